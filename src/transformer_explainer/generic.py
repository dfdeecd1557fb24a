"""Any decoder transformers implements, explained through transformers' own modules: `GenericModel`.

A checkpoint whose model_type none of the project's families (`families/`) declares, but which transformers loads
as a causal language model, runs here: transformers' own code computes, and the bridge (`bridge/`) records what
it computes under the project's names (the generic family's table, `names.GENERIC_NAMES`): each layer's input and
output, its attention's queries, keys, values, mask, scores, pattern and z (and a sink where the model has one),
the output of each mixer that is not attention (a short convolution, a state-space layer, linear attention) and of
the MLP, the final norm's output and the logits. Its weights and the insides of its MLP and non-attention mixers
are transformers' and are not named here (`weight` says so in one sentence), except where our own code implements a
layer's module (`bridge.mechanisms`, the mechanism lens: Gated DeltaNet): its internals are then derived on access
from the module's recorded input by our module, under our names (linear_attn.q, beta, decay, implied_pattern, ...).

`which_way(folder)` says which way a checkpoint runs: "own" (a family with code of our own: every intermediate
named, what the lessons read) or "transformers".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .attribution import Attribution, generic_logit_attribution
from .devices import check_dtype, describe_device, free_memory, resolve_device
from .errors import CheckpointError, InputError
from .families import BY_MODEL_TYPE, NEARBY, supported_model_types
from .features.encode import TextFeatures, text_features
from .features.sae import SparseAutoencoder
from .loading.budget import check_memory
from .loading.checkpoint import resolve_dtype, stored_dtype
from .loading.files import is_regular_file, read_json
from .loading.resolve import ResolvedModel
from .loading.tokenizer import TextTokenizer
from .memo.plan import Memory
from .memo.values import TraceValues
from .models.placement import DeviceMap, MapValue, check_budget, describe_map
from .names import GENERIC_BLOCK_ACTIVATIONS, GENERIC_NAMES, NameTable, block_name, layer_of
from .patching import KINDS, Kind, Patching, generic_activation_patching
from .text_model import TextModel, TokenLike
from .trace import Trace

if TYPE_CHECKING:
    from .bridge.latent_lens import LatentMemory
    from .bridge.mechanisms import HybridMemory, Mechanism
    from .bridge.per_layer_lens import PerLayerMemory

OWN = "own"
TRANSFORMERS = "transformers"
ATTENTION = "attention"
# a stage's layer kind: the layers that record it (the residual stream's stages: every layer)
_STAGE_KIND = {"attn.": ATTENTION, "attn_out": ATTENTION, "linear_attn.": "linear_attention", "conv.": "short_conv",
               "ssm.": "state_space", "mixer.": "mixer"}


def which_way(folder: Path) -> str:
    """How the checkpoint in `folder` runs: OWN when its model_type is one of our families' (or it names none:
    GPT-2's old checkpoints), TRANSFORMERS when transformers implements it as a decoder-only language model;
    a CheckpointError in one sentence otherwise (remote code is never run)."""
    try:
        config = read_json(folder / "config.json")
    except CheckpointError:  # no config, or not one: the loader of our families says what is wrong, as before
        return OWN
    model_type = config.get("model_type")
    if model_type is None or model_type in BY_MODEL_TYPE or model_type in NEARBY:
        return OWN  # (a model type next to one of ours: our family's loader says what to open instead)
    from .bridge import check_config

    try:
        check_config(config)
    except CheckpointError as e:
        raise CheckpointError(f"{e} The decoders with code of our own: {supported_model_types()}") from None
    return TRANSFORMERS


@dataclass(frozen=True)
class GenericLayer:
    """What one decoder layer is: its mixers' kinds ("attention", "linear_attention", "short_conv",
    "state_space"), its local window (keys a query reads; None for full attention or no attention), the
    stages it answers, in computation order, and the mechanism our own code explains its mixer by
    (`bridge.mechanisms`: "gated_deltanet"; None where there is none), whose stages are among them."""

    kinds: tuple[str, ...]
    window: int | None
    stages: tuple[str, ...]
    mechanism: str | None = None


@dataclass(frozen=True)
class GenericExperts:
    """A mixture of experts our own code reads (`bridge.moe_lens`: DeepSeek-V3's, gpt-oss's), as the views branch on it:
    its router's kind, the layers that have it, and the numbers its routing and weights depend on."""

    # "sigmoid_grouped" (DeepSeek-V3: a sigmoid score per expert; the top_k of the best groups, chosen by score + a
    # per-expert bias; the weights from the scores alone, times routed_scaling) or "softmax_topk" (gpt-oss: the top_k
    # logits, a softmax over them alone)
    router: str
    layers: tuple[int, ...]  # the layers whose MLP is this mixture (DeepSeek-V3's first ones are dense)
    n_experts: int  # routed experts
    top_k: int
    d_expert: int  # a routed expert's hidden width
    norm_topk_prob: bool  # the chosen weights divided by their sum (a softmax over the top_k does so by itself)
    n_groups: int | None = None  # sigmoid_grouped: the experts' groups, and how many a token's experts may come from
    topk_groups: int | None = None
    routed_scaling: float | None = None  # sigmoid_grouped: the routed weights' factor (routed_scaling_factor)
    d_shared: int | None = None  # the shared expert's width, which every token goes through; None: none
    swiglu_limit: float | None = None  # softmax_topk: the experts' clamp (gate <= limit, up in [-limit, limit])
    swiglu_alpha: float | None = None  # softmax_topk: act = gate * sigmoid(alpha * gate)


