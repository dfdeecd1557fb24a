"""Taking experts out of a mixture's routing (`analysis.ablation.ablate(..., experts=...)`, the API's
/api/analysis/ablate with `experts`, the CLI's `ablate --expert`) on Mixtral, Qwen3-MoE and OLMoE
(`moe_family_dir`): no token goes to a removed expert, the router's probabilities are the softmax over the
experts that remain, the blocks before are untouched, and bad requests get a sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_explainer import cli, load_model  # noqa: E402
from transformer_explainer.analysis.ablation import ablate, expert_removal_patches  # noqa: E402
from transformer_explainer.errors import InputError  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture(scope="module")
def model(moe_family_dir: Path):
    return load_model(str(moe_family_dir), allow_download=False)


def _busiest(trace, layer: int) -> int:
    """The expert of block `layer` chosen for the most tokens of the trace."""
    return int(trace[f"blocks.{layer}.mlp.expert_indices"].flatten().bincount().argmax())


def test_a_removed_expert_gets_no_token_and_the_rest_share_its_probability(model):
    c = model.config
    ids = model.encode(TEXT)
    layer = c.moe_layers[1]
    clean = model.trace_ids(ids)
    e = _busiest(clean, layer)
    res = ablate(model, ids, experts=[(layer, e)])
    assert res.experts == [(layer, e)] and res.heads == []
    out = res.ablated
    p = f"blocks.{layer}.mlp."
    assert not (out[p + "expert_indices"] == e).any()
    assert (out[p + "router_probs"][:, e] == 0).all()
    # the router reads the same input (the block's MLP input is computed before the experts): the softmax over
    # the remaining experts is each one's clean probability divided by what the removed one left
    torch.testing.assert_close(out[p + "router_logits"][:, :e], clean[p + "router_logits"][:, :e], atol=0, rtol=0)
    keep = [j for j in range(c.n_experts) if j != e]
    want = clean[p + "router_probs"][:, keep] / (1 - clean[p + "router_probs"][:, e:e + 1])
    torch.testing.assert_close(out[p + "router_probs"][:, keep], want, atol=1e-6, rtol=1e-5)
    # each token still goes to top_k experts: those it had, or in the removed one's place its next choice
    for t in range(len(ids)):
        before = clean[p + "expert_indices"][t].tolist()
        after = out[p + "expert_indices"][t].tolist()
        assert len(set(after)) == c.top_k
        assert set(before) - {e} <= set(after)
    if c.norm_topk_prob:  # the weights applied still sum to 1
        torch.testing.assert_close(out[p + "expert_weights"].float().sum(-1), torch.ones(len(ids)))
    # the blocks before are untouched; the text's loss and the next token's distribution move
    torch.testing.assert_close(out[f"blocks.{layer}.resid_mid"], clean[f"blocks.{layer}.resid_mid"], atol=0, rtol=0)
    assert not torch.equal(out[f"blocks.{layer}.mlp_out"], clean[f"blocks.{layer}.mlp_out"])
    assert res.kl > 0 and res.loss_change != 0
    # the patch is the whole of it: the same as running with the patch by hand
    by_hand = model.trace_ids(ids, patches=expert_removal_patches([(layer, e)]))
    torch.testing.assert_close(by_hand["logits"], out["logits"], atol=0, rtol=0)


def test_experts_and_heads_together_and_bad_requests(model):
    c = model.config
    ids = model.encode(TEXT)
    layer = c.moe_layers[0]
    both = ablate(model, ids, [(0, 1)], experts=[(layer, 0), (layer, 1), (layer, 0)])
    assert both.heads == [(0, 1)] and both.experts == [(layer, 0), (layer, 1)]
    assert float(both.ablated["blocks.0.attn.z"][1].abs().max()) == 0.0
    with pytest.raises(InputError, match=rf"expert {c.n_experts} is outside 0\.\.{c.n_experts - 1}"):
        ablate(model, ids, experts=[(layer, c.n_experts)])
    with pytest.raises(InputError, match=r"layer 9 is outside"):
        ablate(model, ids, experts=[(9, 0)])
    too_many = [(layer, e) for e in range(c.n_experts - c.top_k + 1)]
    with pytest.raises(InputError, match=rf"leaves {c.top_k - 1}, fewer than the {c.top_k} each token is sent to"):
        ablate(model, ids, experts=too_many)
    if c.dense_layers:
        with pytest.raises(InputError, match=f"block {c.dense_layers[0]} has no experts: its MLP is dense"):
            ablate(model, ids, experts=[(c.dense_layers[0], 0)])


def test_the_api_route_and_the_cli(model, moe_family_dir: Path, capsys: pytest.CaptureFixture):
    ids = model.encode(TEXT)
    layer = model.config.moe_layers[-1]
    e = _busiest(model.trace_ids(ids), layer)
    ref = ablate(model, ids, experts=[(layer, e)])
    with TestClient(create_app({"tiny": model}, ServerSettings())) as client:
        r = client.post("/api/analysis/ablate", json={"model": "tiny", "ids": ids, "experts": [[layer, e]], "top": 5})
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["experts"] == [[layer, e]] and d["heads"] == []
        assert d["loss_after"] == pytest.approx(ref.ablated_loss, rel=1e-6)
        assert d["kl"] == pytest.approx(ref.kl, rel=1e-5)
        r = client.post("/api/analysis/ablate", json={"model": "tiny", "ids": ids,
                                                       "experts": [[layer, model.config.n_experts]]})
        assert r.status_code == 422 and "is outside" in r.json()["detail"]
        r = client.post("/api/analysis/ablate", json={"model": "tiny", "ids": ids})
        assert r.status_code == 422 and "expert ([layer, expert])" in r.text
    code = cli.main(["ablate", TEXT, "--layer", str(layer), "--expert", str(e), "--json", "--model",
                     str(moe_family_dir), "--offline"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["experts"] == [[layer, e]] and out["heads"] == []
    assert out["loss_after"] == pytest.approx(ref.ablated_loss, rel=1e-6)
    code = cli.main(["ablate", TEXT, "--layer", str(layer), "--expert", str(e), "--model", str(moe_family_dir),
                     "--offline"])
    text = capsys.readouterr().out
    assert code == 0 and f"expert {e} of layer {layer} taken out of the routing" in text
