"""A family's names are derived from its declaration (`names.name_table`), so that a family is one file. The
derived tables equal, entry for entry and in the same order, the tables written by hand before
(`data/name_tables_before_derivation.json`, dumped from names.FAMILY_NAMES as it was at a5dd1bf); and a family declared
with other options gets the names those options have."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from transformer_explainer.families import FAMILIES
from transformer_explainer.families.declaration import Architecture
from transformer_explainer.names import FAMILY_NAMES, NameTable, name_table

BEFORE = json.loads((Path(__file__).parent / "data" / "name_tables_before_derivation.json").read_text("utf-8"))


def as_json(t: NameTable) -> dict:
    out = {}
    for f in dataclasses.fields(t):
        v = getattr(t, f.name)
        if f.name == "derivations":
            v = {k: {"op": d.op, "sources": list(d.sources)} for k, d in v.items()}
        elif isinstance(v, dict):
            v = {k: [list(dims), text] for k, (dims, text) in v.items()}
        else:
            v = list(v)
        out[f.name] = v
    return out


def test_every_family_has_a_table_derived_from_its_declaration():
    assert list(FAMILY_NAMES) == list(FAMILIES) == list(BEFORE)
    for name, family in FAMILIES.items():
        assert as_json(name_table(family)) == as_json(FAMILY_NAMES[name])


@pytest.mark.parametrize("family", list(BEFORE))
def test_the_derived_table_is_the_one_written_by_hand_before(family):
    got, want = as_json(FAMILY_NAMES[family]), BEFORE[family]
    for field in want:
        assert list(got[field]) == list(want[field]), f"{family}.{field}: order or keys"  # the order is the stages'
        assert got[field] == want[field], f"{family}.{field}"


def test_options_change_the_names():
    """A family declared once more with other options: Llama with QK-norm has Qwen3's names; with experts in
    every block, Mixtral's MLP names; Qwen3 with no bias option names no bias."""
    llama, qwen3, mixtral = FAMILIES["llama"], FAMILIES["qwen3"], FAMILIES["mixtral"]
    normed = dataclasses.replace(llama, arch=dataclasses.replace(llama.arch, qk_norm=True),
                                 biases=dict(qwen3.biases))
    assert as_json(name_table(normed)) == as_json(FAMILY_NAMES["qwen3"])
    experts = name_table(dataclasses.replace(llama, arch=dataclasses.replace(llama.arch, mlp="moe"), biases={}))
    assert experts.block_activations == FAMILY_NAMES["mixtral"].block_activations
    assert experts.block_weights == FAMILY_NAMES["mixtral"].block_weights
    assert experts.moe_stages == FAMILY_NAMES["mixtral"].moe_stages and not experts.dense_mlp_stages
    assert mixtral.biases == {}
    bare = name_table(dataclasses.replace(qwen3, biases={}))
    assert not any(".b_" in w for w in bare.block_weights)
    assert "attn.q_norm.w" in bare.block_weights


def test_an_architecture_without_names_is_refused():
    gpt2 = FAMILIES["gpt2"]
    rotary = dataclasses.replace(gpt2, arch=Architecture(norm="layer", positions="rope", qkv="fused", mlp="gelu"))
    with pytest.raises(ValueError, match="GPT-2's parts"):
        name_table(rotary)
