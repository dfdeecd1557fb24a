"""Direct logit attribution: the components plus the constant equal the logit (or the logit difference) within
1e-5 relative, for GPT-2 and the Llama family (Llama, Qwen2, Mistral), at the last and earlier positions; and each
head's contribution equals one computed independently from transformers' eager forward, from the input of its
attention output projection (a forward pre-hook), the final norm's input and the HF weights."""

from __future__ import annotations

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.errors import InputError

TEXT = "The king said, 'Hello!' and then left the room; the queen stayed."


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(1.0, abs(b))


@pytest.mark.parametrize("position", [None, 3])
def test_gpt2_components_sum_to_the_logit(tiny_model, position) -> None:
    tr = tiny_model.trace(TEXT)
    a = tiny_model.attribute(tr, position=position)
    assert _rel(a.total(), a.metric) < 1e-5
    p = tr.n_tokens - 1 if position is None else position
    assert a.metric == pytest.approx(float(tr["logits"][p, a.target]), rel=1e-6)
    if position is not None:  # an earlier position: the token that actually came next
        assert a.target == tr.token_ids[position + 1]
    kinds = [c.kind for c in a.components]
    L, H = tiny_model.config.n_layer, tiny_model.config.n_head
    assert kinds.count("head") == L * H and kinds.count("mlp") == L and kinds.count("attn_bias") == L
    assert kinds.count("embed") == 1 and kinds.count("pos_embed") == 1
    assert a.heads.shape == (L, H)


def test_gpt2_difference_of_two_tokens(tiny_model) -> None:
    tr = tiny_model.trace(TEXT)
    logits = tr["logits"][-1]
    top2 = torch.topk(logits, 2).indices.tolist()
    a = tiny_model.attribute(tr, top2[0], top2[1])
    assert a.metric == pytest.approx(float(logits[top2[0]] - logits[top2[1]]), rel=1e-5, abs=1e-6)
    assert _rel(a.total(), a.metric) < 1e-5
    with pytest.raises(InputError, match="same token"):
        tiny_model.attribute(tr, top2[0], top2[0])
    with pytest.raises(InputError, match="outside"):
        tiny_model.attribute(tr, position=tr.n_tokens)


def test_gpt2_heads_equal_transformers_hooks(tiny_model, hf_tiny) -> None:
    tr = tiny_model.trace(TEXT)
    a = tiny_model.attribute(tr)
    ids = torch.tensor([tr.token_ids])
    z_in: dict[int, torch.Tensor] = {}
    final_in: list[torch.Tensor] = []
    hooks = [blk.attn.c_proj.register_forward_pre_hook(lambda m, args, i=i: z_in.__setitem__(i, args[0].detach()))
             for i, blk in enumerate(hf_tiny.transformer.h)]
    hooks.append(hf_tiny.transformer.ln_f.register_forward_pre_hook(lambda m, args: final_in.append(args[0].detach())))
    try:
        with torch.no_grad():
            hf_tiny(ids)
    finally:
        for h in hooks:
            h.remove()
    f64 = torch.float64
    cfg = hf_tiny.config
    H, D = cfg.n_head, cfg.n_embd
    Dh = D // H
    x = final_in[0][0, -1].to(f64)
    scale = 1 / torch.sqrt(x.var(unbiased=False) + cfg.layer_norm_epsilon)
    w_u = hf_tiny.lm_head.weight[a.target].detach().to(f64)
    along = (hf_tiny.transformer.ln_f.weight.to(f64) * w_u * scale).detach()
    for layer, blk in enumerate(hf_tiny.transformer.h):
        W = blk.attn.c_proj.weight.detach().to(f64)  # Conv1D: (D_in, D_out), y = x @ W + b
        for h in range(H):
            out = z_in[layer][0, -1, h * Dh:(h + 1) * Dh].to(f64) @ W[h * Dh:(h + 1) * Dh]
            ref = float((out - out.mean()) @ along)
            assert float(a.heads[layer, h]) == pytest.approx(ref, rel=1e-4, abs=1e-5), (layer, h)


