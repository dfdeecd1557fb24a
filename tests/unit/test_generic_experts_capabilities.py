"""The capabilities of a mixture of experts in a model that runs through transformers say which layers have experts
whose router the trace shows (bridge/moe_lens.py) and what kind of router it is, with the numbers the Experts view's
sentences depend on, read from the checkpoint's config: DeepSeek-V3 (sigmoid scores, group-limited, a shared expert,
routed_scaling_factor; its first layer dense), gpt-oss (a softmax over the top-k logits, clamped SwiGLU experts).
A model with experts but no lens (Qwen3-Next) has no router kind; an own-code mixture (Mixtral) keeps "softmax"."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("transformers")
from fastapi.testclient import TestClient  # noqa: E402

from tests.helpers.hf_checkpoints import write_checkpoint  # noqa: E402
from transformer_explainer.engine import load_model  # noqa: E402
from transformer_explainer.overview import capabilities_out  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402

MOE_FIELDS = ("n_experts", "top_k", "d_expert", "norm_topk_prob", "moe_layers", "router", "n_groups", "topk_groups",
              "routed_scaling", "d_shared", "swiglu_limit", "swiglu_alpha")


def _served_caps(model, tmp_path) -> dict:
    static = tmp_path / "static"
    static.mkdir(exist_ok=True)
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    with TestClient(create_app({"m": model}, ServerSettings(static_dir=static))) as c:
        caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
    return {k: caps[k] for k in MOE_FIELDS}


def test_deepseek_v3_sigmoid_grouped_router(tmp_path):
    # n_routed_experts 4 in n_group 2, topk_group 1, top 2, moe_intermediate_size 32, first_k_dense_replace 1;
    # transformers' defaults: n_shared_experts 1, norm_topk_prob True, routed_scaling_factor 2.5
    folder = write_checkpoint("deepseek_v3", tmp_path / "ds", tokenizer=True, routed_scaling_factor=1.75)
    caps = _served_caps(load_model(str(folder), allow_download=False), tmp_path)
    assert caps == {"n_experts": 4, "top_k": 2, "d_expert": 32, "norm_topk_prob": True, "moe_layers": [1, 2, 3],
                    "router": "sigmoid_grouped", "n_groups": 2, "topk_groups": 1, "routed_scaling": 1.75,
                    "d_shared": 32, "swiglu_limit": None, "swiglu_alpha": None}


def test_deepseek_v3_without_renormalising_and_two_shared(tmp_path):
    folder = write_checkpoint("deepseek_v3", tmp_path / "ds", norm_topk_prob=False, n_shared_experts=2,
                              first_k_dense_replace=2, tokenizer=True)
    caps = capabilities_out(load_model(str(folder), allow_download=False).config)
    assert (caps.norm_topk_prob, caps.d_shared, caps.moe_layers) == (False, 64, [2, 3])


def test_gpt_oss_softmax_over_the_top_k(tmp_path):
    folder = write_checkpoint("gpt_oss", tmp_path / "oss", tokenizer=True, swiglu_limit=5.0)
    caps = _served_caps(load_model(str(folder), allow_download=False), tmp_path)
    assert caps == {"n_experts": 4, "top_k": 2, "d_expert": 96, "norm_topk_prob": True, "moe_layers": [0, 1, 2, 3],
                    "router": "softmax_topk", "n_groups": None, "topk_groups": None, "routed_scaling": None,
                    "d_shared": None, "swiglu_limit": 5.0, "swiglu_alpha": 1.702}


def test_experts_without_a_lens_have_no_router(tmp_path):
    # Qwen3-Next's experts run in transformers' code alone: the trace holds their output, not their routing
    caps = capabilities_out(load_model(str(write_checkpoint("qwen3_next", tmp_path / "qn", tokenizer=True)),
                                       allow_download=False).config)
    assert (caps.n_experts, caps.top_k, caps.moe_layers, caps.router) == (4, 2, [], None)


def test_dense_generic_and_own_families_keep_theirs(tmp_path):
    from tests.conftest import make_hf_llama_family

    folder = write_checkpoint("llama", tmp_path / "ll", tokenizer=True)
    dense = capabilities_out(load_model(str(folder), allow_download=False).config)
    assert (dense.n_experts, dense.moe_layers, dense.router) == (None, [], None)
    own = capabilities_out(load_model(str(make_hf_llama_family(tmp_path, "mixtral")), allow_download=False).config)
    assert (own.runs, own.mlp, own.router, own.moe_layers) == ("own", "moe", "softmax", [0, 1, 2, 3])
    assert own.n_groups is None and own.routed_scaling is None and own.d_shared is None
