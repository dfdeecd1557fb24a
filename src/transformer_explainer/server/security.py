"""Who may use a server, and how much: an access token, Host and Origin checks, and a fair share of
the model per client. Pure ASGI middlewares, configured by one `AccessSettings`.

- Access token (as notebook servers do): with a token set, every request must carry it, as
  `?token=...` (a page load then gets it as an HttpOnly, SameSite=Strict cookie and is redirected
  to the URL without it), as that cookie, or as `Authorization: Bearer ...`. Compared in constant
  time. Anything else is a 401 with a sentence saying how to get in.
- Host check (against DNS rebinding): a server on 127.0.0.1 answers only requests whose Host is
  localhost, 127.0.0.1 or [::1] (any port), or a name allowed with `--allow-host`. A web page the
  user visits cannot then reach it through a name that resolves to 127.0.0.1.
- Origin check (against cross-site requests): a request that changes state (POST, PUT, PATCH,
  DELETE) whose Origin is another site than the Host it was sent to gets 403. Requests without an
  Origin (curl, the Python client) pass: a browser always sends one on a cross-origin POST.
- Fair share: per client (its IP address), at most `client_calls` model calls (POSTs under /api/)
  run at once and as many again wait for them; beyond that, and beyond a token-bucket rate of
  `client_rate` API requests per second (bursts of `client_burst`), the answer is 429 with
  Retry-After. Of those calls, at most `client_analyses` may be analyses that run a pass per head or
  per patched cell, or a generation per strength of a steering sweep (`ANALYSIS_PATHS`), so that one
  client cannot keep the analysis lane to itself, and a client's calls load one model at a time
  (`ModelSwitches`: a load is a model call, whose request learns the client's share from the scope; a
  call for another model meanwhile gets 429). The per-client
  table is bounded (`max_clients`, least recently seen idle clients are forgotten first), so many
  addresses cannot grow it without bound.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ParamValue, error_answer

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~-]{8,512}")
COOKIE_PREFIX = "te-token-"
# the analyses: a forward pass per head or more, or a patched run per cell of a grid (routes/analysis.py,
# routes/attribution.py: the pool's analysis lane)
ANALYSIS_PATHS = frozenset({"/api/analysis/importance", "/api/analysis/prune", "/api/attribution/patch",
                            "/api/steer"})


@dataclass(frozen=True)
class AccessSettings:
    token: str | None = None  # required on every request when set
    allowed_hosts: tuple[str, ...] | None = None  # Host names answered (any port); None: any Host
    check_origin: bool = True  # 403 for state-changing requests from another site
    client_calls: int | None = None  # model calls at once per client (as many again may wait); None: no limit
    client_analyses: int | None = None  # of those, analyses (ANALYSIS_PATHS) running or waiting; None: no limit
    client_rate: float | None = None  # API requests per second per client, sustained; None: no limit
    client_burst: int = 50  # API requests a client may make at once before the rate applies
    max_clients: int = 4096  # clients remembered for the two limits above

    def __post_init__(self) -> None:
        if self.token is not None and not TOKEN_PATTERN.fullmatch(self.token):
            raise ValueError(token_problem(self.token))
        calls_ok = (self.client_calls is None or self.client_calls >= 1) and (
            self.client_analyses is None or self.client_analyses >= 1)
        rate_ok = self.client_rate is None or self.client_rate > 0
        if not (calls_ok and rate_ok and self.client_burst >= 1 and self.max_clients >= 1):
            raise ValueError("client_calls >= 1, client_analyses >= 1, client_rate > 0, client_burst >= 1 and "
                             "max_clients >= 1 are required")


def token_problem(token: str) -> str:
    return (f"the access token must be 8 to 512 characters from A-Z a-z 0-9 . _ ~ - (it goes into URLs and "
            f"cookies as it is); got {len(token)} characters" + ("" if len(token) >= 8 else ", too short"))


def loopback_hosts(extra: tuple[str, ...] | list[str] = ()) -> tuple[str, ...]:
    """The Host names a server on this machine only answers: the loopback names and `extra`."""
    return tuple(dict.fromkeys([*LOOPBACK_HOSTS, *(h.strip().lower() for h in extra if h.strip())]))


def tokens_equal(given: str, expected: str) -> bool:
    """Constant time in the content of `given`: a wrong guess takes as long whatever it shares with the token."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


