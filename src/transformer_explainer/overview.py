"""The answers of the API's core, built from a model and a trace: the overview of a trace (tokens,
next-token distribution, attention thumbnails, residual norms, the tensors asked for), the next-token
answer, the model's configuration and the name tables. Pure functions: the server routes them and
the offline snapshot stores them, so both agree value for value."""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from .analysis.cost import pass_gflop
from .config import DecoderConfig
from .encoding import encode_array, encode_u8, group_size, lower_triangle_u8, pooled_pattern, query_group_means
from .engine import ExplainerModel
from .errors import InputError
from .families.hf import SLIDING
from .generic import ATTENTION, GenericConfig, GenericModel
from .limits import MIN_TEMPERATURE
from .memo.summaries import THUMBNAIL, key_sums_at
from .names import block_name, layer_of, names_for
from .sampling import SamplingParams, make_generator, next_token_distribution
from .schemas import (
    AttentionOverview,
    Candidate,
    CapabilitiesOut,
    CharGroupOut,
    EncodedTensor,
    Histogram,
    LatentCacheOut,
    ModelConfigOut,
    NameEntry,
    NamesOut,
    NextTokenOut,
    PassCostOut,
    PerLayerOut,
    SampledOut,
    SamplingIn,
    StateMemoryOut,
    TensorSpec,
    TokenOut,
    TraceOut,
)
from .slicing import activation_tensors
from .trace import Trace

HIST_BINS = 64


def pattern_thumbnail(pattern: Tensor) -> Tensor:
    """A block's attention patterns (H, T, S) as the overview's thumbnail (at most THUMBNAIL x THUMBNAIL)."""
    return pooled_pattern(pattern, THUMBNAIL)


def attention_layers(config: DecoderConfig | GenericConfig) -> list[int]:
    """The layers with an attention pattern: every block of an own-code model; the attention layers of one that
    runs through transformers (a convolution, state-space or linear-attention layer has none)."""
    if isinstance(config, GenericConfig):
        return list(config.attention_layers)
    return list(range(config.n_layer))


def check_recorded(config: DecoderConfig | GenericConfig, specs: list[TensorSpec]) -> None:
    """Refuse, in one sentence, an activation that a model which runs through transformers does not record in that
    layer (an attention pattern of a convolution layer, resid_mid of a layer with parallel sublayers). An own-code
    model records every name of its family's table in every layer."""
    if not isinstance(config, GenericConfig):
        return
    for spec in specs:
        layer = layer_of(spec.name)
        known = spec.name.split(".", 2)[-1] in config.names.block_activations
        if layer is None or not 0 <= layer < config.n_layer or not known or config.has(spec.name):
            continue  # a global name, an unknown one or a layer out of range: the slicing says what is wrong
        kinds = " and ".join(k.replace("_", " ") for k in config.layers[layer].kinds) or "mixer"
        attn = ", ".join(map(str, config.attention_layers))
        raise InputError(f"{spec.name} is not recorded: layer {layer} of this {config.model_type} model is a {kinds} "
                         f"layer, which does not compute it (its attention layers: {attn})")


def overview_thumbnails(trace: Trace) -> Tensor:
    """(L, H, n, n) on the CPU: every attention layer's pattern thumbnail (`attention_layers`), from what the pass
    kept of it (else its block run as far as the pattern), reduced where the block's values are, then copied."""
    g = group_size(trace.n_tokens, THUMBNAIL)
    fn = key_sums_at(g)  # memo.summaries.overview_summary(trace.n_tokens)
    return torch.stack([query_group_means(trace.memory.observation(block_name(i, "attn.pattern"), fn), g).cpu()
                        for i in attention_layers(trace.config)])


def _experts_out(c: GenericConfig) -> dict[str, Any]:
    """The capabilities' fields of the mixture of experts our own code reads in a model that runs through transformers
    (`GenericConfig.experts`); for one without, its config's n_experts and top_k alone (None for a dense model)."""
    x = c.experts
    if x is None:
        return dict(n_experts=c.n_experts, top_k=c.top_k)
    return dict(n_experts=x.n_experts, top_k=x.top_k, d_expert=x.d_expert, norm_topk_prob=x.norm_topk_prob,
                moe_layers=list(x.layers), router=x.router, n_groups=x.n_groups, topk_groups=x.topk_groups,
                routed_scaling=x.routed_scaling, d_shared=x.d_shared, swiglu_limit=x.swiglu_limit,
                swiglu_alpha=x.swiglu_alpha)


