"""The Llama-family decoder (Llama, Qwen2, Mistral) in nanoGPT's style, under HF's parameter names
(`model.layers.N.self_attn.q_proj`, ...), so HF checkpoints load key for key.

What it changes from GPT-2: RMSNorm instead of LayerNorm (no mean, no shift); no position embedding:
queries and keys are rotated by position-dependent angles (RoPE) inside attention; grouped-query
attention (several query heads read one key/value head); a gated MLP, down(SiLU(gate(x)) * up(x)).

Numerics follow transformers' modeling_llama.py, so the numbers agree in float32 and in bfloat16:
RMSNorm and the rotation angles are computed in float32 and cast back; softmax runs in float32.
Like `layers.py`, each module has a fast path (fused attention, nothing kept) and a recorded path.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import DecoderConfig
from ..names import parse_name
from .gpt import KVCache, LogitsFor
from .kv_cache import KV, KVSlot
from .layers import DecoderBase, Linear, causal_mask, recorded_attention
from .recorder import Recorder, scope


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32 as transformers does."""

    def __init__(self, ndim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.eps = eps

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        dtype = x.dtype
        x32 = x.to(torch.float32)
        ms = x32.square().mean(dim=-1, keepdim=True)
        if rec is None:
            return self.weight * (x32 * torch.rsqrt(ms + self.eps)).to(dtype)
        rec("rms", torch.sqrt(ms + self.eps).squeeze(-1).to(dtype))
        normalized = rec("normalized", (x32 * torch.rsqrt(ms + self.eps)).to(dtype))
        return rec("out", self.weight * normalized)


def rope_inv_freq(config: DecoderConfig) -> Tensor:
    """The rotation frequency of each pair of a head's dimensions, theta^(-2i/Dh), with Llama 3.1's
    scaling when the config has it (transformers' `_compute_llama3_parameters`)."""
    dim = config.head_dim
    # on the default device: built under `torch.device("meta")` (loading), it costs nothing until
    # `finish_loading_` computes it for a config whose shapes the weight files have confirmed
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    inv_freq = 1.0 / (config.rope_theta**exponents)
    s = config.rope_scaling
    if s is None:
        return inv_freq
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor
                                                                                  - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: dimension i pairs with i + Dh/2."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each (i, i + Dh/2) pair of x (B, heads, T, Dh) by its position's angle."""
    return x * cos + rotate_half(x) * sin


class LlamaAttention(nn.Module):
    """Causal self-attention with rotary positions and grouped-query heads (n_head // n_kv_heads
    query heads share each key/value head; query head h reads key/value head h // group)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = config.n_head, config.n_kv_heads, config.head_dim
        D, Dh = config.n_embd, config.head_dim
        self.q_proj = Linear(D, self.n_head * Dh, bias=config.qkv_bias)
        self.k_proj = Linear(D, self.n_kv * Dh, bias=config.qkv_bias)
        self.v_proj = Linear(D, self.n_kv * Dh, bias=config.qkv_bias)
        self.o_proj = Linear(self.n_head * Dh, D, bias=config.out_bias)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], rec: Recorder | None = None,
                past: KVSlot | None = None) -> tuple[Tensor, KV]:
        B, T, _ = x.shape
        H, G, Dh = self.n_head, self.n_kv, self.head_dim
        q = self.q_proj(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).view(B, T, G, Dh).transpose(1, 2)  # (B, G, T, Dh)
        v = self.v_proj(x).view(B, T, G, Dh).transpose(1, 2)
        cos, sin = rope
        if rec is not None:
            q, k = rec("q", q), rec("k", k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if past is not None:
            k, v = past.extend(k, v)  # (B, G, S, Dh): the cached positions, then these
        S = k.shape[2]
        if rec is None:
            if S == T:
                z = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            elif T == 1:  # one new position after a cached prefix sees every key
                z = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            else:
                z = F.scaled_dot_product_attention(q, k, v, attn_mask=~causal_mask(T, S, x.device), enable_gqa=True)
        else:
            q, k, v = rec("rot_q", q), rec("rot_k", k), rec("v", v)
            z = recorded_attention(q, k, v, rec, softmax_in_float32=True)
        y = self.o_proj(z.transpose(1, 2).reshape(B, T, H * Dh))
        return y, (k, v)


class GatedMLP(nn.Module):
    """down(SiLU(gate(x)) * up(x)): the gate decides, per hidden unit, how much of `up` passes."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = Linear(config.n_embd, config.d_mlp, bias=config.mlp_bias)
        self.up_proj = Linear(config.n_embd, config.d_mlp, bias=config.mlp_bias)
        self.down_proj = Linear(config.d_mlp, config.n_embd, bias=config.mlp_bias)

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        if rec is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate = rec("gate", self.gate_proj(x))
        up = rec("up", self.up_proj(x))
        act = rec("act", F.silu(gate))
        return self.down_proj(rec("post", act * up))


class LlamaBlock(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.n_embd, config.layer_norm_epsilon)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.n_embd, config.layer_norm_epsilon)
        self.mlp = GatedMLP(config)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], rec: Recorder | None = None,
                past: KVSlot | None = None) -> tuple[Tensor, KV]:
        if rec is None:
            attn_out, present = self.self_attn(self.input_layernorm(x), rope, None, past)
            x = x + attn_out
            return x + self.mlp(self.post_attention_layernorm(x)), present
        x = rec("resid_pre", x)
        attn_out, present = self.self_attn(self.input_layernorm(x, rec.scope("ln1")), rope, rec.scope("attn"), past)
        resid_mid = rec("resid_mid", x + rec("attn_out", attn_out))
        normed = self.post_attention_layernorm(resid_mid, rec.scope("ln2"))
        mlp_out = rec("mlp_out", self.mlp(normed, rec.scope("mlp")))
        return rec("resid_post", resid_mid + mlp_out), present