def generic_experts(mechanisms: Mapping[int, Any]) -> GenericExperts | None:
    """The mixture of experts of the layers whose MLP our own code reads (`bridge.moe_lens.MoELens`, alone or a part of
    a layer's `LayerLenses`); None where no layer has one."""
    from .bridge.moe_lens import LayerLenses, MoELens
    from .models.deepseek_moe import DeepSeekMoEConfig

    lenses = {i: p for i, m in mechanisms.items()
              for p in (m.parts if isinstance(m, LayerLenses) else (m,)) if isinstance(p, MoELens)}
    if not lenses:
        return None
    layers = tuple(sorted(lenses))
    c = lenses[layers[0]].config
    if isinstance(c, DeepSeekMoEConfig):
        return GenericExperts("sigmoid_grouped", layers, c.n_experts, c.top_k, c.d_expert, c.norm_topk_prob,
                              n_groups=c.n_group, topk_groups=c.topk_group, routed_scaling=c.routed_scaling_factor,
                              d_shared=c.d_expert * c.n_shared)
    return GenericExperts("softmax_topk", layers, c.n_experts, c.top_k, c.d_expert, True, swiglu_limit=c.limit,
                          swiglu_alpha=c.alpha)


@dataclass(frozen=True)
class GenericConfig:
    """The shape of a decoder that runs through transformers, as the views read it: the fields `DecoderConfig`
    shares (nanoGPT's names) and what each layer is. Heads and their widths are those its attention computes
    with (read from a recording), so they hold for latent or per-layer head widths too."""

    model_type: str
    architecture: str  # transformers' class, e.g. "Qwen3_5ForCausalLM"
    n_layer: int
    n_head: int  # query heads of its attention layers
    n_kv_heads: int
    head_dim: int
    n_embd: int
    vocab_size: int
    block_size: int  # longest context its config states
    d_mlp: int | None  # the MLP's hidden width where the config states one
    layers: tuple[GenericLayer, ...]
    n_experts: int | None = None
    top_k: int | None = None
    family: str = "generic"
    dense_layers: tuple[int, ...] = ()
    # a model with Gated DeltaNet layers: their fixed states against its full-attention layers' KV cache
    memory: HybridMemory | None = None
    # a model with multi-head latent attention: its latents' cache against multi-head and grouped-query attention's
    latent_memory: LatentMemory | None = None
    # stages outside the blocks our own code derives (Gemma 4's per-layer inputs: bridge/per_layer_lens.py), in order
    global_stages: tuple[str, ...] = ()
    # a model with per-layer inputs (Gemma 4): its width, the layers that read one, KV sharing and what it saves
    per_layer: PerLayerMemory | None = None
    # per layer: (attention's, the MLP's) write bound sqrt(D) * max|gamma| where the layer norms what each sublayer
    # writes (OLMo 2 and 3: bridge/post_norm_lens.py), else None
    write_bounds: tuple[tuple[float, float] | None, ...] = ()
    # a mixture of experts our own code reads (DeepSeek-V3's, gpt-oss's): its router and layers; None: none read
    experts: GenericExperts | None = None

    @property
    def names(self) -> NameTable:
        return GENERIC_NAMES

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The layers with attention (the others mix tokens another way)."""
        return tuple(i for i, layer in enumerate(self.layers) if ATTENTION in layer.kinds)

    def window(self, layer: int) -> int | None:
        return self.layers[layer].window

    def activation_names(self) -> list[str]:
        """Every name a trace answers, in computation order: each layer its own stages."""
        out = ["embed.token", *self.global_stages]
        for i, layer in enumerate(self.layers):
            out += [block_name(i, s) for s in layer.stages]
        return [*out, "ln_final.out", "logits"]

    def computes(self, layer: int, stage: str) -> bool:
        """Whether layer `layer` computes `stage` (e.g. no attn.z in a convolution layer, no mlp_out without an
        MLP)."""
        return stage in self.layers[layer].stages

    def pass_gflop(self, n_tokens: int) -> float:
        """An estimate of one forward pass's billions of floating-point operations over `n_tokens` tokens, from
        the config's widths (2 per multiply-add): the query, key, value and output products and the scores of
        every layer (a layer that mixes tokens another way counted as one with attention's widths), a gated
        MLP of d_mlp (4 d_model where the config states none; top_k of them in a mixture), the unembedding.
        For pricing a request before it runs, as `analysis.cost.pass_gflop` does for our own families."""
        T, D = n_tokens, self.n_embd
        q, kv = self.n_head * self.head_dim, self.n_kv_heads * self.head_dim
        mixing = 2 * T * D * (2 * q + 2 * kv) + 2 * 2 * T * T * q
        mlp = (self.top_k or 1) * 3 * 2 * T * D * (self.d_mlp or 4 * D)
        return (self.n_layer * (mixing + mlp) + 2 * T * D * self.vocab_size) / 1e9

    def has(self, name: str) -> bool:
        """Whether a trace of this model records `name` (e.g. no attention pattern in a convolution layer)."""
        return name in set(self.activation_names())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _stage_order(recorded: set[str]) -> tuple[str, ...]:
    return tuple(s for s in GENERIC_BLOCK_ACTIVATIONS if s in recorded)


def _hf_int(cfg: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(cfg, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def generic_config(hf: nn.Module, values: dict[str, Tensor], windows: list[int | None],
                   kinds: list[tuple[str, ...]], mechanisms: Mapping[int, Mechanism] | None = None) -> GenericConfig:
    """The GenericConfig of a loaded transformers decoder, from its config and one recording of it; a layer with a
    mechanism of ours (`bridge.find_mechanisms`) answers its stages too, and a model with per-layer embeddings
    (`bridge.per_layer_lens`) theirs."""
    from .bridge.latent_lens import latent_memory
    from .bridge.mechanisms import MEMORY_TOKENS, hybrid_memory
    from .bridge.moe_lens import MoELens, first_part
    from .bridge.per_layer_lens import find_per_layer_inputs, per_layer_memory
    from .bridge.post_norm_lens import PostNormLens

    cfg = hf.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    stages: dict[int, set[str]] = {}
    for name in values:
        layer = layer_of(name)
        if layer is not None:
            stages.setdefault(layer, set()).add(name.split(".", 2)[2])
    for i, m in (mechanisms or {}).items():
        stages.setdefault(i, set()).update(m.stages)
    experts = generic_experts(mechanisms or {})
    # the layers' mechanisms, the memory tables and the write bounds are the mixer's (or the layer's), not an MLP's
    # (bridge/moe_lens.py), alone or beside the mixer's
    mechanisms = {i: p for i, m in (mechanisms or {}).items() if not isinstance(p := first_part(m), MoELens)}
    n_layer = len(kinds)
    layers = tuple(GenericLayer(kinds[i], windows[i], _stage_order(stages.get(i, set())),
                                mechanisms[i].kind if i in mechanisms else None) for i in range(n_layer))
    first = next((i for i, layer in enumerate(layers) if ATTENTION in layer.kinds and "attn.q" in layer.stages), None)
    if first is None:
        raise CheckpointError(f"{type(hf).__name__} has no attention layer whose queries and keys transformers' "
                              "eager attention computes, so there is no attention to show.")
    q, k = values[block_name(first, "attn.q")], values[block_name(first, "attn.k")]
    n_embd = int(values["embed.token"].shape[-1])
    full = [i for i, layer in enumerate(layers) if ATTENTION in layer.kinds and layer.window is None]
    dtype = next(hf.parameters()).dtype
    memory = hybrid_memory(mechanisms, full, int(k.shape[0]), int(k.shape[-1]), dtype)
    n_experts = _hf_int(text, "num_experts", "num_local_experts", "n_routed_experts")
    return GenericConfig(
        model_type=str(text.model_type), architecture=type(hf).__name__, n_layer=n_layer, n_head=int(q.shape[0]),
        n_kv_heads=int(k.shape[0]), head_dim=int(q.shape[-1]), n_embd=n_embd, vocab_size=int(text.vocab_size),
        block_size=_hf_int(text, "max_position_embeddings", "n_positions", "n_ctx", "seq_length") or 2048,
        d_mlp=_hf_int(text, "intermediate_size", "n_inner", "ffn_hidden_size"), layers=layers,
        n_experts=n_experts, top_k=_hf_int(text, "num_experts_per_tok", "top_k") if n_experts else None, memory=memory,
        latent_memory=latent_memory(mechanisms, dtype, MEMORY_TOKENS),
        global_stages=() if (ple := find_per_layer_inputs(hf)) is None else ple.stages,
        per_layer=per_layer_memory(hf, mechanisms, MEMORY_TOKENS),
        write_bounds=tuple(m.bounds if isinstance(m := mechanisms.get(i), PostNormLens) else None
                           for i in range(n_layer)),
        experts=experts)


def _check_safetensors(folder: Path) -> None:
    """Weights only from safetensors files: a pickle is never unpickled."""
    if not (is_regular_file(folder / "model.safetensors") or is_regular_file(folder / "model.safetensors.index.json")):
        raise CheckpointError(f"{folder} has no model.safetensors (or safetensors shards): a model that runs through "
                              "transformers opens from safetensors files only, as a pickle could run code.")


def _check_memory(folder: Path, dtype: torch.dtype) -> None:
    """Refuse, before any weight is read, a model whose weights would not fit in memory."""
    check_memory(_meta_model(folder), dtype, f"the model in {folder}")


def _module_map(folder: Path, dtype: torch.dtype, device_map: str | Mapping[str, MapValue],
                max_memory: Mapping[int | str, int | str] | None) -> dict[str, torch.device]:
    """The map transformers loads the model in `folder` by (`bridge.placement.module_map`), from ours: checked
    against this machine (each device present, computing in `dtype`, with room for what it gets) before any weight
    is read."""
    from .bridge.placement import generic_placement, module_map
    from .loading.budget import available_memory

    if max_memory is not None:
        check_budget(max_memory)
    meta = _meta_model(folder)
    placement = generic_placement(meta, device_map, dtype, max_memory)
    devices = set(placement.values())
    check_dtype(dtype, devices)
    hf_map = module_map(meta, placement)
    for device in devices:
        free = free_memory(device) if device.type != "cpu" else available_memory()
        if free is None:
            continue
        held = {id(t): t for name, d in hf_map.items() if d == device
                for t in _tensors(meta, name)}  # a tied matrix once
        need = sum(t.numel() for t in held.values()) * dtype.itemsize
        if need > free:
            raise CheckpointError(f"the parts of the model in {folder} mapped to {device} need {need / 2**30:.1f} GiB "
                                  f"in {str(dtype).removeprefix('torch.')}, but {device} has {free / 2**30:.1f} GiB "
                                  f"free; map fewer of them there, or use the device map 'auto'")
    return hf_map


def _tensors(model: nn.Module, name: str) -> list[Tensor]:
    """The parameters of the module or the parameter `name` of `model`."""
    try:
        return list(model.get_submodule(name).parameters())
    except AttributeError:
        return [t for key, t in model.named_parameters() if key == name]


def _meta_model(folder: Path) -> nn.Module:
    """The model in `folder` built from its config on the meta device (no weight read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        cfg = AutoConfig.from_pretrained(folder, trust_remote_code=False)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg, trust_remote_code=False)
    except Exception as e:  # transformers and huggingface_hub check a config with exceptions of many kinds
        first = (str(e).strip().splitlines() or [type(e).__name__])[-1].strip()
        raise CheckpointError(f"{folder / 'config.json'} is not a config transformers can build a model from: "
                              f"{first}") from None


class GenericModel(TextModel):
    """A decoder that runs through transformers' own modules (`hf`, a `*ForCausalLM`), recorded by the bridge:
    `trace`, `next_token`, `generate` as for the families with code of our own; the values are transformers'."""

    def __init__(self, hf: nn.Module, tokenizer: TextTokenizer, name: str, source: str = "local",
                 folder: Path | None = None, file_dtype: str | None = None, *,
                 trace_budget: int | None = None) -> None:
        """`trace_budget`: the most bytes one trace may hold (None: half the memory available when it is asked
        for); a longer text is refused before its pass (`trace_ids`)."""
        from .bridge import find_mechanisms, record
        from .bridge.mechanisms import with_mlp_mechanisms
        from .bridge.per_layer_lens import find_per_layer_inputs
        from .bridge.post_norm_lens import find_post_norms

        vocab = int(hf.config.get_text_config().vocab_size)
        if tokenizer.vocab_size > vocab:
            raise CheckpointError(f"tokenizer has {tokenizer.vocab_size} tokens but the model only {vocab}")
        self.hf = hf.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.folder = folder
        self.file_dtype = file_dtype
        self.trace_budget = trace_budget
        probe = record(self.hf, [0, min(1, vocab - 1)])  # what each layer records
        windows = [k.window for k in probe.layers]
        self._mechanisms = find_mechanisms(self.hf)  # the layers whose module our own code explains
        for i, lens in find_post_norms(self.hf, probe.values).items():  # a norm after each sublayer (OLMo 2, 3)
            self._mechanisms.setdefault(i, lens)
        self._mechanisms = with_mlp_mechanisms(self.hf, self._mechanisms)  # a mixture of experts (bridge/moe_lens.py)
        self._outside_lens = find_per_layer_inputs(self.hf)  # the stages outside the layers it explains
        self._config = generic_config(self.hf, probe.values, windows, [k.kinds for k in probe.layers],
                                      self._mechanisms)
        self._keep_logits = "logits_to_keep" in inspect.signature(type(self.hf).forward).parameters
        self._leave_out = self._derivable(probe, [0, min(1, vocab - 1)])
        # the bytes a trace holds at 2, 3 and 4 tokens: a polynomial of degree 2 in the tokens ((H, T, T) patterns)
        self._trace_bytes_at = [self._recorded_bytes([min(i, vocab - 1) for i in range(n)]) for n in (2, 3, 4)]

    @classmethod
    def from_resolved(cls, r: ResolvedModel, dtype: str | torch.dtype | None = None, *,
                      device: str | torch.device | None = None, device_map: str | Mapping[str, MapValue] | None = None,
                      max_memory: Mapping[int | str, int | str] | None = None) -> GenericModel:
        """The transformers decoder in folder `r`, on `device` (default the CPU), or placed by `device_map` as the
        families of our own are (`engine.load_model`): "auto" (accelerate's map, within `max_memory` per device; a
        budget alone means "auto") or a map of our parts (embed, blocks.L, ln_final, unembed; prefixes allowed),
        each part whole on one device and computing there (`bridge.placement`)."""
        from .bridge import load_decoder

        if max_memory is not None and device_map is None:
            device_map = "auto"  # a budget per device means a map made within it
        if device is not None and device_map is not None:
            raise InputError(f"a device ({device}) and a device map contradict each other: the map says where each "
                             f"block runs; give one of them")
        dt = resolve_dtype(dtype)
        _check_safetensors(r.folder)
        if device_map is None:
            target = resolve_device(device or "cpu")
            check_dtype(dt, {target})
            _check_memory(r.folder, dt)
            hf = load_decoder(r.folder, dt).to(target)
        else:
            hf = load_decoder(r.folder, dt, _module_map(r.folder, dt, device_map, max_memory))
        return cls(hf, TextTokenizer.from_folder(r.folder, True), r.name, r.source, r.folder, stored_dtype(r.folder))

    # -- what it is ------------------------------------------------------------------------------------

    @property
    def config(self) -> GenericConfig:
        return self._config

    @property
    def runs(self) -> str:
        return TRANSFORMERS

    @property
    def device(self) -> torch.device:
        return self.hf.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.hf.get_input_embeddings().weight.dtype

    @property
    def device_map(self) -> DeviceMap:
        """The device of each part: the embedding, each decoder layer, the final norm, the unembedding."""
        from .bridge.placement import current_placement

        return current_placement(self.hf)

    def describe_devices(self) -> str:
        """Where the model runs, in words: "cpu", "cuda:0 (NVIDIA H200, 139.7 GiB)", or its device map."""
        placement = self.device_map
        if len(set(placement.values())) == 1:
            return describe_device(self.device)
        return describe_map(placement)

    @cached_property
    def n_params(self) -> int:
        """Its parameters, a tied matrix once."""
        return sum(p.numel() for p in {id(p): p for p in self.hf.parameters()}.values())

    def __repr__(self) -> str:
        c = self.config
        kv = f" ({c.n_kv_heads} key/value)" if c.n_kv_heads != c.n_head else ""
        other = sorted({k for layer in c.layers for k in layer.kinds} - {ATTENTION})
        mixers = f", {len(c.attention_layers)} attention layers and {', '.join(other)}" if other else ""
        return (f"GenericModel({self.name!r}, {c.model_type} through transformers ({c.architecture}), {c.n_layer} "
                f"layers{mixers}, {c.n_head} heads{kv}, d_model {c.n_embd}, {self.n_params / 1e6:.1f}M parameters, "
                f"{str(self.dtype).removeprefix('torch.')})")

    # -- tracing ---------------------------------------------------------------------------------------

    @torch.inference_mode()
    def trace_ids(self, ids: list[int], *, memory: Memory | None = None, **options: Any) -> Trace:
        """Every value the bridge records of transformers' forward over `ids`, by name. A trace of this model is
        recorded whole (`memory` asks nothing of it); it is not continued from a cache. `patches` ({name: fn}, as
        `bridge.record` takes them: blocks.L.resid_pre, attn_out, attn.z, mlp_out, resid_post) replace values as
        they are computed: the trace of an intervention. What derives exactly from what it keeps is derived on access
        instead (`memo.values`), where a probe shows the same numbers (`_derivable`): each attention layer's masked
        scores (`applied_scores`, the recording's own arithmetic) and z (`attention_z`, eager's product of the
        pattern and the values), resid_mid where it is resid_pre + attn_out, and every position's logits but the
        last (the forward computes the last position's alone; the others by `bridge.residual_logits` on the last
        layer's output). A text whose trace would hold more than `trace_budget` is refused before the pass
        (`trace_bytes`; code text_too_long, with the tokens that fit)."""
        from .bridge import record

        if options.get("cache") is not None:
            raise InputError(f"{self.name} runs through transformers' own modules: its traces are recorded whole, "
                             "without a KV cache")
        self._check_ids(ids)
        self._check_trace_fits(len(ids))
        rec = record(self.hf, ids, patches=options.get("patches"), leave_out=self._leave_out)
        values = dict(rec.values)
        return Trace(model_name=self.name, config=self.config, text=self.tokenizer.decode(ids), token_ids=list(ids),
                     tokens=self.tokenizer.token_texts(ids),
                     memory=TraceValues(config=self.config, token_ids=list(ids), start=0, kept=values,
                                        last_logits=rec.last_logits, scales=dict(rec.scales), sums=dict(rec.sums),
                                        head=None if "logits" in values else self._head,
                                        mechanisms=self._mechanisms, outside_lens=self._outside_lens))

    def _head(self, x: Tensor) -> Tensor:
        """The logits (T, V) of a last residual stream x (T, D), by the model's own code (`bridge.residual_logits`):
        how a trace derives every position's logits, which its pass does not compute."""
        from .bridge import residual_logits

        return residual_logits(self.hf, x)

    def _derivable(self, probe: Any, ids: list[int]) -> frozenset[str]:
        """What a trace derives on access rather than keeping (`bridge.record`'s leave_out), checked on a probe:
        each attention layer's masked scores and z, and resid_mid, where the values derived equal the whole
        recording's bit for bit; and every position's logits where the forward run for the last position's alone
        (`logits_to_keep=1`) records the same values as the whole one (Gemma 4's does not: it runs its KV-sharing
        layers on the last position only) and the model's own head gives the probe's logits from its last layer's
        output (`bridge.residual_logits`, to 1e-5 of their scale)."""
        from .bridge import record

        kinds = {"attn.masked_scores", "attn.z", "resid_mid"}
        lean = record(self.hf, ids, leave_out=kinds)
        derived = TraceValues(config=self.config, token_ids=ids, start=0, kept=dict(lean.values),
                              last_logits=lean.last_logits, scales=dict(lean.scales), sums=dict(lean.sums))
        for name, value in probe.values.items():
            stage = name.split(".", 2)[2] if layer_of(name) is not None else name
            if name not in lean.values and stage in kinds and not torch.equal(derived[name], value):
                kinds.discard(stage)
        ok = frozenset(kinds)
        whole = record(self.hf, ids, leave_out={"logits"}).values
        if "logits" in whole:  # the forward computes every position's logits anyway: they are kept
            return ok
        for name, value in probe.values.items():
            if name != "logits" and not (name in whole and whole[name].shape == value.shape and
                                         torch.equal(whole[name], value)):
                return ok
        last = probe.values[block_name(self.config.n_layer - 1, "resid_post")]
        try:
            lens = self._head(last)
        except InputError:  # no final norm the bridge finds, or something between it and the last layer
            return ok
        logits = probe.values["logits"]
        same = lens.shape == logits.shape and bool((lens - logits).abs().max() <= 1e-5 * max(1.0, float(
            logits.abs().max())))
        return ok | {"logits"} if same else ok

    def _recorded_bytes(self, ids: list[int]) -> int:
        from .bridge import record

        rec = record(self.hf, ids, leave_out=self._leave_out)
        return TraceValues(config=self.config, token_ids=ids, start=0, kept=dict(rec.values),
                           last_logits=rec.last_logits).nbytes()

    def trace_bytes(self, n_tokens: int) -> int:
        """The bytes a trace of `n_tokens` tokens holds (each layer's queries, keys, values, pattern, z and
        residual stream, ...): exact, from the traces of 2, 3 and 4 tokens, as it grows with the tokens squared."""
        f2, f3, f4 = self._trace_bytes_at
        return f2 + (n_tokens - 2) * (f3 - f2) + (n_tokens - 2) * (n_tokens - 3) // 2 * (f4 - 2 * f3 + f2)

    def _check_trace_fits(self, n_tokens: int) -> None:
        """Refuse, before the pass, a text whose trace would hold more than the budget (`trace_budget`)."""
        from .loading.budget import available_memory

        budget = self.trace_budget
        if budget is None:
            have = available_memory()
            budget = None if have is None else have // 2
        if budget is None or self.trace_bytes(n_tokens) <= budget:
            return
        lo, hi = 0, n_tokens  # the most tokens that fit: trace_bytes grows with the tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.trace_bytes(mid) <= budget else (lo, mid - 1)
        raise InputError(f"{n_tokens} tokens would make a trace of {self.trace_bytes(n_tokens) / 1e9:.2f} GB (it "
                         "keeps every layer's values, each attention layer's weights of heads x tokens x tokens among "
                         f"them), more than the {budget / 1e9:.2f} GB a trace of {self.name} may hold: at most {lo} "
                         "tokens fit, so shorten the text",
                         code="text_too_long", tokens=n_tokens, limit=lo, context=self.context_length)

    def extend_trace(self, prefix: Trace, new_ids: list[int], *, memory: Memory | None = None) -> Trace:
        """The trace of `prefix`'s tokens and `new_ids`, recorded whole."""
        return self.trace_ids([*prefix.token_ids, *new_ids], memory=memory)

    # -- prediction ------------------------------------------------------------------------------------

    def _input(self, ids: list[int]) -> Tensor:
        return torch.tensor([ids], device=self.device)

    @torch.inference_mode()
    def last_logits(self, ids: list[int]) -> Tensor:
        self._check_ids(ids)
        extra = {"logits_to_keep": 1} if self._keep_logits else {}
        return self.hf(input_ids=self._input(ids), use_cache=False, **extra).logits[0, -1]

    def _start_decoding(self, ids: list[int], capacity: int) -> tuple[Tensor, Callable[[int], Tensor]]:
        """The prompt's last logits, then one position a step with transformers' own cache (it grows as it needs:
        `capacity` is not needed)."""
        out = self.hf(input_ids=self._input(ids), use_cache=True)
        cache = out.cache

        def step(tid: int) -> Tensor:
            nonlocal cache
            out = self.hf(input_ids=self._input([tid]), cache=cache, use_cache=True)
            cache = out.cache
            return out.logits[0, -1]

        return out.logits[0, -1], step

    def weight(self, name: str) -> Tensor:
        raise InputError(f"{self.name} runs through transformers' own modules: its weights keep transformers' names "
                         "and are not named here (the families with code of our own name every weight)")

    def weight_names(self) -> list[str]:
        """None: the weights of a model that runs through transformers are not named here (`weight`)."""
        return []

    # -- the analyses: the logit lens, attribution, patching ---------------------------------------------

    def residual_logits(self, x: Tensor) -> Tensor:
        """The logits (T, V) the model would give were the residual stream `x` (T, D) its last layer's output:
        its own final norm and head (whatever it does after the unembedding), through the bridge (the logit
        lens)."""
        from .bridge import residual_logits

        return residual_logits(self.hf, x)

    def features(self, text_or_trace: str | Trace, hook: str | None = None, *,
                 sae: SparseAutoencoder | str | Path | None = None) -> TextFeatures:
        """The features of a text (or of a trace's text) at `hook`, as `ExplainerModel.features`: the activation the
        trace recorded there (in our names, whatever the layer's modules), encoded by a sparse autoencoder."""
        trace = text_or_trace if isinstance(text_or_trace, Trace) else self.trace(text_or_trace)
        return text_features(self, trace, hook, sae)

    def attribute(self, text_or_trace: str | Trace, target: TokenLike | None = None, versus: TokenLike | None = None,
                  *, position: int | None = None) -> Attribution:
        """Direct logit attribution, as `ExplainerModel.attribute`: the logit of `target` at `position` (with
        `versus`, the difference) as the sum of what the embedding, each layer's token mixer (per head where its
        write is its attention's output projection of z) and each MLP wrote, with the final norm's scale frozen
        from the forward pass (`attribution.generic_logit_attribution` says how, and what it refuses)."""
        trace = text_or_trace if isinstance(text_or_trace, Trace) else self.trace(text_or_trace)
        t = None if target is None else self.token_id(target)
        v = None if versus is None else self.token_id(versus)
        return generic_logit_attribution(self, trace, t, v, position=position)

    def patch(self, clean: str | Sequence[int], corrupted: str | Sequence[int], answer: TokenLike, wrong: TokenLike,
              what: Sequence[Kind] = KINDS, *, batch_tokens: int = 2048,
              progress: Callable[[int, int], None] | None = None,
              cancelled: Callable[[], bool] | None = None) -> Patching:
        """Activation patching, as `ExplainerModel.patch` (the same grids, metric and normalisation), each patched
        run a forward of transformers' modules with one bridge patch (`patching.generic_activation_patching`):
        a cell the model does not compute (attn_out and heads of a layer without attention, mlp_out of a layer
        without an MLP) is NaN. `batch_tokens` is accepted for the same signature; the runs go one at a time."""
        kinds, c_ids, x_ids, a, w = self.patch_inputs(clean, corrupted, answer, wrong, what)
        clean_trace = self.trace_ids(c_ids)
        x_logits = self.last_logits(x_ids)
        m_clean = float(clean_trace.next_token_logits()[a]) - float(clean_trace.next_token_logits()[w])
        m_corr = float(x_logits[a]) - float(x_logits[w])
        if abs(m_clean - m_corr) < 1e-6 * max(1.0, abs(m_clean)):
            raise InputError(f"the two prompts give the same logit difference ({m_clean:.4g}): with nothing to "
                             "recover, the normalised metric is undefined; choose tokens whose difference changes")
        grids, raw = generic_activation_patching(self.hf, self.config, clean_trace, x_ids, m_clean, m_corr, a, w,
                                                 kinds, progress=progress, cancelled=cancelled)
        texts = self.tokenizer.token_texts
        return Patching(clean_tokens=texts(c_ids), corrupted_tokens=texts(x_ids), answer=a,
                        answer_text=self.tokenizer.token_text(a), wrong=w, wrong_text=self.tokenizer.token_text(w),
                        clean=m_clean, corrupted=m_corr, grids=grids, raw=raw)