def generic_capabilities_out(c: GenericConfig) -> CapabilitiesOut:
    """What the views branch on, for a model that runs through transformers' own modules: each layer's mixers,
    window and recorded stages; the family's fields (its norms, positions, MLP) are null: transformers' code."""
    windows = [c.window(i) for i in range(c.n_layer)]
    local = sorted({w for w in windows if w is not None})
    attn = set(c.attention_layers)
    return CapabilitiesOut(
        norm=None, norm_offset=None, positions=None, qkv=None, mlp=None, qk_norm=None, qk_norm_scope=None,
        sandwich_norm=None, embed_scale=None, kv_groups=c.n_head // c.n_kv_heads,
        local_window=local[0] if len(local) == 1 else None,  # one window for every local layer, else each its own
        layer_types=[None if i not in attn else "sliding_attention" if windows[i] is not None else "full_attention"
                     for i in range(c.n_layer)],
        attn_scale=None, rope_local_theta=None, runs="transformers", **_experts_out(c),
        mixers=[list(layer.kinds) for layer in c.layers], windows=windows, attention_layers=sorted(attn),
        resid_mid=["resid_mid" in layer.stages for layer in c.layers],
        sinks=["attn.sink" in layer.stages for layer in c.layers],
        layer_stages=[list(layer.stages) for layer in c.layers], mechanisms=[layer.mechanism for layer in c.layers],
        state_memory=None if c.memory is None else StateMemoryOut(**asdict(c.memory)),
        kv_latent=None if c.latent_memory is None else LatentCacheOut(**asdict(c.latent_memory)),
        per_layer=None if c.per_layer is None else PerLayerOut(**asdict(c.per_layer)),
        write_bounds=[None if b is None else list(b) for b in c.write_bounds])


def capabilities_out(c: DecoderConfig | GenericConfig) -> CapabilitiesOut:
    """The family's capabilities and this model's options (what the views branch on)."""
    if isinstance(c, GenericConfig):
        return generic_capabilities_out(c)
    a = c.arch
    local = SLIDING in (c.layer_types or ())
    return CapabilitiesOut(norm=a.norm, norm_offset=a.norm_offset, positions=a.positions, qkv=a.qkv, mlp=a.mlp,
                           qk_norm=a.qk_norm, sandwich_norm=a.sandwich_norm, embed_scale=a.embed_scale,
                           kv_groups=c.n_head // c.n_kv_heads,
                           local_window=c.sliding_window if local else None,
                           layer_types=[c.layer_type(i) for i in range(c.n_layer)], attn_scale=c.attn_scale,
                           rope_local_theta=c.rope_local_theta, qk_norm_scope=a.qk_norm_scope,
                           n_experts=c.n_experts, top_k=c.top_k, d_expert=c.d_expert,
                           norm_topk_prob=c.norm_topk_prob if a.mlp == "moe" else False, moe_layers=c.moe_layers,
                           router="softmax" if a.mlp == "moe" else None,
                           runs="own", mixers=[[ATTENTION]] * c.n_layer,
                           windows=[c.sliding_window if c.layer_type(i) == SLIDING else None for i in range(c.n_layer)],
                           attention_layers=list(range(c.n_layer)), resid_mid=[True] * c.n_layer,
                           sinks=[False] * c.n_layer)


def config_out(model: ExplainerModel | GenericModel) -> ModelConfigOut:
    if isinstance(model, GenericModel):
        g = model.config
        return ModelConfigOut(n_layer=g.n_layer, n_head=g.n_head, n_embd=g.n_embd, head_dim=g.head_dim, d_mlp=g.d_mlp,
                              vocab_size=g.vocab_size, block_size=g.block_size, layer_norm_epsilon=None,
                              activation=None, family=g.family, model_type=g.model_type, architecture=g.architecture,
                              n_kv_heads=g.n_kv_heads, capabilities=capabilities_out(g), rope_theta=None,
                              rope_scaling=None, tie_word_embeddings=None, qkv_bias=None, out_bias=None,
                              mlp_bias=None, dtype=str(model.dtype).removeprefix("torch."),
                              file_dtype=model.file_dtype)
    c = model.config
    rope = c.arch.positions == "rope"
    return ModelConfigOut(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd, head_dim=c.head_dim, d_mlp=c.d_mlp,
                          vocab_size=c.vocab_size, block_size=c.block_size, layer_norm_epsilon=c.layer_norm_epsilon,
                          activation=c.activation, family=c.family, model_type=c.model_type,
                          n_kv_heads=c.n_kv_heads, capabilities=capabilities_out(c),
                          rope_theta=c.rope_theta if rope else None,
                          rope_scaling=c.rope_scaling.rope_type if c.rope_scaling is not None else None,
                          tie_word_embeddings=c.tie_word_embeddings, qkv_bias=c.qkv_bias, out_bias=c.out_bias,
                          mlp_bias=c.mlp_bias, dtype=str(model.dtype).removeprefix("torch."),
                          file_dtype=model.file_dtype)


