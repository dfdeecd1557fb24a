"""The GPT-2 decoder (nanoGPT's structure and GPT-2's parameter names)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from ..config import DecoderConfig
from ..names import parse_name
from .kv_cache import KVCache
from .layers import Block, DecoderBase, LayerNorm, Linear
from .recorder import Recorder, scope

__all__ = ["GPT", "KVCache", "LogitsFor"]

LogitsFor = Literal["all", "last"]


class GPT(DecoderBase):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, config.layer_norm_epsilon),
            )
        )
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def finish_loading_(self) -> None:
        """Re-tie lm_head to the token embedding after `load_state_dict(assign=True)` (from a build on
        the meta device) replaced the embedding's matrix."""
        self.lm_head.weight = self.transformer.wte.weight

    # the stage whose values the KV cache keeps as keys (GPT-2: the keys as projected)
    cached_keys = "attn.k"

    @property
    def final_norm(self) -> LayerNorm:
        """The norm between the last block and the unembedding (HF's `transformer.ln_f`)."""
        return self.transformer.ln_f

    def forward(
        self,
        idx: Tensor,
        *,
        cache: KVCache | None = None,
        rec: Recorder | None = None,
        logits_for: LogitsFor = "all",
    ) -> Tensor:
        """Logits for token ids `idx` (B, T).

        `cache`: keys/values of earlier positions; it is extended with this call's positions.
        `rec`: record every intermediate (explicit attention path). `logits_for="last"` runs the
        unembedding on the last position only, which is all that next-token prediction needs; with a
        recorder, the logits are then returned and not recorded (unless a patch edits them).
        """
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(f"{start + T} positions exceed the model's context of {self.config.block_size}")
        pos = torch.arange(start, start + T, device=idx.device)
        tok_emb = self.transformer.wte(idx)  # (B, T, D)
        pos_emb = self.transformer.wpe(pos)  # (T, D)
        if rec is not None:
            tok_emb = rec("embed.token", tok_emb)
            pos_emb = rec("embed.position", pos_emb.expand_as(tok_emb))
        x = self.transformer.drop(tok_emb + pos_emb)
        for i, block in enumerate(self.transformer.h):
            x, _ = block(x, scope(rec, f"blocks.{i}"), None if cache is None else cache.slot(i))
        if logits_for == "last" and rec is None:
            x = x[:, -1:, :]
        x = self.transformer.ln_f(x, scope(rec, "ln_final"))
        if rec is None:
            return self.lm_head(x)
        if logits_for == "last" and not rec.wants("logits"):
            # recorded: the final LayerNorm at every position; the trace derives the logits of the
            # other positions from it when asked (for a short text the unembedding is a third of the work)
            return self.lm_head(x[:, -1:, :])
        return rec("logits", self.lm_head(x))

    # -- weights by name ---------------------------------------------------------------------------

    def weight_names(self) -> list[str]:
        """Every weight name this model has."""
        from ..names import weight_names

        return weight_names(self.config.n_layer)

    def weight(self, name: str) -> Tensor:
        """A parameter in TransformerLens layout, e.g. `blocks.3.attn.W_Q` -> (H, D, Dh).

        Returns views of the live parameters (detached), so nothing is copied.
        """
        cfg = self.config
        H, D, Dh = cfg.n_head, cfg.n_embd, cfg.head_dim
        p = parse_name(name)
        with torch.no_grad():
            if p.layer is None:
                t = self.transformer
                table = {
                    "embed.W_E": lambda: t.wte.weight,
                    "embed.W_pos": lambda: t.wpe.weight,
                    "ln_final.w": lambda: t.ln_f.weight,
                    "ln_final.b": lambda: t.ln_f.bias,
                    "unembed.W_U": lambda: self.lm_head.weight.T,
                }
                if name not in table:
                    raise KeyError(f"{name!r} is an activation, not a weight")
                return table[name]().detach()
            if not 0 <= p.layer < cfg.n_layer:
                raise KeyError(f"{name!r}: the model has {cfg.n_layer} blocks")
            b = self.transformer.h[p.layer]
            w_qkv, b_qkv = b.attn.c_attn.weight, b.attn.c_attn.bias  # (3D, D), (3D,)
            which = {"Q": 0, "K": 1, "V": 2}
            s = p.suffix
            if s.startswith("attn.W_") and s[-1] in which:
                i = which[s[-1]]
                return w_qkv[i * D : (i + 1) * D].T.reshape(D, H, Dh).permute(1, 0, 2).detach()
            if s.startswith("attn.b_") and s[-1] in which:
                i = which[s[-1]]
                return b_qkv[i * D : (i + 1) * D].reshape(H, Dh).detach()
            table = {
                "attn.W_O": lambda: b.attn.c_proj.weight.T.reshape(H, Dh, D),
                "attn.b_O": lambda: b.attn.c_proj.bias,
                "ln1.w": lambda: b.ln_1.weight,
                "ln1.b": lambda: b.ln_1.bias,
                "ln2.w": lambda: b.ln_2.weight,
                "ln2.b": lambda: b.ln_2.bias,
                "mlp.W_in": lambda: b.mlp.c_fc.weight.T,
                "mlp.b_in": lambda: b.mlp.c_fc.bias,
                "mlp.W_out": lambda: b.mlp.c_proj.weight.T,
                "mlp.b_out": lambda: b.mlp.c_proj.bias,
            }
            if s not in table:
                raise KeyError(f"{name!r} is an activation, not a weight")
            return table[s]().detach()
