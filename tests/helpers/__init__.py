"""Fixture builders shared by several test files (checkpoints written locally, no network)."""
