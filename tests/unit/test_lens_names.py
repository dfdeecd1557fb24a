"""The generic family's names (any transformers decoder, `bridge/`) are composed from declarations: what the bridge
records, then what each mechanism of the lens answers, declared once (`name_options.LENS_NAMES`). No mechanism's name is
written in names.py by hand, no description is written twice, each lens derives the stages its declaration names, and
the table is in computation order (a mechanism's stages after the recorded stage they follow)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from transformer_explainer import name_options, names
from transformer_explainer.bridge import latent_lens, mechanisms, moe_lens, per_layer_lens, post_norm_lens
from transformer_explainer.name_options import GLOBAL_LENS_NAMES, LENS_NAMES, LensNames
from transformer_explainer.names import (
    GENERIC_BLOCK_ACTIVATIONS,
    GENERIC_GLOBAL_ACTIVATIONS,
    GENERIC_RECORDED_BLOCK_ACTIVATIONS,
    GENERIC_RECORDED_GLOBAL_ACTIVATIONS,
    with_lenses,
)

SOURCES = [Path(names.__file__), Path(name_options.__file__)]


def literals(source: str) -> list[str]:
    """Every string a source writes (implicit concatenation joined, as Python reads it)."""
    return [n.value for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def generic_part(path: Path) -> str:
    """names.py's generic part (the own families' tables above it name their own dense MLPs' mlp.gate ...)."""
    text = path.read_text("utf-8")
    return text[text.index("# -- the generic family"):]


def lens_stages() -> dict[str, tuple[str, ...]]:
    """What each lens of bridge/ answers, read from the lens code: its dataclass's `stages` default, or (the mixtures,
    one class for two) the stages its builder hands it."""
    out = {}
    for cls in (mechanisms.GatedDeltaNetLens, latent_lens.LatentAttentionLens, post_norm_lens.PostNormLens,
                per_layer_lens.PerLayerGateLens, per_layer_lens.PerLayerInputsLens):
        (field,) = [f for f in dataclasses.fields(cls) if f.name == "stages"]
        out[cls.__name__] = field.default
    out["deepseek_moe"] = moe_lens.DEEPSEEK_MOE_STAGES
    out["clamped_moe"] = moe_lens.CLAMPED_MOE_STAGES
    return out


def test_the_table_is_what_the_bridge_records_and_what_the_lenses_declare():
    declared = {s for lens in LENS_NAMES for s in lens.stages}
    assert set(GENERIC_BLOCK_ACTIVATIONS) == set(GENERIC_RECORDED_BLOCK_ACTIVATIONS) | declared
    assert not declared & set(GENERIC_RECORDED_BLOCK_ACTIVATIONS)
    declared_global = {s for lens in GLOBAL_LENS_NAMES for s in lens.stages}
    assert set(GENERIC_GLOBAL_ACTIVATIONS) == set(GENERIC_RECORDED_GLOBAL_ACTIVATIONS) | declared_global
    for lens in (*LENS_NAMES, *GLOBAL_LENS_NAMES):  # a stage one lens alone answers is its declaration's entry
        for name, entry in lens.entries.items():
            others = [x for x in (*LENS_NAMES, *GLOBAL_LENS_NAMES) if x is not lens and name in x.entries]
            table = GENERIC_BLOCK_ACTIVATIONS if name in GENERIC_BLOCK_ACTIVATIONS else GENERIC_GLOBAL_ACTIVATIONS
            every = (*LENS_NAMES, *GLOBAL_LENS_NAMES)
            shares = any(x is not lens and set(x.entries) & set(lens.entries) for x in every)
            if not others:  # its text; a lens that shares names with another (the mixtures) says whose
                assert table[name] == (entry if not shares else (entry[0], f"{entry[1]} ({lens.models})")), name
            else:  # shared (a router's logits): one entry saying each lens's text, whose it is
                assert table[name][0] == entry[0] and f"{entry[1]} ({lens.models})" in table[name][1], name


