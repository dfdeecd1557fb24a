"""The server's default limits, written once: `serve`'s configuration (run.ServeConfig), the app's
settings (app.ServerSettings) and the command line's flags and help (cli.py) read them from here
(docs/deploy.md explains each). Plain numbers, so that the command line imports nothing to show them."""

from __future__ import annotations

QUEUE = 16  # model calls that may wait (per lane); more get 503 + Retry-After
# the light lane's queue is this many times as long: its answers take milliseconds, so LIGHT_QUEUE_FACTOR x QUEUE of
# them wait less than the shortest Retry-After (1 s) a refusal would send
LIGHT_QUEUE_FACTOR = 4
TIMEOUT_S = 60.0  # seconds one call may take; then 503, and an analysis stops between its passes
CACHE_MB = 256  # memory for recent traces per process
MAX_BODY_BYTES = 1_000_000  # largest request body; larger ones get 413

# The largest analysis accepted, in GFLOP (cost.py): what a minute takes at 50 GFLOP/s, about one
# core of the project's 2-core build machine on a GPT-2-small trace of 16-256 tokens (43-93 GFLOP/s)
ANALYSIS_GFLOP_PER_S = 50.0
ANALYSIS_GFLOP = ANALYSIS_GFLOP_PER_S * TIMEOUT_S

# per-client limits of an exposed server unless told otherwise (docs/deploy.md, "Fair share")
EXPOSED_CLIENT_CALLS = 2  # model calls at once per client (as many again wait)
EXPOSED_CLIENT_RATE = 10.0  # API requests per second per client, sustained
CLIENT_BURST = 50  # API requests a client may make at once before the rate applies
CLIENT_ANALYSES = 1  # analyses (a pass per head) at once per client, where the per-client limits are on

# connections (protocol.py)
MAX_CONNECTIONS = 1000  # open at once per process (fewer when the descriptor limit is lower)
REQUEST_READ_TIMEOUT_S = 10.0  # for a request's head and body to arrive, from the connection or the last answer
KEEP_ALIVE_S = 5  # an idle connection is closed after this long (uvicorn's default)
