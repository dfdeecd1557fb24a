"""`transformer-explainer serve`: registered into the main CLI by `cli._register_optional`."""

from __future__ import annotations

import argparse


def cmd_serve(args: argparse.Namespace) -> int:
    from .run import ServeConfig, serve

    cfg = ServeConfig(models=args.model or [], host=args.host, port=args.port, workers=args.workers,
                      model_threads=args.model_threads, max_queue=args.queue, request_timeout_s=args.timeout,
                      trace_cache_mb=args.cache_mb, allow_download=args.allow_download,
                      discover=not args.only)
    if args.workers < 1 or args.model_threads < 1 or args.queue < 0 or args.timeout <= 0:
        from ..errors import InputError

        raise InputError("--workers and --model-threads must be >= 1, --queue >= 0, --timeout > 0")
    serve(cfg, open_browser=args.open)
    return 0


def register(sub: argparse._SubParsersAction, _train: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start the browser app on a local web server")
    p.add_argument("--model", action="append", default=None, metavar="SPEC",
                   help="built-in model name, local HF-format folder, or cached hub id; repeat to offer several "
                        "(the first is the default). Default: GPT-2 small if cached, else the built-in model")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--open", action="store_true", help="open the app in the default browser")
    p.add_argument("--workers", type=int, default=1, help="server processes (default 1)")
    p.add_argument("--model-threads", type=int, default=1, help="model calls run at once per process (default 1)")
    p.add_argument("--queue", type=int, default=16, help="requests that may wait for the model; more get 503")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one model call may take (default 60)")
    p.add_argument("--cache-mb", type=int, default=256, help="memory for recent traces per process (default 256)")
    p.add_argument("--allow-download", action="store_true", help="let --model name an uncached hub model")
    p.add_argument("--only", action="store_true", help="offer only the --model models, not the built-in/cached ones")
    p.set_defaults(func=cmd_serve)
