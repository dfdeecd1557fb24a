"""The decoder: one composed block and one forward for every family (GPT-2, Llama, Qwen3, Gemma 3, Mixtral,
Qwen3-MoE, OLMoE). Which parts a block has (the norm's kind and placement, the position scheme, the attention's
options, the MLP's kind: dense or a mixture of experts) the family's declaration says (`config.arch`, from
`families/`); the parts are in `layers.py`.

Our parameter names follow the trace's (`blocks.3.ln1.weight` is the norm that records
`blocks.3.ln1.out`); each family's declaration maps them to its checkpoints' names, key for key. The weights
under TransformerLens's names (`blocks.3.attn.W_Q`, (H, D, Dh)) are read off the parameters by `weights.py`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from ..config import DecoderConfig
from ..families.hf import FULL, SLIDING
from ..names import block_part
from . import weights
from .kernels import Linear, inference_layout_
from .kv_cache import KV, KVCache, KVSlot
from .layers import (
    Attention,
    LayerNorm,
    MoeMLP,
    RMSNorm,
    Rotation,
    make_mlp,
    make_norm,
    record,
    rope_inv_freq,
    rotation,
)
from .recorder import Recorder, scope

__all__ = ["Block", "Decoder", "KVCache", "LogitsFor"]

LogitsFor = Literal["all", "last"]


class Block(nn.Module):
    """x + attention(norm(x)), then x + MLP(norm(x)). With sandwich norms (Gemma) each branch's output is
    normed again before it is added."""

    def __init__(self, config: DecoderConfig, layer: int) -> None:
        super().__init__()
        sandwich = config.arch.sandwich_norm
        self.ln1 = make_norm(config)
        self.attn = Attention(config, layer)
        self.ln1_post = make_norm(config) if sandwich else None
        self.ln2 = make_norm(config)
        self.mlp = make_mlp(config, layer)
        self.ln2_post = make_norm(config) if sandwich else None

    def forward(self, x: Tensor, rope: Rotation | None, rec: Recorder | None = None,
                past: KVSlot | None = None) -> tuple[Tensor, KV]:
        x = record(rec, "resid_pre", x)
        attn_out, present = self.attn(self.ln1(x, scope(rec, "ln1")), rope, scope(rec, "attn"), past)
        if self.ln1_post is not None:
            attn_out = self.ln1_post(record(rec, "attn.out", attn_out), scope(rec, "ln1_post"))
        x = record(rec, "resid_mid", x + record(rec, "attn_out", attn_out))
        mlp_out = self.mlp(self.ln2(x, scope(rec, "ln2")), scope(rec, "mlp"))
        if self.ln2_post is not None:
            mlp_out = self.ln2_post(record(rec, "mlp.out", mlp_out), scope(rec, "ln2_post"))
        return record(rec, "resid_post", x + record(rec, "mlp_out", mlp_out)), present


def device_of(module: nn.Module) -> torch.device:
    """The device of a module's weights (each part of a placed model has all of its own on one: `placement.py`)."""
    return next(module.parameters()).device


def _moved(x: Tensor, ropes: dict[torch.device, dict[str, Rotation]], device: torch.device
           ) -> tuple[Tensor, dict[str, Rotation]]:
    """The residual stream and the rotations on `device` (a block's): moved there once per device and call."""
    if device not in ropes:
        first = next(iter(ropes.values()))
        ropes[device] = {kind: (cos.to(device), sin.to(device)) for kind, (cos, sin) in first.items()}
    return x.to(device), ropes[device]


