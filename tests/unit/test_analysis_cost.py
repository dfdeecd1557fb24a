"""What an analysis costs before it runs (analysis/cost.py): its passes counted as the analyses
really make them (`between_passes` is called before each), the arithmetic of one pass, and the
refusal's cheaper settings, which fit the budget they were chosen for."""

from __future__ import annotations

import pytest

from transformer_explainer.analysis.ablation import head_importance, prune_heads
from transformer_explainer.analysis.cost import (
    AnalysisCost,
    check_importance,
    check_prune,
    importance_passes,
    pass_gflop,
    prune_passes,
)
from transformer_explainer.config import DecoderConfig
from transformer_explainer.errors import InputError

TEXT = "The quick brown fox jumps over the lazy dog"


def counter() -> tuple[list[None], object]:
    calls: list[None] = []
    return calls, lambda: calls.append(None)


@pytest.mark.parametrize(("max_heads", "recompute"), [(3, True), (None, False), (2, False)])
def test_pruning_makes_the_passes_it_is_priced_at(tiny_model, max_heads, recompute):
    calls, between = counter()
    curve = prune_heads(tiny_model, TEXT, max_heads=max_heads, recompute=recompute, between_passes=between)
    assert len(calls) == prune_passes(tiny_model.config, max_heads, recompute)
    assert len(curve.heads) == (max_heads or tiny_model.config.n_layer * tiny_model.config.n_head)


def test_importance_makes_the_passes_it_is_priced_at(tiny_model):
    calls, between = counter()
    head_importance(tiny_model, TEXT, between_passes=between)
    assert len(calls) == importance_passes(tiny_model.config) == 1 + 2 * 4


def test_a_raise_between_passes_stops_the_analysis(tiny_model):
    calls: list[None] = []

    def between() -> None:
        if len(calls) == 3:
            raise TimeoutError("nobody waits any more")
        calls.append(None)

    with pytest.raises(TimeoutError):
        prune_heads(tiny_model, TEXT, recompute=True, between_passes=between)
    assert len(calls) == 3


def test_the_arithmetic_of_a_pass():
    gpt2 = DecoderConfig()  # GPT-2 small: ~2 x 124 M multiply-adds per token, and attention grows with T^2
    per_token = pass_gflop(gpt2, 1)
    assert 0.2 < per_token < 0.3
    assert pass_gflop(gpt2, 1024) > 1024 * per_token  # the T^2 of the scores
    assert AnalysisCost(gpt2, 1024, prune_passes(gpt2, None, True)).passes == 1 + 144 * 145 // 2


def test_a_refusal_names_settings_that_fit():
    gpt2 = DecoderConfig()
    budget = 3000.0
    with pytest.raises(InputError) as e:
        check_prune(gpt2, 1024, None, True, budget)  # the request: ~10 000 passes of 1024 tokens
    msg = str(e.value)
    assert "10,441 forward passes of 1,024 tokens" in msg and "(3,000 GFLOP)" in msg
    # neither fewer heads nor a shorter text alone fits: scoring each head once, on a shorter text, does
    tokens = int(msg.split('"recompute": false with a text of at most ')[1].split()[0].replace(",", ""))
    once = prune_passes(gpt2, None, False)
    assert once * pass_gflop(gpt2, tokens) <= budget < once * pass_gflop(gpt2, tokens + 1)

    with pytest.raises(InputError) as e:
        check_prune(gpt2, 16, None, True, budget)
    msg = str(e.value)
    assert msg.endswith('ask for "recompute": false or "max_heads": 5')  # at 16 tokens, either fits
    assert prune_passes(gpt2, 5, True) * pass_gflop(gpt2, 16) <= budget < prune_passes(gpt2, 6, True) * pass_gflop(
        gpt2, 16)

    check_prune(gpt2, 16, None, False, budget)  # accepted
    check_prune(gpt2, 1024, None, True, None)  # no budget: anything goes
    check_importance(gpt2, 64, budget)
    with pytest.raises(InputError) as e:
        check_importance(gpt2, 1024, budget)
    tokens = int(str(e.value).split("a text of at most ")[1].split()[0].replace(",", ""))
    passes = importance_passes(gpt2)
    assert passes * pass_gflop(gpt2, tokens) <= budget < passes * pass_gflop(gpt2, tokens + 1)


