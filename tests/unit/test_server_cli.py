"""`transformer-explainer serve`: binds to 127.0.0.1 by default, prints the URL that is listening,
and warns when exposed beyond this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from transformer_explainer.server.run import WORKER_READY_PATTERN, ServeConfig, is_loopback, serve, url_for


def test_defaults_are_local():
    assert ServeConfig().host == "127.0.0.1"
    from transformer_explainer.cli import build_parser

    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.workers == 1


@pytest.mark.parametrize(("host", "local"), [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                              ("127.0.0.2", True), ("0.0.0.0", False), ("::", False),
                                              ("192.168.1.5", False), ("example.org", False)])
def test_is_loopback(host, local):
    assert is_loopback(host) is local


def test_url_for():
    assert url_for("127.0.0.1", 8000) == "http://127.0.0.1:8000/"
    assert url_for("::1", 9) == "http://[::1]:9/"


def test_exposed_host_warns_before_anything_else(capsys, monkeypatch):
    class Refuse(Exception):
        pass

    def no_bind(*_a, **_k):
        raise Refuse

    monkeypatch.setattr("socket.socket.bind", no_bind)
    with pytest.raises(Refuse):
        serve(ServeConfig(models=["x"], host="0.0.0.0", port=1))
    err = capsys.readouterr().err
    assert "warning" in err and "reachable from other machines" in err and "--api-downloads" not in err
    with pytest.raises(Refuse):
        serve(ServeConfig(models=["x"], host="0.0.0.0", port=1, api_downloads=True))
    assert "--api-downloads is on" in capsys.readouterr().err
    with pytest.raises(Refuse):
        serve(ServeConfig(models=["x"], host="127.0.0.1", port=1))
    assert capsys.readouterr().err == ""  # no warning on this machine only


def test_serve_prints_its_url_and_answers(tiny_gpt2_dir):
    proc = subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "serve", "--model", str(tiny_gpt2_dir),
                             "--port", "0", "--only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        line = proc.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:"), (line, proc.stderr.read() if proc.poll() else "")
        url = line.split()[2]
        r = httpx.get(url + "api/models", timeout=30)
        assert r.status_code == 200 and r.json()["default"] == tiny_gpt2_dir.name
        assert time.monotonic() - t0 < 60
        assert httpx.get(url, timeout=30).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_unknown_model_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "transformer_explainer.cli", "serve", "--model", str(tmp_path / "nope"),
                        "--port", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such folder" in r.stderr and "Traceback" not in r.stderr


def test_lines_from_several_processes_on_one_stderr_never_run_together():
    """say_line writes a line whole: four processes writing 300 lines each to one pipe give 1200 whole lines
    (print's separate writes of the text and its newline could interleave: issue 39's two ready lines)."""
    code = ("import sys; from transformer_explainer.server.run import say_line, WORKER_READY\n"
            "for i in range(300): say_line(WORKER_READY.format(pid=int(sys.argv[1]), seconds=i / 10))")
    read, write = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", code, str(n)], stderr=write) for n in range(4)]
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    assert all(p.wait() == 0 for p in procs)
    lines = out.splitlines()
    assert len(lines) == 1200 and all(WORKER_READY_PATTERN.fullmatch(line) for line in lines), out[:500]
