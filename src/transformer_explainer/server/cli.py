"""`transformer-explainer serve`: registered into the main CLI by `cli.py` (its FEATURE_CLIS)."""

from __future__ import annotations

import argparse

from ..cli_args import (
    device_args,
    dtype_arg,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
)
from . import defaults

TOKEN_ENV = "TRANSFORMER_EXPLAINER_TOKEN"


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    from ..cli_model import placement_of
    from ..errors import InputError
    from .run import ServeConfig, serve

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and args.no_token:
        raise InputError(f"--no-token and a token (--token or ${TOKEN_ENV}) contradict each other; choose one")
    device, device_map = placement_of(args)
    cfg = ServeConfig(models=args.model or [], host=args.host, port=args.port, workers=args.workers,
                      model_threads=args.model_threads, torch_threads=args.torch_threads,
                      max_queue=args.queue, request_timeout_s=args.timeout, trace_cache_mb=args.cache_mb,
                      max_body_bytes=args.max_body_bytes, max_tokens=args.max_tokens,
                      analysis_gflop=args.analysis_gflop, max_connections=args.max_connections,
                      read_timeout_s=args.read_timeout,
                      allow_download=not args.offline, api_downloads=args.api_downloads, discover=not args.only,
                      token=token, no_token=args.no_token, allow_hosts=args.allow_host or [],
                      client_calls=args.client_calls, client_rate=args.client_rate, client_burst=args.client_burst,
                      live_training=args.live_training,
                      dtype=args.dtype, device=device, device_map=device_map, max_memory=args.max_memory)
    serve(cfg, open_browser=args.open)
    return 0


def register(sub: argparse._SubParsersAction, _train: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start the browser app on a local web server")
    p.add_argument("--model", action="append", default=None, metavar="SPEC",
                   help="built-in model name, local HF-format folder, or hub id (gpt2, gpt2-medium, owner/repo: "
                        "downloaded into the Hugging Face cache if it is not there yet); repeat to offer several "
                        "(the first is the default). Default: GPT-2 small if cached, else the built-in model")
    p.add_argument("--offline", action="store_true", help="never download; a --model must be here already")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port_number, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--open", action="store_true", help="open the app in the default browser")
    p.add_argument("--workers", type=positive_int, default=1, help="server processes (default 1)")
    p.add_argument("--model-threads", type=positive_int, default=None,
                   help="forward passes at once per process (default 2 with two or more cores per process, else 1)")
    p.add_argument("--torch-threads", type=positive_int, default=None,
                   help="threads per forward pass, fixed (default: each pass gets the cores of its process shared "
                        "among the passes running, e.g. all of them for a lone user)")
    p.add_argument("--queue", type=non_negative_int, default=defaults.QUEUE,
                   help=f"requests that may wait for the model (default {defaults.QUEUE}; answers from traces in "
                        f"memory: {defaults.LIGHT_QUEUE_FACTOR} times as many); more get 503")
    p.add_argument("--timeout", type=positive_float, default=defaults.TIMEOUT_S,
                   help=f"seconds one model call may take (default {defaults.TIMEOUT_S:g}); then 503, and an analysis "
                        f"stops after its current forward pass")
    p.add_argument("--analysis-gflop", type=non_negative_float, default=None, metavar="G",
                   help=f"the largest head analysis (importance, pruning) a request may ask for, in GFLOP of its "
                        f"forward passes; larger ones are refused with a cheaper setting to try (default "
                        f"{defaults.ANALYSIS_GFLOP_PER_S:g} x --timeout; 0: no limit)")
    p.add_argument("--cache-mb", type=non_negative_int, default=defaults.CACHE_MB,
                   help=f"memory for recent traces per process (default {defaults.CACHE_MB})")
    p.add_argument("--max-tokens", type=positive_int, default=None,
                   help="tokens per request (default: the model's context, 1024 for GPT-2); longer inputs are "
                        "refused, or cut when the client asks for truncation")
    p.add_argument("--max-body-bytes", type=positive_int, default=defaults.MAX_BODY_BYTES,
                   help=f"largest request body accepted (default {defaults.MAX_BODY_BYTES}); larger ones get 413")
    p.add_argument("--max-connections", type=positive_int, default=defaults.MAX_CONNECTIONS, metavar="N",
                   help=f"connections open at once per process (default {defaults.MAX_CONNECTIONS}, fewer under a "
                        f"lower `ulimit -n`); beyond it the connection idle longest is closed")
    p.add_argument("--read-timeout", type=positive_float, default=defaults.REQUEST_READ_TIMEOUT_S, metavar="S",
                   help=f"seconds a connection may take to send a request (head and body), from its start or the "
                        f"last answer (default {defaults.REQUEST_READ_TIMEOUT_S:g}); slower ones are closed")
    # downloading a named --model is the default now; the flag stays so that old scripts still run
    p.add_argument("--allow-download", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--api-downloads", action="store_true",
                   help="let a request download a known GPT-2 checkpoint (gpt2 ... gpt2-xl, distilgpt2) on first use, "
                        "and offer the app's download panel on a server reachable from other machines (a server "
                        "bound to 127.0.0.1 offers the panel anyway); off by default")
    dtype_arg(p)
    device_args(p)
    p.add_argument("--live-training", action=argparse.BooleanOptionalAction, default=None,
                   help="may a visitor train the 'Watch it learn' induction run live on this server, one run at a "
                        "time (default: yes when bound to this machine, no otherwise: a shared server replays the "
                        "recorded run)")
    p.add_argument("--only", action="store_true", help="offer only the --model models, not the built-in/cached ones")
    g = p.add_argument_group("access (docs/deploy.md)")
    g.add_argument("--token", default=None,
                   help=f"access token every request must carry (?token= in the URL once, then a cookie; or "
                        f"Authorization: Bearer). Default: a random one when --host is not loopback, none on "
                        f"127.0.0.1. ${TOKEN_ENV} sets it without showing it in the process list")
    g.add_argument("--no-token", action="store_true", help="serve beyond this machine without a token (anyone in)")
    g.add_argument("--allow-host", action="append", default=None, metavar="NAME",
                   help="on a loopback bind, also answer requests for the Host NAME (a reverse proxy's name); "
                        "others than localhost, 127.0.0.1 and [::1] get 403 (DNS rebinding)")
    g.add_argument("--client-calls", type=non_negative_int, default=None, metavar="N",
                   help=f"model calls at once per client address, as many again wait, more get 429; of them "
                        f"{defaults.CLIENT_ANALYSES} head analysis (default {defaults.EXPOSED_CLIENT_CALLS} when "
                        f"exposed, no limit on loopback; 0: no limit)")
    g.add_argument("--client-rate", type=non_negative_float, default=None, metavar="R",
                   help=f"API requests per second per client address, beyond a burst; more get 429 + Retry-After "
                        f"(default {defaults.EXPOSED_CLIENT_RATE:g} when exposed, no limit on loopback; 0: no limit)")
    g.add_argument("--client-burst", type=positive_int, default=defaults.CLIENT_BURST, metavar="B",
                   help=f"API requests a client may make at once before --client-rate applies "
                        f"(default {defaults.CLIENT_BURST})")
    p.set_defaults(func=cmd_serve)
