"""Soak: a class's mixed load against one real `transformer-explainer serve` process for a long
time (default 20 minutes), to show that the server neither slows down nor grows over time.

The students are those of `load_classroom.py` (typing with the trace following, stepping through
views, weights, the temperature, a generation step, with think times); new students keep arriving
as the first ones are done with a session, so the texts and the cache keep changing. The server runs
with an access token (every request carries it as a bearer header), as an exposed server does.

Reported per minute: answered requests, errors (not 503), 503s, p50 / p99 latency, and the resident
memory (VmRSS, summed over the server's processes) sampled every `--sample` seconds; at the end the
growth of the resident memory from minute 2 (after the model, the allocator and the trace cache have
warmed up) to the end, which must stay under 10 %.

    .venv/bin/python benchmarks/soak.py [--duration 1200] [--students 50] [--sample 10] [--json out.json]
        [--server-arg=--cache-mb=128 ...]

Exit status 1 when a request failed (not 503) or the memory grew by 10 % or more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import sys
import time
from pathlib import Path

import httpx
from fixtures import gpt2_small_shape
from load_classroom import Stats, Student, pct, process_tree, start_server, stop_server, vm_kb

GROWTH_LIMIT = 0.10  # from minute 2 to the end


def rss_mb(pid: int) -> float:
    return sum(vm_kb(p, "VmRSS") for p in process_tree(pid)) / 1024


def minute_row(i: int, stats: Stats, rss: list[tuple[float, float]]) -> dict:
    xs = [x for v in stats.latency.values() for x in v]
    in_minute = [m for t, m in rss if i * 60 <= t < (i + 1) * 60]
    return {"minute": i + 1, "answered": len(xs), "errors": sum(stats.errors.values()) + stats.gave_up,
            "busy_503": sum(stats.busy.values()),
            "p50_ms": round(pct(xs, 50) * 1e3) if xs else None, "p99_ms": round(pct(xs, 99) * 1e3) if xs else None,
            "rss_mb": round(in_minute[-1]) if in_minute else None}


async def soak(url: str, token: str, pid: int, args: argparse.Namespace) -> dict:
    minutes: list[Stats] = [Stats()]
    rss: list[tuple[float, float]] = []  # (seconds since start, MB)
    # idle connections are let go after 4 s, before the server's keep-alive of 5 s (uvicorn's default) ends
    # them: a request sent on a connection the server is closing fails with ReadError, and httpx, unlike a
    # browser, does not send it again (seen once in a 60-student probe)
    limits = httpx.Limits(max_connections=args.students * 2, max_keepalive_connections=args.students * 2,
                          keepalive_expiry=4.0)
    async with httpx.AsyncClient(base_url=url, timeout=args.request_timeout, limits=limits,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        info = (await client.get("/api/models")).json()
        cfg = next(m for m in info["models"] if m["name"] == info["default"])["config"]
        t0 = time.monotonic()
        deadline = t0 + args.duration
        rng = random.Random(args.seed)
        students: list[Student] = []

        async def seat(k: int) -> None:
            """One seat of the class: a student, then another when the first has had a few sessions."""
            first = True
            while time.monotonic() < deadline:
                s = Student(k, client, minutes[-1], random.Random(rng.random()), deadline, 1.0, cfg["n_layer"],
                            cfg["n_head"])
                students.append(s)
                await asyncio.sleep(rng.uniform(0, min(15.0, args.duration / 4)) if first else rng.uniform(1, 5))
                first = False
                for _ in range(rng.randint(1, 3)):
                    if s.over():
                        break
                    await s.session()
                students.remove(s)

        async def ticker() -> None:
            """Sample the memory; every minute, start counting the next minute's requests."""
            next_minute = 60.0
            while time.monotonic() < deadline:
                now = time.monotonic() - t0
                rss.append((now, rss_mb(pid)))
                if now >= next_minute:
                    minutes.append(Stats())
                    for s in students:
                        s.stats = minutes[-1]
                    next_minute += 60
                row = minute_row(len(minutes) - 1, minutes[-1], rss)
                if args.verbose:
                    print(f"  t={now:6.0f} s  rss {rss[-1][1]:7.0f} MB  this minute: {row['answered']} answered",
                          file=sys.stderr)
                await asyncio.sleep(min(args.sample, max(0.0, deadline - time.monotonic())) or 0.01)
            rss.append((time.monotonic() - t0, rss_mb(pid)))

        seats = [asyncio.create_task(seat(k)) for k in range(args.students)]
        tick = asyncio.create_task(ticker())
        _, late = await asyncio.wait(seats, timeout=args.duration + args.request_timeout + 5)
        for t in late:
            t.cancel()
        await tick
        wall = time.monotonic() - t0

    rows = [minute_row(i, st, rss) for i, st in enumerate(minutes)]
    everything = [x for st in minutes for v in st.latency.values() for x in v]
    errors: dict[str, int] = {}
    for st in minutes:
        for k, v in st.errors.items():
            errors[k] = errors.get(k, 0) + v
    # growth: the sample nearest the end of minute 2 against the last one
    base = min(rss, key=lambda tm: abs(tm[0] - 120.0))
    growth = (rss[-1][1] - base[1]) / base[1] if base[1] else 0.0
    return {
        "students": args.students, "duration_s": args.duration, "wall_s": round(wall, 1),
        "answered": len(everything), "requests_per_s": round(len(everything) / wall, 2),
        "errors_total": sum(r["errors"] for r in rows), "errors": errors,
        "busy_503_total": sum(r["busy_503"] for r in rows),
        "p50_ms": round(pct(everything, 50) * 1e3) if everything else None,
        "p99_ms": round(pct(everything, 99) * 1e3) if everything else None,
        "per_minute": rows,
        "rss_samples_mb": [[round(t), round(m)] for t, m in rss],
        "rss_at_minute_2_mb": round(base[1]), "rss_at_end_mb": round(rss[-1][1]),
        "rss_peak_mb": round(max(m for _, m in rss)),
        "rss_growth_from_minute_2": round(growth, 4),
        "growth_measured_from_s": round(base[0]),
        "unfinished_seats": len(late),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=1200.0, help="seconds of load (default 1200: 20 minutes)")
    ap.add_argument("--students", type=int, default=50, help="seats in the class, each used by student after student")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between memory samples")
    ap.add_argument("--request-timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, default=Path("/tmp/te-bench-gpt2-small-shape"))
    ap.add_argument("--server-arg", action="append", default=[], help="passed to `serve` (repeat)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--verbose", action="store_true", help="print every memory sample")
    args = ap.parse_args()

    token = secrets.token_urlsafe(24)
    proc, url = start_server(gpt2_small_shape(args.model), ["--token", token, *args.server_arg])
    url = url.split("?", 1)[0]
    try:
        res = asyncio.run(soak(url, token, proc.pid, args))
    finally:
        stop_server(proc)
    res["server_args"] = args.server_arg
    res["load_average_1m"] = os.getloadavg()[0]
    print(f"{'minute':>6} {'answered':>8} {'errors':>6} {'503':>5} {'p50 ms':>7} {'p99 ms':>7} {'RSS MB':>7}",
          file=sys.stderr)
    for r in res["per_minute"]:
        print(f"{r['minute']:>6} {r['answered']:>8} {r['errors']:>6} {r['busy_503']:>5} {r['p50_ms'] or '-':>7} "
              f"{r['p99_ms'] or '-':>7} {r['rss_mb'] or '-':>7}", file=sys.stderr)
    print(f"resident memory: {res['rss_at_minute_2_mb']} MB at {res['growth_measured_from_s']} s, "
          f"{res['rss_at_end_mb']} MB at the end: {res['rss_growth_from_minute_2']:+.1%} "
          f"(limit +{GROWTH_LIMIT:.0%})", file=sys.stderr)
    print(json.dumps({k: v for k, v in res.items() if k != "rss_samples_mb"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if res["errors_total"] == 0 and res["rss_growth_from_minute_2"] < GROWTH_LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
