"""What the API computes, as plain synchronous functions over an `ExplainerModel` (they run in the
server's worker threads). Traces are kept in a small LRU bounded in bytes, keyed by (model, token
ids): a view that asks for one more tensor of the same text reuses the forward pass, and nothing a
client does can grow memory without bound."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

import torch
from torch import Tensor

from ..engine import ExplainerModel
from ..errors import InputError
from ..models.gpt import KVCache
from ..names import (
    BLOCK_ACTIVATIONS,
    BLOCK_WEIGHTS,
    DERIVED,
    GLOBAL_ACTIVATIONS,
    GLOBAL_WEIGHTS,
    describe,
    parse_name,
)
from ..sampling import SamplingParams, make_generator, next_token_distribution
from ..trace import Trace
from .encoding import encode_array, encode_u8, lower_triangle_u8, pooled_pattern
from .schemas import (
    AttentionOverview,
    Candidate,
    CharGroupOut,
    EncodedTensor,
    Histogram,
    InputIn,
    ModelConfigOut,
    NameEntry,
    NamesOut,
    NextTokenOut,
    SampledOut,
    SamplingIn,
    TensorSpec,
    TokenOut,
    TraceOut,
)

MAX_ELEMENTS = 4_000_000  # per tensor in one answer (16 MB as float32): slice bigger ones by head/position/row
THUMBNAIL = 32  # attention overview thumbnails are at most 32 x 32
HIST_BINS = 64


def trace_nbytes(trace: Trace) -> int:
    return sum(v.numel() * v.element_size() for v in trace.values.values())


class TraceCache:
    """LRU of recent traces, bounded by the bytes their tensors hold. A trace larger than the whole
    budget (a long GPT-2 input) is simply not kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, tuple[int, ...]], tuple[Trace, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[str, tuple[int, ...]], *, count_miss: bool = True) -> Trace | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                self.misses += count_miss
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return hit[0]

    def longest_prefix(self, key: tuple[str, tuple[int, ...]]) -> Trace | None:
        """The cached trace of the longest proper prefix of `key`'s ids (same model), if any: a text
        being typed grows at its end, so its previous trace usually is one."""
        name, ids = key
        with self._lock:
            best = None
            for (m, k), (trace, _) in self._items.items():
                if m == name and len(k) < len(ids) and (best is None or len(k) > best.n_tokens) and ids[:len(k)] == k:
                    best = trace
            return best

    def stats(self) -> dict[str, int | float]:
        return {"traces": len(self._items), "mb": round(self._bytes / 2**20, 1), "max_mb": self.max_bytes // 2**20,
                "hits": self.hits, "misses": self.misses}

    def put(self, key: tuple[str, tuple[int, ...]], trace: Trace) -> None:
        size = trace_nbytes(trace)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            self._items[key] = (trace, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, n) = self._items.popitem(last=False)
                self._bytes -= n


@dataclass
class Resolved:
    """The token ids of a request and whether they were cut to fit the context."""

    ids: list[int]
    truncated: bool


def token_limit(model: ExplainerModel, max_tokens: int | None) -> int:
    """Tokens one request may hold: the model's context, or less where the server says so."""
    return model.context_length if max_tokens is None else min(max_tokens, model.context_length)


def resolve_input(model: ExplainerModel, inp: InputIn, max_tokens: int | None = None) -> Resolved:
    """The token ids of a request, within the model's context and the server's `max_tokens`; an
    over-long input is refused with a message that offers truncation, or cut when it was asked for."""
    ctx = model.context_length
    if inp.text is not None:
        try:
            ids, truncated = model.encode(inp.text), False
        except InputError:
            if not inp.truncate:
                raise
            ids, truncated = model.encode(inp.text, truncate=True), True
    else:
        ids, truncated = list(inp.ids or []), False
        V = model.config.vocab_size
        bad = [i for i in ids if not 0 <= i < V]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary of {model.name} (0..{V - 1})")
        if len(ids) > ctx:
            if not inp.truncate:
                raise InputError(f"{len(ids)} tokens exceed the context of {model.name} ({ctx}); shorten the input "
                                 f"or ask for truncation")
            ids, truncated = ids[-ctx:], True
    limit = token_limit(model, max_tokens)
    if len(ids) > limit:
        if not inp.truncate:
            raise InputError(f"{len(ids)} tokens exceed this server's limit of {limit} tokens per request "
                             f"(the model's context is {ctx}); shorten the input or ask for truncation")
        ids, truncated = ids[-limit:], True
    return Resolved(ids, truncated)


