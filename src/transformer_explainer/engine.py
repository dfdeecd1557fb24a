"""One loaded model with its tokenizer: trace a text, predict and generate. The engine behind the
Python API, the CLI and the web app."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

from .allocator import keep_freed_memory
from .attribution import Attribution, direct_logit_attribution
from .config import DecoderConfig
from .devices import check_dtype, describe_device, free_memory, resolve_device
from .errors import CheckpointError, InputError
from .features.encode import TextFeatures, text_features
from .features.sae import SparseAutoencoder
from .generic import TRANSFORMERS, GenericModel, which_way
from .loading.checkpoint import load_decoder, resolve_dtype, stored_dtype
from .loading.resolve import ResolvedModel, resolve
from .loading.tokenizer import TextTokenizer
from .memo.plan import Memory, PassMemory
from .memo.recipes import KV_LAST, CachedKV, Past, PrefixCache, kv_of
from .models.decode import DecodeStep
from .models.decoder import Decoder
from .models.kv_cache import KVCache
from .models.placement import (
    DeviceMap,
    MapValue,
    check_budget,
    current_map,
    describe_map,
    infer_device_map,
    place_,
    resolve_map,
)
from .models.recorder import Patch, Recorder
from .patching import KINDS, Kind, Patching, activation_patching
from .text_model import TextModel, TokenLike
from .trace import Trace, merge_traces

log = logging.getLogger(__name__)

class ExplainerModel(TextModel):
    """A model of any supported family (GPT-2, Llama, Qwen2, Mistral, Qwen3, Gemma 3, Mixtral, Qwen3-MoE, OLMoE)
    ready to explain: `trace`, `next_token`, `generate`, `weight`. `net` is the network (a `models.decoder.Decoder`)."""

    def __init__(self, net: Decoder, tokenizer: TextTokenizer, name: str, source: str = "local",
                 folder: Path | None = None, file_dtype: str | None = None) -> None:
        if tokenizer.vocab_size > net.config.vocab_size:
            raise CheckpointError(
                f"tokenizer has {tokenizer.vocab_size} tokens but the model only {net.config.vocab_size}"
            )
        self.net = net.eval().inference_layout_()
        keep_freed_memory()  # a trace's intermediates reuse freed pages instead of faulting in new ones
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.folder = folder
        # the type the checkpoint's file stores its weights in (None when unknown); `dtype` is what they are now
        self.file_dtype = file_dtype

    @classmethod
    def from_resolved(cls, r: ResolvedModel, dtype: str | torch.dtype | None = None, *,
                      device: str | torch.device | None = None, device_map: str | Mapping[str, MapValue] | None = None,
                      max_memory: Mapping[int | str, int | str] | None = None) -> ExplainerModel:
        """The model in folder `r`, on `device` (default the CPU), or placed by `device_map` (see `load_model`)."""
        if max_memory is not None and device_map is None:
            device_map = "auto"  # a budget per device means a map made within it
        if device is not None and device_map is not None:
            raise InputError(f"a device ({device}) and a device map contradict each other: the map says where each "
                             f"block runs; give one of them")
        target = resolve_device(device or "cpu") if device_map is None else None  # a device not here costs no load
        if target is not None:
            check_dtype(resolve_dtype(dtype), {target})
        if max_memory is not None:
            check_budget(max_memory)
        net = load_decoder(r.folder, dtype)
        model = cls(net, TextTokenizer.from_folder(r.folder, net.config.declaration.special_tokens), r.name, r.source,
                    r.folder, stored_dtype(r.folder))
        if device_map is None:
            assert target is not None
            placement = dict.fromkeys(current_map(net), target)
        elif device_map == "auto":
            placement = resolve_map(net, infer_device_map(net, model.dtype, max_memory))
        elif isinstance(device_map, str):
            raise InputError(f"device map {device_map!r}: use 'auto' or a mapping of parts to devices")
        else:
            placement = resolve_map(net, device_map)
        model.place(placement)
        return model

    def place(self, device_map: DeviceMap) -> ExplainerModel:
        """Move the model's parts to the devices of `device_map` (every part named, see `models.placement`),
        after checking that each GPU has room for what it gets and computes in this dtype."""
        check_dtype(self.dtype, set(device_map.values()))
        for device in set(device_map.values()):
            free = free_memory(device)
            if free is None:
                continue
            params = {id(t): t for p, d in device_map.items() if d == device
                      for t in self.net.get_submodule(p).parameters()}  # a tied matrix once
            need = sum(t.numel() * self.dtype.itemsize for t in params.values())
            if need > free:
                raise CheckpointError(f"{self.name} needs {need / 2**30:.1f} GiB on {device} in "
                                      f"{str(self.dtype).removeprefix('torch.')}, but {device} has "
                                      f"{free / 2**30:.1f} GiB free; load it in bfloat16, or with the device map "
                                      f"'auto', which puts the blocks that do not fit on the CPU")
        place_(self.net, device_map)
        return self

    @property
    def device(self) -> torch.device:
        """Where the model reads its input: the token embedding's device (all of it, without a device map)."""
        return self.net.embed.weight.device

    @property
    def device_map(self) -> DeviceMap:
        """The device of each part: the embedding, each block, the final norm, the unembedding."""
        return current_map(self.net)

    def describe_devices(self) -> str:
        """Where the model runs, in words: "cpu", "cuda:0 (NVIDIA H200, 139.7 GiB)", or its device map."""
        placement = self.device_map
        if len(set(placement.values())) == 1:
            return describe_device(self.device)
        return describe_map(placement)

    @property
    def dtype(self) -> torch.dtype:
        """The weights' (and activations') dtype: float32, or bfloat16 when loaded so."""
        return self.net.unembed.weight.dtype

    @property
    def config(self) -> DecoderConfig:
        return self.net.config

    @property
    def context_length(self) -> int:
        return self.config.block_size

    def __repr__(self) -> str:
        c = self.config
        kv = f" ({c.n_kv_heads} key/value)" if c.n_kv_heads != c.n_head else ""
        experts = f", {c.n_experts} experts ({c.top_k} per token)" if c.n_experts is not None else ""
        active = f" ({self.net.num_active_params() / 1e6:.1f}M per token)" if c.n_experts is not None else ""
        return (f"ExplainerModel({self.name!r}, {c.model_type}, {c.n_layer} layers, {c.n_head} heads{kv}, "
                f"d_model {c.n_embd}{experts}, {self.net.num_params() / 1e6:.1f}M parameters{active}, "
                f"{str(self.dtype).removeprefix('torch.')})")

    # -- tracing -----------------------------------------------------------------------------------

    @torch.inference_mode()
    def trace_ids(self, ids: list[int], *, cache: KVCache | None = None, patches: dict[str, Patch] | None = None,
                  memory: Memory | None = None) -> Trace:
        """Trace token ids. With a `cache` holding ids already (`KVCache.ids`: those a trace over it ran), only the
        new positions are computed and traced (their attention still covers the whole prefix); the cache is
        extended. The trace's text is the ids decoded (`trace` keeps the text it was given).

        `patches` maps activation names to functions that replace the value as it is computed (with
        the batch dimension, e.g. (1, H, T, Dh) for `blocks.3.attn.z`): the trace of an intervention.
        A patch must depend on its value alone: a block's internals are computed again, patches and all, when
        they are first read. `memory`: what the pass keeps beyond each block's input, and where (`memo.Memory`;
        `memo.EAGER` keeps every intermediate).
        """
        past = None
        if cache is not None and cache.length:  # views of the cache's buffers, which later steps only extend
            past = CachedKV(tuple((k[0], v[0]) for k, v in cache.layers))
        return self._trace(ids, cache, patches, past, memory or Memory())

    def _trace(self, ids: list[int], cache: KVCache | None, patches: dict[str, Patch] | None, past: Past | None,
               memory: Memory) -> Trace:
        self._check_ids(ids, cache)
        prefix = [] if cache is None else list(cache.ids)
        start = len(prefix)
        if cache is not None and cache.length != start:
            raise InputError(f"the KV cache holds {cache.length} positions but the ids of {start}: trace into it "
                             f"from its first position, so that it knows the ids it holds")
        plan = PassMemory(self.net, memory, patches, past, start)
        rec = plan.recorder()
        last = self.net(self._input(ids), cache=cache, rec=rec, logits_for="last")[0, -1]
        if cache is not None:  # a new list: the one it held may be a trace's own (`KVCache(ids=trace.token_ids)`)
            cache.ids = [*cache.ids, *ids]
        return Trace(model_name=self.name, config=self.config, text=self.tokenizer.decode(prefix + ids),
                     token_ids=list(ids), tokens=self.tokenizer.token_texts(ids),
                     memory=plan.values(rec, ids, self.net.weight("unembed.W_U"), last), start=start,
                     prefix_ids=prefix)

    def _input(self, ids: list[int]) -> Tensor:
        """Token ids (1, T) on the device the model reads them on."""
        return torch.tensor([ids], device=self.device)

    # -- prediction --------------------------------------------------------------------------------

    def _start_decoding(self, ids: list[int], capacity: int) -> tuple[Tensor, Callable[[int], Tensor]]:
        """The prompt's last logits through our own decoder, filling a KV cache of `capacity` positions (no regrowth
        while generating), then one position a step (`DecodeStep`: the same numbers as the decoder on that position,
        with less Python)."""
        cache = KVCache(capacity=capacity)
        logits = self.net(self._input(ids), cache=cache, logits_for="last")[0, -1]
        return logits, DecodeStep(self.net, cache)

    # -- why this token ------------------------------------------------------------------------------

    def features(self, text_or_trace: str | Trace, hook: str | None = None, *,
                 sae: SparseAutoencoder | str | Path | None = None) -> TextFeatures:
        """The features of a text (or of a trace's text) at `hook` (TransformerLens's spelling,
        `blocks.3.hook_resid_post`): the activation the trace recorded there, encoded by a sparse autoencoder, per
        position the active features by decreasing activation, with the reconstruction and its error
        (`features.encode.TextFeatures`: `error` is x - decode(f), so the two add up to the activation). `sae`: an
        autoencoder, or a folder / `hf:owner/repo/folder` in SAELens's format; default: the one the model ships at
        `hook`, or at its middle depth."""
        trace = text_or_trace if isinstance(text_or_trace, Trace) else self.trace(text_or_trace)
        return text_features(self, trace, hook, sae)

    def attribute(self, text_or_trace: str | Trace, target: TokenLike | None = None, versus: TokenLike | None = None,
                  *, position: int | None = None) -> Attribution:
        """Direct logit attribution: the logit of `target` at `position` (default: the last; `target` defaults
        to the token that came next there, or the top prediction at the last) as the sum of what each
        embedding, head, output bias and MLP wrote, with the final norm's scale from the forward pass. With
        `versus`, the logit difference target - versus. From the trace alone: no extra forward pass."""
        trace = text_or_trace if isinstance(text_or_trace, Trace) else self.trace(text_or_trace)
        t = None if target is None else self.token_id(target)
        v = None if versus is None else self.token_id(versus)
        return direct_logit_attribution(self.net, self.tokenizer, trace, t, v, position=position)

    def patch(self, clean: str | Sequence[int], corrupted: str | Sequence[int], answer: TokenLike, wrong: TokenLike,
              what: Sequence[Kind] = KINDS, *, batch_tokens: int = 2048,
              progress: Callable[[int, int], None] | None = None,
              cancelled: Callable[[], bool] | None = None) -> Patching:
        """Activation patching: each activation of `what` ("resid_pre", "attn_out", "mlp_out": per layer and
        position; "heads": each head's z over all positions) from the clean run into the corrupted one, one
        cell at a time; the logit difference answer - wrong normalised so that 0 is the corrupted run and 1
        the clean one. The prompts (texts or ids) must have the same number of tokens. `progress(done, total)`
        is told after each batch of patched runs, and `cancelled()` asked before each (it raises
        `patching.Cancelled`)."""
        kinds, c_ids, x_ids, a, w = self.patch_inputs(clean, corrupted, answer, wrong, what)
        with torch.inference_mode():
            clean_trace = self.trace_ids(c_ids)
            x_logits = self.last_logits(x_ids)
        # differences of the float32 logits in float64 (Python's floats: exact, and on any device)
        m_clean = float(clean_trace.next_token_logits()[a]) - float(clean_trace.next_token_logits()[w])
        m_corr = float(x_logits[a]) - float(x_logits[w])
        if abs(m_clean - m_corr) < 1e-6 * max(1.0, abs(m_clean)):
            raise InputError(f"the two prompts give the same logit difference ({m_clean:.4g}): with nothing to "
                             "recover, the normalised metric is undefined; choose tokens whose difference changes")
        grids, raw = activation_patching(self.net, clean_trace, x_ids, m_corr, a, w, kinds,
                                         batch_tokens=batch_tokens, progress=progress, cancelled=cancelled)
        texts = self.tokenizer.token_texts
        return Patching(clean_tokens=texts(c_ids), corrupted_tokens=texts(x_ids), answer=a,
                        answer_text=self.tokenizer.token_text(a), wrong=w, wrong_text=self.tokenizer.token_text(w),
                        clean=m_clean, corrupted=m_corr, grids=grids, raw=raw)

    def weight(self, name: str) -> Tensor:
        """A weight matrix by name, e.g. `blocks.0.attn.W_Q` (heads, d_model, head_dim)."""
        return self.net.weight(name)

    def weight_names(self) -> list[str]:
        """Every weight name this model answers (its family's, biases only where it has them)."""
        return self.net.weight_names()

    @torch.inference_mode()
    def last_logits(self, ids: list[int]) -> Tensor:
        """The next-token logits (V,) after `ids`, recording nothing (the fast path)."""
        self._check_ids(ids, None)
        return self.net(self._input(ids), logits_for="last")[0, -1]

    @torch.inference_mode()
    def extend_trace(self, prefix: Trace, new_ids: list[int], *, memory: Memory | None = None) -> Trace:
        """The trace of `prefix`'s tokens + `new_ids`, computing only the new positions: the prefix's
        keys and values are the KV cache (kept in the trace, or its blocks run again for them). Equal to
        tracing the whole sequence, to float rounding. `memory` as for `trace_ids` (the new positions' values
        observed; a `RowSummary` the prefix kept too is joined to the prefix's rows); a trace continued keeps what
        its beginning kept: every intermediate when that one was recorded eagerly (`memory.eager` aside)."""
        values = prefix.memory
        kept = values.kv  # read once: a server may drop it meanwhile
        if kept is not None:
            cache: KVCache = KVCache.with_room([(k[None], v[None]) for k, v in kept], len(new_ids))
        else:  # each block run again as far as its keys and values
            cache = PrefixCache(prefix.n_tokens, lambda i: kv_of(values.block_until(i, KV_LAST), i, self.net))
        cache.ids = list(prefix.token_ids)
        memory = replace(memory or Memory(), eager=values.blocks is None)
        return merge_traces(prefix, self._trace(new_ids, cache, None, values.blocks, memory))

    def residual_logits(self, x: Tensor) -> Tensor:
        """The logits (T, V) the model would give were the residual stream `x` (T, D) its last: the
        final norm and the unembedding, with the forward pass's own kernels (the logit lens)."""
        ln, unembed = self.net.ln_final, self.net.unembed
        normed = ln(x.unsqueeze(0).to(ln.weight.device), Recorder())
        return unembed(normed.to(unembed.weight.device))[0]


