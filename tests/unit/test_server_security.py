"""Who may use a server and how much (server/security.py): the access token (missing, wrong, in the
URL then a cookie, as a bearer header, compared in constant time), the Host check against DNS
rebinding, the Origin check against cross-site requests, and a fair share per client (one client
flooding, another still served)."""

from __future__ import annotations

import asyncio
import hmac
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from transformer_explainer.server import AccessSettings, ServerSettings, create_app
from transformer_explainer.server.run import ServeConfig, access_settings, with_token
from transformer_explainer.server.security import FairShare, loopback_hosts, split_host

TOKEN = "s3cret-Token_for.tests"
BASE = "http://127.0.0.1:8000"


def app_with(tiny_model, **access):
    """A fresh app: leaving a test client's `with` block shuts its model pool down."""
    return create_app({"tiny": tiny_model}, ServerSettings(access=AccessSettings(**access)))


@pytest.fixture
def token_app(tiny_model):
    return app_with(tiny_model, token=TOKEN)


def client(app, **kw) -> TestClient:
    return TestClient(app, base_url=BASE, follow_redirects=False, **kw)


# -- the access token ------------------------------------------------------------------------------


def test_missing_token_is_401_with_a_sentence(token_app):
    with client(token_app) as c:
        r = c.get("/api/models")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        detail = r.json()["detail"]
        assert "No access token" in detail and "Authorization: Bearer" in detail and "?token=" in detail
        assert c.post("/api/trace", json={"text": "hi"}).status_code == 401
        page = c.get("/")  # the page itself is closed too, and says how to get in
        assert page.status_code == 401 and "text/html" in page.headers["content-type"]
        assert "?token=" in page.text and "serve" in page.text
        assert c.get("/assets/index.js").status_code == 401
        assert c.get("/api/health").status_code == 401


def test_wrong_token_is_401_whichever_way_it_comes(token_app):
    with client(token_app) as c:
        r = c.get("/api/models", headers={"Authorization": "Bearer " + TOKEN[:-1] + "X"})
        assert r.status_code == 401 and "bearer token sent is not" in r.json()["detail"]
        assert c.get("/?token=nope-nope-nope").status_code == 401
        assert c.get("/api/models?token=" + TOKEN + "x").status_code == 401
        c.cookies.set("te-token-8000", "stale-token-from-before")
        r = c.get("/api/models")
        assert r.status_code == 401 and "no longer" in r.json()["detail"]


def test_bearer_token_opens_the_api(token_app):
    with client(token_app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        assert c.get("/api/models").status_code == 200
        assert c.post("/api/trace", json={"text": "The cat"}).status_code == 200


def test_token_in_the_url_becomes_a_cookie_and_leaves_the_url(token_app):
    with client(token_app) as c:
        r = c.get(f"/?lang=zh&token={TOKEN}")
        assert r.status_code == 303 and r.headers["location"] == "/?lang=zh"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"te-token-8000={TOKEN};")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # plain http here; over https it would be
        # the browser now sends the cookie: page, assets and API all answer
        assert c.get("/?lang=zh").status_code == 200
        assert c.get("/api/models").status_code == 200
        assert c.post("/api/trace", json={"text": "The cat"}).status_code == 200
    with client(token_app) as c:  # an API call with the token in its query is answered, not redirected
        assert c.get(f"/api/models?token={TOKEN}").status_code == 200


def test_token_is_compared_in_constant_time(token_app, monkeypatch):
    seen = []
    real = hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    with client(token_app) as c:
        for how in ({"headers": {"Authorization": "Bearer guess-guess"}}, {"params": {"token": "guess-guess"}}):
            assert c.get("/api/models", **how).status_code == 401
        c.cookies.set("te-token-8000", "guess-guess")
        assert c.get("/api/models").status_code == 401
    assert seen == [(b"guess-guess", TOKEN.encode())] * 3


@pytest.mark.parametrize("bad", ["short", "has space in it", "semi;colon;token", "plus+is+a+space", "x" * 513])
def test_unusable_tokens_are_refused(bad):
    with pytest.raises(ValueError, match="8 to 512 characters"):
        AccessSettings(token=bad)


# -- Host: DNS rebinding ---------------------------------------------------------------------------


@pytest.fixture
def loopback_app(tiny_model):
    return app_with(tiny_model, allowed_hosts=loopback_hosts(["explainer.school.example"]))


@pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST", "127.0.0.1",
                                  "[::1]", "explainer.school.example", "explainer.school.example:443"])
def test_loopback_names_and_allowed_hosts_are_answered(loopback_app, host):
    with client(loopback_app) as c:
        assert c.get("/api/models", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("host", ["attacker.example:8000", "attacker.example", "127.0.0.1.attacker.example",
                                  "localhost.attacker.example:8000", "192.168.1.10:8000", "[::2]:8000", ""])
def test_other_hosts_are_refused(loopback_app, host):
    with client(loopback_app) as c:
        r = c.get("/api/models", headers={"host": host})
        assert r.status_code == 403 and "--allow-host" in r.json()["detail"]
        assert c.post("/api/trace", json={"text": "hi"}, headers={"host": host}).status_code == 403


def test_split_host():
    assert split_host("LocalHost:8000") == ("localhost", "8000")
    assert split_host("[::1]:80") == ("[::1]", "80")
    assert split_host("[::1]") == ("[::1]", None)
    assert split_host("example.org") == ("example.org", None)


# -- Origin: cross-site requests -------------------------------------------------------------------


@pytest.mark.parametrize(("origin", "status"), [
    (None, 200),  # curl, the Python client
    ("http://127.0.0.1:8000", 200),  # the app's own pages
    ("http://attacker.example", 403),
    ("https://127.0.0.1:8000", 200),  # one port speaks one scheme (behind a TLS proxy, the Host is http)
    ("http://127.0.0.1:9999", 403),  # another port is another site
    ("http://localhost:8000", 403),  # another name for the same machine is another origin too
    ("null", 403),  # a sandboxed frame or a local file
])
def test_posts_from_another_origin_are_403(loopback_app, origin, status):
    headers = {} if origin is None else {"origin": origin}
    with client(loopback_app) as c:
        r = c.post("/api/trace", json={"text": "The cat"}, headers=headers)
        assert r.status_code == status, r.text
        if status == 403:
            assert "another site" in r.json()["detail"]
        # reading is not changing: a cross-origin GET is answered (the browser keeps the answer from the page)
        assert c.get("/api/models", headers=headers).status_code == 200


def test_fetch_metadata_without_origin_counts_as_cross_site(loopback_app):
    with client(loopback_app) as c:
        assert c.post("/api/trace", json={"text": "x"}, headers={"sec-fetch-site": "cross-site"}).status_code == 403
        assert c.post("/api/trace", json={"text": "x"}, headers={"sec-fetch-site": "same-origin"}).status_code == 200


# -- fair share: two clients, one flooding ---------------------------------------------------------


def test_rate_limit_refuses_the_flooder_and_serves_the_other(tiny_model):
    app = app_with(tiny_model, client_rate=0.5, client_burst=5)
    with client(app, client=("10.0.0.1", 40000)) as flooder, client(app, client=("10.0.0.2", 40000)) as other:
        codes = [flooder.post("/api/trace", json={"text": f"flood {i}"}) for i in range(12)]
        assert [r.status_code for r in codes[:5]] == [200] * 5
        refused = [r for r in codes if r.status_code == 429]
        assert len(refused) >= 6  # one every 2 s refills: at most one more in the time 12 requests take
        retry = int(refused[0].headers["retry-after"])
        assert 1 <= retry <= 2 and "more than 0.5 a second" in refused[0].json()["detail"]
        assert other.post("/api/trace", json={"text": "my own text"}).status_code == 200
        assert other.get("/api/health").status_code == 200  # the health check is not counted
        time.sleep(retry)
        assert flooder.post("/api/trace", json={"text": "later"}).status_code == 200  # the bucket refills


class Gate:
    """A downstream app whose POSTs wait until released: shows how many run at once, per client."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.release = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        ip = scope["client"][0]
        self.running[ip] = self.running.get(ip, 0) + 1
        self.peak[ip] = max(self.peak.get(ip, 0), self.running[ip])
        try:
            if scope["method"] == "POST":
                await self.release.wait()
        finally:
            self.running[ip] -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def test_calls_in_flight_per_client_are_bounded_and_the_other_client_gets_through():
    async def scenario():
        gate = Gate()
        app = FairShare(gate, AccessSettings(client_calls=2))

        def for_client(ip: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(ip, 1)), base_url=BASE, timeout=10)

        async with for_client("10.0.0.1") as flooder, for_client("10.0.0.2") as other:
            flood = [asyncio.create_task(flooder.post("/api/trace")) for _ in range(10)]
            while sum(t.done() for t in flood) < 6:  # 2 run, 2 wait, the other 6 are refused at once
                await asyncio.sleep(0.01)
            refused = [t.result() for t in flood if t.done()]
            assert all(r.status_code == 429 and r.headers["retry-after"] == "1" for r in refused)
            assert "2 at once" in refused[0].json()["detail"]
            assert gate.running["10.0.0.1"] == 2  # the two waiting have not reached the app
            mine = asyncio.create_task(other.post("/api/trace"))
            while gate.running.get("10.0.0.2", 0) < 1:  # the other client runs at once, flood or not
                await asyncio.sleep(0.01)
            gate.release.set()
            assert (await mine).status_code == 200
            answered = [await t for t in flood]
            assert sum(r.status_code == 200 for r in answered) == 4
            assert gate.peak["10.0.0.1"] == 2
            assert (await flooder.post("/api/trace")).status_code == 200  # the share is free again
            assert app.clients["10.0.0.1"].active == 0

    asyncio.run(scenario())


def test_the_client_table_is_bounded():
    async def scenario():
        app = FairShare(Gate(), AccessSettings(client_rate=1.0, client_burst=1, max_clients=16))
        for i in range(500):
            transport = httpx.ASGITransport(app, client=(f"10.1.{i // 256}.{i % 256}", 1))
            async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
                assert (await c.get("/api/models")).status_code == 200
        assert len(app.clients) == 16
        assert "10.1.1.243" in app.clients and "10.1.0.0" not in app.clients  # the least recently seen went

    asyncio.run(scenario())


# -- what `serve` sets up --------------------------------------------------------------------------


def test_serve_defaults_loopback_open_exposed_guarded():
    local = access_settings(with_token(ServeConfig(host="127.0.0.1")))
    assert local.token is None and local.client_calls is None and local.client_rate is None
    assert local.allowed_hosts == ("localhost", "127.0.0.1", "[::1]")
    assert access_settings(ServeConfig(host="127.0.0.2", allow_hosts=["Proxy.Example"])).allowed_hosts == (
        "localhost", "127.0.0.1", "[::1]", "127.0.0.2", "proxy.example")
    assert access_settings(ServeConfig(host="::1")).allowed_hosts == ("localhost", "127.0.0.1", "[::1]")
    assert access_settings(ServeConfig(token=TOKEN)).token == TOKEN  # a token on loopback when asked

    exposed = with_token(ServeConfig(host="0.0.0.0"))
    s = access_settings(exposed)
    assert s.token is not None and len(s.token) >= 32 and s.allowed_hosts is None
    assert s.client_calls == 2 and s.client_rate == 10.0 and s.client_burst == 50
    assert with_token(ServeConfig(host="0.0.0.0")).token != exposed.token  # random per start
    assert with_token(exposed) == exposed  # decided once: `--workers` children get the parent's
    assert access_settings(with_token(ServeConfig(host="0.0.0.0", no_token=True))).token is None
    off = access_settings(ServeConfig(host="0.0.0.0", client_calls=0, client_rate=0))
    assert off.client_calls is None and off.client_rate is None


def test_exposed_serve_prints_a_url_with_its_token(tiny_gpt2_dir):
    proc = subprocess.Popen([sys.executable, "-m", "transformer_explainer.cli", "serve", "--model", str(tiny_gpt2_dir),
                             "--only", "--host", "0.0.0.0", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:") and "/?token=" in line, (
            line, proc.stderr.read() if proc.poll() is not None else "")
        url = line.split()[2]
        base, token = url.split("?token=")
        assert httpx.get(base + "api/models", timeout=30).status_code == 401
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(base + "api/models", headers=bearer, timeout=30).status_code == 200
        with httpx.Client(timeout=30, follow_redirects=True) as browser:  # opens the printed URL, as a person would
            r = browser.get(url)
            assert r.status_code == 200 and str(r.url) == base
            assert browser.get(base + "api/models").status_code == 200  # the cookie carries it from now on
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "reachable from other machines" in proc.stderr.read()


def test_bad_token_on_the_command_line_is_one_clear_error():
    r = subprocess.run([sys.executable, "-m", "transformer_explainer.cli", "serve", "--token", "short", "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "8 to 512 characters" in r.stderr and "Traceback" not in r.stderr