class Decoder(nn.Module):
    """Token embedding, the blocks, the final norm and the unembedding."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        a = config.arch
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_embed = nn.Embedding(config.block_size, config.n_embd) if a.positions == "learned" else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config, i) for i in range(config.n_layer)])
        self.ln_final = make_norm(config)
        self.unembed = Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.unembed.weight = self.embed.weight
        self.inv_freq = self._rotary_frequencies()  # derived from the config, not weights
        self.init_weights_()

    def _rotary_frequencies(self) -> dict[str, Tensor]:
        """The rotation frequencies (Dh/2,) of each kind of layer the model has (float32), for rotary families."""
        c = self.config
        if c.arch.positions != "rope":
            return {}
        assert c.head_dim is not None
        return {kind: rope_inv_freq(c.head_dim, *c.rope_of(kind)) for kind in (FULL, SLIDING)}

    def finish_loading_(self) -> None:
        """After a build on the meta device and `load_state_dict(assign=True)`: re-tie the unembedding to the
        embedding (assigning replaced it) and compute the rotary frequencies on the CPU."""
        if self.config.tie_word_embeddings:
            self.unembed.weight = self.embed.weight
        with torch.device("cpu"):
            self.inv_freq = self._rotary_frequencies()

    def init_weights_(self, std: float = 0.02) -> Decoder:
        """Fresh weights for training from scratch: N(0, std) for every matrix and embedding (HF's
        `initializer_range`), std / sqrt(2 n_layer) for the two projections that write into the residual
        stream (attention's o_proj, the MLP's down_proj; as GPT-2 does), zero biases, norm scales of one."""
        residual_std = std / math.sqrt(2 * self.config.n_layer)
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, LayerNorm | RMSNorm):  # scale one (Gemma's: 1 + 0), shift zero
                    nn.init.constant_(module.weight, 0.0 if getattr(module, "offset", False) else 1.0)
                    if isinstance(module, LayerNorm):
                        nn.init.zeros_(module.bias)
                elif isinstance(module, nn.Linear):
                    residual = name.endswith(("o_proj", "down_proj"))
                    nn.init.normal_(module.weight, mean=0.0, std=residual_std if residual else std)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
                elif isinstance(module, nn.Embedding):
                    nn.init.normal_(module.weight, mean=0.0, std=std)
        return self

    def inference_layout_(self) -> Decoder:
        """Projection matrices input-major in memory, for fast generation steps (`kernels.inference_layout_`)."""
        inference_layout_(self)
        return self

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def num_active_params(self) -> int:
        """The parameters one token's forward pass uses: all of them but, in each block with experts, the experts
        the token is not sent to (n_experts - top_k of them). Equal to `num_params` for a dense model."""
        unused = 0
        for block in self.blocks:
            if isinstance(block.mlp, MoeMLP):
                per_expert = sum(p.numel() for p in block.mlp.experts[0].parameters())
                unused += (len(block.mlp.experts) - block.mlp.top_k) * per_expert
        return self.num_params() - unused

    def num_expert_params(self) -> int:
        """The parameters of the experts of every block with experts (the router excluded); 0 for a dense model."""
        return sum(p.numel() for block in self.blocks if isinstance(block.mlp, MoeMLP)
                   for p in block.mlp.experts.parameters())

    @property
    def cached_keys(self) -> str:
        """The stage whose values the KV cache keeps as keys: as attention uses them (rotated, where it rotates)."""
        return "attn.rot_k" if self.config.arch.positions == "rope" else "attn.k"

    # -- forward -----------------------------------------------------------------------------------------

    def embed_tokens(self, idx: Tensor, start: int, rec: Recorder | None) -> Tensor:
        """The residual stream entering block 0: each token's row of W_E (plus its position's row of W_pos
        where positions are learned; times sqrt(d_model) where the family scales it)."""
        x = record(rec, "embed.token", self.embed(idx))  # (B, T, D)
        if self.pos_embed is not None:
            pos = self.pos_embed(torch.arange(start, start + idx.shape[1], device=idx.device))  # (T, D)
            x = x + (pos if rec is None else rec("embed.position", pos.expand_as(x)))
        if self.config.arch.embed_scale:  # Gemma: as transformers does, the factor in the weights' dtype (a CPU
            x = x * torch.tensor(self.config.n_embd**0.5, dtype=x.dtype, device="cpu")  # scalar: any device reads it)
        return self.drop(x) if self.training else x

    def rotations(self, B: int, start: int, T: int, dtype: torch.dtype, device: torch.device,
                  rec: Recorder | None) -> dict[str, Rotation]:
        """cos and sin of positions start..start+T-1 for each kind of layer (rotary families); the angles are
        recorded as `rope.angles` (and `rope.local_angles`, where the local layers have their own base)."""
        if not self.inv_freq:
            return {}
        angles, full = rotation(self.inv_freq[FULL], start, T, dtype, device)
        if rec is not None:
            rec("rope.angles", angles.expand(B, T, -1))
        if self.config.rope_local_theta is None:
            return {FULL: full, SLIDING: full}
        local_angles, local = rotation(self.inv_freq[SLIDING], start, T, dtype, device)
        if rec is not None:
            rec("rope.local_angles", local_angles.expand(B, T, -1))
        return {FULL: full, SLIDING: local}

    def forward_block(self, layer: int, x: Tensor, *, start: int = 0, rec: Recorder | None = None,
                      past: KVSlot | None = None) -> tuple[Tensor, KV]:
        """Block `layer` alone on `x` (B, T, D), the residual stream entering it at positions start..start+T-1,
        with the rotation `forward` gives that block: how a trace computes a block's internals again from its
        input (`memo/recipes.py`). `past`: the keys and values of the positions before `start`."""
        B, T, _ = x.shape
        rope = self.rotations(B, start, T, x.dtype, x.device, None)
        return self.blocks[layer](x, rope.get(self.config.layer_type(layer)), rec, past)

    def forward(self, idx: Tensor, *, cache: KVCache | None = None, rec: Recorder | None = None,
                logits_for: LogitsFor = "all", start_layer: int = 0, resid: Tensor | None = None) -> Tensor:
        """Logits for token ids `idx` (B, T).

        `cache`: keys/values of earlier positions; it is extended with this call's positions.
        `rec`: record every intermediate (explicit attention path). `logits_for="last"` runs the
        unembedding on the last position only, which is all that next-token prediction needs; with a
        recorder, the logits are then returned and not recorded (unless a patch edits them).
        `start_layer` with `resid` (B, T, D): run from block `start_layer` on, with `resid` as the residual
        stream entering it (activation patching starts at the patched block: the blocks before it would
        give the same values every time).
        Each part computes where its weights are (`placement.py`): the residual stream moves to each block's device.
        """
        B, T = idx.shape
        c = self.config
        start = cache.length if cache is not None else 0
        if start + T > c.block_size:
            raise ValueError(f"{start + T} positions exceed the model's context of {c.block_size}")
        if resid is None:
            if start_layer:
                raise ValueError("starting after block 0 needs the residual stream entering that block")
            x = self.embed_tokens(idx, start, rec)
        else:
            if not 0 <= start_layer < c.n_layer or resid.shape != (B, T, c.n_embd):
                raise ValueError(f"a start at block {start_layer} needs a residual stream of shape {(B, T, c.n_embd)}")
            x = resid
        ropes = {idx.device: self.rotations(B, start, T, x.dtype, idx.device, rec)}  # per device the blocks are on
        for i in range(start_layer, c.n_layer):
            block = self.blocks[i]
            x, rope = _moved(x, ropes, device_of(block))
            x, _ = block(x, rope.get(c.layer_type(i)), scope(rec, block_part(i)),
                         None if cache is None else cache.slot(i))
        if logits_for == "last" and rec is None:
            x = x[:, -1:, :]
        x = self.ln_final(x.to(device_of(self.ln_final)), scope(rec, "ln_final"))
        x = x.to(device_of(self.unembed))
        if rec is None:
            return self.unembed(x)
        if logits_for == "last" and not rec.wants("logits"):
            # recorded: the final norm at every position; the trace derives the logits of the other
            # positions from it when asked (for a short text the unembedding is a third of the work)
            return self.unembed(x[:, -1:, :])
        return rec("logits", self.unembed(x))

    # -- weights by name (`weights.py`) ------------------------------------------------------------------

    def weight_names(self) -> list[str]:
        """Every weight name this model has (biases only where it has them; the experts' in blocks with experts)."""
        return weights.weight_names(self)

    def weight(self, name: str) -> Tensor:
        """A parameter in TransformerLens layout, e.g. `blocks.3.attn.W_K` -> (G, D, Dh) (`weights.weight`)."""
        return weights.weight(self, name)

    def expert_weight(self, name: str, expert: int) -> Tensor:
        """One expert's matrix of a stacked expert weight, e.g. `blocks.3.mlp.experts.W_in`, 5 -> (D, M)."""
        return weights.expert_weight(self, name, expert)
