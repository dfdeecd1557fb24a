"""Head ablation through recorder patches on `attn.z`: exactly the chosen heads change, nothing upstream."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_explainer import InputError
from transformer_explainer.analysis import (
    ablate,
    ablate_each_head,
    ablation_patches,
    head_importance,
    head_means,
    prune_heads,
    text_loss,
)
from transformer_explainer.analysis.ablation import layer_heads

TEXT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def ids(tiny_model):
    return tiny_model.encode(TEXT)


@pytest.fixture(scope="module")
def means(tiny_model):
    return head_means(tiny_model, ["The cat sat on the mat.", "Water boils at one hundred degrees."])


def test_ablating_nothing_changes_nothing(tiny_model, ids):
    res = ablate(tiny_model, ids, [])
    for name in res.clean.names():
        assert torch.equal(res.clean[name], res.ablated[name]), name
    assert res.kl == 0.0 and res.loss_change == 0.0


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablating_a_head_sets_exactly_its_z(tiny_model, ids, means, mode):
    layer, head = 1, 2
    res = ablate(tiny_model, ids, [(layer, head)], mode=mode, means=means)
    clean, abl = res.clean, res.ablated
    z, z0 = abl[f"blocks.{layer}.attn.z"], clean[f"blocks.{layer}.attn.z"]
    expected = torch.zeros_like(z[head]) if mode == "zero" else means[layer, head].expand_as(z[head])
    assert torch.equal(z[head], expected)
    others = [h for h in range(tiny_model.config.n_head) if h != head]
    assert torch.equal(z[others], z0[others])
    # everything computed before the patch is untouched: embeddings, earlier blocks, this block's attention
    upstream = ["embed.token", "embed.position"] + [n for n in clean.names() if n.startswith("blocks.0.")]
    upstream += [f"blocks.{layer}.{s}" for s in ("resid_pre", "ln1.out", "attn.q", "attn.k", "attn.v", "attn.pattern")]
    for name in upstream:
        assert torch.equal(abl[name], clean[name]), name
    assert not torch.equal(abl[f"blocks.{layer}.attn_out"], clean[f"blocks.{layer}.attn_out"])
    assert not torch.equal(abl["logits"], clean["logits"])
    assert res.kl > 0


def test_zero_ablating_a_layer_leaves_only_the_output_bias(tiny_model, ids):
    layer = 0
    res = ablate(tiny_model, ids, layer_heads(tiny_model.config, layer))
    attn_out = res.ablated[f"blocks.{layer}.attn_out"]
    b_O = tiny_model.weight(f"blocks.{layer}.attn.b_O")
    torch.testing.assert_close(attn_out, b_O.expand_as(attn_out), atol=1e-6, rtol=0)


def test_loss_is_the_mean_next_token_cross_entropy(tiny_model, ids):
    logits = tiny_model.trace_ids(ids).logits
    manual = -torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:]).unsqueeze(1)).mean()
    assert text_loss(logits, ids) == pytest.approx(float(manual), rel=1e-5)
    with pytest.raises(InputError):
        text_loss(logits[:1], ids[:1])
    assert ablate(tiny_model, ids[:1], [(0, 0)]).clean_loss is None


def test_kl_and_top_changes(tiny_model, ids):
    res = ablate(tiny_model, ids, [(1, 0), (1, 1)])
    p = res.clean_probs
    lp = F.log_softmax(res.clean.next_token_logits().double(), -1)
    lq = F.log_softmax(res.ablated.next_token_logits().double(), -1)
    assert res.kl == pytest.approx(float(F.kl_div(lq, lp, reduction="sum", log_target=True)), rel=1e-6)
    rows = res.top_changes(3)
    assert rows[0][0] == int(p.argmax()) and all(b >= 0 and a >= 0 for _, b, a in rows)
    d = res.to_dict(tiny_model.tokenizer.token_text, 3)
    assert d["heads"] == [[1, 0], [1, 1]] and len(d["before"]) == 3


def test_importance_map_and_pruning(tiny_model, ids):
    L, H = tiny_model.config.n_layer, tiny_model.config.n_head
    imp = head_importance(tiny_model, ids)
    assert imp.loss_change.shape == (L, H) and (imp.kl >= 0).all()
    one = ablate(tiny_model, ids, [(1, 3)])
    assert float(imp.loss_change[1, 3]) == pytest.approx(one.loss_change, abs=1e-6)
    assert len(imp.ranked()) == L * H

    curve = prune_heads(tiny_model, ids, max_heads=2)
    assert len(curve.heads) == len(set(curve.heads)) == 2
    least, _ = imp.ranked()[-1]  # the greedy first step is the least important single head
    assert curve.heads[0] == least
    assert curve.losses[0] == pytest.approx(imp.clean_loss + float(imp.loss_change.min()), abs=1e-6)

    static = prune_heads(tiny_model, ids, max_heads=2, recompute=False)
    assert static.heads == [h for h, _ in reversed(imp.ranked())][:2]
    full = ablate(tiny_model, ids, static.heads)
    assert static.losses[-1] == pytest.approx(full.ablated_loss, abs=1e-6)


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_each_head_in_one_sweep_equals_ablate_and_importance(tiny_model, ids, means, mode):
    each, imp = ablate_each_head(tiny_model, ids, mode=mode, means=means, clean=tiny_model.trace_ids(ids))
    ref = head_importance(tiny_model, ids, mode=mode, means=means)
    assert torch.equal(imp.loss_change, ref.loss_change) and torch.equal(imp.kl, ref.kl)
    assert len(each) == tiny_model.config.n_layer * tiny_model.config.n_head
    one = ablate(tiny_model, ids, [(1, 2)], mode=mode, means=means)
    assert torch.equal(each[(1, 2)].ablated.logits, one.ablated.logits)
    assert each[(1, 2)].kl == one.kl and each[(1, 2)].ablated_loss == one.ablated_loss


def test_bad_ablations(tiny_model, ids):
    with pytest.raises(InputError):
        ablate(tiny_model, ids, [(tiny_model.config.n_layer, 0)])
    with pytest.raises(InputError):
        ablate(tiny_model, ids, [(0, tiny_model.config.n_head)])
    with pytest.raises(InputError):
        ablation_patches([(0, 0)], mode="mean")
    with pytest.raises(InputError):
        ablation_patches([(0, 0)], mode="random")  # type: ignore[arg-type]
