"""`transformer-explainer serve`: registered into the main CLI by `cli._register_optional`."""

from __future__ import annotations

import argparse

from ..cli_args import non_negative_int, port_number, positive_float, positive_int


def cmd_serve(args: argparse.Namespace) -> int:
    from .run import ServeConfig, serve

    cfg = ServeConfig(models=args.model or [], host=args.host, port=args.port, workers=args.workers,
                      model_threads=args.model_threads, torch_threads=args.torch_threads,
                      max_queue=args.queue, request_timeout_s=args.timeout, trace_cache_mb=args.cache_mb,
                      max_body_bytes=args.max_body_bytes, max_tokens=args.max_tokens,
                      allow_download=not args.offline, api_downloads=args.api_downloads, discover=not args.only)
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
    p.add_argument("--queue", type=non_negative_int, default=16,
                   help="requests that may wait for the model; more get 503")
    p.add_argument("--timeout", type=positive_float, default=60.0, help="seconds one model call may take (default 60)")
    p.add_argument("--cache-mb", type=non_negative_int, default=256,
                   help="memory for recent traces per process (default 256)")
    p.add_argument("--max-tokens", type=positive_int, default=None,
                   help="tokens per request (default: the model's context, 1024 for GPT-2); longer inputs are "
                        "refused, or cut when the client asks for truncation")
    p.add_argument("--max-body-bytes", type=positive_int, default=1_000_000,
                   help="largest request body accepted (default 1000000); larger ones get 413")
    # downloading a named --model is the default now; the flag stays so that old scripts still run
    p.add_argument("--allow-download", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--api-downloads", action="store_true",
                   help="let a request download a known GPT-2 checkpoint (gpt2 ... gpt2-xl, distilgpt2) on first use; "
                        "off by default: a client can then only pick models already here")
    p.add_argument("--only", action="store_true", help="offer only the --model models, not the built-in/cached ones")
    p.set_defaults(func=cmd_serve)