# -- small ASGI helpers ----------------------------------------------------------------------------


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in scope.get("headers", []):
        out.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
    return out


# a Host header (RFC 9110 7.2, RFC 3986 3.2.2): a name, an IPv4 address or a bracketed IPv6 one, and an optional
# port; nothing before, between or after them
HOST_PATTERN = re.compile(r"(?P<name>\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::(?P<port>[0-9]*))?")


def split_host(host: str) -> tuple[str, str | None]:
    """`name:port`, `[v6]:port`, `name` -> (lower-case name, port or None); IPv6 keeps its brackets. A value that
    is no host (`[::1]evil.com`, `localhost@evil.com`, `a:1:2`) comes back whole, as its name, with no port: whole,
    it equals no name a server answers to."""
    host = host.strip().lower()
    m = HOST_PATTERN.fullmatch(host)
    if m is None:
        return host, None
    return m["name"], m["port"] or None


def _same_site(origin: str, host: str) -> bool:
    """Is the Origin header's host:port the request's Host? The scheme is not compared: one port
    speaks one of http and https, and behind a TLS proxy the Host is the proxy's. A default port
    (80, 443) counts as no port, as browsers and proxies leave it out."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False  # "null" (a sandboxed frame, a file), or nonsense
    o_name, o_port = split_host(parts.netloc)
    h_name, h_port = split_host(host)
    defaults = (None, "80", "443")
    return o_name == h_name and (o_port == h_port or (o_port in defaults and h_port in defaults))


async def _send(send: Send, status: int, body: bytes, content_type: str, headers: list[tuple[bytes, bytes]] = ()
                ) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), *headers]})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] = (), *, code: str,
                **params: ParamValue) -> None:
    await _send(send, status, json.dumps(error_answer(detail, code, params)).encode(), "application/json", headers)


def local_path(path: str) -> str:
    """`path` (decoded, as in the ASGI scope) as a redirect target that stays on this server. A Location
    of `//host/...` is another site's address to a browser (a network-path reference), and browsers
    read a backslash as a slash and drop tabs and newlines, so: one leading slash, and the rest
    percent-encoded (a tab, a backslash or a space cannot then rebuild `//`)."""
    return "/" + quote(path.lstrip("/\\"), safe="/!$&'()*+,;=:@-._~")


def _is_api(scope: Scope) -> bool:
    return scope.get("path", "").startswith("/api/")


LOGIN_PAGE = """<!doctype html><meta charset="utf-8"><title>transformer-explainer: access token needed</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:38em;margin:4em auto;padding:0 1em}}
code{{background:#f3f3f3;padding:0 .2em}}</style>
<h1>This server needs its access token</h1>
<p>{why} Open the address that <code>transformer-explainer serve</code> printed when it started: it ends in
<code>?token=...</code>. Your browser then remembers the token for this server, and the address works without it.</p>
<p>No address? Ask whoever started the server for it.</p>"""


# -- the access guard: Host, Origin, token ---------------------------------------------------------


class AccessGuard:
    """Host check, then Origin check, then the token, before anything else answers."""

    def __init__(self, app: ASGIApp, settings: AccessSettings) -> None:
        self.app, self.settings = app, settings
        self.allowed = None if settings.allowed_hosts is None else {h.lower() for h in settings.allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the app has no WebSocket endpoint; one must not slip past the checks
            if self.settings.token is not None or self.allowed is not None:
                return await send({"type": "websocket.close", "code": 1008})
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = _headers(scope)
        host = headers.get("host", "")
        if self.allowed is not None and split_host(host)[0] not in self.allowed:
            names = ", ".join(sorted(self.allowed))
            return await _json(send, 403, f"this server answers only to the host names {names} (the request was "
                                          f"for {host!r}); a server behind a reverse proxy or reached by another name "
                                          f"needs `serve --allow-host NAME`", code="host_refused")
        method = scope.get("method", "GET")
        if self.settings.check_origin and method not in SAFE_METHODS:
            origin = headers.get("origin")
            cross = (origin is not None and not _same_site(origin, host)) or (
                origin is None and headers.get("sec-fetch-site") == "cross-site")
            if cross:
                return await _json(send, 403, f"a {method} request from another site ({origin or 'cross-site'}) is "
                                              f"refused: only pages of this server may change anything here",
                                   code="origin_refused")
        token = self.settings.token
        if token is None:
            return await self.app(scope, receive, send)
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        in_query = [v for k, v in query if k == "token"]
        cookie_name = COOKIE_PREFIX + (split_host(host)[1] or "80")
        if in_query:
            if not tokens_equal(in_query[-1], token):
                return await self._refuse(scope, send, "The token in the address is not this server's token.")
            if method == "GET" and not _is_api(scope):
                # remember it in a cookie, and take it out of the address bar (and the history, and Referer)
                rest = urlencode([(k, v) for k, v in query if k != "token"])
                location = local_path(scope.get("root_path", "") + scope.get("path", "/"))
                location += f"?{rest}" if rest else ""
                secure = "; Secure" if scope.get("scheme") == "https" else ""
                cookie = f"{cookie_name}={token}; Path=/; HttpOnly; SameSite=Strict{secure}"
                return await _send(send, 303, b"", "text/plain", [(b"location", location.encode()),
                                                                 (b"set-cookie", cookie.encode())])
            return await self.app(scope, receive, send)
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            if tokens_equal(auth[7:].strip(), token):
                return await self.app(scope, receive, send)
            return await self._refuse(scope, send, "The bearer token sent is not this server's token.")
        jar = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no token
            jar = SimpleCookie()
        morsel = jar.get(cookie_name)
        if morsel is not None:
            if tokens_equal(morsel.value, token):
                return await self.app(scope, receive, send)
            return await self._refuse(scope, send, "The token your browser remembered is no longer this server's "
                                                   "(it was restarted with another one).")
        return await self._refuse(scope, send, "No access token came with the request.")

    async def _refuse(self, scope: Scope, send: Send, why: str) -> None:
        challenge = [(b"www-authenticate", b'Bearer realm="transformer-explainer"')]
        if _is_api(scope):
            return await _json(send, 401, f"{why} This server needs its access token: send it as "
                                          f"`Authorization: Bearer TOKEN`, or open the address `serve` printed "
                                          f"(it ends in ?token=...) in the browser first.", challenge,
                               code="token_required")
        await _send(send, 401, LOGIN_PAGE.format(why=why).encode(), "text/html; charset=utf-8", challenge)


# -- fair share per client -------------------------------------------------------------------------


# the scope key under which FairShare hands a request its client's ModelSwitches (server_context reads it)
SWITCHES_KEY = "transformer_explainer.model_switches"


class ModelSwitches:
    """The models one client's requests are loading, with how many of its requests wait for each: a client switches
    to one model at a time (its page's several requests for the model it switches to share that load; a request for
    a second model meanwhile is refused). Counted from the model lane's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.loading: dict[str, int] = {}

    def begin(self, name: str) -> str | None:
        """Count a request waiting for `name` to load, or, when another model is loading for this client, name
        that one (and count nothing)."""
        with self._lock:
            other = next((n for n in self.loading if n != name), None)
            if other is None:
                self.loading[name] = self.loading.get(name, 0) + 1
            return other

    def end(self, name: str) -> None:
        with self._lock:
            self.loading[name] -= 1
            if not self.loading[name]:
                del self.loading[name]


class _Client:
    __slots__ = ("active", "analyses", "running", "slot", "switches", "tokens", "updated")

    def __init__(self, burst: int, calls: int | None) -> None:
        self.tokens = float(burst)
        self.updated = time.monotonic()
        self.active = 0  # model calls admitted: running or waiting for a slot
        self.analyses = 0  # of those, analyses (ANALYSIS_PATHS)
        self.slot = asyncio.Semaphore(calls) if calls is not None else None
        self.switches = ModelSwitches()


class FairShare:
    """Per-client limits on API requests (rate) and on model calls at once (concurrency).

    Why the excess waits, then is refused: a browser tab sends a few calls at once (a view's
    tensors, the next token), and letting those wait a moment serves them in order; a client that
    keeps more than twice its share in flight is flooding, and a 429 at once keeps both its memory
    and its place in the model queue bounded."""

    def __init__(self, app: ASGIApp, settings: AccessSettings) -> None:
        self.app, self.settings = app, settings
        self.clients: OrderedDict[str, _Client] = OrderedDict()
        self.enabled = settings.client_calls is not None or settings.client_rate is not None

    def client(self, key: str) -> _Client:
        c = self.clients.get(key)
        if c is not None:
            self.clients.move_to_end(key)
            return c
        if len(self.clients) >= self.settings.max_clients:
            # forget the least recently seen client with nothing in flight (its bucket starts full again)
            idle = next((k for k, v in self.clients.items() if v.active == 0), None)
            if idle is not None:
                del self.clients[idle]
        c = self.clients[key] = _Client(self.settings.client_burst, self.settings.client_calls)
        return c

    def _take(self, c: _Client) -> float:
        """Take one request from the client's bucket; 0, or the seconds until one is there."""
        rate = self.settings.client_rate
        if rate is None:
            return 0.0
        now = time.monotonic()
        c.tokens = min(float(self.settings.client_burst), c.tokens + (now - c.updated) * rate)
        c.updated = now
        if c.tokens >= 1:
            c.tokens -= 1
            return 0.0
        return (1 - c.tokens) / rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.enabled or scope["type"] != "http" or not _is_api(scope) or scope["path"] == "/api/health":
            return await self.app(scope, receive, send)
        key = (scope.get("client") or ("unknown", 0))[0]
        c = self.client(key)
        wait = self._take(c)
        if wait > 0:
            return await _json(send, 429, f"too many requests from your address (more than "
                                          f"{self.settings.client_rate:g} a second); wait {math.ceil(wait)} s",
                               [(b"retry-after", str(math.ceil(wait)).encode())], code="rate_limited",
                               rate=self.settings.client_rate, wait=math.ceil(wait))
        calls = self.settings.client_calls
        if c.slot is None or scope.get("method") in SAFE_METHODS:
            return await self.app(scope, receive, send)
        if c.active >= 2 * calls:
            return await _json(send, 429, f"your address already has {c.active} model calls running or waiting "
                                          f"(the share of one client is {calls} at once); wait for their answers",
                               [(b"retry-after", b"1")], code="too_many_calls", active=c.active, share=calls)
        analysis = scope["path"] in ANALYSIS_PATHS
        most = self.settings.client_analyses
        if analysis and most is not None and c.analyses >= most:
            return await _json(send, 429, f"your address already has {c.analyses} "
                                          f"{'analysis' if c.analyses == 1 else 'analyses'} (head importance, "
                                          f"pruning, patching or steering) running or waiting (the share of one "
                                          f"client is {most}); wait for its answer",
                               [(b"retry-after", b"5")], code="too_many_analyses", active=c.analyses, share=most)
        c.active += 1
        c.analyses += analysis
        scope[SWITCHES_KEY] = c.switches
        try:
            async with c.slot:
                await self.app(scope, receive, send)
        finally:
            c.active -= 1
            c.analyses -= analysis