class LlamaModel(nn.Module):
    """HF's `model.*` part: embeddings, blocks, final norm."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.n_embd)
        self.layers = nn.ModuleList([LlamaBlock(config) for _ in range(config.n_layer)])
        self.norm = RMSNorm(config.n_embd, config.layer_norm_epsilon)


class LlamaLM(DecoderBase):
    """A Llama / Qwen2 / Mistral causal LM with the same interface as `GPT` (forward, weight, ...)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        if config.family != "llama":
            raise ValueError(f"LlamaLM runs the Llama family, not {config.model_type!r}")
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.inv_freq = rope_inv_freq(config)  # (Dh/2,) float32; derived from the config, not a weight

    def finish_loading_(self) -> None:
        """After a build on the meta device and `load_state_dict(assign=True)`: re-tie lm_head to the
        embedding (assigning replaced it) and compute the rotary frequencies on the CPU."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        with torch.device("cpu"):
            self.inv_freq = rope_inv_freq(self.config)

    # the stage whose values the KV cache keeps as keys: rotated, as attention uses them
    cached_keys = "attn.rot_k"

    @property
    def final_norm(self) -> RMSNorm:
        """The norm between the last block and the unembedding (HF's `model.norm`)."""
        return self.model.norm

    def init_weights_(self, std: float = 0.02) -> LlamaLM:
        """Fresh weights for training from scratch: N(0, std) for every matrix (HF's
        `initializer_range`), std / sqrt(2 n_layer) for the two projections that write into the
        residual stream (o_proj, down_proj; as GPT-2 does), zero biases, RMSNorm scales of one."""
        residual_std = std / math.sqrt(2 * self.config.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    nn.init.ones_(p)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)
                elif name.endswith(("o_proj.weight", "down_proj.weight")):
                    nn.init.normal_(p, mean=0.0, std=residual_std)
                else:
                    nn.init.normal_(p, mean=0.0, std=std)
        return self

    def rope(self, start: int, T: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Angles (T, Dh/2) of positions start..start+T-1, and their cos and sin (T, Dh) in `dtype`."""
        pos = torch.arange(start, start + T, device=device, dtype=torch.float32)
        angles = pos[:, None] * self.inv_freq.to(device)[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        return angles, emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, idx: Tensor, *, cache: KVCache | None = None, rec: Recorder | None = None,
                logits_for: LogitsFor = "all") -> Tensor:
        """Logits for token ids `idx` (B, T); `cache`, `rec` and `logits_for` as in `GPT.forward`."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(f"{start + T} positions exceed the model's context of {self.config.block_size}")
        x = self.model.embed_tokens(idx)  # (B, T, D)
        angles, cos, sin = self.rope(start, T, x.dtype, idx.device)
        if rec is not None:
            x = rec("embed.token", x)
            rec("rope.angles", angles.expand(B, T, -1))
        for i, block in enumerate(self.model.layers):
            x, _ = block(x, (cos, sin), scope(rec, f"blocks.{i}"), None if cache is None else cache.slot(i))
        if logits_for == "last" and rec is None:
            x = x[:, -1:, :]
        x = self.model.norm(x, scope(rec, "ln_final"))
        if rec is None:
            return self.lm_head(x)
        if logits_for == "last" and not rec.wants("logits"):
            return self.lm_head(x[:, -1:, :])
        return rec("logits", self.lm_head(x))

    # -- weights by name ---------------------------------------------------------------------------

    def weight_names(self) -> list[str]:
        """Every weight name this model has (biases only where it has them)."""
        from ..names import weight_names

        c = self.config
        absent = {"attn.b_Q": not c.qkv_bias, "attn.b_K": not c.qkv_bias, "attn.b_V": not c.qkv_bias,
                  "attn.b_O": not c.out_bias, "mlp.b_gate": not c.mlp_bias, "mlp.b_in": not c.mlp_bias,
                  "mlp.b_out": not c.mlp_bias}
        skip = {s for s, no in absent.items() if no}
        return [n for n in weight_names(c.n_layer, "llama") if n.split(".", 2)[-1] not in skip]

    def weight(self, name: str) -> Tensor:
        """A parameter in TransformerLens layout, e.g. `blocks.3.attn.W_K` -> (G, D, Dh); views, detached."""
        cfg = self.config
        H, G, D, Dh = cfg.n_head, cfg.n_kv_heads, cfg.n_embd, cfg.head_dim
        p = parse_name(name, "llama")
        with torch.no_grad():
            if p.layer is None:
                table = {
                    "embed.W_E": lambda: self.model.embed_tokens.weight,
                    "ln_final.w": lambda: self.model.norm.weight,
                    "unembed.W_U": lambda: self.lm_head.weight.T,
                }
                if name not in table:
                    raise KeyError(f"{name!r} is an activation, not a weight")
                return table[name]().detach()
            if not 0 <= p.layer < cfg.n_layer:
                raise KeyError(f"{name!r}: the model has {cfg.n_layer} blocks")
            b = self.model.layers[p.layer]
            a = b.self_attn

            def bias(proj: nn.Linear, heads: int | None = None) -> Tensor:
                if proj.bias is None:
                    raise KeyError(f"{name!r}: this model has no such bias")
                return proj.bias if heads is None else proj.bias.view(heads, Dh)

            table = {
                "ln1.w": lambda: b.input_layernorm.weight,
                "ln2.w": lambda: b.post_attention_layernorm.weight,
                "attn.W_Q": lambda: a.q_proj.weight.T.reshape(D, H, Dh).permute(1, 0, 2),
                "attn.W_K": lambda: a.k_proj.weight.T.reshape(D, G, Dh).permute(1, 0, 2),
                "attn.W_V": lambda: a.v_proj.weight.T.reshape(D, G, Dh).permute(1, 0, 2),
                "attn.b_Q": lambda: bias(a.q_proj, H),
                "attn.b_K": lambda: bias(a.k_proj, G),
                "attn.b_V": lambda: bias(a.v_proj, G),
                "attn.W_O": lambda: a.o_proj.weight.T.reshape(H, Dh, D),
                "attn.b_O": lambda: bias(a.o_proj),
                "mlp.W_gate": lambda: b.mlp.gate_proj.weight.T,
                "mlp.W_in": lambda: b.mlp.up_proj.weight.T,
                "mlp.W_out": lambda: b.mlp.down_proj.weight.T,
                "mlp.b_gate": lambda: bias(b.mlp.gate_proj),
                "mlp.b_in": lambda: bias(b.mlp.up_proj),
                "mlp.b_out": lambda: bias(b.mlp.down_proj),
            }
            if p.suffix not in table:
                raise KeyError(f"{name!r} is an activation, not a weight")
            return table[p.suffix]().detach()
