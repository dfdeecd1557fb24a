"""Run the app under uvicorn: bind first, then print the URL, so the address printed is the one
that is listening (also with `--port 0`). One process answers at once and builds the app (torch,
the web framework, the default model) behind a `StartingApp`, which serves the page meanwhile; see
starting.py."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from ..errors import ExplainerError, InputError
from . import defaults
from .security import AccessSettings, loopback_hosts

if TYPE_CHECKING:  # imported where used: listening must not wait for the web framework and torch
    from collections.abc import Callable

    from fastapi import FastAPI
    from starlette.types import ASGIApp

    from .app import ServerSettings
    from .registry import ModelRegistry
    from .starting import StartingApp

log = logging.getLogger(__name__)

# Worker processes (uvicorn --workers) rebuild the app from this; it is plumbing between the
# parent and its own children, not a user setting.
_CONFIG_ENV = "TRANSFORMER_EXPLAINER_SERVE_CONFIG"


@dataclass
class ServeConfig:
    models: list[str] = field(default_factory=list)  # specs: built-in names, folders, hub ids; first is the default
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1  # processes
    model_threads: int | None = None  # forward passes at once per process; None: see `model_threads`
    torch_threads: int | None = None  # threads per model call; None: shared out as calls run (`thread_budget`)
    max_queue: int = defaults.QUEUE
    request_timeout_s: float = defaults.TIMEOUT_S
    trace_cache_mb: int = defaults.CACHE_MB
    max_body_bytes: int = defaults.MAX_BODY_BYTES
    max_tokens: int | None = None  # tokens per request; None: the model's context
    analysis_gflop: float | None = None  # largest analysis (cost.py); None: ANALYSIS_GFLOP_PER_S x timeout; 0: any
    max_connections: int = defaults.MAX_CONNECTIONS  # at once per process (fewer under a lower descriptor limit)
    read_timeout_s: float = defaults.REQUEST_READ_TIMEOUT_S  # for a request's head and body to arrive
    allow_download: bool = False  # may `--model gpt2` download at startup
    api_downloads: bool = False  # may a request download a known GPT-2 hub model (never any other)
    discover: bool = True  # also offer the built-in and cached models
    dtype: str = "float32"  # weights and activations of every model it loads: float32, bfloat16 or float16 (GPU)
    device: str | None = "auto"  # where every model it loads runs (None: by `device_map`)
    device_map: str | None = None  # "auto": each model placed by accelerate, whole blocks, GPUs first
    max_memory: dict[str, str] | None = None  # with the map: bytes each device may give ({"0": "20GiB", "cpu": ...})
    token: str | None = None  # access token; None: generated when exposed (see `with_token`), none on loopback
    no_token: bool = False  # exposed without a token, on purpose
    allow_hosts: list[str] = field(default_factory=list)  # Host names answered besides the loopback ones
    client_calls: int | None = None  # model calls at once per client; None: 2 when exposed, no limit on loopback
    client_rate: float | None = None  # API requests/s per client; None: 10 when exposed, no limit on loopback
    client_burst: int = defaults.CLIENT_BURST  # API requests at once before the rate applies
    live_training: bool | None = None  # may a client train the induction run live; None: on loopback only


def model_threads(cfg: ServeConfig) -> int:
    """Forward passes at once per process: the given number, else 2 where each process has two
    cores or more (two calls, one core each, keep up better under many users than one call on two
    cores, and much better when another program is busy on one of them), else 1. The light lane (answers
    from traces in memory) gets as many threads: a view's block run again runs beside another's."""
    if cfg.model_threads is not None:
        return cfg.model_threads
    return min(2, max(1, len(os.sched_getaffinity(0)) // cfg.workers))


def thread_budget(cfg: ServeConfig) -> int | None:
    """Torch threads this process shares out among its running forward passes (each gets the
    budget divided by the passes running when it starts, at least 1): its share of the machine's
    cores. None when `--torch-threads` fixes the threads of every pass instead."""
    if cfg.torch_threads is not None:
        return None
    return max(1, len(os.sched_getaffinity(0)) // cfg.workers)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def downloads_allowed(cfg: ServeConfig) -> bool:
    """May the app's download panel fetch a known GPT-2 checkpoint: by default only on a server
    bound to this machine; on an exposed one only with --api-downloads. One process only: each
    worker would keep its own downloads."""
    return (cfg.api_downloads or is_loopback(cfg.host)) and cfg.workers == 1


def with_token(cfg: ServeConfig) -> ServeConfig:
    """`cfg` with its access token decided, once, in the parent process (so `--workers` share it):
    the given one, else a new random one when exposed (unless `--no-token`), else none."""
    if cfg.token is not None or cfg.no_token or is_loopback(cfg.host):
        return cfg
    return replace(cfg, token=secrets.token_urlsafe(24))


def access_settings(cfg: ServeConfig) -> AccessSettings:
    """Loopback: Host checked (against DNS rebinding), no token unless given, no per-client limits
    unless given. Exposed: any Host, the token, per-client limits on."""
    loopback = is_loopback(cfg.host)
    bound = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    hosts = loopback_hosts([bound, *cfg.allow_hosts]) if loopback else None

    def limit(given: float | None, exposed: float) -> float | None:
        if given is None:
            return None if loopback else exposed
        return given or None  # 0: off

    calls = limit(cfg.client_calls, defaults.EXPOSED_CLIENT_CALLS)
    return AccessSettings(token=None if cfg.no_token else cfg.token, allowed_hosts=hosts,
                          client_calls=None if calls is None else int(calls),
                          client_analyses=None if calls is None else defaults.CLIENT_ANALYSES,
                          client_rate=limit(cfg.client_rate, defaults.EXPOSED_CLIENT_RATE),
                          client_burst=cfg.client_burst)


def live_training(cfg: ServeConfig) -> bool:
    """May a client train the induction run live: as `--live-training` / `--no-live-training` say, else only on a
    server bound to this machine (one that a class shares replays the shipped run: it cannot train a model for
    each of thirty people at once)."""
    return cfg.live_training if cfg.live_training is not None else is_loopback(cfg.host)


def analysis_gflop(cfg: ServeConfig) -> float | None:
    """The largest analysis a request may ask for, in GFLOP: the given one (0: no limit), else what
    the time limit per call allows at `defaults.ANALYSIS_GFLOP_PER_S`."""
    if cfg.analysis_gflop is None:
        return defaults.ANALYSIS_GFLOP_PER_S * cfg.request_timeout_s
    return cfg.analysis_gflop or None


def build_registry(cfg: ServeConfig) -> ModelRegistry:
    from ..loading.resolve import default_spec, resolve
    from ..sampling import SamplingParams
    from .registry import ModelRegistry

    specs = cfg.models or [default_spec()]
    resolved = [resolve(s, allow_download=cfg.allow_download) for s in specs]
    reg = ModelRegistry(default=resolved[0].name, api_downloads=cfg.api_downloads, dtype=cfg.dtype, device=cfg.device,
                        device_map=cfg.device_map, max_memory=cfg.max_memory)
    for r in resolved:
        reg.add_resolved(r, pinned=True)
    if cfg.discover:
        reg.discover()
    model = reg.get(reg.default)  # load the default now, so the first page view is fast and errors show at startup
    # one short pass, so that first-use costs (lazy imports, the tokenizer's and torch's first calls, the
    # allocator's first pages) are paid here rather than by the first visitors (measured: their traces
    # took 0.4-2.0 s at a server's start, 0.1-0.2 s after)
    model.next_token(model.trace("Warming up."), SamplingParams())
    return reg


def preload_torch_libraries() -> None:
    """Load torch's two big shared libraries (libc10, libtorch_cpu) with ctypes, ahead of `import torch`.

    Loading libtorch_cpu (its static initialisers fill torch's operator registry) takes 0.25-0.3 s here,
    and while it loads, the server's event loop stands still: under `import torch` it holds the GIL, and
    under ctypes, which releases the GIL, the loop still waited (measured: a /api/health answer took
    0.30-0.33 s in that window either way, 1-50 ms outside it; the dynamic loader's lock, most likely).
    `serve` does it before it prints the URL, so that a page opened at once is not caught in that pause;
    `import torch` then finds the libraries loaded. CPU builds of torch on Linux only (no libtorch_cuda
    next to them): the same files torch loads itself; anywhere else, or on any error, nothing is done."""
    import ctypes
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return
        lib = os.path.join(next(iter(spec.submodule_search_locations)), "lib")
        names = ("libc10.so", "libtorch_cpu.so")
        if sys.platform != "linux" or os.path.exists(os.path.join(lib, "libtorch_cuda.so")) or not all(
                os.path.exists(os.path.join(lib, n)) for n in names):
            return
        for n in names:
            ctypes.CDLL(os.path.join(lib, n))
    except (OSError, ValueError, ImportError):
        log.debug("preloading torch's libraries failed; import torch loads them", exc_info=True)


def server_settings(cfg: ServeConfig) -> ServerSettings:
    """The app's settings for `cfg`: the threads of its lanes, its limits, downloads and access."""
    from .app import ServerSettings

    threads = model_threads(cfg)
    return ServerSettings(model_threads=threads, light_threads=threads, thread_budget=thread_budget(cfg),
                          max_queue=cfg.max_queue, request_timeout_s=cfg.request_timeout_s,
                          trace_cache_mb=cfg.trace_cache_mb, max_body_bytes=cfg.max_body_bytes,
                          max_tokens=cfg.max_tokens, max_analysis_gflop=analysis_gflop(cfg),
                          downloads=downloads_allowed(cfg), access=access_settings(cfg),
                          live_training=live_training(cfg))


def build_app(cfg: ServeConfig) -> FastAPI:
    import torch

    from .app import create_app

    settings = server_settings(cfg)
    # this process serves; the setting is its own
    torch.set_num_threads(cfg.torch_threads or settings.thread_budget or 1)
    return create_app(build_registry(cfg), settings)


WORKER_READY = "worker {pid} ready (model loaded in {seconds:.1f} s)"  # one line per process on stderr
# how a reader finds those lines: searched, not matched at a line's start, so that a line another process's
# output ran into is still found
WORKER_READY_PATTERN = re.compile(r"worker (\d+) ready \(model loaded in \d+\.\d s\)")


def say_line(text: str) -> None:
    """One line on stderr in one write: processes sharing the pipe (uvicorn's workers) never split each
    other's lines, as print's separate writes of the text and its newline can."""
    sys.stderr.flush()
    data = (text + "\n").encode()
    while data:  # a pipe takes a write of up to PIPE_BUF bytes whole; a line is far shorter
        data = data[os.write(2, data):]


def die_with_parent(interval: float = 0.5) -> None:
    """A worker ends when the process that started it is gone (killed with SIGKILL, its workers are
    re-parented and would otherwise keep serving and holding the port): a daemon thread watches the parent."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        say_line(f"worker {os.getpid()} stopping: its parent process {parent} is gone")
        os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def app_from_env() -> FastAPI:
    """Factory for uvicorn's worker processes. Each says on stderr when it has loaded the model (`WORKER_READY`):
    the parent's /api/health answers 200 as soon as one worker is up, while the others may still be loading
    (and taking the cores from the first), so whoever waits for the whole server waits for these lines."""
    import time

    die_with_parent()
    t0 = time.monotonic()
    app = build_app(ServeConfig(**json.loads(os.environ[_CONFIG_ENV])))
    say_line(WORKER_READY.format(pid=os.getpid(), seconds=time.monotonic() - t0))
    return app


def url_for(host: str, port: int, token: str | None = None) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def devices_words(cfg: ServeConfig) -> str:
    """Where the models will run, said before they load: "cpu", "cuda:0 (NVIDIA H200, 139.7 GiB)", or the map's
    rule. A device that is not here is refused now (InputError). torch is imported only to ask for a GPU: a
    build of it for the CPU alone (no libtorch_cuda, not a Mac) answers "auto" with the CPU without it."""
    if cfg.device_map is not None:
        budget = ",".join(f"{k}={v}" for k, v in (cfg.max_memory or {}).items())
        return f"a device map ({cfg.device_map}{f', within {budget}' if budget else ''}: whole blocks, GPUs first)"
    if cfg.device in (None, "cpu") or (cfg.device == "auto" and _torch_is_cpu_only()):
        return "cpu"
    from ..devices import describe_device, resolve_device

    return describe_device(resolve_device(cfg.device))


def _torch_is_cpu_only() -> bool:
    """Whether the installed torch can only be a CPU one (Linux, no libtorch_cuda beside libtorch_cpu), without
    importing it."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if sys.platform != "linux" or spec is None or not spec.submodule_search_locations:
        return False
    lib = os.path.join(next(iter(spec.submodule_search_locations)), "lib")
    return os.path.exists(os.path.join(lib, "libtorch_cpu.so")) and not os.path.exists(
        os.path.join(lib, "libtorch_cuda.so"))


def model_line(cfg: ServeConfig) -> str:
    """Which model the app opens with, and why: e.g. "model: explainer-small (built in): no model
    named, and GPT-2 small is not in the Hugging Face cache; run ... to download it". Resolving
    here also downloads a named hub model (with its progress bar) before the server starts."""
    from ..loading.resolve import resolve

    first = resolve(cfg.models[0] if cfg.models else None, allow_download=cfg.allow_download)
    return f"model: {first.describe()}" + (f": {first.reason}" if first.reason else "")


def starting_app(cfg: ServeConfig, build: Callable[[], ASGIApp] | None = None, *,
                 on_ready: Callable[[], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None) -> StartingApp:
    """What `serve` runs in one process: the real app (`build`, by default `build_app(cfg)`) built in a
    thread behind a StartingApp, which serves the page meanwhile with the real app's middleware (the
    security headers, the access checks of `cfg`, gzip: pages.py)."""
    from ..web_bundle import package_static_dir
    from .pages import middleware, wrapped
    from .starting import StartingApp

    layers = middleware(access_settings(cfg), cfg.max_body_bytes)
    return StartingApp(build or (lambda: build_app(cfg)), static_dir=package_static_dir(),
                       wrap=lambda app: wrapped(app, layers), on_ready=on_ready, on_error=on_error)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` and listening (port 0: a free one), for `serve` to hand uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on connections accepted from a socket that
    # says it is TCP. Without it each answer's body waited for the ACK of its headers (Nagle's algorithm and the
    # client's delayed ACK): 40 ms more on every answer, the page's and the API's (measured on /api/health
    # polled while the model loads: 43-55 ms each, 8-15 ms with it)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except socket.gaierror as e:
        sock.close()
        raise ExplainerError(f"cannot listen on {host}: {e.strerror}; check --host") from None
    except OSError as e:
        sock.close()
        raise ExplainerError(f"cannot listen on {host}:{port}: {e.strerror}; pick another --port") from None
    sock.listen(2048)
    return sock


def serve(cfg: ServeConfig, *, open_browser: bool = False, out=sys.stdout) -> None:
    import uvicorn

    cfg = with_token(cfg)
    try:
        access_settings(cfg)  # a bad --token or limit is refused before anything starts
    except ValueError as e:
        raise InputError(str(e)) from None
    preload = None
    if cfg.workers == 1 and "torch" not in sys.modules:  # beside the setup below; done before the URL prints
        import threading

        preload = threading.Thread(target=preload_torch_libraries, name="preload-torch", daemon=True)
        preload.start()
    if not is_loopback(cfg.host):
        if cfg.no_token:
            print(f"warning: serving on {cfg.host}, reachable from other machines, without an access token "
                  f"(--no-token). Anyone who can reach this port can use the model; bind to 127.0.0.1 unless you "
                  f"mean to share it.", file=sys.stderr)
        else:
            print(f"warning: serving on {cfg.host}, reachable from other machines. Only browsers that open the "
                  f"address below (with its token) get in; give it only to your class, and put TLS in front on a "
                  f"network you do not trust (docs/deploy.md).", file=sys.stderr)
        if cfg.api_downloads:
            print("warning: --api-downloads is on: any client can make this server download and load GPT-2 "
                  "checkpoints (up to 6.4 GB for gpt2-xl).", file=sys.stderr)
    sock = listening_socket(cfg.host, cfg.port)
    about_model = model_line(cfg)
    where = devices_words(cfg)
    port = sock.getsockname()[1]
    url = url_for(cfg.host, port, cfg.token)
    from .protocol import ServerConfig

    connections = {"read_timeout_s": cfg.read_timeout_s, "max_connections": cfg.max_connections}
    if cfg.workers > 1:
        os.environ[_CONFIG_ENV] = json.dumps(asdict(cfg))
        config = ServerConfig("transformer_explainer.server.run:app_from_env", factory=True, workers=cfg.workers,
                              log_level="warning", **connections)
        from uvicorn.supervisors import Multiprocess

        print(f"serving on {url} ({cfg.workers} processes; each loads the models onto {where} before answering)\n"
              f"{about_model}", file=out, flush=True)
        Multiprocess(config, sockets=[sock]).run()
        return
    server: uvicorn.Server | None = None

    def ready() -> None:
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    def failed(error: BaseException) -> None:
        assert server is not None
        server.should_exit = True  # serve() raises the error once the server has stopped

    starting = starting_app(cfg, on_ready=ready, on_error=failed)
    config = ServerConfig(starting, interface="asgi3", log_level="warning", timeout_graceful_shutdown=5, **connections)
    server = uvicorn.Server(config)
    if preload is not None:
        preload.join()
    print(f"serving on {url} (models on {where})\n{about_model}", file=out, flush=True)
    log.info("loading the model; the page is served at once, API requests wait for the model, /api/health "
             "answers 503 {\"status\": \"loading\"} until then")
    server.run(sockets=[sock])
    if starting.error is not None:
        raise starting.error
