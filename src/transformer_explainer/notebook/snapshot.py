"""A self-contained HTML snapshot of one trace: the packaged web app (its JS and CSS inlined) plus the
trace's data, in one file that opens from file:// in any browser with no server and no network.

The data are what the app would ask the server for: the overview (tokens, next-token distribution,
attention thumbnails), the full activation tensors the views slice (float16; the per-position statistics,
a few values per token that the views show with 4 decimals, in float32 as the live app reads them), the
layer-norm weights, and the analyses (logit lens at every position, head roles and attention statistics,
the head-importance map with each head's ablation, embedding neighbours of the text's tokens), and the
direct logit attribution at each position (snapshot_attribution.py). To stay small, the largest tensors
are left out first when they would not fit in `max_mb` (a long text's attention patterns, too large whole,
are kept for the first blocks that fit), then the attributions at the earliest positions; the views that
need them then say so, as does a warning, with the `max_mb` that would keep them. Stages the trace derives
(scaled scores, the concatenated heads, ...) are not stored: the page derives them by the same rules
(names.DERIVATIONS). The CLI's `snapshot` command writes its page with `save_snapshot` too.

A model that runs through transformers' own modules (`generic.GenericModel`) gets the same page with what it
records (its attention layers' patterns, masks and masked scores; every layer's residual stream and the outputs
of its mixers and MLP), the logit lens, the ablation of each head of its attention layers and the attributions; not
the weights (they have no names here), nor the embedding explorer (it reads the token embedding by name), nor head
roles where a layer has no heads. What it leaves out, the page says where it is asked, as for what the budget
leaves out.

Where the page can show Chinese (it offers 中文, the default, or its text holds CJK characters), it
carries the app's CJK font subset as a data: URL, so 中文 needs no system font and no fetch; an
English-only page (`languages=("en",)`) is about 250 kB smaller.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis.ablation import BetweenPasses, ablate_each_head
from ..analysis.answers import (
    ablation_dict,
    analogy_json,
    finite,
    heads_json,
    importance_dict,
    lens_json,
    neighbours_json,
    project_json,
    reference_roles,
)
from ..analysis.embeddings import embedding_matrix
from ..encoding import lower_triangle
from ..engine import ExplainerModel
from ..errors import InputError
from ..features.encode import default_hook, text_features
from ..features.sae import CFG_FILE, SAEConfig, builtin_saes
from ..features.schemas import FEATURES_TOP, MAX_FEATURES_TOP, FeatureHookOut, FeatureHooksOut, features_out
from ..generic import GenericModel
from ..limits import ABLATION_TOP, APP_TOP_K, APP_TOP_N, DEFAULT_SEED, LENS_TOP, MAX_TOKENS_LIST, NEIGHBOURS
from ..loading.checkpoint import atomic_write_bytes
from ..loading.files import read_json
from ..names import NAME_TABLES, NameTable, block_name, blocks_label, describe, layer_of
from ..overview import Found, OverviewAsk, config_out, trace_overview
from ..schemas import ModelInfo, ModelList, SamplingIn
from ..trace import Trace, with_text
from ..web_bundle import package_static_dir
from .snapshot_attribution import SnapshotAttribution

log = logging.getLogger(__name__)

Model = ExplainerModel | GenericModel  # a family with code of our own, or any decoder through transformers' modules

FORMAT = "transformer-explainer-snapshot"
VERSION = 4  # 2: aliases, languages and the inlined CJK font; derived stages by names.DERIVATIONS; 3: attribution;
# 4: per-position statistics in float32, the attention pattern of the first blocks that fit, keep_mb
LANGUAGES = ("en", "zh")  # the app's languages: a snapshot offers both unless told otherwise
CJK_FONT = "fonts/noto-sans-sc-subset.woff2"  # in the web bundle (web/public/fonts/, scripts/build_cjk_font.py)
CJK_FONT_RECORD = "fonts/noto-sans-sc-subset.json"  # its record: the unicode-range the subset covers
# What the app asks for on its first trace (web/src/lib/state.svelte.ts): the snapshot's stored
# next-token distribution must be for these settings.
APP_SAMPLING = {"temperature": 1.0, "top_k": APP_TOP_K, "top_p": None, "seed": DEFAULT_SEED}
ANALOGY = ([" king", " woman"], [" man"])  # the explorer's default: king - man + woman
MAX_PROJECTED = MAX_TOKENS_LIST
LENS_CHUNK = 32  # positions per logit-lens call: (L+1) x chunk x V logits at a time

# Activations by priority, per model family: each is kept for every layer or not at all. The first
# ones serve several views and are small; the MLP's hidden layer (4 x d_model per token) comes last.
# Stages the trace derives are left to the page, but for the raw scores and the key/value head of each
# query head, which the views read directly and cost little.
STORED_DERIVED = ("attn.scores", "attn.kv_head")
# Query x key grids stored in float32 and as their lower triangle: a Gated DeltaNet layer's implied attention, whose
# weights (products of decays) span many orders of magnitude in a row (1e-9 beside 1e-3); float16 would flush the
# small ones to 0 or to its subnormals, and the view counts their signs and orders them by size, as the live app does.
PRECISE_GRIDS = ("linear_attn.implied_pattern",)
RESIDUAL = ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post")


def activation_order(t: NameTable) -> tuple[list[str], list[str]]:
    """(global activations, block stages) of a family's names in the order the snapshot keeps them: the
    attention pattern and scores; per-position statistics (no d_model, head or MLP dim); the residual
    stream; the other d_model-wide stages (norm outputs); per-head vectors; the MLP's hidden layer. In
    computation order within each kind."""
    derived = t.derivations
    first = [n for n in t.global_activations if n not in derived and n != "logits"]
    stages = [s for s in t.block_activations if s not in derived or s in STORED_DERIVED]
    return first, sorted(stages, key=lambda s: (_kind(t, s), 0 if s == "attn.pattern" else 1))


def _kind(t: NameTable, stage: str) -> int:
    """A block stage's rank in the snapshot's order (see activation_order)."""
    dims = t.block_activations[stage][0]
    if stage in ("attn.pattern", "attn.scores"):
        return 0
    if stage not in t.derivations and {"T", "S"} <= set(dims):  # a recorded query x key grid: the masked scores
        return 0
    if not {"D", "Dh", "Dk", "Dv", "M"} & set(dims):  # Dk, Dv: keys' and values' own widths
        return 1
    if stage in RESIDUAL:
        return 2
    if "M" in dims:
        return 5
    return 4 if {"Dh", "Dk", "Dv"} & set(dims) else 3


def precise_stages(t: NameTable) -> set[str]:
    """The block stages stored in float32: the per-position statistics (norm statistics, the router's logits and
    probabilities, the experts' weights), a few values per token that the views show with 4 decimals, as the live
    app (which asks for float32) shows them; float16 would change the 4th digit (0.5032 -> 0.5029); and the grids of
    PRECISE_GRIDS."""
    small = {n for n, (dims, _) in t.global_activations.items() if not {"D", "Dh", "Dk", "Dv", "M", "V"} & set(dims)}
    return small | {s for s in t.block_activations if _kind(t, s) == 1 or s in PRECISE_GRIDS}


ACTIVATION_ORDER: dict[str, tuple[list[str], list[str]]] = {f: activation_order(t) for f, t in NAME_TABLES.items()}
PRECISE: dict[str, set[str]] = {f: precise_stages(t) for f, t in NAME_TABLES.items()}
# weights, where the model has them (the Llama family's RMSNorm has no shift)


def norm_weights(t: NameTable) -> tuple[list[str], list[str]]:
    """(block, global) names of the norms' scales and shifts (`.w`, `.b`): every norm's, QK-norm's too."""
    def is_norm(n: str) -> bool:
        return n.endswith((".w", ".b")) and not n.startswith("unembed.")
    return [n for n in t.block_weights if is_norm(n)], [n for n in t.global_weights if is_norm(n)]


LARGE_WEIGHTS = ["attn.W_O", "attn.W_Q", "attn.W_K", "attn.W_V"]  # shown per head on request


def _triangle(t: Any, dims: tuple[str, ...]) -> bool:
    """Whether a (..., T, S) value is stored as its lower triangle: a causal pattern, 0 above it (half the bytes; the
    page's decodeTensor puts the zeros back, as for the live app's answers)."""
    if tuple(dims[-2:]) != ("T", "S") or t.dim() < 2:
        return False
    T, S = t.shape[-2:]
    return not torch.triu(t.detach(), diagonal=S - T + 1).any()


def _stored(t: Any, dims: tuple[str, ...], precise: bool = False, triangle: bool = False) -> dict[str, Any]:
    shape = list(t.shape)
    if triangle:
        t = lower_triangle(t.detach())
    with np.errstate(over="ignore"):  # a mask's "large negative number" is -inf in float16, as the page reads it
        a = np.ascontiguousarray(t.detach().float().cpu().numpy(), dtype="<f4" if precise else "<f2")
    out = {"dims": list(dims), "shape": shape, "dtype": "float32" if precise else "float16",
           "data": base64.b64encode(a.tobytes()).decode("ascii")}
    return {**out, "triangle": True} if triangle else out


def _b64_size(n_values: int, precise: bool = False) -> int:
    width = 4 if precise else 2
    return (width * n_values + 2) // 3 * 4 + 40  # base64 of float16 (float32), plus the JSON around it


def _lens_all(model: Model, trace: Trace) -> dict[str, Any]:
    """The logit lens at every position, computed in chunks of positions (bounded memory)."""
    T = trace.n_tokens
    out: dict[str, Any] | None = None
    for s in range(0, T, LENS_CHUNK):
        part = lens_json(model, trace, list(range(s, min(T, s + LENS_CHUNK))), LENS_TOP)
        if out is None:
            out = part
            continue
        for k in ("positions", "position_tokens", "targets"):
            out[k] += part[k]
        for la, lb in zip(out["layers"], part["layers"], strict=True):
            la["positions"] += lb["positions"]
    assert out is not None
    return out


def _try(f: Any) -> tuple[Any, str | None]:
    try:
        return f(), None
    except InputError as e:
        return None, str(e)


def attention_layers(model: Model) -> list[int]:
    """The layers with attention heads: every layer of our families; a model that runs through transformers may
    mix tokens another way in some (a short convolution, a state-space or linear-attention layer)."""
    c = model.config
    return list(c.attention_layers) if model.runs == "transformers" else list(range(c.n_layer))


def snapshot_passes(model: Model, n_tokens: int, *, ablations: bool = True) -> int:
    """The most forward passes a snapshot of `n_tokens` tokens runs after its trace (what `between_passes` counts):
    one per head ablated (beside the snapshot's own trace), then one attribution per earlier position."""
    heads = len(attention_layers(model)) * model.config.n_head if ablations and n_tokens >= 2 else 0
    return heads + max(0, n_tokens - 1)


def snapshot_analyses(model: Model, trace: Trace, *, ablations: bool = True,
                      between_passes: BetweenPasses | None = None) -> dict[str, Any]:
    """The analyses the Experiments area shows, answered ahead of time for this trace (`between_passes`: called
    before each of the head ablations' forward passes). What a model cannot answer (a model that runs through
    transformers: the embedding explorer, which reads the weights by name; the heads of its layers without attention,
    which it has none of to ablate or sort into roles) is left out, as the budget leaves things out: the page says so
    where it is asked."""
    ids = list(trace.token_ids)
    lens, _ = _try(lambda: {"top": LENS_TOP, "out": _lens_all(model, trace)})
    # head roles and attention statistics: None in the rows of the layers without attention
    out: dict[str, Any] = {"lens": lens, "heads": heads_json(trace, reference_roles(model)),
                           "importance": None, "ablations": {}, "ablation_top": ABLATION_TOP, "neighbours": {}}
    if ablations and len(ids) >= 2:
        each, imp = ablate_each_head(model, ids, mode="zero", clean=trace, between_passes=between_passes)
        out["importance"] = importance_dict(model, imp)
        out["ablations"] = {f"{layer}.{h}": ablation_dict(model, res, ABLATION_TOP) for (layer, h), res in each.items()}
    # the embedding explorer reads the token embedding by its name: where the model has none, each answer says why
    _, no_embedding = _try(lambda: embedding_matrix(model))
    if no_embedding is None:
        for tid in dict.fromkeys(ids):
            out["neighbours"][str(tid)] = neighbours_json(model, tid, NEIGHBOURS)
    pos, neg = ANALOGY
    res, err = (None, no_embedding) if no_embedding else _try(
        lambda: analogy_json(model, list(pos), list(neg), NEIGHBOURS))
    out["analogy"] = {"request": {"positive": pos, "negative": neg}, "out": res, "error": err}
    distinct = list(dict.fromkeys(ids))[:MAX_PROJECTED]
    res, err = (None, no_embedding) if no_embedding else _try(lambda: project_json(model, list(distinct)))
    out["projection"] = {"request": distinct, "out": res, "error": err}
    return finite(out)


@dataclass(frozen=True)
class SnapshotInfo:
    """What went into a snapshot, for the CLI's report."""

    kept: list[str]  # tensor groups included, e.g. "blocks.*.attn.pattern" (or "blocks.0-1.attn.pattern")
    omitted: list[str]
    nbytes: int
    keep_mb: float | None = None  # the max_mb that would keep everything left out (None: nothing was)


def snapshot_features(model: Model, trace: Trace) -> dict[str, Any] | None:
    """The Features view of the traced text: its features at the model's default shipped autoencoder (the middle one,
    as the app opens), every active feature of each position (top = k), as POST /api/features answers them, and that
    autoencoder as GET /api/features/hooks lists it (its pages stay in the package: a feature's page needs the live
    app). None for a model that ships none."""
    folders = builtin_saes(model)
    if not folders:
        return None
    hook = default_hook(list(folders))
    cfg = SAEConfig.from_json(read_json(folders[hook] / CFG_FILE), str(folders[hook] / CFG_FILE))
    top = cfg.k if cfg.k is not None and cfg.k <= MAX_FEATURES_TOP else FEATURES_TOP
    shipped = FeatureHookOut(hook=hook, layer=cfg.layer, d_sae=cfg.d_sae, k=cfg.k, default=True, pages=False)
    hooks = FeatureHooksOut(model=model.name, hooks=[shipped])
    out = features_out(model.name, text_features(model, trace, hook), top)
    return {"hooks": hooks.model_dump(), "out": _shortest_float32(out.model_dump()), "top": top}


def _shortest_float32(node: Any) -> Any:
    """`node` with each float written as the shortest decimal that reads back as the same float32 (what the
    autoencoder computed: 3.4702172, not float64's 3.470217227935791): a 256-token text's features take 30 % fewer
    bytes of the page's budget, and every value stays the float32 it was."""
    if isinstance(node, float):
        return float(np.format_float_positional(np.float32(node), unique=True, trim="-")) if math.isfinite(node) \
            else node
    if isinstance(node, dict):
        return {k: _shortest_float32(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_shortest_float32(v) for v in node]
    return node


def check_languages(languages: Sequence[str]) -> list[str]:
    out = list(dict.fromkeys(languages))
    if not out or any(lang not in LANGUAGES for lang in out):
        raise InputError(f"languages must be some of {', '.join(LANGUAGES)}, got {', '.join(languages) or 'none'}")
    return out


def snapshot_data(model: Model, trace: Trace, *, max_mb: float = 4.5, ablations: bool = True,
                  bundle_bytes: int = 0, languages: Sequence[str] = LANGUAGES,
                  cjk_font: str | None = None,
                  between_passes: BetweenPasses | None = None) -> tuple[dict[str, Any], SnapshotInfo]:
    """The JSON the snapshot page carries (see web/src/snapshot/static.ts for its reader): `languages`
    the page offers, `cjk_font` (a data: URL) for the page to draw Chinese with, counted in `max_mb`.
    `between_passes` is called before each forward pass of its long work (`snapshot_passes` of them at most: the
    head ablations, then one attribution per earlier position while they fit), e.g. a progress bar's update."""
    languages = check_languages(languages)
    if trace.start != 0:  # a generation step's trace covers only its new positions: trace it all
        trace = with_text(model.trace_ids(list(trace.prefix_ids) + list(trace.token_ids)), trace.text)
    trace = trace.materialized()  # the page stores stage by stage across blocks: run each block once
    ask = OverviewAsk(SamplingIn(**APP_SAMPLING), top_n=APP_TOP_N)
    overview = trace_overview(model.name, model, trace, ask=ask, found=Found(False, [0, trace.n_tokens]))
    models = ModelList(default=model.name, models=[_model_info(model)])
    L, family = model.config.n_layer, model.config.family
    table = model.config.names
    has = set(model.weight_names())  # none for a model that runs through transformers: its weights have no names here
    block_norms, final_norms = norm_weights(table)
    small = [block_name(i, s) for i in range(L) for s in block_norms] + final_norms
    weights = {n: _stored(model.weight(n), describe(n, family)[0]) for n in small if n in has}
    data: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "models": models.model_dump(), "trace": overview.model_dump(),
        "sampling": ask.sampling.model_dump(), "top_n": APP_TOP_N, "tensors": {},
        # each block's resid_post is the next block's resid_pre (the same tensor): only the last is stored
        "aliases": _aliases(model, trace),
        "weights": weights, "omitted": [], "languages": languages, "cjk_font": cjk_font,
        "analysis": snapshot_analyses(model, trace, ablations=ablations, between_passes=between_passes),
        "features": snapshot_features(model, trace),
    }
    attribution = SnapshotAttribution(model, trace)  # the last position's now; the earlier ones last, as room allows
    data["attribution"] = attribution.record
    used = bundle_bytes + len(json.dumps(data, ensure_ascii=False)) + 2048
    budget = int(max_mb * 1e6) - used

    global_first, block_order = ACTIVATION_ORDER[family]
    precise = PRECISE[family]
    answered = set(trace.names())  # a mixture's blocks answer their MLP's stages: experts' or a dense MLP's
    # (a model through transformers answers the global stages it has: Gemma 4's per-layer inputs, its alone)
    groups: list[tuple[str, list[str], bool]] = [(n, [n], False) for n in global_first
                                                 if family != "generic" or n in answered]
    groups += [(blocks_label("*", s), [n for i in range(L) if (n := block_name(i, s)) in answered
                                       and n not in data["aliases"]], False) for s in block_order]
    groups += [(blocks_label("*", s), [n for i in range(L) if (n := block_name(i, s)) in has], True)
               for s in LARGE_WEIGHTS]
    kept: list[str] = []
    omitted: list[str] = []
    wanted = 0  # what everything left out would have added
    sizes: dict[str, int] = {}

    def value(n: str, is_weight: bool) -> Any:
        return model.weight(n) if is_weight else trace[n]

    triangles: dict[str, bool] = {}

    def triangle(n: str, is_weight: bool) -> bool:  # an attention pattern: its lower triangle
        if n not in triangles:
            triangles[n] = (not is_weight and _stage(n) in ("attn.pattern", *PRECISE_GRIDS)
                            and _triangle(trace[n], describe(n, family)[0]))
        return triangles[n]

    def size(n: str, is_weight: bool) -> int:
        if n not in sizes:
            v = value(n, is_weight)
            T, S = v.shape[-2:] if v.dim() >= 2 else (0, 0)
            # a triangle: row i holds keys 0..S - T + i
            count = v.numel() // (T * S) * (T * (S - T) + T * (T + 1) // 2) if triangle(n, is_weight) else v.numel()
            sizes[n] = _b64_size(count, not is_weight and _stage(n) in precise)
        return sizes[n]

    def store(n: str, is_weight: bool) -> None:
        target = data["weights"] if is_weight else data["tensors"]
        target[n] = _stored(value(n, is_weight), describe(n, family)[0], not is_weight and _stage(n) in precise,
                            triangle(n, is_weight))

    # The attention view of a block needs its pattern and its scores (or the queries and keys the page derives them
    # from). A long text's patterns (H x T x T per block) may not fit whole: then, in the patterns' place, they go in
    # block by block from the first, each with its queries and keys (2 x T x D: less than the scores beyond a few
    # tokens), rather than not at all.
    by_stage = {label: names for label, names, _ in groups}
    pattern = by_stage.get(blocks_label("*", "attn.pattern"), [])
    # the scores the view reads: derived from the queries and keys (our families), or as recorded (the masked
    # scores of a model that runs through transformers)
    score_stage = "attn.scores" if "attn.scores" in table.block_activations else "attn.masked_scores"
    scores = by_stage.get(blocks_label("*", score_stage), [])
    derived = table.derivations.get(score_stage)
    sources = derived.sources if derived is not None else (score_stage,)
    for label, names, is_weight in groups:
        if not names:
            continue
        target = data["weights"] if is_weight else data["tensors"]
        if names is pattern and sum(size(n, False) for n in pattern + scores) > budget:
            for i in [layer_of(n) for n in pattern]:  # the layers with attention, from the first
                unit = [block_name(i, "attn.pattern")] + [block_name(i, src) for src in sources]
                if sum(size(n, False) for n in unit) > budget:
                    break
                for n in unit:
                    store(n, False)
                    budget -= size(n, False)
        before = [n for n in names if n in target]  # the first blocks', stored above
        rest = [n for n in names if n not in target]
        need = sum(size(n, is_weight) for n in rest)
        if need <= budget:
            for n in rest:
                store(n, is_weight)
            budget -= need
            kept.append(label)
            continue
        wanted += need
        if before:
            kept.append(_blocks_of(before))
            omitted.append(_blocks_of(rest))
        else:
            omitted.append(label)
    filled = attribution.fill(budget, between_passes)
    budget -= filled
    wanted += attribution.left_bytes()
    omitted += attribution.omitted()
    data["omitted"] = omitted
    nbytes = int(max_mb * 1e6) - budget
    # the budget that would keep everything: what is in, what was left out (the attributions as large as the last
    # position's), rounded up to a tenth of a MB
    keep_mb = math.ceil((nbytes + wanted) / 1e5) / 10 if omitted else None
    data["keep_mb"] = keep_mb
    if omitted:
        log.warning("the snapshot left out %s to stay under %g MB (the views that need them say so); "
                    "max_mb=%g (the CLI's --max-mb %g) would keep everything", ", ".join(omitted), max_mb,
                    keep_mb, keep_mb)
    return data, SnapshotInfo(kept, omitted, nbytes, keep_mb)


def _blocks(first: int, last: int, stage: str) -> str:
    """A run of blocks' stage, as the snapshot lists it ("blocks.0.attn.q", "blocks.1-5.attn.q")."""
    return block_name(first, stage) if first == last else blocks_label(f"{first}-{last}", stage)


def _blocks_of(names: list[str]) -> str:
    """Some blocks' stage, as the snapshot lists it: a run ("blocks.1-5.attn.pattern"), or the blocks one by one where
    they are not a run (the attention layers of a hybrid model: "blocks.1,3.attn.pattern")."""
    layers = [layer_of(n) for n in names]
    stage = _stage(names[0])
    if layers == list(range(layers[0], layers[-1] + 1)):
        return _blocks(layers[0], layers[-1], stage)
    return blocks_label(",".join(map(str, layers)), stage)


def _model_info(model: Model) -> ModelInfo:
    """The model as the app's model list shows it (the server's answer: `routes/core.model_info`)."""
    info = ModelInfo(name=model.name, source=model.source, loaded=True, default=True, config=config_out(model))
    if isinstance(model, GenericModel):  # transformers' modules: its parameters counted, its experts' not told apart
        info.n_params = model.n_params
    else:
        info.n_params, info.n_active_params = model.net.num_params(), model.net.num_active_params()
        info.n_expert_params = model.net.num_expert_params()
    return info


def _aliases(model: Model, trace: Trace) -> dict[str, str]:
    """Each block's output stored as the next block's input: our families' blocks hand over the same tensor; a model
    that runs through transformers, where the recorded output is the next layer's recorded input (not where a layer
    hands over something else too, e.g. Gemma 4's per-layer inputs: then both are stored)."""
    L = model.config.n_layer
    pairs = {block_name(i, "resid_post"): block_name(i + 1, "resid_pre") for i in range(L - 1)}
    if model.runs != "transformers":
        return pairs
    return {a: b for a, b in pairs.items() if torch.equal(trace[a], trace[b])}


def _stage(name: str) -> str:
    """A block name's stage ("blocks.3.attn.pattern" -> "attn.pattern")."""
    return name.split(".", 2)[2] if name.startswith("blocks.") else name


# -- the page --------------------------------------------------------------------------------------


def _bundle_dir() -> Path:
    return package_static_dir()


def _asset(root: Path, rel: str) -> str:
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise InputError(f"the web bundle refers to {rel!r} outside its folder")
    return path.read_text(encoding="utf-8")


def _json_safe(data: dict[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _cjk_ranges(root: Path) -> list[tuple[int, int]]:
    """The code points the bundled CJK subset is used for (its record's unicode-range, as the page's)."""
    record = json.loads((root / CJK_FONT_RECORD).read_text(encoding="utf-8"))
    out = []
    for part in record["unicode_range"].split(","):
        lo, _, hi = part.strip().removeprefix("U+").partition("-")
        out.append((int(lo, 16), int(hi or lo, 16)))
    return out


def cjk_font_url(text: str, languages: Sequence[str], root: Path) -> str | None:
    """The bundle's CJK font subset as a data: URL where a page offering `languages` with `text` can show
    Chinese (it offers 中文, or the text holds a character of the subset's range); else None. Inlined, it
    needs no fetch: a file:// page or a notebook's sandboxed iframe could not fetch it relative to itself."""
    font, record = root / CJK_FONT, root / CJK_FONT_RECORD
    if not font.is_file() or not record.is_file():
        if "zh" in languages or any(ord(c) >= 0x2E80 for c in text):
            log.warning("snapshot: the web bundle has no %s: Chinese needs a system CJK font", CJK_FONT)
        return None
    ranges = _cjk_ranges(root)
    if "zh" not in languages and not any(lo <= ord(c) <= hi for c in text for lo, hi in ranges):
        return None
    return "data:font/woff2;base64," + base64.b64encode(font.read_bytes()).decode("ascii")


CHUNK_SCHEME = "te-snapshot:"  # what a chunk is named by in the page (its import map maps it to the chunk's text)
# the chunks of the pages that need the server (the encoder-decoder page and Watch it learn, which the header's mode
# switch does not offer in a snapshot, web/src/pages/seq2seq/ModeSwitch.svelte): loaded only on first use
# (web/src/parts.ts), so a snapshot leaves them out and spends their bytes on the trace
SERVER_ONLY_CHUNKS = ("Seq2SeqPage-", "LearnPage-")


def _inlined(name: str) -> bool:
    """Whether a snapshot inlines the bundle's asset `name`: not a copy the build compressed for the server, nor a
    page that needs the server."""
    return not name.endswith(".gz") and not name.startswith(SERVER_ONLY_CHUNKS)

# the characters of a script that a data: URL's body cannot hold as they are (the URL parser drops tabs and
# newlines, "#" starts a fragment, "?" a query, "%" an escape): percent-escaped, as the data: URL decodes them
_DATA_URL_ESCAPES = str.maketrans({c: f"%{ord(c):02X}" for c in "%#?\t\n\r"})


def _import_map(root: Path) -> dict[str, str]:
    """The bundle's scripts (the page's and the chunks it loads, statically or on first use, web/vite.config.ts)
    as data: URLs, by the names the page imports them by (CHUNK_SCHEME + file name), so that the page fetches
    nothing. A data: URL, unlike the page, has no folder that a script's "./other.js" could be resolved against:
    each such reference is renamed (the scripts' hashed file names occur in them only where they are imported).
    Each script is one module of the page, whoever imports it: the page's own script too, which its chunks
    import from."""
    names = sorted(p.name for p in (root / "assets").glob("*.js") if _inlined(p.name))
    ref = re.compile(r"""(["'`])\./(""" + "|".join(map(re.escape, names)) + r")\1")
    return {f"{CHUNK_SCHEME}{n}": "data:text/javascript;charset=utf-8,"
            + ref.sub(lambda m: f"{m[1]}{CHUNK_SCHEME}{m[2]}{m[1]}", _asset(root, f"assets/{n}"))
            .translate(_DATA_URL_ESCAPES)
            for n in names}


def page_html(data: dict[str, Any], static_dir: Path | None = None) -> str:
    """The app's index.html with its scripts and styles inlined and `data` embedded."""
    root = static_dir or _bundle_dir()
    index = root / "index.html"
    if not index.is_file():
        raise InputError("the web app is not built in this installation (cd web && npm ci && npm run build)")
    html = index.read_text(encoding="utf-8")
    scripts = re.findall(r'<script type="module"[^>]*\bsrc="\./([^"]+)"[^>]*></script>', html)
    styles = re.findall(r'<link rel="stylesheet"[^>]*\bhref="\./([^"]+)"[^>]*>', html)
    if not scripts:
        raise InputError(f"no module script found in {index}")
    html = re.sub(r'\s*<script type="module"[^>]*\bsrc="[^"]+"[^>]*></script>', "", html)
    html = re.sub(r'\s*<link rel="stylesheet"[^>]*>', "", html)
    if re.search(r'\b(src|href)="\./', html):
        raise InputError("the web bundle's index.html loads a file this snapshot does not inline")
    css = "".join(_asset(root, s) for s in styles).replace("</style", "<\\/style")
    imports = _import_map(root)
    entries = [CHUNK_SCHEME + s.removeprefix("assets/") for s in scripts]
    if any(e not in imports for e in entries):
        raise InputError(f"{index} loads a script that is not in its assets/ folder")
    js = "".join(f'import "{e}";' for e in entries)
    title = f"{data['trace']['text'][:60]} · Transformer Explainer snapshot"
    head = (f'<meta name="generator" content="transformer-explainer snapshot v{VERSION}">\n'
            f"<style>{css}</style>\n"
            # the snapshot holds one text: the text box is read-only and the examples are hidden
            f"<style>.examples{{display:none!important}}{BANNER_CSS}</style>\n"
            f'<script type="application/json" id="te-snapshot">{_json_safe(data)}</script>\n'
            f'<script type="importmap">{_json_safe({"imports": imports})}</script>\n'
            f'<script type="module">{js}</script>\n')
    html = html.replace('<div id="app"></div>', _banner(data.get("languages", LANGUAGES)) + '<div id="app"></div>', 1)
    html = re.sub(r"<title>.*?</title>", lambda _: f"<title>{_escape(title)}</title>", html, count=1)
    return html.replace("</head>", head + "</head>", 1)


BANNER_TEXT = {"en": "Offline snapshot of one text: no server needed; views that need new computation say so.",
               "zh": "单一文本的离线快照：无需服务器；需要重新计算的视图会给出提示。"}
# the app's font list (app.css --sans), which holds the inlined CJK subset once it has loaded
BANNER_CSS = (".te-snapshot-banner{background:#fff6d6;color:#5c4a00;font:13px var(--sans,system-ui,sans-serif);"
              "padding:4px 20px;border-bottom:1px solid #eadb9f}")


def _banner(languages: Sequence[str]) -> str:
    text = " · ".join(BANNER_TEXT[lang] for lang in languages)
    return f'<div class="te-snapshot-banner" data-testid="snapshot-banner">{text}</div>'


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def snapshot_page(model: Model, text_or_trace: str | Trace, *, max_mb: float = 4.5, ablations: bool = True,
                  static_dir: Path | None = None, languages: Sequence[str] = LANGUAGES,
                  between_passes: BetweenPasses | None = None) -> tuple[str, SnapshotInfo]:
    """The page of `snapshot_html` and what went into it (what the budget left out, and the `max_mb` that
    would keep it); `between_passes` as `snapshot_data` has it."""
    languages = check_languages(languages)
    trace = model.trace(text_or_trace) if isinstance(text_or_trace, str) else text_or_trace
    if trace.config != model.config:
        raise InputError(f"the trace was made by {trace.model_name}, not by {model.name}")
    root = static_dir or _bundle_dir()
    # what the page inlines: the scripts and styles (`_inlined`)
    bundle = sum(p.stat().st_size for p in (root / "assets").glob("*") if _inlined(p.name)) \
        if (root / "assets").is_dir() else 0
    data, info = snapshot_data(model, trace, max_mb=max_mb, ablations=ablations, bundle_bytes=bundle,
                               languages=languages, cjk_font=cjk_font_url(trace.text, languages, root),
                               between_passes=between_passes)
    return page_html(data, root), info


def snapshot_html(model: Model, text_or_trace: str | Trace, *, max_mb: float = 4.5, ablations: bool = True,
                  static_dir: Path | None = None, languages: Sequence[str] = LANGUAGES) -> str:
    """One self-contained HTML page explaining `text_or_trace` with `model`: opens offline from file://.
    `languages`: what the page offers (English and 中文; one alone fixes the page to it, and an English-only page
    of English text carries no CJK font). What the size budget `max_mb` leaves out is logged as a warning, with
    the `max_mb` that would keep it."""
    return snapshot_page(model, text_or_trace, max_mb=max_mb, ablations=ablations, static_dir=static_dir,
                         languages=languages)[0]


def save_snapshot(model: Model, text_or_trace: str | Trace, path: str | Path, **kwargs: Any) -> Path:
    """Write `snapshot_html(...)` to `path` (UTF-8, replacing it whole or not at all). The CLI's `snapshot`
    command writes its page with this function too."""
    path = Path(path)
    atomic_write_bytes(path, snapshot_page(model, text_or_trace, **kwargs)[0].encode("utf-8"))
    return path