def test_llama_family_components_and_heads(llama_family_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = load_model(str(llama_family_dir), allow_download=False)
    tr = model.trace(TEXT)
    for position in (None, 2):
        a = model.attribute(tr, position=position)
        assert _rel(a.total(), a.metric) < 1e-5
        assert not any(c.kind == "pos_embed" for c in a.components)
    a = model.attribute(tr)
    hf = AutoModelForCausalLM.from_pretrained(llama_family_dir, attn_implementation="eager").eval()
    z_in: dict[int, torch.Tensor] = {}
    final_in: list[torch.Tensor] = []
    layers = hf.model.layers
    hooks = [blk.self_attn.o_proj.register_forward_pre_hook(lambda m, args, i=i: z_in.__setitem__(i, args[0].detach()))
             for i, blk in enumerate(layers)]
    hooks.append(hf.model.norm.register_forward_pre_hook(lambda m, args: final_in.append(args[0].detach())))
    try:
        with torch.no_grad():
            hf(torch.tensor([tr.token_ids]))
    finally:
        for h in hooks:
            h.remove()
    f64 = torch.float64
    cfg = hf.config
    H = cfg.num_attention_heads
    Dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    x = final_in[0][0, -1].to(f64)
    scale = 1 / torch.sqrt((x * x).mean() + cfg.rms_norm_eps)
    along = (hf.model.norm.weight.to(f64) * hf.lm_head.weight[a.target].to(f64) * scale).detach()
    for layer, blk in enumerate(layers):
        W = blk.self_attn.o_proj.weight.detach().to(f64)  # Linear: (D_out, D_in), y = x @ W.T
        for h in range(H):
            out = z_in[layer][0, -1, h * Dh:(h + 1) * Dh].to(f64) @ W[:, h * Dh:(h + 1) * Dh].T
            assert float(a.heads[layer, h]) == pytest.approx(float(out @ along), rel=1e-4, abs=1e-5), (layer, h)


def test_new_families_components_sum_to_the_logit(new_family_dir) -> None:
    """Qwen3 and Gemma 3: the components add up to the logit (Gemma's heads through the norm after attention,
    its scale frozen), and the heads' contributions add up to what attention wrote, through the final norm."""
    model = load_model(str(new_family_dir), allow_download=False)
    tr = model.trace(TEXT)
    for position in (None, 2):
        a = model.attribute(tr, position=position)
        assert _rel(a.total(), a.metric) < 1e-5, (a.total(), a.metric)
        assert not any(c.kind == "pos_embed" for c in a.components)
    a = model.attribute(tr)
    f64 = torch.float64
    w_u = model.weight("unembed.W_U")[:, a.target].to(f64)
    along = model.weight("ln_final.w").to(f64) * w_u * a.scale
    for layer in range(model.config.n_layer):
        wrote = tr[f"blocks.{layer}.attn_out"][-1].to(f64) @ along
        assert float(a.heads[layer].to(f64).sum()) == pytest.approx(float(wrote), rel=1e-4, abs=1e-5), layer


def test_mixtures_of_experts_split_per_expert(moe_family_dir) -> None:
    """Mixtral, Qwen3-MoE, OLMoE: a block with experts contributes one part per expert chosen at the position
    (its output times its weight), kind "expert" with its layer and index; the parts still add up to the
    logit, and each block's parts add up to what transformers' MLP wrote there (a forward hook on HF's mixture
    block), through the final norm. Blocks without experts (Qwen3-MoE's dense one) keep one "mlp" part."""
    from transformers import AutoModelForCausalLM

    model = load_model(str(moe_family_dir), allow_download=False)
    c = model.config
    tr = model.trace(TEXT)
    for position in (None, 2):
        a = model.attribute(tr, position=position)
        assert _rel(a.total(), a.metric) < 1e-5, (a.total(), a.metric)
        p = tr.n_tokens - 1 if position is None else position
        for layer in range(c.n_layer):
            parts = [x for x in a.components if x.layer == layer and x.kind in ("expert", "mlp")]
            if c.has_experts(layer):
                chosen = tr[f"blocks.{layer}.mlp.expert_indices"][p].tolist()
                assert [x.kind for x in parts] == ["expert"] * c.top_k and [x.expert for x in parts] == chosen
                assert [x.label for x in parts] == [f"L{layer}E{e}" for e in chosen]
                row = a.experts[layer]
                assert set(row.nonzero().flatten().tolist()) <= set(chosen)
                assert float(row.sum()) == pytest.approx(sum(x.value for x in parts), rel=1e-5, abs=1e-6)
            else:
                assert [x.kind for x in parts] == ["mlp"] and not a.experts[layer].any()
    a = model.attribute(tr)
    hf = AutoModelForCausalLM.from_pretrained(moe_family_dir, attn_implementation="eager").eval()
    wrote: dict[int, torch.Tensor] = {}
    hooks = [blk.mlp.register_forward_hook(lambda m, args, out, i=i: wrote.__setitem__(i, out.detach()))
             for i, blk in enumerate(hf.model.layers)]
    try:
        with torch.no_grad():
            hf(torch.tensor([tr.token_ids]))
    finally:
        for h in hooks:
            h.remove()
    f64 = torch.float64
    along = (hf.model.norm.weight.to(f64) * hf.lm_head.weight[a.target].to(f64) * a.scale).detach()
    for layer in c.moe_layers:
        ours = sum(x.value for x in a.components if x.kind == "expert" and x.layer == layer)
        assert ours == pytest.approx(float(wrote[layer][0, -1].to(f64) @ along), rel=1e-4, abs=1e-5), layer
    d = a.to_dict()
    assert len(d["experts"]) == c.n_layer and len(d["experts"][0]) == c.n_experts
    assert any(x["kind"] == "expert" and x["expert"] is not None for x in d["components"])


def test_mixtures_of_experts_over_http(moe_family_dir) -> None:
    """/api/attribution/attribute on a mixture of experts: the answer carries each chosen expert as a part of
    kind "expert" with its index (the trace's expert_indices at the position, in its order), the (L, E) map of
    their values, and the parts plus the constant still sum to the metric in the JSON."""
    from fastapi.testclient import TestClient

    from transformer_explainer.server import create_app

    model = load_model(str(moe_family_dir), allow_download=False)
    c = model.config
    tr = model.trace(TEXT)
    with TestClient(create_app({"moe": model})) as client:
        for position in (None, 2):
            r = client.post("/api/attribution/attribute", json={"model": "moe", "text": TEXT, "position": position})
            assert r.status_code == 200, r.text
            out = r.json()
            p = out["position"]
            total = sum(x["value"] for x in out["components"]) + out["rest"]
            assert _rel(total, out["metric"]) < 1e-5, (total, out["metric"])
            experts = out["experts"]
            assert len(experts) == c.n_layer and all(len(row) == c.n_experts for row in experts)
            for layer in range(c.n_layer):
                parts = [x for x in out["components"] if x["layer"] == layer and x["kind"] in ("expert", "mlp")]
                if c.has_experts(layer):
                    chosen = tr[f"blocks.{layer}.mlp.expert_indices"][p].tolist()
                    assert [x["expert"] for x in parts] == chosen and all(x["kind"] == "expert" for x in parts)
                    for x in parts:
                        assert experts[layer][x["expert"]] == pytest.approx(x["value"], rel=1e-5, abs=1e-6)
                    assert sum(v for e, v in enumerate(experts[layer]) if e not in chosen) == 0
                else:
                    assert [x["kind"] for x in parts] == ["mlp"] and parts[0]["expert"] is None
                    assert not any(experts[layer])
            assert all(x["expert"] is None for x in out["components"] if x["kind"] != "expert")
