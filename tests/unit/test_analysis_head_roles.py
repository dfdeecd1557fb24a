"""Head roles and attention statistics: forced patterns are recognised; scores match a plain loop."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from transformer_explainer.analysis import (
    ROLES,
    attention_stats,
    head_roles,
    reference_head_roles,
    repeated_random_tokens,
)
from transformer_explainer.analysis.roles import head_roles_of, role_masks

TEXT = "The cat sat on the mat, and then the cat sat on the rug."


def force_pattern(head: int, keys: Callable[[int], int]) -> Callable[[Tensor], Tensor]:
    """A patch on `attn.pattern` (1, H, T, S) putting all of one head's attention on key keys(q)."""

    def patch(p):
        p = p.clone()
        T = p.shape[2]
        p[:, head] = 0.0
        for q in range(T):
            p[:, head, q, keys(q)] = 1.0
        return p

    return patch


def loop_scores(trace, rarity=None) -> dict[str, torch.Tensor]:
    """Role scores written the slow, obvious way (no cache: queries start at 0)."""
    ids = trace.token_ids
    r = [rarity[i] if rarity is not None else i for i in ids]
    L, H = trace.config.n_layer, trace.config.n_head
    out = {}
    for role in ROLES:
        total, n = torch.zeros(L, H, dtype=torch.float64), 0
        for q in range(len(ids)):
            if role == "previous_token":
                keys = [q - 1] if q >= 1 else []
            elif role == "first_token":
                keys = [0] if q >= 1 else []
            elif role == "duplicate_token":
                keys = [s for s in range(q) if ids[s] == ids[q]]
            elif role == "induction":
                keys = [s for s in range(1, q) if ids[s - 1] == ids[q]]
            else:
                cands = list(range(1, q))
                keys = [s for s in cands if r[s] == max(r[c] for c in cands)] if len(cands) >= 2 else []
            if not keys:
                continue
            n += 1
            for layer in range(L):
                p = trace[f"blocks.{layer}.attn.pattern"].double()
                total[layer] += p[:, q, keys].sum(-1)
        out[role] = total / n if n else torch.full((L, H), math.nan, dtype=torch.float64)
    return out


def test_scores_match_a_plain_loop(tiny_model):
    trace = tiny_model.trace(TEXT)
    roles = head_roles(trace)
    expected = loop_scores(trace)
    for role in ROLES:
        torch.testing.assert_close(roles.scores[role].double(), expected[role], atol=1e-6, rtol=0)
    rarity = torch.rand(tiny_model.config.vocab_size, generator=torch.Generator().manual_seed(1))
    roles = head_roles(trace, rarity=rarity)
    torch.testing.assert_close(roles.scores["rare_token"].double(), loop_scores(trace, rarity)["rare_token"],
                               atol=1e-6, rtol=0)


def test_forced_previous_token_head_is_detected(tiny_model):
    layer, head = 1, 3
    ids = tiny_model.encode(TEXT)
    patches = {f"blocks.{layer}.attn.pattern": force_pattern(head, lambda q: max(q - 1, 0))}
    trace = tiny_model.trace_ids(ids, patches=patches)
    roles = head_roles(trace)
    assert roles.scores["previous_token"][layer, head].item() == pytest.approx(1.0)
    assert roles.top("previous_token", 1)[0][:2] == (layer, head)
    assert roles.role_of(layer, head) == "previous_token"
    stats = attention_stats(trace)
    assert stats.entropy[layer, head].item() == pytest.approx(0.0, abs=1e-9)
    assert stats.mean_distance[layer, head].item() == pytest.approx(1.0)


def test_forced_first_token_head_is_detected(tiny_model):
    patches = {"blocks.0.attn.pattern": force_pattern(1, lambda q: 0)}
    trace = tiny_model.trace_ids(tiny_model.encode(TEXT), patches=patches)
    roles = head_roles(trace)
    assert roles.scores["first_token"][0, 1].item() == pytest.approx(1.0)
    assert roles.role_of(0, 1) == "first_token"


def test_forced_induction_and_duplicate_heads_on_the_probe(tiny_model):
    n = 10
    ids = repeated_random_tokens(tiny_model.config.vocab_size, n, seed=3, bos=tiny_model.tokenizer.eos_id())
    assert ids[1 : n + 1] == ids[n + 1 :] and len(set(ids[1 : n + 1])) == n
    # in the second copy, query q holds R[q - n - 1]: its first occurrence is at q - n, the token after at q - n + 1
    induction = force_pattern(0, lambda q: q - n + 1 if q > n else q)
    duplicate = force_pattern(2, lambda q: q - n if q > n else q)
    trace = tiny_model.trace_ids(ids, patches={"blocks.1.attn.pattern": lambda p: duplicate(induction(p))})
    roles = head_roles(trace)
    assert roles.counts["induction"] == roles.counts["duplicate_token"] == n
    assert roles.scores["induction"][1, 0].item() == pytest.approx(1.0)
    assert roles.scores["duplicate_token"][1, 2].item() == pytest.approx(1.0)
    assert roles.role_of(1, 0) == "induction" and roles.role_of(1, 2) == "duplicate_token"


def test_masks_of_a_continuation_are_the_tail_of_the_full_masks():
    ids = torch.tensor([5, 7, 5, 9, 7, 5, 11, 3])
    full = role_masks(ids, 0)
    tail = role_masks(ids, 5)
    for role in ROLES:
        assert torch.equal(tail[role], full[role][5:]), role


def test_reference_set_and_pooling(tiny_model):
    ref = reference_head_roles(tiny_model, ["Alice met Bob. Then Alice thanked Bob."], probe_length=8)
    L, H = tiny_model.config.n_layer, tiny_model.config.n_head
    assert ref.source == "reference" and all(ref.counts[r] > 0 for r in ROLES)
    for role in ROLES:
        s = ref.scores[role]
        assert s.shape == (L, H) and ((s >= 0) & (s <= 1 + 1e-6)).all()
    a, b = tiny_model.trace("one two one two"), tiny_model.trace("three")
    pooled = head_roles_of([a, b])
    torch.testing.assert_close(pooled.scores["previous_token"], head_roles(a).scores["previous_token"])
    assert math.isnan(head_roles(b).scores["previous_token"][0, 0].item())
    assert head_roles(b).to_dict()["scores"]["previous_token"][0][0] is None


def test_uniform_attention_statistics(tiny_model):
    def uniform(p: Tensor) -> Tensor:
        return torch.tril(torch.ones_like(p)) / torch.arange(1, p.shape[-1] + 1).view(-1, 1)

    ids = tiny_model.encode(TEXT)
    trace = tiny_model.trace_ids(ids, patches={"blocks.0.attn.pattern": uniform})
    stats = attention_stats(trace)
    qs = torch.arange(1, len(ids), dtype=torch.float64)
    torch.testing.assert_close(stats.normalized_entropy[0], torch.ones(tiny_model.config.n_head))
    assert stats.entropy[0, 0].item() == pytest.approx(float((qs + 1).log().mean()), rel=1e-5)
    assert stats.mean_distance[0, 0].item() == pytest.approx(float((qs / 2).mean()), rel=1e-5)
    assert stats.queries == len(ids) - 1
