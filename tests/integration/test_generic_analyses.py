"""The analyses on decoders that run through transformers' own modules (issue 34): the logit lens, head ablation
through z, direct logit attribution by residual components and activation patching, with the return types and
meaning of our own families' versions, on random-weight checkpoints of llama-like dense models (phi3, olmo3),
hybrids (qwen3_5_text: Gated DeltaNet; lfm2: short convolutions) and gpt_oss (sinks, biases).

Each is checked against a computation of the test's own: transformers' eager forward with hooks of the test's own
(a head's slice of the output projection's input zeroed, a module's output replaced at one position), the final
norm's scale from its definition (1 / rms), the components summed; and what does not apply is refused in one
sentence."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from fastapi.testclient import TestClient  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.analysis.ablation import ablate, head_importance, head_means  # noqa: E402
from transformer_explainer.analysis.lens import lens_logits, logit_lens  # noqa: E402
from transformer_explainer.attribution import Attribution  # noqa: E402
from transformer_explainer.errors import InputError  # noqa: E402
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.patching import KINDS, Patching, PatchingCost  # noqa: E402
from transformer_explainer.server import create_app  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402

FAMILIES = ["phi3", "olmo3", "qwen3_5_text", "lfm2", "gpt_oss"]
TOL = 1e-5
TEXT = "The king said, 'Hello!' and then left the room; the queen stayed."
Opened = Callable[[str], tuple[GenericModel, torch.nn.Module]]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-12))


@pytest.fixture(scope="module")
def opened(tmp_path_factory: pytest.TempPathFactory) -> Opened:
    """model_type -> (the checkpoint opened by load_model, the same checkpoint in transformers with eager
    attention: the test's own reference)."""
    cache: dict[str, tuple[GenericModel, torch.nn.Module]] = {}

    def get(model_type: str) -> tuple[GenericModel, torch.nn.Module]:
        if model_type not in cache:
            folder = write_checkpoint(model_type, tmp_path_factory.mktemp(model_type) / model_type, tokenizer=True)
            model = load_model(str(folder))
            assert isinstance(model, GenericModel)
            eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
            cache[model_type] = (model, eager.eval())
        return cache[model_type]

    return get


def _layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.get_decoder().layers


def _attention(layer: torch.nn.Module) -> torch.nn.Module:
    return next(getattr(layer, n) for n in ("self_attn", "attn", "attention") if hasattr(layer, n))


def _o_proj(layer: torch.nn.Module) -> torch.nn.Module:
    """The attention's output projection, by the names transformers gives it (the test's own lookup)."""
    attn = _attention(layer)
    return next(getattr(attn, n) for n in ("o_proj", "out_proj", "dense") if hasattr(attn, n))


def _mlp(layer: torch.nn.Module) -> torch.nn.Module:
    return next(getattr(layer, n) for n in ("mlp", "feed_forward") if hasattr(layer, n))


def _eager_logits(model: torch.nn.Module, ids: list[int], *, pre: list[tuple[torch.nn.Module, Callable]] = (),
                  post: list[tuple[torch.nn.Module, Callable]] = ()) -> torch.Tensor:
    """transformers' eager forward with the test's own pre-hooks and forward hooks: the logits (T, V)."""
    handles = [m.register_forward_pre_hook(h) for m, h in pre] + [m.register_forward_hook(h) for m, h in post]
    try:
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    finally:
        for h in handles:
            h.remove()


# -- the logit lens -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_lens_at_the_last_layer_is_the_logits(model_type: str, opened: Opened) -> None:
    model, eager = opened(model_type)
    trace = model.trace(TEXT)
    L = model.config.n_layer
    reference = _eager_logits(eager, trace.token_ids)
    assert _rel(lens_logits(model, trace, L), reference) < TOL
    assert _rel(lens_logits(model, trace, L, [2, -1]), reference[[2, -1]]) < TOL
    lens = logit_lens(model, trace, top=3)
    assert lens.top_ids.shape == (L + 1, trace.n_tokens, 3)
    assert lens.target_ids == reference.argmax(-1).tolist()  # followed: the model's final prediction
    assert (lens.target_rank[L] == 1).all()
    assert _rel(lens_logits(model, trace, 0), reference) > 1e-3  # the embeddings read otherwise
    with pytest.raises(InputError, match="outside"):
        lens_logits(model, trace, L + 1)


# -- head ablation through z -------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", FAMILIES)
def test_zeroing_a_head_equals_its_output_projection_input_zeroed(model_type: str, opened: Opened) -> None:
    model, eager = opened(model_type)
    ids = model.encode(TEXT)
    layer, head = model.config.attention_layers[-1], 1
    res = ablate(model, ids, [(layer, head)])
    dv = res.ablated[f"blocks.{layer}.attn.z"].shape[-1]

    def zero_slice(_m: torch.nn.Module, args: tuple) -> tuple:  # o_proj's input (1, T, H * Dv), heads in order
        x = args[0].clone()
        x[..., head * dv:(head + 1) * dv] = 0.0
        return (x, *args[1:])

    reference = _eager_logits(eager, ids, pre=[(_o_proj(_layers(eager)[layer]), zero_slice)])
    assert not res.ablated[f"blocks.{layer}.attn.z"][head].any()
    assert _rel(res.ablated.logits, reference) < TOL
    assert _rel(res.clean.logits, _eager_logits(eager, ids)) < TOL
    assert res.kl > 0 and res.loss_change is not None and res.loss_change != 0


def test_mean_ablation_puts_each_heads_mean_in_its_z(opened: Opened) -> None:
    model, _ = opened("lfm2")
    means = head_means(model, ["The king said hello.", "A queen stayed in the room."])
    attention = model.config.attention_layers
    assert not means[[i for i in range(model.config.n_layer) if i not in attention]].any()
    layer = attention[0]
    res = ablate(model, TEXT, [(layer, 2)], mode="mean", means=means)
    z = res.ablated[f"blocks.{layer}.attn.z"]
    assert torch.equal(z[2], means[layer, 2].expand_as(z[2]))
    assert torch.equal(z[0], res.clean[f"blocks.{layer}.attn.z"][0])


def test_importance_covers_the_attention_layers_alone(opened: Opened) -> None:
    model, _ = opened("lfm2")
    ids = model.encode("The king said hello to the queen")
    imp = head_importance(model, ids)
    attention = model.config.attention_layers
    for i in range(model.config.n_layer):
        assert torch.isnan(imp.loss_change[i]).all() == (i not in attention), i
    assert len(imp.ranked()) == len(attention) * model.config.n_head
    (layer, h), change = imp.ranked()[0]
    assert change == pytest.approx(ablate(model, ids, [(layer, h)]).loss_change, abs=1e-5)


def test_what_ablation_cannot_do_is_refused_in_one_sentence(opened: Opened) -> None:
    model, _ = opened("lfm2")
    conv = next(i for i in range(model.config.n_layer) if i not in model.config.attention_layers)
    with pytest.raises(InputError, match=f"layer {conv} has no attention") as e:
        ablate(model, TEXT, [(conv, 0)])
    with pytest.raises(InputError, match="no experts") as e2:
        ablate(model, TEXT, experts=[(1, 0)])
    gpt_oss, _ = opened("gpt_oss")
    with pytest.raises(InputError, match="routers the bridge does not patch") as e3:
        ablate(gpt_oss, TEXT, experts=[(1, 0)])
    for err in (e, e2, e3):
        assert str(err.value).count(". ") == 0


# -- direct logit attribution ------------------------------------------------------------------------------


def _kinds(a: Attribution, layer: int) -> set[str]:
    return {c.kind for c in a.components if c.layer == layer}


# what each layer's mixer is split into: heads where its write is its attention's output projection of z
SPLIT = {"phi3": "heads", "gpt_oss": "heads", "olmo3": "mixer",  # OLMo 3 normalises attn_out before it adds it
         "qwen3_5_text": "mixer",  # linear attention, and a gate between z and the output projection
         "lfm2": "by layer"}  # heads in its attention layers, its convolutions whole


@pytest.mark.parametrize("model_type", FAMILIES)
def test_attribution_components_sum_to_the_logit(model_type: str, opened: Opened) -> None:
    model, eager = opened(model_type)
    trace = model.trace(TEXT)
    reference = _eager_logits(eager, trace.token_ids)
    L, c = model.config.n_layer, model.config
    for position, versus in ((None, None), (5, 7)):
        a = model.attribute(trace, 40, versus, position=position)
        p = trace.n_tokens - 1 if position is None else position
        expected = float(reference[p, 40] - (reference[p, versus] if versus is not None else 0.0))
        assert a.metric == pytest.approx(expected, abs=1e-4)
        assert a.total() == pytest.approx(a.metric, abs=1e-4 * max(1.0, abs(a.metric)))
        # the frozen scale is the final norm's 1 / rms at that position (all five norms here are RMSNorms)
        x = trace[f"blocks.{L - 1}.resid_post"][p].double()
        eps = eager.config.rms_norm_eps if hasattr(eager.config, "rms_norm_eps") else eager.config.norm_eps
        assert a.scale == pytest.approx(float(1 / torch.sqrt((x * x).mean() + eps)), rel=1e-5)
    assert a.components[0].kind == "embed"
    for i in range(L):
        kinds = _kinds(a, i)
        assert "mlp" in kinds
        heads = "head" in kinds
        expected_heads = SPLIT[model_type] == "heads" or (SPLIT[model_type] == "by layer" and i in c.attention_layers)
        assert heads == expected_heads and ("mixer" in kinds) != heads, (i, kinds)
        assert bool(torch.isnan(a.heads[i]).all()) == (not heads), i  # a layer not split by head: no head values
    assert [row == [None] * c.n_head for row in a.to_dict()["heads"]] == torch.isnan(a.heads).all(-1).tolist()


def _contribution(model: GenericModel, eager: torch.nn.Module, trace, v: torch.Tensor, p: int, t: int) -> float:
    """A residual vector's share of logit t at position p, computed by the test: the RMS norm's weight and its
    1 / rms at p (from its definition), then the unembedding's row of t."""
    x = trace[f"blocks.{model.config.n_layer - 1}.resid_post"][p].double()
    norm = eager.get_decoder().norm
    scale = 1 / torch.sqrt((x * x).mean() + norm.variance_epsilon)
    with torch.no_grad():
        return float((v.double() * norm.weight.double() * scale) @ eager.lm_head.weight[t].double())


@pytest.mark.parametrize("model_type", ["phi3", "gpt_oss"])
def test_a_layers_heads_add_up_to_its_attention_output(model_type: str, opened: Opened) -> None:
    model, eager = opened(model_type)
    trace = model.trace(TEXT)
    p, t = 9, 40
    a = model.attribute(trace, t, position=p)
    for i in range(model.config.n_layer):
        parts = sum(c.value for c in a.components if c.layer == i and c.kind in ("head", "attn_bias"))
        assert parts == pytest.approx(_contribution(model, eager, trace, trace[f"blocks.{i}.attn_out"][p], p, t),
                                      abs=1e-4)
        mlp = next(c.value for c in a.components if c.layer == i and c.kind == "mlp")
        assert mlp == pytest.approx(_contribution(model, eager, trace, trace[f"blocks.{i}.mlp_out"][p], p, t), abs=1e-4)
    embed = a.components[0].value
    assert embed == pytest.approx(_contribution(model, eager, trace, trace["blocks.0.resid_pre"][p], p, t), abs=1e-4)
    assert ("attn_bias" in {c.kind for c in a.components}) == (model_type == "gpt_oss")  # its o_proj has a bias


def test_attribution_refuses_a_layer_it_cannot_split(tmp_path: Path) -> None:
    """Granite scales each sublayer's output before it adds it, with no point between them the bridge finds."""
    model = load_model(str(write_checkpoint("granite", tmp_path / "granite", tokenizer=True)))
    with pytest.raises(InputError, match="cannot be split into parts") as e:
        model.attribute(TEXT)
    assert str(e.value).count(". ") == 0


# -- activation patching -----------------------------------------------------------------------------------


def _pair(model: GenericModel) -> tuple[list[int], list[int], int, int]:
    """A clean prompt, the same with one token changed (position 4), and an answer and a wrong token whose
    logit difference the change moves."""
    clean = model.encode("The king said hello to the")
    corrupted = list(clean)
    corrupted[4] = 200 if clean[4] != 200 else 201
    a = int(model.last_logits(clean).argmax())
    w = int(model.last_logits(corrupted).argmax())
    if w == a:
        w = int(model.last_logits(corrupted).topk(2).indices[1])
    return clean, corrupted, a, w


@pytest.fixture(scope="module")
def patched(opened: Opened) -> Callable[[str], tuple[Patching, list[int], list[int]]]:
    cache: dict[str, tuple[Patching, list[int], list[int]]] = {}

    def get(model_type: str) -> tuple[Patching, list[int], list[int]]:
        if model_type not in cache:
            model, _ = opened(model_type)
            clean, corrupted, a, w = _pair(model)
            cache[model_type] = (model.patch(clean, corrupted, a, w), clean, corrupted)
        return cache[model_type]

    return get


@pytest.mark.parametrize("model_type", ["phi3", "lfm2", "gpt_oss"])
def test_patching_the_extreme_cells(model_type: str, opened: Opened, patched) -> None:
    model, eager = opened(model_type)
    p, clean, corrupted = patched(model_type)
    L, H, T = model.config.n_layer, model.config.n_head, len(clean)
    assert p.clean == pytest.approx(float(_eager_logits(eager, clean)[-1, p.answer] -
                                          _eager_logits(eager, clean)[-1, p.wrong]), abs=1e-4)
    assert p.corrupted == pytest.approx(float(_eager_logits(eager, corrupted)[-1, p.answer] -
                                              _eager_logits(eager, corrupted)[-1, p.wrong]), abs=1e-4)
    assert set(p.grids) == set(KINDS)
    assert p.grids["resid_pre"].shape == (L, T) and p.grids["heads"].shape == (L, H)
    resid = p.grids["resid_pre"]
    # the first layer's input at the changed position is the whole difference: the clean run (1)
    assert float(resid[0, 4]) == pytest.approx(1.0, abs=1e-4)
    # before the changed position the two runs are the same, at every layer: the corrupted run (0)
    assert resid[:, :4].abs().max() < 1e-5 and p.grids["mlp_out"][:, :4].abs().max() < 1e-5
    # at the first layer, any other position: the corrupted run (0), nothing differs there yet
    assert resid[0, 5:].abs().max() < 1e-5
    # the last layer's input at the last position decides the last layer's output there, but the last layer still
    # reads the corrupted run's other positions: a cell that is not 0
    assert abs(float(resid[L - 1, T - 1])) > 1e-3
    attention = set(model.config.attention_layers)
    for i in range(L):  # a layer without attention has no attn_out or heads cells: NaN, None in the JSON
        for kind in ("attn_out", "heads"):
            assert bool(torch.isnan(p.grids[kind][i]).all()) == (i not in attention), (kind, i)
    d = p.to_dict()
    assert all((cell is None) == (i not in attention) for i, row in enumerate(d["grids"]["heads"]) for cell in row)
    runs = PatchingCost(model.config, T, KINDS).runs
    assert runs == sum(int((~torch.isnan(g)).sum()) for g in p.grids.values())


def _normalised(p: Patching, logits: torch.Tensor) -> float:
    m = float(logits[-1, p.answer]) - float(logits[-1, p.wrong])
    return (m - p.corrupted) / (p.clean - p.corrupted)


@pytest.mark.parametrize("model_type", ["phi3", "lfm2", "gpt_oss"])
def test_a_patched_cell_equals_a_hand_made_patched_forward(model_type: str, opened: Opened, patched) -> None:
    model, eager = opened(model_type)
    p, clean, corrupted = patched(model_type)
    trace = model.trace_ids(clean)
    layer, pos, head = model.config.attention_layers[0], 5, 1
    layers = _layers(eager)

    def at(name: str) -> Callable:
        value = trace[name][pos]

        def hook(_m: torch.nn.Module, _args: tuple, out):  # the module's output at one position, the clean run's
            first = out[0] if isinstance(out, tuple) else out
            first = first.clone()
            first[0, pos] = value
            return (first, *out[1:]) if isinstance(out, tuple) else first
        return hook

    attn = _eager_logits(eager, corrupted, post=[(_attention(layers[layer]), at(f"blocks.{layer}.attn_out"))])
    assert float(p.grids["attn_out"][layer, pos]) == pytest.approx(_normalised(p, attn), abs=1e-4)
    mlp = _eager_logits(eager, corrupted, post=[(_mlp(layers[2]), at("blocks.2.mlp_out"))])
    assert float(p.grids["mlp_out"][2, pos]) == pytest.approx(_normalised(p, mlp), abs=1e-4)
    z = trace[f"blocks.{layer}.attn.z"][head]  # (T, Dv): the clean run's head at every position
    dv = z.shape[-1]

    def put_head(_m: torch.nn.Module, args: tuple) -> tuple:
        x = args[0].clone()
        x[0, :, head * dv:(head + 1) * dv] = z
        return (x, *args[1:])

    heads = _eager_logits(eager, corrupted, pre=[(_o_proj(layers[layer]), put_head)])
    assert float(p.grids["heads"][layer, head]) == pytest.approx(_normalised(p, heads), abs=1e-4)
    assert not math.isclose(float(p.grids["heads"][layer, head]), 0.0, abs_tol=1e-6)


# -- the server's routes -----------------------------------------------------------------------------------


def test_the_analysis_routes_answer_for_a_generic_model(opened: Opened) -> None:
    model, _ = opened("lfm2")
    clean, corrupted = "The cat sat on the mat", "The cat sat on the hat"
    c_ids, x_ids = model.encode(clean), model.encode(corrupted)
    changed = [i for i, (x, y) in enumerate(zip(c_ids, x_ids, strict=True)) if x != y]
    assert len(changed) == 1  # one token changed: its first-layer cell is the clean run
    a, w = int(model.last_logits(c_ids).argmax()), int(model.last_logits(x_ids).argmin())
    with TestClient(create_app({"m": model})) as client:
        lens = client.post("/api/analysis/lens", json={"model": "m", "text": TEXT, "top": 3})
        assert lens.status_code == 200, lens.text
        assert len(lens.json()["layers"]) == model.config.n_layer + 1
        layer = model.config.attention_layers[0]
        ab = client.post("/api/analysis/ablate", json={"model": "m", "text": TEXT, "heads": [[layer, 1]]})
        assert ab.status_code == 200 and ab.json()["kl"] > 0, ab.text
        conv = client.post("/api/analysis/ablate", json={"model": "m", "text": TEXT, "heads": [[0, 1]]})
        assert conv.status_code == 422 and "has no attention" in conv.text
        roles = client.post("/api/analysis/heads", json={"model": "m", "text": TEXT, "reference": False})
        assert roles.status_code == 200, roles.text  # the attention layers' heads; no value in a convolution layer's
        assert roles.json()["text"]["scores"]["previous_token"][0] == [None] * model.config.n_head
        assert None not in roles.json()["text"]["scores"]["previous_token"][layer]
        att = client.post("/api/attribution/attribute", json={"model": "m", "text": TEXT})
        assert att.status_code == 200, att.text
        body = att.json()
        assert "mixer" in {c["kind"] for c in body["components"]}
        assert body["heads"][0] == [None] * model.config.n_head  # a convolution layer: not split by head
        assert sum(c["value"] for c in body["components"]) + body["rest"] == pytest.approx(body["metric"], abs=1e-4)
        pr = client.post("/api/attribution/patch", json={"model": "m", "clean": clean, "corrupted": corrupted,
                                                          "answer": a, "wrong": w, "what": ["resid_pre", "heads"]})
        assert pr.status_code == 200, pr.text
        out = pr.json()
        assert out["grids"]["resid_pre"][0][changed[0]] == pytest.approx(1.0, abs=1e-4)
        c = model.config
        assert out["runs"] == len(c_ids) * c.n_layer + len(c.attention_layers) * c.n_head
        assert out["grids"]["heads"][0] == [None] * model.config.n_head  # a convolution layer: no heads


def test_the_many_pass_analyses_are_priced_for_a_generic_model(opened: Opened) -> None:
    """Importance, pruning and patching are priced before they run (GenericConfig.pass_gflop: the cost grows with
    the tokens), and refused in one sentence over the server's budget; were 500s (no `arch` on its config)."""
    from transformer_explainer.analysis.cost import AnalysisCost, importance_passes
    from transformer_explainer.server import ServerSettings

    model, _ = opened("lfm2")
    c = model.config
    assert 0 < c.pass_gflop(8) < c.pass_gflop(16) < 4 * c.pass_gflop(8)
    assert importance_passes(c) == 1 + len(c.attention_layers) * c.n_head  # the heads it has
    T = len(model.encode(TEXT))
    budget = AnalysisCost(c, T, importance_passes(c)).gflop / 2
    clean, corrupted = "The cat sat on the mat", "The cat sat on the hat"
    with TestClient(create_app({"m": model}, ServerSettings(max_analysis_gflop=budget))) as client:
        imp = client.post("/api/analysis/importance", json={"model": "m", "text": TEXT})
        assert imp.status_code == 422 and "forward passes" in imp.json()["detail"], imp.text
        pr = client.post("/api/attribution/patch", json={"model": "m", "clean": clean * 8, "corrupted": corrupted * 8,
                                                          "answer": 40, "wrong": 41})
        assert pr.status_code == 422 and "patched runs" in pr.json()["detail"], pr.text
