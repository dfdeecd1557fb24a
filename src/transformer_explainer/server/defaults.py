"""The server's default limits, written once: `serve`'s configuration (run.ServeConfig), the app's
settings (app.ServerSettings) and the command line's flags and help (cli.py) read them from here
(docs/deploy.md explains each). Plain numbers, so that the command line imports nothing to show them."""

from __future__ import annotations

QUEUE = 16  # model calls that may wait; more get 503 + Retry-After
TIMEOUT_S = 60.0  # seconds one call may take; then 503
CACHE_MB = 256  # memory for recent traces per process
MAX_BODY_BYTES = 1_000_000  # largest request body; larger ones get 413

# per-client limits of an exposed server unless told otherwise (docs/deploy.md, "Fair share")
EXPOSED_CLIENT_CALLS = 2  # model calls at once per client (as many again wait)
EXPOSED_CLIENT_RATE = 10.0  # API requests per second per client, sustained
CLIENT_BURST = 50  # API requests a client may make at once before the rate applies
