"""How long `transformer-explainer serve` takes to start, from launching the process.

    .venv/bin/python benchmarks/startup.py [--model builtin|gpt2-small-shape|FOLDER] [--repeats 5] [--workers 1]

Each round launches `python -m transformer_explainer.cli serve --port 0 --only --model ...` (this
checkout's src/ first on PYTHONPATH) and records, from the launch:
  url      the "serving on URL" line is printed (the socket is bound and listening)
  answer   /api/health first answers over HTTP (any status: 503 "loading" counts; the server is up),
           polled every 50 ms
  ready    GET /api/models has answered and /api/health then says 200 (the model is loaded); one
           waiting request, as a browser opening the page makes (no polling while the model loads)
and, for comparison, `--help` (parsing the command line only). Medians with min-max over the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from fixtures import gpt2_small_shape

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def time_help() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "transformer_explainer.cli", "--help"], env=_env(), check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def time_serve(model: str, workers: int, timeout: float = 180.0) -> dict[str, float]:
    cmd = [sys.executable, "-m", "transformer_explainer.cli", "serve", "--port", "0", "--only", "--offline",
           "--model", model, "--workers", str(workers)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out: dict[str, float] = {}
    try:
        line = proc.stdout.readline()
        out["url"] = time.perf_counter() - t0
        if "serving on " not in line:
            raise RuntimeError(f"serve did not print its URL: {line!r}")
        url = line.split("serving on ", 1)[1].split()[0]
        status = 0
        with httpx.Client(timeout=timeout) as c:
            while time.perf_counter() - t0 < timeout:
                try:
                    status = c.get(url + "api/health").status_code
                except httpx.TransportError:
                    time.sleep(0.05)
                    continue
                out["answer"] = time.perf_counter() - t0
                break
            if status != 200:  # as a browser would: one request, answered once the model is in
                c.get(url + "api/models").raise_for_status()
                status = c.get(url + "api/health").status_code
            out["ready"] = time.perf_counter() - t0
        if status != 200:
            raise RuntimeError(f"the server did not become ready (health {status})")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2-small-shape",
                    help="builtin (explainer-small), gpt2-small-shape (random weights, GPT-2 small's size), "
                         "or a folder")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    if args.model == "builtin":
        model = "explainer-small"
    elif args.model == "gpt2-small-shape":
        model = str(gpt2_small_shape(Path(tempfile.gettempdir()) / "te-bench-gpt2-small-shape"))
    else:
        model = args.model
    rounds: dict[str, list[float]] = {"help": [], "url": [], "answer": [], "ready": []}
    for _ in range(args.repeats):  # interleaved, so drift in the machine's load hits both alike
        rounds["help"].append(time_help())
        for k, v in time_serve(model, args.workers).items():
            rounds[k].append(v)
    print(f"serve --model {args.model} --workers {args.workers}: seconds from launch, median (min-max) of "
          f"{args.repeats}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for k, v in rounds.items():
        print(f"  {k:<7} {statistics.median(v):6.2f}  ({min(v):.2f}-{max(v):.2f})")


if __name__ == "__main__":
    main()
