"""What a patching costs before it runs: the number of patched runs is the one the engine makes (its progress
total), the arithmetic grows with the prompt, and a pair over a budget is refused with one sentence that names
what would fit, which does fit."""

from __future__ import annotations

import pytest

from transformer_explainer.config import DecoderConfig
from transformer_explainer.errors import InputError
from transformer_explainer.patching import KINDS, PatchingCost, patched_runs, run_gflop

CLEAN = "The cat sat on the mat and the dog sat on the"
CORRUPTED = "The cat sat on the rug and the dog sat on the"


@pytest.mark.parametrize("what", [KINDS, ("heads",), ("resid_pre", "mlp_out")])
def test_runs_are_the_engines(tiny_model, what) -> None:
    totals = []
    tiny_model.patch(CLEAN, CORRUPTED, " cat", " dog", what, batch_tokens=40,
                     progress=lambda done, total: totals.append((done, total)))
    T = len(tiny_model.encode(CLEAN))
    assert totals[-1] == (patched_runs(tiny_model.config, T, what),) * 2
    assert PatchingCost(tiny_model.config, T, tuple(what)).runs == totals[-1][1]


def test_the_cost_grows_with_the_prompt_and_the_model() -> None:
    small, gpt2 = DecoderConfig(n_layer=6, n_head=8, n_embd=256, vocab_size=8192), DecoderConfig()
    costs = [PatchingCost(small, t, KINDS).gflop for t in (4, 8, 16, 32)]
    assert costs == sorted(costs) and costs[-1] > 4 * costs[1]  # more runs, each over more tokens
    assert PatchingCost(gpt2, 16, KINDS).gflop > 5 * PatchingCost(small, 16, KINDS).gflop
    assert run_gflop(small, 10) > 0


def test_over_the_budget_says_what_fits() -> None:
    cfg = DecoderConfig()  # GPT-2 small
    cost = PatchingCost(cfg, 64, KINDS)
    cost.check(None)
    cost.check(cost.gflop)
    budget = 3000.0
    with pytest.raises(InputError) as e:
        cost.check(budget)
    msg = str(e.value)
    fits = cost.longest_prompt_within(budget)
    assert f"{cost.runs:,} patched runs" in msg and f"at most {fits} tokens" in msg and "heads alone" in msg
    assert PatchingCost(cfg, fits, KINDS).gflop <= budget < PatchingCost(cfg, fits + 1, KINDS).gflop
    PatchingCost(cfg, 64, ("heads",)).check(budget)  # what it names fits
    PatchingCost(cfg, fits, KINDS).check(budget)
    with pytest.raises(InputError, match="GFLOP"):
        PatchingCost(cfg, 1024, ("heads",)).check(1.0)  # nothing fits: no suggestion, still one sentence
