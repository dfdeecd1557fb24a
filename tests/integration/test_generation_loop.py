"""One sampling loop for every kind of model (`TextModel.generate_ids`): each model class says only how it computes
logits (`_start_decoding`: the prompt's, then one token at a time). The same Llama checkpoint run by our own code and
through transformers' modules computes the same logits, so the loop draws the same tokens from both, greedy and
sampled with a seed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM  # noqa: E402

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.engine import ExplainerModel  # noqa: E402
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.sampling import SamplingParams  # noqa: E402
from transformer_explainer.text_model import TextModel  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402


def test_both_kinds_of_model_share_the_loop() -> None:
    assert ExplainerModel.generate_ids is TextModel.generate_ids
    assert GenericModel.generate_ids is TextModel.generate_ids
    assert "generate_ids" not in vars(ExplainerModel) and "generate_ids" not in vars(GenericModel)


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExplainerModel, GenericModel]:
    folder: Path = write_checkpoint("llama", tmp_path_factory.mktemp("llama") / "llama", tokenizer=True)
    own = load_model(str(folder), allow_download=False)
    assert isinstance(own, ExplainerModel)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return own, GenericModel(hf, own.tokenizer, "llama-through-transformers")


@pytest.mark.parametrize("params", [SamplingParams(temperature=0), SamplingParams(temperature=0.8, top_k=20, seed=3),
                                    SamplingParams(temperature=1.5, top_p=0.95, seed=11)])
def test_the_same_checkpoint_generates_the_same_tokens_both_ways(both_ways, params: SamplingParams) -> None:
    own, generic = both_ways
    ids = own.encode("The king said hello to the queen")
    a = list(own.generate_ids(ids, 10, params, stop_at_eos=False))
    b = list(generic.generate_ids(ids, 10, params, stop_at_eos=False))
    assert [t.id for t in a] == [t.id for t in b] and len(a) == 10
    assert [t.position for t in a] == list(range(len(ids), len(ids) + 10))
    assert [t.prob for t in a] == pytest.approx([t.prob for t in b], rel=1e-4)
    if params.greedy:
        assert all(t.prob == 1.0 for t in a)
    else:  # a draw, not the most likely token each time
        assert len({t.id for t in a}) > 1 and all(0 < t.prob < 1 for t in a)


def test_generation_stops_at_the_context_and_refuses_a_bad_count(both_ways) -> None:
    from transformer_explainer.errors import InputError

    for model in both_ways:
        n = model.context_length
        ids = model.encode("The king")
        out = list(model.generate_ids(ids, n, SamplingParams(temperature=0), stop_at_eos=False))
        assert len(out) == n - len(ids) and out[-1].position == n - 1
        with pytest.raises(InputError, match="whole number"):
            list(model.generate_ids(ids, -1))