def test_every_lens_answers_its_declaration_and_the_table_has_it():
    answered = lens_stages()
    table = {*GENERIC_BLOCK_ACTIVATIONS, *GENERIC_GLOBAL_ACTIVATIONS}
    for lens, stages in answered.items():
        assert set(stages) <= table, f"{lens} answers {set(stages) - table}, which the generic table lacks"
    declared = {s for lens in (*LENS_NAMES, *GLOBAL_LENS_NAMES) for s in lens.stages}
    said = {s for stages in answered.values() for s in stages}
    assert declared == said, f"declared but no lens answers: {declared - said}"
    assert sorted(answered.values()) == sorted(lens.stages for lens in (*LENS_NAMES, *GLOBAL_LENS_NAMES))


def test_no_mechanism_name_nor_description_is_written_twice():
    declared = {s for lens in (*LENS_NAMES, *GLOBAL_LENS_NAMES) for s in lens.stages}
    written_in_names = set(literals(generic_part(SOURCES[0])))
    assert not declared & written_in_names, "names.py writes a mechanism's name by hand"
    everything = [s for path in SOURCES for s in literals(path.read_text("utf-8"))]
    for table in (GENERIC_BLOCK_ACTIVATIONS, GENERIC_GLOBAL_ACTIVATIONS):
        for name, (_, text) in table.items():
            assert everything.count(text) <= 1, f"{name}'s description is written {everything.count(text)} times"


def test_the_order_is_the_computation_order():
    order = list(GENERIC_BLOCK_ACTIVATIONS)
    for lens in LENS_NAMES:
        for after, stages in lens.after.items():  # each lens's stages follow their recorded stage, in its order
            at = [order.index(s) for s in stages]
            assert at == sorted(at) and at[0] > order.index(after), lens.models
            later = [s for s in GENERIC_RECORDED_BLOCK_ACTIVATIONS if order.index(s) > order.index(after)]
            assert not later or at[-1] < order.index(later[0]), lens.models
    # the stages today's views and lessons read in this order: the latents before the heads' queries, the clamped
    # SwiGLU between the router's choice and the experts' outputs, the norms' writes after the module outputs
    assert order.index("attn.k_rope") < order.index("attn.q")
    assert order.index("mlp.expert_weights") < order.index("mlp.gate") < order.index("mlp.expert_out")
    assert order.index("mlp_out") < order.index("ln2_post.out") < order.index("per_layer.resid")


def test_a_lens_that_contradicts_another_or_the_bridge_is_refused():
    recorded = {"resid_pre": (("T", "D"), "in"), "resid_post": (("T", "D"), "out")}
    a = LensNames("A", {"x.one": (("T",), "one"), "x.two": (("T", "D"), "two")}, {"resid_pre": ("x.one", "x.two")})
    b = LensNames("B", {"x.one": (("T",), "uno"), "x.three": (("T",), "three")}, {"resid_pre": ("x.three", "x.one")})
    merged = with_lenses(recorded, (a, b))
    assert list(merged) == ["resid_pre", "x.three", "x.one", "x.two", "resid_post"]  # both lenses' orders kept
    assert merged["x.one"] == (("T",), "one (A); uno (B)")
    assert merged["x.two"] == (("T", "D"), "two (A)") and merged["x.three"] == (("T",), "three (B)")  # whose, beside
    alone = with_lenses(recorded, (a,))
    assert alone["x.one"] == (("T",), "one") and alone["x.two"] == (("T", "D"), "two")
    with pytest.raises(ValueError, match="different dims"):
        with_lenses(recorded, (a, LensNames("C", {"x.one": (("D",), "one")}, {"resid_pre": ("x.one",)})))
    with pytest.raises(ValueError, match="does not record"):
        with_lenses(recorded, (LensNames("D", {"x.four": (("T",), "four")}, {"mlp_out": ("x.four",)}),))
    with pytest.raises(ValueError, match="recorded by the bridge"):
        with_lenses(recorded, (LensNames("E", {"resid_post": (("T", "D"), "out")}, {"resid_pre": ("resid_post",)}),))
    with pytest.raises(ValueError, match="places"):
        LensNames("F", {"x.five": (("T",), "five")}, {"resid_pre": ()})