def names_out(family: str = "gpt2") -> NamesOut:
    """The names one family's traces answer (`names.FAMILY_NAMES`)."""
    t = names_for(family)

    def table(t: dict[str, tuple[tuple[str, ...], str]]) -> dict[str, NameEntry]:
        return {k: NameEntry(dims=list(d), description=s) for k, (d, s) in t.items()}

    return NamesOut(family=family, block_activations=table(t.block_activations),
                    global_activations=table(t.global_activations), block_weights=table(t.block_weights),
                    global_weights=table(t.global_weights), derived=dict(t.derived))


# -- next token ------------------------------------------------------------------------------------


def sampling_params(sp: SamplingIn) -> SamplingParams:
    if 0 < sp.temperature < MIN_TEMPERATURE:
        raise InputError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {sp.temperature}",
                         code="temperature_too_low", value=sp.temperature, min=MIN_TEMPERATURE)
    return SamplingParams(temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p, seed=sp.seed)


def next_token_out(model: ExplainerModel, logits: Tensor, sp: SamplingIn, top_n: int, position: int) -> NextTokenOut:
    """The next-token distribution at `position` after `sp`'s temperature and cuts, its `top_n`
    candidates, a draw from it (seeded; the seed is in the answer) and a histogram of all logits."""
    params = sampling_params(sp)
    seed = sp.seed if sp.seed is not None else random.SystemRandom().randrange(2**31)
    dist = next_token_distribution(logits, params)
    tid = dist.sample(make_generator(seed, dist.probs.device))
    logits32 = dist.logits
    no_cut = dist.probs_before_cuts
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
    if token_id is None:
        token_id = dist.sample(make_generator(sp.seed, dist.probs.device))
    else:
        model.check_vocabulary([token_id])
    return SampledOut(id=token_id, text=model.tokenizer.token_text(token_id), prob=float(dist.probs[token_id]),
                      logit=float(dist.logits[token_id]))


# -- the overview of a trace -----------------------------------------------------------------------


def pass_cost(cfg: DecoderConfig | GenericConfig, n_tokens: int) -> PassCostOut | None:
    """The arithmetic of a forward pass over `n_tokens` tokens: with the experts the tokens were sent to, and
    with every expert (the same for a dense model). None for a model that runs through transformers: its layers'
    products (a convolution's, a state-space layer's, latent attention's) are its code's, not counted here."""
    if isinstance(cfg, GenericConfig):
        return None
    return PassCostOut(n_tokens=n_tokens, gflop=pass_gflop(cfg, n_tokens),
                       gflop_all_experts=pass_gflop(cfg, n_tokens, experts_per_token=cfg.n_experts))


@dataclass(frozen=True)
class Found:
    """How a request's trace was found, for the overview's facts and timings."""

    truncated: bool  # the input was cut to its last tokens to fit the model's context
    computed: list[int]  # [first, last + 1) of the positions the forward pass computed for it
    seconds: float = 0.0  # the time finding it took: the lookup, the tokenization and the pass


@dataclass(frozen=True)
class OverviewAsk:
    """What a request (`TraceIn`, `GenerateIn`) asks the overview for."""

    sampling: SamplingIn  # how the next-token answer samples
    top_n: int  # its candidates
    include: list[TensorSpec] = field(default_factory=list)  # the tensors the answer holds


def trace_overview(name: str, model: ExplainerModel | GenericModel, trace: Trace, *, ask: OverviewAsk,
                   found: Found) -> TraceOut:
    """What the app shows first for a trace of the model called `name`: what `ask` asks for (the sampling and
    number of candidates of the next-token answer, the tensors to include), with how the trace was `found`."""
    t_traced = time.perf_counter()
    cfg = model.config
    tok = model.tokenizer
    tensors = activation_tensors(trace, ask.include)
    nxt = next_token_out(model, trace.next_token_logits(), ask.sampling, ask.top_n, trace.n_tokens - 1)
    thumbs = overview_thumbnails(trace)
    size = thumbs.shape[-1]
    norms = [trace[block_name(i, "resid_pre")].norm(dim=-1).cpu() for i in range(cfg.n_layer)]
    norms.append(trace[block_name(cfg.n_layer - 1, "resid_post")].norm(dim=-1).cpu())
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
        truncated=found.truncated,
        context_length=model.context_length,
        config=config_out(model),
        next=nxt,
        attention=AttentionOverview(n_layer=thumbs.shape[0], n_head=cfg.n_head, size=size,
                                    pooled=size < trace.n_tokens, encoding="uint8-lower-triangle",
                                    data=encode_u8(lower_triangle_u8(thumbs)), layers=attention_layers(cfg)),
        resid_norms=EncodedTensor(name="resid_norms", dims=["L", "T"], shape=list(resid.shape), dtype="float32",
                                  data=encode_array(resid, "float32")),
        tensors=tensors,
        computed_positions=found.computed,
        cost=pass_cost(cfg, trace.start + trace.n_tokens),
        timings_ms={"model": round(found.seconds * 1e3, 2), "encode": round((t_done - t_traced) * 1e3, 2)},
    )