def config_out(model: ExplainerModel) -> ModelConfigOut:
    c = model.config
    return ModelConfigOut(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, head_dim=c.head_dim, d_mlp=c.d_mlp,
                          vocab_size=c.vocab_size, block_size=c.block_size, layer_norm_epsilon=c.layer_norm_epsilon,
                          activation=c.activation)


def names_out() -> NamesOut:
    def table(t: dict[str, tuple[tuple[str, ...], str]]) -> dict[str, NameEntry]:
        return {k: NameEntry(dims=list(d), description=s) for k, (d, s) in t.items()}

    return NamesOut(block_activations=table(BLOCK_ACTIVATIONS), global_activations=table(GLOBAL_ACTIVATIONS),
                    block_weights=table(BLOCK_WEIGHTS), global_weights=table(GLOBAL_WEIGHTS), derived=dict(DERIVED))


# -- tensors by name -------------------------------------------------------------------------------


def _is_weight(suffix: str) -> bool:
    return suffix in BLOCK_WEIGHTS or suffix in GLOBAL_WEIGHTS


def _parse(name: str) -> tuple[int | None, str, tuple[str, ...]]:
    try:
        p = parse_name(name)
        dims, _ = describe(name)
    except (KeyError, ValueError):
        raise InputError(f"unknown tensor name {name!r}: names look like 'blocks.0.attn.pattern' or "
                         f"'embed.token' (GET /api/names lists them all)") from None
    return p.layer, p.suffix, dims


def _take(t: Tensor, dims: list[str], dim: str, index: int, what: str, name: str, offset: int = 0) -> Tensor:
    if dim not in dims:
        raise InputError(f"{name} has no {what} dimension (its dims are {', '.join(dims)})")
    axis = dims.index(dim)
    n = t.shape[axis]
    i = n + index if index < 0 else index - offset
    if not 0 <= i < n:
        hi = offset + n - 1
        raise InputError(f"{what} {index} is out of range for {name} ({offset}..{hi})")
    dims.pop(axis)
    return t.select(axis, i)


def _encode(name: str, spec: TensorSpec, t: Tensor, dims: list[str]) -> EncodedTensor:
    if t.numel() > MAX_ELEMENTS:
        raise InputError(f"{name} has {t.numel():,} values, more than the {MAX_ELEMENTS:,} one answer may hold; "
                         f"ask for one head, position or row")
    return EncodedTensor(name=name, head=spec.head, position=spec.position, row=spec.row, dims=dims,
                         shape=list(t.shape), dtype=spec.dtype, data=encode_array(t, spec.dtype))


def activation_tensor(trace: Trace, spec: TensorSpec) -> EncodedTensor:
    layer, suffix, dims_t = _parse(spec.name)
    if _is_weight(suffix):
        raise InputError(f"{spec.name} is a weight, not an activation: ask POST /api/weights for it")
    if layer is not None and layer >= trace.config.n_layer:
        raise InputError(f"{spec.name}: the model has {trace.config.n_layer} blocks (0..{trace.config.n_layer - 1})")
    if spec.row is not None:
        raise InputError("`row` applies to weights; for activations use `head` and `position`")
    t = trace[spec.name]
    dims = list(dims_t)
    if spec.head is not None:
        t = _take(t, dims, "H", spec.head, "head", spec.name)
    if spec.position is not None:
        t = _take(t, dims, "T" if "T" in dims else "S", spec.position, "position", spec.name, trace.start)
    return _encode(spec.name, spec, t, dims)


def weight_tensor(model: ExplainerModel, spec: TensorSpec) -> EncodedTensor:
    layer, suffix, dims_t = _parse(spec.name)
    if not _is_weight(suffix):
        raise InputError(f"{spec.name} is an activation: ask POST /api/trace or /api/tensors for it")
    if layer is not None and layer >= model.config.n_layer:
        raise InputError(f"{spec.name}: the model has {model.config.n_layer} blocks")
    if spec.position is not None:
        raise InputError("`position` applies to activations; for weights use `head` and `row`")
    t = model.weight(spec.name)
    dims = list(dims_t)
    if spec.head is not None:
        t = _take(t, dims, "H", spec.head, "head", spec.name)
    if spec.row is not None:
        if not dims:
            raise InputError(f"{spec.name} has no rows")
        t = _take(t, dims, dims[0], spec.row, "row", spec.name)
    return _encode(spec.name, spec, t, dims)


# -- next token ------------------------------------------------------------------------------------


