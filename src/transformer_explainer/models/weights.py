"""A decoder's weights under the naming scheme's names (`names.py`, TransformerLens's layout): `blocks.3.attn.W_Q`
is block 3's query projection as (H, D, Dh), `unembed.W_U` the unembedding as (D, V). The model keeps HF's
layout and names (`q_proj.weight`, (H * Dh, D)); this module converts, in one flat function (`_parameter`),
and the model's `weight`, `expert_weight` and `weight_names` ask it.

Every tensor is a view of the live parameter where the layout allows (detached), so nothing is copied; a
norm's weight is what it multiplies by (1 + weight for Gemma's). `model` is a `decoder.Decoder` (not imported:
the decoder imports this module).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..names import is_weight, parse_name
from ..names import weight_names as family_weight_names
from .layers import MoeMLP

EXPERT_PROJECTIONS = {"W_gate": "gate_proj", "W_in": "up_proj", "W_out": "down_proj"}  # our name -> the expert's


def weight_names(model: nn.Module) -> list[str]:
    """Every weight name the model has (biases only where it has them; the experts' in blocks with experts)."""
    return [n for n in family_weight_names(model.config.n_layer, model.config.family) if _has(model, n)]


def _has(model: nn.Module, name: str) -> bool:
    p = parse_name(name, model.config.family)
    if p.suffix.startswith("mlp.experts."):  # without stacking every expert's matrix to find out
        return isinstance(model.blocks[p.layer].mlp, MoeMLP)
    return _parameter(model, name) is not None


def weight(model: nn.Module, name: str) -> Tensor:
    """The weight `name` (e.g. `blocks.3.attn.W_K` -> (G, D, Dh)); a KeyError says why a name is none of the
    model's weights."""
    c = model.config
    p = parse_name(name, c.family)  # KeyError outside the family's names
    if not is_weight(p.suffix, c.family):
        raise KeyError(f"{name!r} is an activation, not a weight")
    if p.layer is not None and not 0 <= p.layer < c.n_layer:
        raise KeyError(f"{name!r}: the model has {c.n_layer} blocks")
    t = _parameter(model, name)
    if t is None:
        raise KeyError(f"{name!r}: this model has no such bias")
    return t


@torch.no_grad()
def expert_weight(model: nn.Module, name: str, expert: int) -> Tensor:
    """One expert's matrix of a stacked expert weight (`blocks.3.mlp.experts.W_in`, expert 5 -> (D, M)): a view
    of the live parameter, without stacking the others."""
    c = model.config
    p = parse_name(name, c.family)
    mlp = model.blocks[p.layer].mlp if p.layer is not None and 0 <= p.layer < c.n_layer else None
    if not p.suffix.startswith("mlp.experts.") or not isinstance(mlp, MoeMLP):
        raise KeyError(f"{name!r} is not a weight of a block with experts")
    if not 0 <= expert < len(mlp.experts):
        raise KeyError(f"{name!r}: expert {expert} is outside 0..{len(mlp.experts) - 1}")
    proj = EXPERT_PROJECTIONS[p.suffix.rsplit(".", 1)[1]]
    return getattr(mlp.experts[expert], proj).weight.T.detach()


def _t(module: nn.Module | None) -> Tensor | None:
    """A projection's matrix as (in, out), TransformerLens's layout (ours is HF's (out, in))."""
    return None if module is None else module.weight.T


def _bias(module: nn.Module | None) -> Tensor | None:
    return getattr(module, "bias", None)


@torch.no_grad()
def _parameter(model: nn.Module, name: str) -> Tensor | None:
    """The weight `name` of the family's table, or None where this model lacks it (a bias, a position table)."""
    c = model.config
    H, G, D, Dh = c.n_head, c.n_kv_heads, c.n_embd, c.head_dim
    p = parse_name(name, c.family)
    if p.layer is None:
        t = {
            "embed.W_E": lambda: model.embed.weight,  # (V, D)
            "embed.W_pos": lambda: None if model.pos_embed is None else model.pos_embed.weight,  # (P, D)
            "ln_final.w": lambda: model.ln_final.scale,
            "ln_final.b": lambda: _bias(model.ln_final),
            "unembed.W_U": lambda: model.unembed.weight.T,  # (D, V)
        }[name]()
        return None if t is None else t.detach()
    block = model.blocks[p.layer]
    attn, mlp, s = block.attn, block.mlp, p.suffix
    dense = None if isinstance(mlp, MoeMLP) else mlp  # a dense MLP's projections; none in a mixture of experts
    if s[:-1] in ("attn.W_", "attn.b_") and s[-1] in "QKV":
        # Q's rows, K's, V's: of the fused projection (GPT-2's), or each of its own
        heads = {"Q": H, "K": G, "V": G}[s[-1]]
        if hasattr(attn, "qkv_proj"):
            begin = {"Q": 0, "K": H * Dh, "V": (H + G) * Dh}[s[-1]]
            whole = attn.qkv_proj.bias if s[5] == "b" else attn.qkv_proj.weight
            t = None if whole is None else whole[begin:begin + heads * Dh]
        else:
            proj = {"Q": attn.q_proj, "K": attn.k_proj, "V": attn.v_proj}[s[-1]]
            t = proj.bias if s[5] == "b" else proj.weight
        if t is not None:  # a bias (heads, Dh); a matrix (heads, D, Dh)
            t = t.view(heads, Dh) if s[5] == "b" else t.T.reshape(D, heads, Dh).permute(1, 0, 2)
    elif s.endswith((".w", ".b")):  # a norm's scale or shift
        where, what = s.rsplit(".", 1)
        norm = {"ln1": block.ln1, "ln2": block.ln2, "ln1_post": block.ln1_post, "ln2_post": block.ln2_post,
                "attn.q_norm": getattr(attn, "q_norm", None), "attn.k_norm": getattr(attn, "k_norm", None)}[where]
        t = None if norm is None else norm.scale if what == "w" else _bias(norm)
    elif s.startswith("mlp.experts."):  # every expert's matrix, stacked: (E, D, M) or (E, M, D)
        if dense is not None:
            return None
        t = torch.stack([expert_weight(model, name, e) for e in range(len(mlp.experts))])
    else:
        t = {
            "attn.W_O": lambda: attn.o_proj.weight.T.reshape(H, Dh, D),
            "attn.b_O": lambda: attn.o_proj.bias,
            "mlp.W_in": lambda: _t(getattr(dense, "up_proj", None)),
            "mlp.b_in": lambda: _bias(getattr(dense, "up_proj", None)),
            "mlp.W_out": lambda: _t(getattr(dense, "down_proj", None)),
            "mlp.b_out": lambda: _bias(getattr(dense, "down_proj", None)),
            "mlp.W_gate": lambda: _t(getattr(dense, "gate_proj", None)),
            "mlp.b_gate": lambda: _bias(getattr(dense, "gate_proj", None)),
            "mlp.W_router": lambda: None if dense is not None else mlp.router.weight.T,
        }[s]()
    return None if t is None else t.detach()
