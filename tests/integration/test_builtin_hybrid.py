"""explainer-hybrid, the built-in Qwen3.5-shaped hybrid (Gated DeltaNet layers and a full attention layer, trained by
`train lm --family qwen3_5_text`): shipped within its size budget, listed wherever the built-ins are (CLI `models`,
the server's model list), opened offline through transformers' own modules, and it runs as transformers does:
the same logits and the same greedy tokens; trained, not random."""

from __future__ import annotations

import json
import math

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.cli import main
from transformer_explainer.loading.resolve import builtin_models

NAME = "explainer-hybrid"
PROMPT = "The king said that the people of the city were"


@pytest.fixture(scope="module")
def folder():
    f = builtin_models().get(NAME)
    assert f is not None, f"the package must ship {NAME}"
    return f


@pytest.fixture(scope="module")
def model(folder):
    return load_model(NAME, allow_download=False)


def test_shipped_in_qwen3_5_format_within_budget(folder):
    assert {p.name for p in folder.iterdir()} == {"config.json", "model.safetensors", "tokenizer.json", "MODEL_CARD.md"}
    size = (folder / "model.safetensors").stat().st_size
    assert size < 15e6, f"{NAME} is {size / 1e6:.1f} MB, over its 15 MB budget"
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and cfg["architectures"] == ["Qwen3_5ForCausalLM"]
    assert cfg["dtype"] == "float16"
    assert cfg["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}


def test_listed_by_the_cli(capsys: pytest.CaptureFixture[str]):
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert rows[NAME]["kind"] == "built-in"
    assert rows[NAME]["architecture"] == "qwen3_5_text"


def test_listed_by_the_server_and_opened_when_chosen():
    """`serve` discovers the built-ins: the app's model menu (from /api/models) offers explainer-hybrid, and a trace
    asked of it loads it."""
    from fastapi.testclient import TestClient

    from transformer_explainer.server import create_app
    from transformer_explainer.server.registry import ModelRegistry

    reg = ModelRegistry(NAME)
    reg.discover()
    with TestClient(create_app(reg)) as client:
        listed = {m["name"]: m for m in client.get("/api/models").json()["models"]}
        assert listed[NAME]["source"] == "builtin"
        info = client.get(f"/api/models/{NAME}")
        assert info.status_code == 200, info.text


def test_opens_offline_through_transformers_with_its_logits_and_greedy_tokens(model, folder, monkeypatch):
    from transformers import AutoModelForCausalLM

    from transformer_explainer.generic import GenericModel
    from transformer_explainer.sampling import SamplingParams

    assert isinstance(model, GenericModel) and model.source == "builtin" and model.runs == "transformers"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = model.encode(PROMPT)
    trace = model.trace_ids(ids)
    assert torch.isfinite(trace["logits"]).all()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
        ref_tokens = hf.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, len(ids):].tolist()
    torch.testing.assert_close(trace["logits"], ref, atol=1e-4, rtol=0)
    ours = [t.id for t in model.generate_ids(ids, 12, SamplingParams(temperature=0), stop_at_eos=False)]
    assert ours == ref_tokens
    # every layer records its mixer: three Gated DeltaNet layers, then full attention
    assert all(f"blocks.{i}.linear_attn.beta" in trace for i in range(3))
    p = trace["blocks.3.attn.pattern"]
    torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5, rtol=0)


def test_trained_not_random(model):
    """Common continuations are likely, and a sentence of English costs far less than the uniform ln 8192 = 9.0
    nats per token."""
    ids = model.encode("It was the best of times, it was the worst of times.")
    logits = model.trace_ids(ids)["logits"]
    loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]))
    assert loss < 6.0 < math.log(8192), f"loss {loss:.2f} nats/token: the shipped model looks untrained"
    top = [model.tokenizer.token_text(i) for i in model.next_token("The king said that the").top(20)]
    assert any(t.strip().isalpha() for t in top)


def test_its_deltanet_heads_remember(model):
    """As its card says: layer 0's heads keep about half their state per token, and layers 1 and 2 each have a head
    that keeps over 0.9 of it (a half-life of tens of tokens), where transformers' own initialisation had left
    almost every head wiping its state at each token."""
    trace = model.trace("It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
                        "age of foolishness. The king said that the people of the city were tired of the war.")
    kept = {i: trace[f"blocks.{i}.linear_attn.decay"].float().exp().mean(-1) for i in range(3)}  # (H,) mean exp(g)
    assert 0.3 < float(kept[0].mean()) < 0.8, kept[0]
    for i in (1, 2):
        assert float(kept[i].max()) > 0.9, (i, kept[i])
