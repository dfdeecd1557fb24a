"""`transformer-explainer serve`: registered into the main CLI by `cli._register_optional`."""

from __future__ import annotations

import argparse


def cmd_serve(args: argparse.Namespace) -> int:
    from ..errors import InputError
    from .run import ServeConfig, serve

    at_least_1 = {"--workers": args.workers, "--model-threads": args.model_threads,
                  "--torch-threads": args.torch_threads, "--max-tokens": args.max_tokens,
                  "--max-body-bytes": args.max_body_bytes}
    bad = [k for k, v in at_least_1.items() if v is not None and v < 1]
    if bad or args.queue < 0 or args.cache_mb < 0 or args.timeout <= 0:
        raise InputError(f"{', '.join(bad) or 'these options'} must be at least 1; --queue and --cache-mb at least 0; "
                         f"--timeout more than 0")
    cfg = ServeConfig(models=args.model or [], host=args.host, port=args.port, workers=args.workers,
                      model_threads=args.model_threads, torch_threads=args.torch_threads,
                      max_queue=args.queue, request_timeout_s=args.timeout, trace_cache_mb=args.cache_mb,
                      max_body_bytes=args.max_body_bytes, max_tokens=args.max_tokens,
                      allow_download=args.allow_download, api_downloads=args.api_downloads, discover=not args.only,
                      dtype=args.dtype)
    serve(cfg, open_browser=args.open)
    return 0


def register(sub: argparse._SubParsersAction, _train: argparse._SubParsersAction) -> None:
    from ..cli import _dtype_arg

    p = sub.add_parser("serve", help="start the browser app on a local web server")
    p.add_argument("--model", action="append", default=None, metavar="SPEC",
                   help="built-in model name, local HF-format folder, or cached hub id; repeat to offer several "
                        "(the first is the default). Default: GPT-2 small if cached, else the built-in model")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--open", action="store_true", help="open the app in the default browser")
    p.add_argument("--workers", type=int, default=1, help="server processes (default 1)")
    p.add_argument("--model-threads", type=int, default=None,
                   help="forward passes at once per process (default 2 with two or more cores per process, else 1)")
    p.add_argument("--torch-threads", type=int, default=None,
                   help="threads per forward pass, fixed (default: each pass gets the cores of its process shared "
                        "among the passes running, e.g. all of them for a lone user)")
    p.add_argument("--queue", type=int, default=16, help="requests that may wait for the model; more get 503")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one model call may take (default 60)")
    p.add_argument("--cache-mb", type=int, default=256, help="memory for recent traces per process (default 256)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="tokens per request (default: the model's context, 1024 for GPT-2); longer inputs are "
                        "refused, or cut when the client asks for truncation")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000,
                   help="largest request body accepted (default 1000000); larger ones get 413")
    p.add_argument("--allow-download", action="store_true", help="let --model name an uncached hub model")
    p.add_argument("--api-downloads", action="store_true",
                   help="let a request download a known GPT-2 checkpoint (gpt2 ... gpt2-xl, distilgpt2) on first use; "
                        "off by default: a client can then only pick models already here")
    _dtype_arg(p)
    p.add_argument("--only", action="store_true", help="offer only the --model models, not the built-in/cached ones")
    p.set_defaults(func=cmd_serve)
