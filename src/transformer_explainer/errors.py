"""Errors a person can act on. Each message says what went wrong and what to do; none needs a traceback."""


class ExplainerError(Exception):
    """Base class: the CLI and the server print these as one line, never as a stack trace."""


class ModelNotFoundError(ExplainerError):
    """A model spec names nothing that can be loaded here."""


class CheckpointError(ExplainerError):
    """A checkpoint folder or file is incomplete, corrupt, or does not match its config."""


class InputError(ExplainerError, ValueError):
    """The user's text or parameters cannot be used as given."""
