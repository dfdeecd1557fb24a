"""Does the page stay responsive while the server trains the induction run live? The time of a trace request (the call
a view change or a new text makes) against the app, idle and while a live run trains, and the run's steps per second
meanwhile. The app is built with serve's settings for this machine (its lanes and thread budget), in-process.

    nice .venv/bin/python benchmarks/induction_live.py [--model explainer-small] [--requests 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from fastapi.testclient import TestClient

from transformer_explainer import load_model
from transformer_explainer.server import create_app
from transformer_explainer.server.run import ServeConfig, server_settings
from transformer_explainer.training.induction_live import LiveInductions, live_config

WORDS = ("the king said that people of the city were waiting for news from the river and the hills beyond "
         "it while children played in the old market square").split()


def texts(n: int, offset: int) -> list[str]:
    """Distinct texts of 24 words (none in the trace cache)."""
    return [" ".join(WORDS[(i * 7 + offset + j) % len(WORDS)] for j in range(24)) + f" {offset + i}." for i in range(n)]


def time_traces(client: TestClient, model: str, batch: list[str]) -> list[float]:
    out = []
    for text in batch:
        t = time.perf_counter()
        r = client.post("/api/trace", json={"model": model, "text": text})
        out.append(time.perf_counter() - t)
        assert r.status_code == 200, r.text
    return out


def show(label: str, times: list[float]) -> None:
    ms = sorted(t * 1000 for t in times)
    print(f"{label}: median {statistics.median(ms):.0f} ms, p90 {ms[int(0.9 * (len(ms) - 1))]:.0f} ms, "
          f"max {ms[-1]:.0f} ms over {len(ms)} traces")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="explainer-small")
    p.add_argument("--requests", type=int, default=20)
    args = p.parse_args()
    settings = server_settings(ServeConfig())
    torch.set_num_threads(settings.thread_budget or 1)  # as serve does
    model = load_model(args.model, allow_download=False)
    app = create_app({args.model: model}, settings)
    app.state.inductions = LiveInductions(lease_s=3600.0)  # no page holds the lease here
    print(f"torch threads {torch.get_num_threads()}, model lane {settings.model_threads}, "
          f"budget {settings.thread_budget}")
    with TestClient(app, base_url="http://127.0.0.1") as client:
        time_traces(client, args.model, texts(3, 1000))  # warm up
        idle = time_traces(client, args.model, texts(args.requests, 0))
        run = app.state.inductions.start(live_config(control=False))
        try:
            while run.step < 5:  # past its first record's start
                time.sleep(0.1)
            step0, t0 = run.step, time.perf_counter()
            busy = time_traces(client, args.model, texts(args.requests, 100))
            rate = (run.step - step0) / (time.perf_counter() - t0)
        finally:
            run.stop()
            run.join(60)
    show("idle", idle)
    show("while a live run trains", busy)
    print(f"the live run meanwhile: {rate:.1f} steps/s (width {run.config.width}, batch {run.config.batch})")


if __name__ == "__main__":
    main()
