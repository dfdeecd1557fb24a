"""A local stand-in for the Hugging Face hub: the part of its HTTP API that `huggingface_hub`'s
client uses to download a model repo, serving the files of a local folder. Point the client at it
with `HF_ENDPOINT=http://127.0.0.1:<port>` (read when huggingface_hub is imported).

Endpoints (as huggingface_hub 2.x calls them):
- GET  /api/models/{repo}/revision/{rev}: the repo's commit and file list (`HfApi.model_info`);
- GET  /api/models/{repo}/tree/{rev}: the files with their sizes and hashes (`HfApi.list_repo_tree`, which
  `snapshot_download` calls);
- HEAD /{repo}/resolve/{rev}/{file}: X-Repo-Commit, ETag (the SHA-256 of an LFS file, the git blob
  hash of a small one), Content-Length (`get_hf_file_metadata`);
- GET  /{repo}/resolve/{rev}/{file}: the bytes, honouring `Range: bytes=N-` with a 206.

Faults, switched by the test while it runs: `rate` (bytes per second, to watch progress), `break_at`
(cut the connection after that fraction of a weights file), `breaks` (how many transfers to cut),
`down` (answer nothing: close every connection at once, as a dead link looks to the client).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_SUFFIXES = (".safetensors", ".bin")


def etag_of(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in LFS_SUFFIXES:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a connection the stand-in cut on purpose, or one the client dropped


class StandInHub:
    def __init__(self, repo: str, folder: Path) -> None:
        self.repo, self.folder = repo, folder
        self.files = {p.name: p for p in sorted(folder.iterdir()) if p.is_file()}
        self.etags = {name: etag_of(p) for name, p in self.files.items()}
        self.rate: float | None = None  # bytes per second for weights files; None: full speed
        self.break_at: float = 0.5
        self.breaks = 0  # weights transfers still to cut at `break_at`
        self.down = False
        self.down_after_break = False  # the link stays dead after a cut, until the test sets `down` back
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[StandInHub]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)

    def weight_requests(self) -> list[str | None]:
        """The Range header of every GET of a weights file, in order."""
        return [rng for method, path, rng in self.requests
                if method == "GET" and path.endswith(LFS_SUFFIXES)]

    # -- answers -------------------------------------------------------------------------------------

    def _answer(self, h: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.requests.append((h.command, path, h.headers.get("Range")))
        if self.down:
            h.close_connection = True
            h.connection.close()  # no status line at all
            return
        info = f"/api/models/{self.repo}/revision/"
        tree = f"/api/models/{self.repo}/tree/"
        resolve = f"/{self.repo}/resolve/"
        if path.startswith(info):
            self._json(h, {"id": self.repo, "modelId": self.repo, "sha": COMMIT, "private": False,
                           "siblings": [{"rfilename": n} for n in self.files]}, body)
        elif path.startswith(tree):
            self._json(h, [self._tree_entry(n) for n in self.files], body)
        elif path.startswith(resolve) and path[len(resolve):].split("/", 1)[-1] in self.files:
            self._file(h, path[len(resolve):].split("/", 1)[1], body)
        else:
            self._json(h, {"error": "Repository not found"}, body, status=404,
                       headers={"X-Error-Code": "RepoNotFound"})

    def _tree_entry(self, name: str) -> dict[str, object]:
        data = self.files[name].read_bytes()
        entry: dict[str, object] = {"type": "file", "path": name, "size": len(data),
                                    "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
        if name.endswith(LFS_SUFFIXES):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def _json(self, h: BaseHTTPRequestHandler, obj: object, body: bool, status: int = 200,
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if body:
            h.wfile.write(data)

    def _file(self, h: BaseHTTPRequestHandler, name: str, body: bool) -> None:
        data = self.files[name].read_bytes()
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[len("bytes="):-1])
        part = data[start:]
        h.send_response(206 if start else 200)
        h.send_header("Content-Length", str(len(part)))
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("ETag", f'"{self.etags[name]}"')
        h.send_header("X-Repo-Commit", COMMIT)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if not body:
            return
        weights = name.endswith(LFS_SUFFIXES)
        cut = len(part)
        if weights and self.breaks > 0:
            self.breaks -= 1
            cut = max(0, int(len(data) * self.break_at) - start)
        chunk = 64 * 1024
        t0 = time.monotonic()
        sent = 0
        while sent < cut:
            if self.down:
                break
            n = min(chunk, cut - sent)
            h.wfile.write(part[sent:sent + n])
            sent += n
            if weights and self.rate:
                ahead = sent / self.rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        if sent < len(part):  # a cut: close mid-body, as a dropped connection does
            if self.down_after_break:
                self.down = True
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)


@contextmanager
def serve_with_hub(hub_url: str, hf_home: Path, *args: str, timeout_s: float = 90) -> Iterator[str]:
    """`transformer-explainer serve --port 0 *args` in a subprocess whose huggingface_hub talks to
    `hub_url` and caches under `hf_home`; yields the app's URL once it answers."""
    import os
    import subprocess
    import sys

    import httpx

    env = {**os.environ, "HF_ENDPOINT": hub_url, "HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    log = hf_home.parent / f"serve-{hf_home.name}.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "serve", "--port", "0", *args],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            assert line.startswith("serving on http://127.0.0.1:"), (line, log.read_text())
            url = line.split()[2]
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    if httpx.get(url + "api/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
