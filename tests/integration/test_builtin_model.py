"""The shipped models: each loads offline through the same path as a downloaded one (whatever its
architecture), and the default behaves like a language model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.loading.resolve import BUILTIN_DEFAULT, MODEL_FOLDER_FILES, builtin_models, has_weights

FOLDER = builtin_models().get(BUILTIN_DEFAULT)


def test_builtin_model_is_shipped():
    assert FOLDER is not None, f"the package must ship {BUILTIN_DEFAULT!r}"
    files = {p.name for p in FOLDER.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "MODEL_CARD.md"} <= files
    size = sum(p.stat().st_size for p in FOLDER.iterdir())
    assert size <= 20e6, f"built-in model is {size / 1e6:.1f} MB, over the 20 MB budget"


@pytest.fixture(scope="module")
def model():
    return load_model(BUILTIN_DEFAULT, allow_download=False)


def test_loads_in_transformers_with_same_logits(model):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(FOLDER, attn_implementation="eager", dtype=torch.float32).eval()
    trace = model.trace("The king said that the people of the city were")
    with torch.no_grad():
        out = hf(torch.tensor([trace.token_ids]), output_attentions=True)
    torch.testing.assert_close(trace["logits"], out.logits[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(trace["blocks.2.attn.pattern"], out.attentions[2][0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", sorted(builtin_models()))
def test_every_builtin_matches_transformers(name: str):
    """Every folder under builtin/ (GPT-2 or the Llama family, whatever its config.json says) loads
    offline, in transformers too, with the same logits."""
    from transformers import AutoModelForCausalLM

    folder = builtin_models()[name]
    assert has_weights(folder) and (folder / "tokenizer.json").is_file(), f"{name}: {MODEL_FOLDER_FILES}"
    m = load_model(name, allow_download=False)
    assert m.source == "builtin"
    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    assert hf.config.model_type == m.config.model_type
    ids = m.encode("The king said that the people of the city were")
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(m.trace_ids(ids)["logits"], ref, atol=1e-4, rtol=0)


def test_trace_properties(model):
    trace = model.trace("Data visualization empowers users to")
    assert "".join(trace.tokens) == "Data visualization empowers users to"
    assert any(t.startswith(" ") for t in trace.tokens)
    for i in range(model.config.n_layer):
        p = trace[f"blocks.{i}.attn.pattern"]
        torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5, rtol=0)
        assert (torch.triu(p, diagonal=1) == 0).all()


def test_predicts_english(model):
    """A trained model, not a random one: common continuations are likely."""
    dist = model.next_token("The king said that the")
    top = [model.tokenizer.token_text(i) for i in dist.top(20)]
    assert any(t.strip().isalpha() for t in top)
    ids = model.encode("It was the best of times, it was the worst of times.")
    with torch.no_grad():
        logits = model.net(torch.tensor([ids]))[0, :-1]
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]))
    assert loss < 6.0, f"loss {loss:.2f} nats/token: the shipped model looks untrained"


def test_explain_with_network_cut_off(tmp_path: Path):
    """`explain` with no --model, no Hugging Face cache, and (where possible) no network at all."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "empty-hf-home"), "HF_HUB_OFFLINE": "0"}
    cmd = [sys.executable, "-m", "transformer_explainer.cli", "explain", "The king said", "--json"]
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        cmd = ["unshare", "-n", *cmd]  # a new network namespace: only a down loopback
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["model"] == BUILTIN_DEFAULT
    assert result["tokens"] == ["The", " king", " said"]
    assert f"model: {BUILTIN_DEFAULT}" in out.stderr


MOE = builtin_models().get("explainer-moe")


@pytest.mark.skipif(MOE is None, reason="explainer-moe is not shipped in this checkout")
def test_the_builtin_mixture_of_experts():
    """explainer-moe: Mixtral's format, 8 experts of which each token gets 2, grouped-query attention, within
    25 MB; trained: English continuations are likely, and on a text of 51 tokens every block sends its tokens to
    at least 5 of its 8 experts (the router is not collapsed onto a few)."""
    assert MOE is not None
    size = sum(p.stat().st_size for p in MOE.iterdir())
    assert size <= 25e6, f"explainer-moe is {size / 1e6:.1f} MB, over its 25 MB budget"
    assert (MOE / "MODEL_CARD.md").is_file()
    m = load_model("explainer-moe", allow_download=False)
    c = m.config
    assert c.family == "mixtral" and (c.n_experts, c.top_k) == (8, 2) and c.n_kv_heads < c.n_head
    assert m.net.num_active_params() < m.net.num_params() / 2
    text = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
            "foolishness. The king said that the people of the city were tired of the war, and the queen agreed.")
    trace = m.trace(text)
    assert trace.n_tokens == 51
    loss = torch.nn.functional.cross_entropy(trace["logits"][:-1], torch.tensor(trace.token_ids[1:]))
    assert loss < 6.0, f"loss {loss:.2f} nats/token: the shipped model looks untrained"
    for layer in range(c.n_layer):
        used = trace[f"blocks.{layer}.mlp.expert_indices"].flatten().bincount(minlength=8)
        assert (used > 0).sum() >= 5, (layer, used)
