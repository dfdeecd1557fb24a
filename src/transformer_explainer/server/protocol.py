"""Connections: what uvicorn does not bound by itself.

uvicorn closes a connection idle between requests after its keep-alive timeout, and h11 bounds a
request head's size (16 kB) while the head arrives in pieces (the bytes it buffers waiting for the head's end: a
head that came in one read passed whatever its size, 21-117 kB measured; `HeadLimitedConnection` holds every
head to the limit), but nothing bounds the time a request takes to arrive (every byte
restarts the keep-alive timer, and a new connection has none), nor the number of connections open at
once. 200 sockets sending half a request head each, under a descriptor limit of 160, used to keep
real requests out, and asyncio then logged a traceback for each refused accept, thousands a second.

`GuardedH11Protocol` is uvicorn's h11 protocol with those two limits:
- a read deadline: a request's head and body must arrive within `read_timeout_s` of the connection
  being made or of the last answer on it; else the connection is closed;
- a cap on connections open at once (`max_connections`, lowered to leave descriptors for the model's
  files when the process may open fewer): a new connection beyond it closes the longest-idle one (no
  request in progress: a sleeping keep-alive connection, or one still trickling its head), and is
  itself closed when every connection is busy serving a request.
`ServerConfig` is uvicorn's Config with them; it also makes asyncio report a descriptor shortage
once a minute instead of per connection. What is shed is logged once a minute, with a count.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import time
import weakref
from collections import OrderedDict
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import defaults

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024  # a request's line and headers (h11's default bound on a head it buffers)
FD_RESERVE = 64  # descriptors kept for what the process opens besides connections (weights, tokenizer, temp files)
MAX_BACKLOG = 2048  # connections the kernel queues for accept (uvicorn's default)
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class OncePer:
    """A warning logged at most once per `interval_s`, with how many times it happened meanwhile."""

    def __init__(self, interval_s: float = 60.0) -> None:
        self.interval_s = interval_s
        self._last = -float("inf")
        self._count = 0

    def warn(self, message: str, *args: object) -> None:
        self._count += 1
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            log.warning(message + " (%d times since the last such message)", *args, self._count)
            self._last, self._count = now, 0


def connection_limits(max_connections: int) -> tuple[int, int]:
    """(connections open at once, listen backlog) within the process's descriptor limit.

    asyncio accepts up to the backlog's number of connections at each turn of its loop before any
    of them is seen (and the longest-idle one closed for it), so a burst can overshoot the cap by
    about two backlogs: the cap leaves room for that and for `FD_RESERVE` other files."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections, MAX_BACKLOG
    backlog = max(8, min(MAX_BACKLOG, (soft - FD_RESERVE) // 8))
    return max(8, min(max_connections, soft - FD_RESERVE - 2 * backlog)), backlog


class ServerConfig(uvicorn.Config):
    """uvicorn's Config, serving over `GuardedH11Protocol` with a read deadline and a connection cap."""

    def __init__(self, app: Any, *, read_timeout_s: float = defaults.REQUEST_READ_TIMEOUT_S,
                 max_connections: int = defaults.MAX_CONNECTIONS, **kwargs: Any) -> None:
        if read_timeout_s <= 0 or max_connections < 1:
            raise ValueError("read_timeout_s > 0 and max_connections >= 1 are required")
        cap, backlog = connection_limits(max_connections)
        super().__init__(app, http=GuardedH11Protocol, timeout_keep_alive=defaults.KEEP_ALIVE_S, backlog=backlog,
                         **kwargs)
        self.read_timeout_s = read_timeout_s
        self.max_connections = cap

    def load(self) -> None:
        super().load()
        try:  # uvicorn loads its config on the server's event loop (in Server.serve)
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        quiet_descriptor_errors(loop)


def quiet_descriptor_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Report asyncio's "out of system resource" errors (a refused accept when descriptors run out)
    once a minute: asyncio itself logs a traceback for each, up to the listen backlog each time the
    socket is readable. Every other error goes to the handler there was."""
    previous = loop.get_exception_handler()
    shortage = OncePer()

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in OUT_OF_DESCRIPTORS:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            shortage.warn("out of file descriptors (the limit is %s): new connections wait until some close; "
                          "raise `ulimit -n` or lower --max-connections", soft)
            return
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)


# idle connections per server (uvicorn's ServerState), oldest first
_idle: weakref.WeakKeyDictionary[Any, OrderedDict[GuardedH11Protocol, None]] = weakref.WeakKeyDictionary()
_shed = OncePer()
_late = OncePer()


def head_bytes(request: h11.Request) -> int:
    """The size of `request`'s head as sent: its request line, its headers (h11 strips the spaces around a value:
    at most those are not counted) and the empty line after them."""
    line = len(request.method) + 1 + len(request.target) + len(b" HTTP/") + len(request.http_version) + 2
    return line + sum(len(k) + 2 + len(v) + 2 for k, v in request.headers.raw_items()) + 2


class HeadLimitedConnection(h11.Connection):
    """h11's server connection that refuses a request head over `max_head_bytes` however it arrived: h11 itself
    bounds only the bytes it buffers while a head is incomplete. The refusal is h11's: a RemoteProtocolError,
    which uvicorn answers with 400 and a closed connection, as it does a head h11 stopped buffering."""

    def __init__(self, max_head_bytes: int = MAX_HEAD_BYTES) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes

    def next_event(self) -> Any:
        event = super().next_event()
        if isinstance(event, h11.Request) and head_bytes(event) > self.max_head_bytes:
            raise h11.RemoteProtocolError(f"the request head is over {self.max_head_bytes} bytes",
                                          error_status_hint=431)
        return event


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read deadline per request and a cap on connections (see above).
    Its config is a `ServerConfig` (a plain uvicorn Config gets the defaults)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.conn = HeadLimitedConnection(getattr(config, "h11_max_incomplete_event_size", None) or MAX_HEAD_BYTES)
        self._read_timeout_s: float = getattr(config, "read_timeout_s", defaults.REQUEST_READ_TIMEOUT_S)
        self._cap: int = getattr(config, "max_connections", defaults.MAX_CONNECTIONS)
        self._deadline: asyncio.TimerHandle | None = None
        self._awaited: Any = None  # the request cycle there was when the deadline was set

    # -- idleness: no request in progress ----------------------------------------------------------

    @property
    def _idle_set(self) -> OrderedDict[GuardedH11Protocol, None]:
        return _idle.setdefault(self.server_state, OrderedDict())

    def _became_idle(self) -> None:
        self._idle_set[self] = None
        self._idle_set.move_to_end(self)
        if self._deadline is not None:
            self._deadline.cancel()
        self._awaited = self.cycle
        self._deadline = self.loop.call_later(self._read_timeout_s, self._read_timed_out)

    def _became_busy(self) -> None:
        self._idle_set.pop(self, None)

    def _read_timed_out(self) -> None:
        cycle = self.cycle
        head_missing = cycle is self._awaited  # no request head since the deadline was set
        body_missing = cycle is not None and not head_missing and cycle.more_body and not cycle.response_started
        if (head_missing or body_missing) and not self.transport.is_closing():
            _late.warn("closed a connection that had not sent its request within %g s", self._read_timeout_s)
            self.transport.close()

    # -- uvicorn's protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._became_idle()
        if len(self.connections) <= self._cap:
            return
        idle = self._idle_set
        victim = next((c for c in idle if c is not self), None)
        if victim is None:  # every other connection is serving a request: this one waits its turn outside
            _shed.warn("at the connection limit (%d) with every connection busy: refused a new one", self._cap)
            idle.pop(self, None)
            transport.close()
            return
        _shed.warn("at the connection limit (%d): closed the connection idle longest", self._cap)
        idle.pop(victim, None)
        victim.transport.close()

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not before:  # a request head arrived
            self._became_busy()

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._became_idle()  # first: uvicorn then handles a pipelined request, which makes it busy again
        super().on_response_complete()

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._forget()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)

    def _forget(self) -> None:
        self._idle_set.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
