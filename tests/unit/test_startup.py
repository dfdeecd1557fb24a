"""Fast start: commands that need no model do not import torch or the web framework, and `serve`
answers while its app is built (StartingApp): the page and its files at once, exactly as the real app
serves them (headers, access checks, gzip), health says "loading", other requests wait for the real
app and get its answer, a failed build is reported and stops the server."""

from __future__ import annotations

import asyncio
import gzip
import socket
import subprocess
import sys
import threading

import httpx

from transformer_explainer.server.pages import CSP, middleware, wrapped
from transformer_explainer.server.security import AccessSettings, loopback_hosts
from transformer_explainer.server.starting import BUILD_SWITCH_INTERVAL_S, StartingApp
from transformer_explainer.web_bundle import package_static_dir

HEAVY = ("torch", "fastapi", "transformers", "numpy")


def _imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120).stdout.split()
    return {m for m in HEAVY if m in out}


def test_cli_parser_and_serve_setup_import_no_heavy_library():
    # (numpy comes with the seq2seq tasks' names, a fifth of a second; the rest takes seconds)
    assert _imported_after("from transformer_explainer.cli import build_parser\nbuild_parser()") <= {"numpy"}
    assert _imported_after("import transformer_explainer.server.run") == set()


def test_torch_libraries_are_preloaded_without_importing_torch_and_torch_then_works():
    if sys.platform != "linux":
        return
    code = ("import sys\nfrom transformer_explainer.server.run import preload_torch_libraries\n"
            "preload_torch_libraries()\nassert 'torch' not in sys.modules\n"
            "maps = open('/proc/self/maps').read()\nprint('libtorch_cpu.so' in maps, 'libc10.so' in maps)\n"
            "import torch\nx = torch.arange(6.0).reshape(2, 3)\n"
            "print(torch.nn.functional.gelu(x @ x.T).sum().item() > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    import torch

    cuda_build = torch.version.cuda is not None  # skipped there: torch loads its CUDA libraries in its own order
    assert out.split() == (["False", "False", "True"] if cuda_build else ["True", "True", "True"])


def test_cli_help_imports_no_torch():
    code = "from transformer_explainer.cli import main\nassert main(['--help']) == 0"
    assert not {"torch", "fastapi", "transformers"} & _imported_after(code)


class Inner:
    """The real app, as far as StartingApp can tell: answers with the path; records its lifespan."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                self.events.append(msg["type"])
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": scope["path"].encode()})


async def _lifespan(app):
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"

    async def stop() -> None:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task

    return stop


def test_requests_wait_for_the_app_and_health_says_loading():
    inner, gate = Inner(), threading.Event()
    ready, switch = [], sys.getswitchinterval()

    def build():
        assert gate.wait(10)
        assert sys.getswitchinterval() == BUILD_SWITCH_INTERVAL_S  # the server's thread gets the GIL back soon
        return inner

    async def scenario() -> None:
        app = StartingApp(build, on_ready=lambda: ready.append(True))
        stop = await _lifespan(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.get("/api/health")
            assert r.status_code == 503 and r.json()["status"] == "loading" and r.headers["retry-after"] == "1"
            waiting = asyncio.ensure_future(c.get("/api/models"))
            await asyncio.sleep(0.1)
            assert not waiting.done()  # held until the app is built, not refused
            gate.set()
            r = await asyncio.wait_for(waiting, 10)
            assert r.status_code == 200 and r.text == "/api/models"
            assert (await c.get("/api/health")).text == "/api/health"  # now the real app's answer
        assert ready == [True] and inner.events == ["lifespan.startup"]
        assert sys.getswitchinterval() == switch  # restored once built
        await stop()
        assert inner.events == ["lifespan.startup", "lifespan.shutdown"]

    asyncio.run(scenario())


def test_a_failed_build_is_reported_and_answered():
    errors: list[BaseException] = []

    def build():
        raise ValueError("weights are broken")

    async def scenario() -> None:
        app = StartingApp(build, on_error=errors.append)
        stop = await _lifespan(app)
        for _ in range(200):
            if errors:
                break
            await asyncio.sleep(0.01)
        assert isinstance(app.error, ValueError) and errors == [app.error]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.get("/api/models")
            assert r.status_code == 503 and "weights are broken" in r.json()["detail"]
        await stop()

    asyncio.run(scenario())


# -- the page while the model loads ----------------------------------------------------------------

TOKEN = "secret-token-1"
ACCESS = AccessSettings(token=TOKEN, allowed_hosts=loopback_hosts())
GOOD = {"host": "127.0.0.1:8000", "authorization": f"Bearer {TOKEN}", "accept-encoding": "gzip"}


def _web(tmp_path):
    root = tmp_path / "web_dist"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text('<!doctype html><title>t</title><script src="/assets/app-1.js"></script>\n')
    (root / "assets" / "app-1.js").write_text("console.log('the app');\n" * 200)  # over 2048 bytes: gzipped
    (root / "assets" / "app-1.js.gz").write_bytes(gzip.compress((root / "assets" / "app-1.js").read_bytes(), 9))
    (root / "assets" / "lazy-2.js").write_text("console.log('a chunk the build left uncompressed');\n" * 100)
    (root / "fonts").mkdir()
    (root / "fonts" / "f.json").write_text("{}")
    return root


# (path, headers): what a browser asks first, and what the real app refuses
PAGE_CASES = [
    ("/", GOOD),
    ("/assets/app-1.js", GOOD),
    ("/assets/lazy-2.js", GOOD),
    ("/fonts/f.json", GOOD),
    ("/", {**GOOD, "host": "evil.example:8000"}),  # DNS rebinding: 403
    ("/assets/app-1.js", {"host": "localhost:8000"}),  # no token: 401 (the login page)
    ("/", {"host": "localhost:8000", "authorization": "Bearer wrong-token-9"}),  # 401
    (f"/?token={TOKEN}&lang=zh", {"host": "localhost:8000"}),  # 303 to /?lang=zh, with the cookie
    ("/api/health", {"host": "localhost:8000"}),  # no token: 401, as the real app refuses it
    ("/api/health", {**GOOD, "host": "evil.example"}),  # 403
]


def test_the_page_is_served_while_the_model_loads_exactly_as_the_real_app_serves_it(tmp_path, tiny_model):
    from transformer_explainer.server import ServerSettings, create_app

    root = _web(tmp_path)
    real = create_app({"tiny": tiny_model}, ServerSettings(static_dir=root, access=ACCESS))
    gate = threading.Event()

    def build():
        assert gate.wait(20)
        return real

    async def get(c: httpx.AsyncClient, path: str, headers: dict[str, str]) -> httpx.Response:
        try:
            return await asyncio.wait_for(c.get(path, headers=headers), 5)
        finally:
            c.cookies.clear()  # each request stands alone (the ?token= case sets a cookie)

    async def scenario() -> tuple[list[httpx.Response], list[httpx.Response]]:
        app = StartingApp(build, static_dir=root, wrap=lambda a: wrapped(a, middleware(ACCESS, 1_000_000)))
        stop = await _lifespan(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            # answered now, not held for the model (a held request would time out here)
            early = [await get(c, p, h) for p, h in PAGE_CASES]
            r = await asyncio.wait_for(c.get("/api/health", headers=GOOD), 5)
            assert r.status_code == 503 and r.json()["status"] == "loading" and r.headers["retry-after"] == "1"
            assert r.headers["content-security-policy"] == CSP
            waiting = [asyncio.ensure_future(c.get(p, headers=GOOD)) for p in ("/api/models", "/api/nothing")]
            head = asyncio.ensure_future(c.head("/", headers=GOOD))  # only GET is the page's: HEAD waits
            await asyncio.sleep(0.2)
            assert not any(w.done() for w in [*waiting, head])  # the API waits for the model
            gate.set()
            models, nothing = [await asyncio.wait_for(w, 20) for w in waiting]
            assert models.status_code == 200 and models.json()["default"] == "tiny"
            assert nothing.status_code == 404
            assert (await head).status_code == 405  # the real app's answer
            late = [await get(c, p, h) for p, h in PAGE_CASES]  # now the real app answers
        await stop()
        return early, late

    early, late = asyncio.run(scenario())
    assert [r.status_code for r in early] == [200, 200, 200, 200, 403, 401, 401, 303, 401, 403]
    page, js, lazy = early[0], early[1], early[2]
    assert page.text == (root / "index.html").read_text() and page.headers["cache-control"] == "no-cache"
    assert page.headers["content-security-policy"] == CSP and page.headers["x-frame-options"] == "DENY"
    assert js.headers["content-encoding"] == "gzip" and js.text == (root / "assets" / "app-1.js").read_text()
    assert js.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert "text/javascript" in js.headers["content-type"]
    assert lazy.headers["content-encoding"] == "gzip" and lazy.text == (root / "assets" / "lazy-2.js").read_text()
    assert early[7].headers["location"] == "/?lang=zh" and "HttpOnly" in early[7].headers["set-cookie"]
    for (path, _), e, r in zip(PAGE_CASES, early, late, strict=True):  # the same answer, byte for byte
        assert (e.status_code, e.headers.multi_items(), e.content) == (r.status_code, r.headers.multi_items(),
                                                                       r.content), path


def test_without_a_web_folder_only_health_answers_early():
    gate = threading.Event()

    async def scenario() -> None:
        app = StartingApp(lambda: gate.wait(10) and Inner())
        stop = await _lifespan(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            assert (await asyncio.wait_for(c.get("/api/health"), 5)).status_code == 503
            page = asyncio.ensure_future(c.get("/"))
            await asyncio.sleep(0.1)
            assert not page.done()
            gate.set()
            assert (await asyncio.wait_for(page, 10)).text == "/"
        await stop()

    asyncio.run(scenario())


def test_an_asset_compressed_by_the_build_goes_as_those_bytes_and_plain_to_a_client_without_gzip(tmp_path):
    root = _web(tmp_path)
    js, packed = root / "assets" / "app-1.js", root / "assets" / "app-1.js.gz"

    async def raw(c: httpx.AsyncClient, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
        async with c.stream("GET", "/assets/app-1.js", headers=headers) as r:
            return r, b"".join([b async for b in r.aiter_raw()])

    async def scenario() -> list[tuple[httpx.Response, bytes]]:
        gate = threading.Event()
        app = StartingApp(lambda: gate.wait(10) and Inner(), static_dir=root,
                          wrap=lambda a: wrapped(a, middleware(ACCESS, 1_000_000)))
        stop = await _lifespan(app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            out = [await raw(c, GOOD), await raw(c, {**GOOD, "accept-encoding": "identity"})]
            gate.set()
            assert (await asyncio.wait_for(c.get("/api/models", headers=GOOD), 10)).text == "/api/models"
        await stop()
        return out

    (gz, gz_body), (plain, plain_body) = asyncio.run(scenario())
    assert gz.headers["content-encoding"] == "gzip" and gz_body == packed.read_bytes()  # not compressed again
    assert gzip.decompress(gz_body) == js.read_bytes() and gz.headers["vary"] == "Accept-Encoding"
    assert "text/javascript" in gz.headers["content-type"] and "immutable" in gz.headers["cache-control"]
    assert "content-encoding" not in plain.headers and plain_body == js.read_bytes()


def test_the_built_bundle_has_each_script_and_stylesheet_also_compressed_as_it_is():
    """The server sends X.gz for X as it is (above), so each copy must be its file's bytes once the build has
    finished them (web/vite.config.ts compresses last: a copy made before Vite filled in what a dynamic
    import() preloads broke every part of the page loaded on first use)."""
    assets = package_static_dir() / "assets"
    files = sorted(p for p in assets.iterdir() if p.suffix in (".js", ".css"))
    assert len([p for p in files if p.suffix == ".js"]) > 1  # the page's script and the parts it loads later
    for f in files:
        packed = f.with_name(f.name + ".gz")
        assert packed.is_file(), f"{f.name} has no {packed.name}"
        assert gzip.decompress(packed.read_bytes()) == f.read_bytes(), f"{packed.name} is not {f.name}"
    assert sorted(p.with_suffix("") for p in assets.glob("*.gz")) == files  # and no copy of a file that is gone


def test_serve_answers_without_waiting_for_the_clients_ack():
    """`serve`'s own socket says it is TCP, so asyncio sets TCP_NODELAY on each connection it accepts: with
    Nagle's algorithm on, an answer's body waited for the ACK of its headers (the client delays it 40 ms)."""
    from transformer_explainer.server.run import listening_socket

    sock = listening_socket("127.0.0.1", 0)

    async def scenario() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        try:
            return await asyncio.wait_for(accepted, 5)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(scenario()) != 0
