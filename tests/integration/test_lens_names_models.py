"""Each lens a model gets (bridge/: the mechanisms our code explains, found on random-weight checkpoints of the
families that have them) answers only names the generic table has, each declared by a lens
(`name_options.LENS_NAMES`), and the trace answers every one of them; together the five families' lenses answer every
declared name."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.name_options import GLOBAL_LENS_NAMES, LENS_NAMES  # noqa: E402
from transformer_explainer.names import GENERIC_BLOCK_ACTIVATIONS, GENERIC_GLOBAL_ACTIVATIONS, block_name  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402

# the families whose layers have a mechanism of ours: Gated DeltaNet, latent attention and DeepSeek's experts, gpt-oss's
# experts, Gemma 4's per-layer inputs, OLMo 3's norms after each sublayer
MECHANISM_FAMILIES = ("qwen3_5_text", "deepseek_v3", "gpt_oss", "gemma4_text", "olmo3")


def test_every_lens_answers_declared_names_the_trace_has(tmp_path_factory: pytest.TempPathFactory):
    answered: set[str] = set()
    for model_type in MECHANISM_FAMILIES:
        folder = write_checkpoint(model_type, tmp_path_factory.mktemp(model_type) / "ckpt", tokenizer=True)
        model = load_model(str(folder), dtype="float32")
        assert isinstance(model, GenericModel)
        names = set(model.config.activation_names())
        lenses = model._mechanisms  # the lenses it was given: layer -> a lens, or several (LayerLenses)
        assert lenses, model_type
        for i, lens in lenses.items():
            for stage in lens.stages:
                assert stage in GENERIC_BLOCK_ACTIVATIONS, f"{model_type}: {stage} is not in the generic table"
                assert block_name(i, stage) in names, f"{model_type}: the trace lacks {block_name(i, stage)}"
            answered |= set(lens.stages)
        if model._outside_lens is not None:
            for stage in model._outside_lens.stages:
                assert stage in GENERIC_GLOBAL_ACTIVATIONS and stage in names, f"{model_type}: {stage}"
            answered |= set(model._outside_lens.stages)
    declared = {s for lens in (*LENS_NAMES, *GLOBAL_LENS_NAMES) for s in lens.stages}
    assert answered == declared, f"declared, no lens answers: {declared - answered}; undeclared: {answered - declared}"
