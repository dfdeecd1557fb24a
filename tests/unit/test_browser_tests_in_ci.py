"""A browser test that cannot run (no Chromium) is skipped on a developer's machine but fails where
`CI` is set, as a missing schemathesis does: in CI the browser tests must run, not pass silently.
Run as a separate pytest on a probe test that asks for the `browser` fixture of tests/web/conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _probe(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text("from tests.web.conftest import browser  # noqa: F401\n\n\n"
                     "def test_probe(browser):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["CHROMIUM_PATH"] = str(tmp_path / "no-chromium")
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the probe needs none of them (seconds of start-up)
    if ci:
        env["CI"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", str(probe), "-q", "-rs", "-p", "no:cacheprovider"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_without_chromium_a_browser_test_is_skipped(tmp_path: Path):
    run = _probe(tmp_path, ci=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 skipped" in run.stdout and f"no Chromium at {tmp_path / 'no-chromium'}" in run.stdout


def test_without_chromium_a_browser_test_fails_in_ci(tmp_path: Path):
    run = _probe(tmp_path, ci=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 error" in run.stdout and "and CI must run the browser tests" in run.stdout