def test_a_mixture_of_experts_costs_its_chosen_experts():
    """A token goes through the router and top_k experts: the pass costs what a dense model of top_k experts'
    width would, plus the router; the other experts add nothing. A dense block (Qwen3-MoE's) costs its MLP."""
    shape = dict(vocab_size=1000, n_layer=4, n_head=4, n_embd=64, n_kv_heads=2, activation="silu",
                 layer_norm_epsilon=1e-5, qkv_bias=False, out_bias=False, mlp_bias=False, tie_word_embeddings=False)
    moe = DecoderConfig(**shape, d_mlp=96, model_type="mixtral", n_experts=8, top_k=2, norm_topk_prob=True)
    dense = DecoderConfig(**shape, d_mlp=2 * 96, model_type="llama")
    router = 4 * 2 * 10 * 64 * 8 / 1e9
    assert pass_gflop(moe, 10) == pytest.approx(pass_gflop(dense, 10) + router, rel=1e-12)
    more = DecoderConfig(**{**shape, "d_mlp": 96}, model_type="mixtral", n_experts=64, top_k=2, norm_topk_prob=True)
    assert pass_gflop(more, 10) - pass_gflop(moe, 10) == pytest.approx(4 * 2 * 10 * 64 * 56 / 1e9, rel=1e-9)
    mixed = DecoderConfig(**shape, d_mlp=2 * 96, model_type="qwen3_moe", n_experts=8, top_k=2, d_expert=96,
                          dense_layers=(1, 2))
    assert pass_gflop(mixed, 10) == pytest.approx(pass_gflop(dense, 10) + router / 2, rel=1e-12)
    # every expert run: a dense model of all the experts' width, plus the router (the experts view's comparison)
    wide = DecoderConfig(**shape, d_mlp=8 * 96, model_type="llama")
    assert pass_gflop(moe, 10, experts_per_token=8) == pytest.approx(pass_gflop(wide, 10) + router, rel=1e-12)
    assert pass_gflop(dense, 10, experts_per_token=8) == pass_gflop(dense, 10)  # a dense model has no experts


def test_the_trace_answer_carries_its_pass_cost(tmp_path):
    """/api/trace says what its forward pass cost (the experts view's compute per token) by pass_gflop, and
    /api/models the parameters: all, those a token uses, and the experts' (summed from the modules)."""
    from fastapi.testclient import TestClient

    from tests.conftest import make_hf_llama_family
    from transformer_explainer.engine import load_model
    from transformer_explainer.server import create_app

    model = load_model(str(make_hf_llama_family(tmp_path, "mixtral")), allow_download=False)
    with TestClient(create_app({"moe": model})) as client:
        tr = client.post("/api/trace", json={"model": "moe", "text": TEXT}).json()
        info = client.get("/api/models/moe").json()
    T = len(tr["token_ids"])
    assert tr["cost"] == {"n_tokens": T, "gflop": pytest.approx(pass_gflop(model.config, T), rel=1e-12),
                          "gflop_all_experts": pytest.approx(pass_gflop(model.config, T, model.config.n_experts),
                                                             rel=1e-12)}
    assert tr["cost"]["gflop"] < tr["cost"]["gflop_all_experts"]
    net = model.net
    experts = sum(p.numel() for n, p in net.named_parameters() if ".experts." in n)
    assert info["n_params"] == net.num_params() and info["n_expert_params"] == experts > 0
    c = model.config
    assert info["n_active_params"] == info["n_params"] - experts * (c.n_experts - c.top_k) // c.n_experts