def open_resolved(r: ResolvedModel, dtype: str | torch.dtype | None = None, *,
                  device: str | torch.device | None = None, device_map: str | Mapping[str, MapValue] | None = None,
                  max_memory: Mapping[int | str, int | str] | None = None) -> ExplainerModel | GenericModel:
    """The model in folder `r`, the way its checkpoint runs (`generic.which_way`): with our code where its family
    has code of our own, else through transformers' own modules; options as for `load_model`."""
    if which_way(r.folder) == TRANSFORMERS:
        return GenericModel.from_resolved(r, dtype, device=device, device_map=device_map, max_memory=max_memory)
    return ExplainerModel.from_resolved(r, dtype, device=device, device_map=device_map, max_memory=max_memory)


def load_model(spec: str | None = None, *, allow_download: bool = True, dtype: str | torch.dtype | None = None,
               device: str | torch.device | None = None, device_map: str | Mapping[str, MapValue] | None = None,
               max_memory: Mapping[int | str, int | str] | None = None) -> ExplainerModel | GenericModel:
    """Load a decoder: a family with code of our own (GPT-2, Llama, Qwen2, Mistral, Qwen3, Gemma 3, Mixtral,
    Qwen3-MoE, OLMoE; every intermediate named), or any other decoder-only language model transformers implements
    (through transformers' own modules: `generic.GenericModel`; its repr and `runs` say which way it runs).

    `spec`: a built-in model name, a local HF-format folder, a hub id ("gpt2", "gpt2-medium",
    "distilgpt2", "HuggingFaceTB/SmolLM2-135M", "owner/repo"), or None for the default (cached GPT-2
    small, else the built-in model). `dtype`: "float32" (default) or "bfloat16", which keeps weights and
    activations in bfloat16 (half the memory: a 1.5 B model needs about 3 GB); on a GPU also "float16".
    `device`: "cpu" (the default), "cuda", "cuda:N", "mps", or "auto" (a GPU if there is one). Traces, KV caches
    and analyses keep their tensors there; `.cpu()` what you read.
    `device_map`: "auto" places a model larger than one GPU with accelerate (whole blocks, the GPUs first, the
    rest on the CPU), within `max_memory` per device if given ({0: "20GiB", "cpu": "64GiB"}; a budget alone
    implies "auto"); or a mapping of parts to devices ({"embed": 0, "blocks.0": 0, ..., "": "cpu"}, see
    `models.placement`). Each block then computes where its weights are, and a trace's values stay there.
    Naming a hub model that is not cached downloads it, unless `allow_download` is False; the default
    (None) never downloads. Which model was picked, and why, is logged at INFO.
    """
    resolved = resolve(spec, allow_download=allow_download)
    model = open_resolved(resolved, dtype, device=device, device_map=device_map, max_memory=max_memory)
    log.info("model %s: %r%s", resolved.describe(), model, f"; {resolved.reason}" if resolved.reason else "")
    return model
