"""A classroom against one server: N simulated students (default 50) use the JSON API the way the web
app does, for a bounded time, against a real `transformer-explainer serve` process on 127.0.0.1.

Each student arrives during a ramp-up, then repeats until the time is up:
- types a text: the trace is requested a few times as the text grows (with the current view's tensors);
- steps through views (embedding, layer norm, Q/K/V, attention, heads, residual, MLP, output): the
  tensors of each view for a layer, head and the last token (POST /api/tensors by token ids, as the app
  does), and the layer-norm weights;
- moves the temperature twice (POST /api/next_token) and appends one generated token (POST
  /api/generate, then that view's tensors for the longer text);
with think times between actions. A 503 is counted apart from errors; the student waits for its
Retry-After and tries again. Latency is per answered request (a retried request counts from its
first attempt: what the person waited).

Reported: answered requests per second, p50/p99 latency per endpoint and overall, errors by status,
503s, and the peak memory of the server's process tree (VmHWM from /proc, summed over its processes).

    .venv/bin/python benchmarks/load_classroom.py [--students 50] [--duration 90] [--model DIR]
        [--server-arg=--workers=2 ...] [--json out.json]
    .venv/bin/python benchmarks/load_classroom.py --long-input-probe [--server-arg=--max-tokens=256]

The largest class (`--search`): how many students one server takes with p99 under 1 s and no errors.
Each probe is a full class against a fresh server (default 40 s of load, the students arriving over
the first 10 s; a reused server would start each probe with the last one's traces in its cache and
its memory high-water mark). The count grows geometrically from --start (5, 10, 20, 40, ...) until a
probe fails, then is bisected between the last pass and the first fail to within 10 % or 2 students,
and the answer is probed once more to confirm it (a lucky pass near the limit does not stand). A probe
takes about a minute with the server's start, a search about ten. The measurement, on a quiet machine
(the table's `load` column is the 1-minute load average as each probe ended):

    PYTHONPATH=src .venv/bin/python benchmarks/load_classroom.py --search --json classroom-1.json
    PYTHONPATH=src .venv/bin/python benchmarks/load_classroom.py --search --server-arg=--workers=2 \
        --json classroom-2.json

A probe passes when the overall p99 is under --p99 (default 1.0 s), no request failed (errors,
timeouts, giving up after 20 busy answers) and every student finished. A 503 is not an error: the
student waits for its Retry-After and tries again, and that wait is in the request's latency.
Options: --start, --factor, --max-students (a cap), --max-probes, --resolution, --abs-resolution,
--no-confirm, and --duration/--ramp for each probe. It prints every probe (students, answered req/s,
p50, p99, errors, 503s, peak MB, load, pass/fail) and the answer line; --json writes the probes (each
with the full report of a single run) and the answer. With few students a probe answers only ~50
requests, so its p99 is nearly its slowest request: the counts near the answer matter, not those.

The model is GPT-2 small's shape with random weights (made once in /tmp by the tests' helper): the
cost of a forward pass depends on the shape, not the values.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from fixtures import gpt2_small_shape

from transformer_explainer.server.run import WORKER_READY_PATTERN

ROOT = Path(__file__).resolve().parents[1]

TEXTS = [
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined movable type",
    "In the middle of the ocean there is a small island where the fishermen tell stories about a whale",
    "Researchers at the university announced on Tuesday that a new kind of battery could store twice as much",
    "My favourite teacher always said that the best way to learn something is to explain it to a friend",
    "When the train finally arrived at the station, the children ran to the window to see the mountains",
    "A transformer reads every word of the sentence at once and decides which earlier words matter most",
    "The recipe asks for two cups of flour, a pinch of salt, three eggs and a spoonful of honey",
    "After the storm had passed, the village gathered in the square to count the fallen trees and",
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having",
    "The capital of France is Paris, the capital of Italy is Rome, and the capital of Spain is",
    "Once upon a time there lived a king who had three daughters, and the youngest was so beautiful",
    "Photosynthesis is the process by which green plants use sunlight to turn water and carbon dioxide into",
]
VIEWS = ["embedding", "layernorm", "qkv", "attention", "heads", "residual", "mlp", "output"]


def specs_for(view: str, layer: int, head: int, pos: int) -> list[dict]:
    """The tensors a view shows (the web app's `specsFor`, web/src/lib/pipeline.ts)."""
    def b(s: str) -> str:
        return f"blocks.{layer}.{s}"

    if view == "embedding":
        return [{"name": n, "position": pos} for n in ("embed.token", "embed.position", "embed.sum")]
    if view == "layernorm":
        return [{"name": b("resid_pre"), "position": pos}, {"name": b("ln1.mean")}, {"name": b("ln1.var")},
                {"name": b("ln1.normalized"), "position": pos}, {"name": b("ln1.out"), "position": pos}]
    if view == "qkv":
        return [{"name": b("ln1.out"), "position": pos}] + [{"name": b(f"attn.{x}"), "head": head} for x in "qkv"]
    if view == "attention":
        return [{"name": b(f"attn.{x}"), "head": head, "position": pos}
                for x in ("scores", "scaled_scores", "masked_scores")] + [{"name": b("attn.pattern"), "head": head}]
    if view == "heads":
        return [{"name": b("attn.pattern"), "head": head, "position": pos}, {"name": b("attn.v"), "head": head},
                {"name": b("attn.z"), "head": head}, {"name": b("attn.concat"), "position": pos},
                {"name": b("attn_out"), "position": pos}]
    if view == "residual":
        return [{"name": b(n), "position": pos}
                for n in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")]
    if view == "mlp":
        return [{"name": b(n), "position": pos} for n in ("ln2.out", "mlp.pre", "mlp.post", "mlp_out")]
    if view == "output":
        return [{"name": "ln_final.out", "position": pos}]
    return []


@dataclass
class Stats:
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # endpoint -> seconds
    errors: Counter = field(default_factory=Counter)  # "endpoint status" -> count (not 503)
    busy: Counter = field(default_factory=Counter)  # endpoint -> 503 answers
    retry_after: list[float] = field(default_factory=list)
    gave_up: int = 0
    bytes_in: int = 0


class Student:
    def __init__(self, i: int, client: httpx.AsyncClient, stats: Stats, rng: random.Random, deadline: float,
                 think: float, n_layer: int, n_head: int) -> None:
        self.i, self.client, self.stats, self.rng, self.deadline = i, client, stats, rng, deadline
        self.think_scale, self.n_layer, self.n_head = think, n_layer, n_head
        self.sampling: dict = {"temperature": 1.0, "seed": rng.randrange(2**31)}

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    async def think(self, lo: float, hi: float) -> None:
        await asyncio.sleep(self.rng.uniform(lo, hi) * self.think_scale)

    async def call(self, endpoint: str, body: dict | None = None) -> dict | None:
        """One request as the person sees it: retried after Retry-After on 503, timed from the first try."""
        t0 = time.monotonic()
        for _ in range(20):
            try:
                if body is None:
                    r = await self.client.get("/api/" + endpoint)
                else:
                    r = await self.client.post("/api/" + endpoint, json=body)
            except httpx.TimeoutException:
                self.stats.errors[f"{endpoint} timeout"] += 1
                return None
            except httpx.TransportError as e:
                self.stats.errors[f"{endpoint} {type(e).__name__}"] += 1
                return None
            if r.status_code == 503:
                self.stats.busy[endpoint] += 1
                wait = float(r.headers.get("retry-after", "1"))
                self.stats.retry_after.append(wait)
                await asyncio.sleep(wait * self.rng.uniform(1.0, 1.5))  # honour it, with jitter
                continue
            if r.status_code != 200:
                self.stats.errors[f"{endpoint} {r.status_code}"] += 1
                return None
            self.stats.latency[endpoint].append(time.monotonic() - t0)
            self.stats.bytes_in += len(r.content)
            return r.json()
        self.stats.gave_up += 1
        return None

    async def run(self, ramp: float) -> None:
        await asyncio.sleep(self.rng.uniform(0, ramp))
        if await self.call("models") is None:
            return
        while not self.over():
            await self.session()

    async def session(self) -> None:
        words = self.rng.choice(TEXTS).split()
        view = "tokens"
        tr = None
        # typing: the trace follows the text as it grows (the app waits for a pause in typing)
        n_steps = self.rng.randint(3, 4)
        for k in range(1, n_steps + 1):
            text = " ".join(words[: max(2, len(words) * k // n_steps)])
            tr = await self.call("trace", {"text": text, "sampling": self.sampling, "top_n": 15, "include": []})
            if tr is None or self.over():
                return
            await self.think(0.8, 2.0)
        ids = tr["token_ids"]
        # stepping through the views for one layer and head, at the last token
        layer, head = self.rng.randrange(self.n_layer), self.rng.randrange(self.n_head)
        for view in self.rng.sample(VIEWS, self.rng.randint(4, 6)):
            if self.rng.random() < 0.3:  # sometimes another layer or head
                layer, head = self.rng.randrange(self.n_layer), self.rng.randrange(self.n_head)
            out = await self.call("tensors", {"model": tr["model"], "ids": ids,
                                              "tensors": specs_for(view, layer, head, len(ids) - 1)})
            if out is None or self.over():
                return
            if view == "layernorm":
                await self.call("weights", {"model": tr["model"], "tensors": [{"name": f"blocks.{layer}.ln1.w"},
                                                                              {"name": f"blocks.{layer}.ln1.b"}]})
            await self.think(1.5, 4.0)
        # sampling: the temperature slider moves twice
        for t in (round(self.rng.uniform(0.3, 0.9), 2), round(self.rng.uniform(1.1, 2.0), 2)):
            self.sampling = {**self.sampling, "temperature": t}
            if await self.call("next_token", {"model": tr["model"], "ids": ids, "sampling": self.sampling,
                                              "top_n": 15}) is None or self.over():
                return
            await self.think(1.0, 2.5)
        # one generation step, then the current view's tensors for the longer text
        g = await self.call("generate", {"model": tr["model"], "ids": ids, "sampling": self.sampling, "top_n": 15})
        if g is None or self.over():
            return
        ids2 = g["trace"]["token_ids"]
        await self.call("tensors", {"model": tr["model"], "ids": ids2,
                                    "tensors": specs_for(view, layer, head, len(ids2) - 1)})
        await self.think(2.0, 5.0)


# -- the server and its memory ---------------------------------------------------------------------


def process_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def vm_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


async def watch_memory(pid: int, peak: dict[int, int], cpu: dict[int, float], stop: asyncio.Event) -> None:
    """Peak resident memory (VmHWM) and CPU time of each process of the server's tree, sampled until `stop`."""
    while not stop.is_set():
        for p in process_tree(pid):
            peak[p] = max(peak.get(p, 0), vm_kb(p, "VmHWM"))
            cpu[p] = max(cpu.get(p, 0.0), cpu_s(p))
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass


def start_server(folder: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    """The server, answering: /api/health 200 and, with --workers N, every worker's ready line on stderr
    (the first worker answers health while the others still load the model on the same cores; a class
    started then would measure the start-up, not the server). Its stderr is passed through."""
    cmd = [sys.executable, "-m", "transformer_explainer.cli", "serve", "--model", str(folder), "--only",
           "--port", "0", *extra]
    print("$ " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    workers, ready = server_processes(extra), threading.Semaphore(0)

    def pass_stderr() -> None:
        for line in proc.stderr:
            sys.stderr.write(line)
            for _ in WORKER_READY_PATTERN.finditer(line):  # two workers' lines may have run together
                ready.release()

    threading.Thread(target=pass_stderr, daemon=True).start()
    line = proc.stdout.readline()
    if "serving on " not in line:
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    url, _, token = line.split("serving on ", 1)[1].split()[0].partition("?token=")  # with --token: the base URL
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    for _ in range(600):  # with --workers N the URL is printed before the workers have loaded the model
        try:
            if httpx.get(url + "api/health", headers=auth, timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    if workers > 1:
        deadline = time.monotonic() + 300
        for _ in range(workers):
            if not ready.acquire(timeout=max(0.0, deadline - time.monotonic())):
                stop_server(proc)
                raise SystemExit(f"not every one of the server's {workers} workers said it was ready within 300 s")
    return proc, url


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))]


async def classroom(url: str, args: argparse.Namespace, pid: int) -> dict:
    stats = Stats()
    client_cpu0 = time.process_time()
    # idle connections are let go after 4 s, before the server's keep-alive of 5 s (uvicorn's default) ends
    # them: a request sent on a connection the server is closing fails with ReadError, and httpx, unlike a
    # browser, does not send it again (seen once in a 60-student probe)
    limits = httpx.Limits(max_connections=args.students * 2, max_keepalive_connections=args.students * 2,
                          keepalive_expiry=4.0)
    async with httpx.AsyncClient(base_url=url, timeout=args.request_timeout, limits=limits) as client:
        info = (await client.get("/api/models")).json()
        cfg = next(m for m in info["models"] if m["name"] == info["default"])["config"]
        peak: dict[int, int] = {}
        cpu: dict[int, float] = {}
        stop = asyncio.Event()
        cpu0 = {p: cpu_s(p) for p in process_tree(pid)}
        watcher = asyncio.create_task(watch_memory(pid, peak, cpu, stop))
        t0 = time.monotonic()
        deadline = t0 + args.duration
        rng = random.Random(args.seed)
        students = [Student(i, client, stats, random.Random(rng.random()), deadline, args.think, cfg["n_layer"],
                            cfg["n_head"]) for i in range(args.students)]
        tasks = [asyncio.create_task(s.run(min(args.ramp, args.duration / 2))) for s in students]
        # a hard stop: requests in flight at the deadline may finish, within the client's own timeout
        _, late = await asyncio.wait(tasks, timeout=args.duration + args.request_timeout + 5)
        for t in late:
            t.cancel()
        wall = time.monotonic() - t0
        stop.set()
        await watcher
        health = (await client.get("/api/health")).json()  # one process's trace cache, with --workers N
    everything = [x for v in stats.latency.values() for x in v]
    per = {ep: {"n": len(v), "p50_ms": round(pct(v, 50) * 1e3), "p99_ms": round(pct(v, 99) * 1e3),
                "max_ms": round(max(v) * 1e3)} for ep, v in sorted(stats.latency.items())}
    return {
        "students": args.students, "duration_s": args.duration, "wall_s": round(wall, 1),
        "answered": len(everything), "requests_per_s": round(len(everything) / wall, 2),
        "overall": {"p50_ms": round(pct(everything, 50) * 1e3), "p99_ms": round(pct(everything, 99) * 1e3),
                    "max_ms": round(max(everything) * 1e3)} if everything else {},
        "per_endpoint": per,
        "errors": dict(stats.errors), "errors_total": sum(stats.errors.values()) + stats.gave_up,
        "busy_503": dict(stats.busy), "busy_503_total": sum(stats.busy.values()),
        "gave_up_after_retries": stats.gave_up,
        "mb_received": round(stats.bytes_in / 2**20, 1),
        "server_peak_rss_mb": round(sum(peak.values()) / 1024),
        "server_processes": len(peak),
        # CPU the server got: on a shared machine, less than its cores; per answer, its cost
        "server_cpu_s": round(sum(cpu.values()) - sum(cpu0.values()), 1),
        "server_cores_used": round((sum(cpu.values()) - sum(cpu0.values())) / wall, 2),
        "server_cpu_ms_per_answer": round(1e3 * (sum(cpu.values()) - sum(cpu0.values())) / max(1, len(everything))),
        "unfinished_students": len(late),
        "retry_after_s": {"n": len(stats.retry_after), "max": max(stats.retry_after, default=0)},
        "server_cache": health.get("cache"),
        "client_cpu_s": round(time.process_time() - client_cpu0, 1),  # the students share the machine too
    }


def long_input_probe(url: str, pid: int) -> dict:
    """Peak memory of the server for the longest input it allows: a full trace, then a generation
    step after it (which holds the prefix's trace and the longer one)."""
    text = (" ".join(TEXTS) * 40)[:30_000]  # well over any context, under the 40 000 characters a text may have
    out = {"after_start_mb": round(sum(vm_kb(p, "VmHWM") for p in process_tree(pid)) / 1024)}
    with httpx.Client(base_url=url, timeout=600) as c:
        t0 = time.monotonic()
        r = c.post("/api/trace", json={"text": text, "truncate": True})
        if r.status_code != 200:
            raise SystemExit(f"the trace failed: {r.status_code} {r.text[:300]}")
        tr = r.json()
        out["tokens"] = len(tr["token_ids"])
        out["trace_s"] = round(time.monotonic() - t0, 1)
        out["after_trace_mb"] = round(sum(vm_kb(p, "VmHWM") for p in process_tree(pid)) / 1024)
        t0 = time.monotonic()
        g = c.post("/api/generate", json={"ids": tr["token_ids"][:-1]})
        out["generate_status"] = g.status_code
        out["generate_s"] = round(time.monotonic() - t0, 1)
        out["after_generate_mb"] = round(sum(vm_kb(p, "VmHWM") for p in process_tree(pid)) / 1024)
        out["cache"] = c.get("/api/health").json().get("cache")
    return out


# -- the largest class ------------------------------------------------------------------------------


@dataclass
class SearchResult:
    answer: int  # the largest count that passed, below every count that failed (0: none passed)
    lowest_fail: int | None  # the smallest count that failed (None: none failed)
    # "resolved"; "capped": every count up to --max-students passed; "none passed"; "probe limit": the
    # bracket was not narrowed enough; "unconfirmed": it was, but no probe was left to run the answer again
    reason: str
    probes: list[tuple[int, bool]]  # (students, passed) in the order run


def search_largest(probe: Callable[[int], bool], *, start: int = 5, factor: float = 2.0,
                   max_students: int | None = None, max_probes: int = 12, resolution: float = 0.10,
                   abs_resolution: int = 2, confirm: bool = True) -> SearchResult:
    """The largest n with probe(n) true, assuming (roughly) that a larger class does not do better.

    Grows n geometrically from `start` until a probe fails (or `max_students` passes), then bisects
    between the last pass and the first fail until they are within max(abs_resolution, resolution *
    last pass), or, when even `start` failed, down to 1. With `confirm`, the answer is probed again;
    if it fails that time, it counts as a fail and the bisection goes on below it. Never more than
    `max_probes` probes. Probes are only ever made above the largest pass and below the smallest fail
    so far, so every count that failed is above the answer: a noisy result moves the bracket but
    never leaves a probe that contradicts the answer."""
    if start < 1 or factor <= 1 or max_probes < 1 or (max_students is not None and max_students < 1):
        raise ValueError("need start >= 1, factor > 1, max_probes >= 1, max_students >= 1")
    probes: list[tuple[int, bool]] = []
    lo, hi = 0, None  # lo passed (0: nothing yet), hi failed (None: nothing yet)

    def run(n: int) -> bool:
        ok = bool(probe(n))
        probes.append((n, ok))
        return ok

    def done(reason: str) -> SearchResult:
        return SearchResult(lo, hi, reason, probes)

    n = min(start, max_students) if max_students is not None else start
    while True:  # growing
        if len(probes) >= max_probes:
            return done("probe limit")
        if not run(n):
            hi = n
            break
        lo = n
        if max_students is not None and n >= max_students:
            break
        n = max(n + 1, math.ceil(n * factor))
        if max_students is not None:
            n = min(n, max_students)
    while True:  # lo passed, hi failed (or None at the cap), lo < hi
        # within the resolution of the last pass; from nothing passed, down to 1 student
        if hi is not None and hi - lo > (max(abs_resolution, resolution * lo) if lo > 0 else 1):
            if len(probes) >= max_probes:
                return done("probe limit")
            mid = (lo + hi) // 2
            if run(mid):
                lo = mid
            else:
                hi = mid
            continue
        final = "resolved" if hi is not None else "capped"
        if lo == 0:
            return done("none passed")
        if not confirm or sum(1 for m, ok in probes if m == lo and ok) >= 2:
            return done(final)
        if len(probes) >= max_probes:
            return done("unconfirmed")
        if run(lo):
            return done(final)
        hi = lo  # the answer failed on its second try: a fail, and the largest pass below it is the new lo
        lo = max((m for m, ok in probes if ok and m < hi), default=0)


def probe_passes(res: dict, p99_s: float) -> bool:
    """A class passed: answers came, the overall p99 is under the limit, nothing failed (503s retried
    after Retry-After are not failures: their wait is in the latency), every student finished."""
    return (res["answered"] > 0 and res["overall"]["p99_ms"] < p99_s * 1e3 and res["errors_total"] == 0
            and res["unfinished_students"] == 0)


def server_processes(server_args: list[str]) -> int:
    """The --workers in the server's arguments (1 without)."""
    n = 1
    for i, a in enumerate(server_args):
        if a.startswith("--workers="):
            n = int(a.split("=", 1)[1])
        elif a == "--workers" and i + 1 < len(server_args):
            n = int(server_args[i + 1])
    return n


TABLE_HEAD = (f"{'students':>8} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} {'503s':>5} {'peak MB':>8}"
              f" {'load':>5}  result")  # load: the machine's 1-minute load average as the probe ended


def table_row(res: dict) -> str:
    o = res.get("overall") or {}
    return (f"{res['students']:>8} {res['requests_per_s']:>7.2f} {o.get('p50_ms', '-'):>7} {o.get('p99_ms', '-'):>7} "
            f"{res['errors_total']:>6} {res['busy_503_total']:>5} {res['server_peak_rss_mb']:>8} "
            f"{res['load_average_1m']:>5.1f}  "
            f"{'pass' if res['passed'] else 'FAIL'}")


def answer_line(found: SearchResult, p99_s: float, processes: int) -> str:
    what = f"largest class with p99 < {p99_s} s and no errors"
    procs = f"{processes} process{'es' if processes > 1 else ''}"
    if found.reason == "none passed":
        return f"{what}: none ({found.lowest_fail} student{'s' if found.lowest_fail != 1 else ''} failed) ({procs})"
    if found.reason == "capped":
        return f"{what}: at least {found.answer} students (the cap, --max-students, passed) ({procs})"
    if found.reason == "probe limit":
        above = f"{found.lowest_fail} failed" if found.lowest_fail else "no fail yet"
        got = f"{found.answer} students" if found.answer else "no pass yet"
        return f"{what}: {got}, not resolved ({above}; --max-probes reached) ({procs})"
    if found.reason == "unconfirmed":
        return (f"{what}: {found.answer} students, passed once, not confirmed ({found.lowest_fail} failed; "
                f"--max-probes reached) ({procs})")
    return f"{what}: {found.answer} students ({procs})"


def search(args: argparse.Namespace) -> int:
    folder = gpt2_small_shape(args.model)
    rows: list[dict] = []
    print(TABLE_HEAD, flush=True)

    def probe(n: int) -> bool:
        # a fresh server per probe: the peak memory (VmHWM) is a process's high-water mark and the trace
        # cache would start warm with the last class's texts, so a reused server would flatter later probes
        proc, url = start_server(folder, args.server_arg)
        try:
            res = asyncio.run(classroom(url, argparse.Namespace(**{**vars(args), "students": n}), proc.pid))
        finally:
            stop_server(proc)
        res["passed"] = probe_passes(res, args.p99)
        res["load_average_1m"] = os.getloadavg()[0]
        rows.append(res)
        print(table_row(res), flush=True)
        return res["passed"]

    found = search_largest(probe, start=args.start, factor=args.factor, max_students=args.max_students,
                           max_probes=args.max_probes, resolution=args.resolution,
                           abs_resolution=args.abs_resolution, confirm=not args.no_confirm)
    print()
    print(TABLE_HEAD)
    for res in sorted(rows, key=lambda r: r["students"]):  # the same rows, by class size
        print(table_row(res))
    line = answer_line(found, args.p99, server_processes(args.server_arg))
    print(line)
    if args.json:
        out = {"answer": found.answer, "lowest_fail": found.lowest_fail, "reason": found.reason, "line": line,
               "p99_limit_s": args.p99, "server_args": args.server_arg, "duration_s": args.duration,
               "ramp_s": args.ramp, "probes": rows}
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if found.answer > 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=50)
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of load (after which students stop); default 90, 40 per probe with --search")
    ap.add_argument("--ramp", type=float, default=None,
                    help="students arrive over this many seconds; default 15, 10 per probe with --search")
    ap.add_argument("--think", type=float, default=1.0, help="scale of the think times (1: as a person)")
    ap.add_argument("--request-timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, default=Path("/tmp/te-bench-gpt2-small-shape"))
    ap.add_argument("--server-arg", action="append", default=[], help="passed to `serve` (repeat)")
    ap.add_argument("--url", help="use a running server instead of starting one (no memory figure then)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--long-input-probe", action="store_true",
                    help="instead of the class: peak memory for one longest input (trace, then a generation step)")
    s = ap.add_argument_group("the largest class (--search)")
    s.add_argument("--search", action="store_true",
                   help="find the largest class with p99 under --p99 and no errors (a fresh server per probe)")
    s.add_argument("--p99", type=float, default=1.0, help="seconds the overall p99 must be under (default 1.0)")
    s.add_argument("--start", type=int, default=5, help="students in the first probe (default 5)")
    s.add_argument("--factor", type=float, default=2.0, help="growth until a probe fails (default 2)")
    s.add_argument("--max-students", type=int, default=None, help="never probe more students than this")
    s.add_argument("--max-probes", type=int, default=12, help="at most this many probes (default 12)")
    s.add_argument("--resolution", type=float, default=0.10,
                   help="stop bisecting within this fraction of the answer (default 0.10) ...")
    s.add_argument("--abs-resolution", type=int, default=2, help="... or within this many students (default 2)")
    s.add_argument("--no-confirm", action="store_true", help="do not probe the answer a second time")
    args = ap.parse_args()
    if args.duration is None:
        args.duration = 40.0 if args.search else 90.0
    if args.ramp is None:
        args.ramp = 10.0 if args.search else 15.0

    if args.search:
        if args.url or args.long_input_probe:
            ap.error("--search starts its own server for each probe: not with --url or --long-input-probe")
        return search(args)
    if args.url:
        proc, url, pid = None, args.url.rstrip("/") + "/", -1
    else:
        proc, url = start_server(gpt2_small_shape(args.model), args.server_arg)
        pid = proc.pid
    try:
        res = long_input_probe(url, pid) if args.long_input_probe else asyncio.run(classroom(url, args, pid))
    finally:
        if proc is not None:
            stop_server(proc)
    res["server_args"] = args.server_arg
    res["load_average_1m"] = os.getloadavg()[0]
    print(json.dumps(res, indent=2))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if res.get("errors_total", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