def sampling_params(sp: SamplingIn) -> SamplingParams:
    if 0 < sp.temperature < 0.01:
        raise InputError(f"temperature must be 0 (greedy) or at least 0.01, got {sp.temperature}")
    return SamplingParams(temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p, seed=sp.seed)


def next_token_out(model: ExplainerModel, logits: Tensor, sp: SamplingIn, top_n: int, position: int) -> NextTokenOut:
    params = sampling_params(sp)
    seed = sp.seed if sp.seed is not None else random.SystemRandom().randrange(2**31)
    dist = next_token_distribution(logits, params)
    tid = dist.sample(make_generator(seed))
    logits32 = dist.logits
    if params.greedy:
        no_cut = dist.probs
    elif params.top_k is None and params.top_p is None:
        no_cut = dist.probs  # nothing was cut: the same softmax
    else:
        no_cut = torch.softmax(dist.scaled_logits, dim=-1)
    tok = model.tokenizer
    cands = [
        Candidate(id=i, text=tok.token_text(i), logit=float(logits32[i]), scaled_logit=float(dist.scaled_logits[i]),
                  kept=bool(dist.kept[i]), prob=float(dist.probs[i]), prob_no_cut=float(no_cut[i]))
        for i in dist.top(top_n)
    ]
    lo, hi = float(logits32.min()), float(logits32.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise InputError("the model produced non-finite logits for this input")
    if hi <= lo:
        hi = lo + 1.0
    counts = torch.histc(logits32, bins=HIST_BINS, min=lo, max=hi).to(torch.int64).tolist()
    return NextTokenOut(
        temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, seed=seed, greedy=params.greedy,
        position=position, candidates=cands, n_kept=int(dist.kept.sum()),
        sampled=SampledOut(id=tid, text=tok.token_text(tid), prob=float(dist.probs[tid]), logit=float(logits32[tid])),
        logit_histogram=Histogram(lo=lo, hi=hi, counts=counts),
    )


def choose_next(model: ExplainerModel, logits: Tensor, sp: SamplingIn, token_id: int | None) -> SampledOut:
    """The token to append: `token_id` if the user picked one, else a draw from the distribution
    (seeded when a seed is given). Its probability is the one under that distribution."""
    dist = next_token_distribution(logits, sampling_params(sp))
    V = model.config.vocab_size
    if token_id is None:
        token_id = dist.sample(make_generator(sp.seed))
    elif not 0 <= token_id < V:
        raise InputError(f"token id {token_id} is outside the vocabulary (0..{V - 1})")
    return SampledOut(id=token_id, text=model.tokenizer.token_text(token_id), prob=float(dist.probs[token_id]),
                      logit=float(dist.logits[token_id]))


@torch.inference_mode()
def last_logits(model: ExplainerModel, ids: list[int]) -> Tensor:
    """The next-token logits without recording anything (the fast path)."""
    return model.gpt(torch.tensor([ids]), logits_for="last")[0, -1]


# -- traces ----------------------------------------------------------------------------------------


def merge_traces(prefix: Trace, new: Trace) -> Trace:
    """The trace of prefix + new positions, where `new` was computed with a KV cache holding the
    prefix. Equal (up to float rounding) to tracing the whole sequence at once: the prefix's score
    rows get their entries for the new keys (computed, then hidden by the mask: pattern 0)."""
    if new.start != prefix.n_tokens + prefix.start or prefix.start != 0:
        raise ValueError("the new trace must continue the prefix trace")
    values: dict[str, Tensor] = {}
    for name, a in prefix.values.items():
        b = new.values.get(name)
        if b is None:  # recorded in one pass only (logits a patch asked for): the merged trace derives it
            continue
        dims, _ = describe(name)
        if "S" in dims and "T" not in dims:  # keys, values: the new trace already spans every position
            values[name] = b
            continue
        if "S" in dims:  # (H, T, S) scores or pattern: extend the old rows to the new keys
            layer = parse_name(name).layer
            n_new = b.shape[-1] - a.shape[-1]
            if name.endswith("attn.scores"):
                k_new = new.values[f"blocks.{layer}.attn.k"][:, -n_new:, :]  # (H, n_new, Dh)
                extra = prefix.values[f"blocks.{layer}.attn.q"] @ k_new.transpose(-2, -1)
            else:
                extra = a.new_zeros(*a.shape[:-1], n_new)
            a = torch.cat([a, extra], dim=-1)
        values[name] = torch.cat([a, b], dim=dims.index("T"))
    ids = prefix.token_ids + new.token_ids
    return Trace(model_name=prefix.model_name, config=prefix.config, text=new.text, token_ids=ids,
                 tokens=prefix.tokens + new.tokens, values=values, start=0, prefix_ids=[],
                 unembed=new.unembed, last_logits=new.last_logits)


class Explainer:
    """The computations behind the API, with the trace cache. Thread-safe."""

    def __init__(self, cache_bytes: int) -> None:
        self.cache = TraceCache(cache_bytes)
        self._inflight: dict[tuple[str, tuple[int, ...]], Future[Trace]] = {}
        self._lock = threading.Lock()

    def trace(self, name: str, model: ExplainerModel, ids: list[int]) -> tuple[Trace, list[int]]:
        """The full trace of `ids` by the model called `name`, and the positions computed for it
        ([n, n] when it came from the cache or from the same request of another client at the same
        time, [p, n] when the trace of the first p tokens was cached and only the rest computed)."""
        key = (name, tuple(ids))
        n = len(ids)
        hit = self.cache.get(key)
        if hit is not None:
            return hit, [n, n]
        with self._lock:  # a class typing the same example text: compute it once
            pending = self._inflight.get(key)
            if pending is None:
                mine = self._inflight[key] = Future()
        if pending is not None:  # computed by another worker thread right now: it only has to finish
            return pending.result(), [n, n]
        try:
            prefix = self.cache.longest_prefix(key)
            if prefix is not None:
                trace = self._extend(model, prefix, ids[prefix.n_tokens:])
                computed = [prefix.n_tokens, n]
            else:
                trace, computed = model.trace_ids(ids), [0, n]
            mine.set_result(trace)
        except BaseException as e:
            mine.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._inflight[key]
        self.cache.put(key, trace)
        return trace, computed

    @staticmethod
    def _extend(model: ExplainerModel, prefix: Trace, new_ids: list[int]) -> Trace:
        """The trace of prefix + `new_ids`, computing only the new positions (the prefix's keys and
        values are the KV cache)."""
        L = model.config.n_layer
        cache = KVCache([(prefix[f"blocks.{i}.attn.k"][None], prefix[f"blocks.{i}.attn.v"][None]) for i in range(L)])
        return merge_traces(prefix, model.trace_ids(new_ids, cache=cache, prefix_ids=prefix.token_ids))

    def extend(self, name: str, model: ExplainerModel, prefix: Trace, token_id: int) -> Trace:
        """Trace one more token: only the new position is computed."""
        merged = self._extend(model, prefix, [token_id])
        self.cache.put((name, tuple(merged.token_ids)), merged)
        return merged

    def overview(self, name: str, model: ExplainerModel, trace: Trace, *, truncated: bool, sampling: SamplingIn,
                 top_n: int, include: list[TensorSpec], computed: list[int], t0: float, t_traced: float) -> TraceOut:
        cfg = model.config
        tok = model.tokenizer
        tensors = [activation_tensor(trace, s) for s in include]
        nxt = next_token_out(model, trace.next_token_logits(), sampling, top_n, trace.n_tokens - 1)
        thumbs = torch.stack([pooled_pattern(trace[f"blocks.{i}.attn.pattern"], THUMBNAIL) for i in range(cfg.n_layer)])
        size = thumbs.shape[-1]
        norms = [trace[f"blocks.{i}.resid_pre"].norm(dim=-1) for i in range(cfg.n_layer)]
        norms.append(trace[f"blocks.{cfg.n_layer - 1}.resid_post"].norm(dim=-1))
        resid = torch.stack(norms)
        t_done = time.perf_counter()
        return TraceOut(
            model=name,
            text=trace.text,
            token_ids=trace.token_ids,
            tokens=[TokenOut(id=i, text=t, raw=tok.raw_token(i)) for i, t in zip(trace.token_ids, trace.tokens,
                                                                                   strict=True)],
            char_groups=[CharGroupOut(start=g.start, end=g.end, text=g.text) for g in tok.char_groups(trace.token_ids)],
            start=trace.start,
            truncated=truncated,
            context_length=model.context_length,
            config=config_out(model),
            next=nxt,
            attention=AttentionOverview(n_layer=cfg.n_layer, n_head=cfg.n_head, size=size,
                                        pooled=size < trace.n_tokens, encoding="uint8-lower-triangle",
                                        data=encode_u8(lower_triangle_u8(thumbs))),
            resid_norms=EncodedTensor(name="resid_norms", dims=["L", "T"], shape=list(resid.shape), dtype="float16",
                                      data=encode_array(resid)),
            tensors=tensors,
            computed_positions=computed,
            timings_ms={"model": round((t_traced - t0) * 1e3, 2), "encode": round((t_done - t_traced) * 1e3, 2)},
        )

