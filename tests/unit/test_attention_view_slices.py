"""What the attention view asks for, sliced as the server sends it: a derived attention stage (scores, scaled,
masked) asked for one head is computed for that head alone, with the numbers the whole stage has; a head's
pattern is sent as its lower triangle (`triangle`), the values the view shows, about half of them; and at 1,000
tokens the view's request answers those slices only, equal to the trace's (issue 40)."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from tests.conftest import make_hf_gpt2, make_hf_llama_family
from transformer_explainer import slicing
from transformer_explainer.encoding import decode_array, lower_triangle, triangle_rows, unpack_binary
from transformer_explainer.engine import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.media import BINARY_MEDIA_TYPE
from transformer_explainer.memo import values as memo_values
from transformer_explainer.schemas import TensorSpec
from transformer_explainer.slicing import (
    MAX_ELEMENTS,
    activation_tensor,
    activation_tensors,
    check_activations_fit,
    weight_tensor,
)

DERIVED = ("attn.scores", "attn.scaled_scores", "attn.masked_scores")


def arr(t) -> np.ndarray:
    a = np.frombuffer(base64.b64decode(t.data), np.float32)
    return triangle_rows(a, t.shape) if t.triangle else a.reshape(t.shape)


@pytest.fixture(scope="module")
def family_model(decoder_family_dir):
    return load_model(str(decoder_family_dir), allow_download=False)


def _check_heads(model, tr) -> None:
    cfg = model.config
    for layer in range(cfg.n_layer):
        for stage in DERIVED:
            name = f"blocks.{layer}.{stage}"
            full = tr[name].float().numpy()  # (H, T, S), by the trace's own derivation
            for h in range(cfg.n_head):
                got = activation_tensor(tr, TensorSpec(name=name, head=h, dtype="float32"))
                assert got.dims == ["T", "S"] and got.kv_head is None
                np.testing.assert_array_equal(arr(got), full[h])  # bit for bit (and -inf where masked)
                for p in (0, tr.n_tokens // 2, -1):
                    row = activation_tensor(tr, TensorSpec(name=name, head=h, position=p, dtype="float32"))
                    np.testing.assert_array_equal(arr(row), full[h, p])


def test_one_head_of_a_derived_stage_equals_the_whole_stage_gpt2(tiny_model):
    _check_heads(tiny_model, tiny_model.trace("The quick brown fox jumps over the lazy dog again and again"))


def test_one_head_of_a_derived_stage_equals_the_whole_stage_every_rotary_family(family_model):
    """Llama, Qwen2, Mistral (grouped-query heads, a sliding window), Qwen3 (QK-norm), Gemma 3 (its own scale,
    local layers), the mixtures: one head's scores, scaled and masked scores are the whole stage's at that head."""
    _check_heads(family_model, family_model.trace("hello there, the world is wide and the sea is deep " * 3))


def test_one_head_is_computed_alone(monkeypatch, tmp_path):
    """The view's request for one head's rows computes the scores' product for that head's group of query heads
    (H / G of them), not for every head three times over (scores, scaled from scores, masked from scaled)."""
    model = load_model(str(make_hf_llama_family(tmp_path, "llama")), allow_download=False)
    tr = model.trace("hello there, the world is wide and the sea is deep")
    cfg = model.config
    per = cfg.n_head // cfg.n_kv_heads
    assert 1 < per < cfg.n_head
    products: list[int] = []

    def counted(real):
        def product(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            products.append(q.shape[0])
            return real(q, k)
        return product

    real = memo_values.attention_scores  # the forward pass's product (memo.recipes), counted where either calls it
    monkeypatch.setattr(memo_values, "attention_scores", counted(real))
    monkeypatch.setattr(slicing, "attention_scores", counted(real), raising=False)
    specs = [TensorSpec(name=f"blocks.1.{s}", head=3, position=-1, dtype="float32") for s in DERIVED]
    out = activation_tensors(tr, specs)
    assert products == [per]  # one product, of the group that reads head 3's keys
    for spec, got in zip(specs, out, strict=True):
        np.testing.assert_array_equal(arr(got), tr[spec.name][3, -1].float().numpy())


# -- the lower triangle ------------------------------------------------------------------------------------------


def test_lower_triangle_round_trip():
    t = torch.arange(2 * 3 * 5, dtype=torch.float32).view(2, 3, 5)  # T = 3 queries after 2 earlier positions
    tri = lower_triangle(t)
    assert tri.shape == (2, 3 + 4 + 5)  # row i: keys 0..2 + i
    assert tri[0].tolist() == [0, 1, 2, 5, 6, 7, 8, 10, 11, 12, 13, 14]
    back = triangle_rows(tri.numpy(), list(t.shape))
    np.testing.assert_array_equal(back, t.tril(2).numpy())


def test_triangle_pattern_is_the_pattern(tiny_model):
    tr = tiny_model.trace("The quick brown fox jumps over the lazy dog")
    T = tr.n_tokens
    spec = TensorSpec(name="blocks.1.attn.pattern", head=2, triangle=True, dtype="float32")
    got = activation_tensor(tr, spec)
    assert got.triangle and got.shape == [T, T] and got.dims == ["T", "S"]
    assert len(base64.b64decode(got.data)) == 4 * T * (T + 1) // 2  # the lower triangle only
    np.testing.assert_array_equal(arr(got), tr["blocks.1.attn.pattern"][2].numpy())
    whole = activation_tensor(tr, TensorSpec(name="blocks.1.attn.pattern", triangle=True, dtype="float32"))
    assert whole.shape == [tiny_model.config.n_head, T, T]  # every head, each its own triangle
    np.testing.assert_array_equal(arr(whole), tr["blocks.1.attn.pattern"].numpy())


def test_triangle_is_not_used_where_it_would_lose_values(tiny_model):
    """A tensor with values above its diagonal (the masked scores' -inf) comes whole, and says so; one without the
    dims (T, S) is refused, with a sentence that says why."""
    tr = tiny_model.trace("The quick brown fox jumps over the lazy dog")
    masked = activation_tensor(tr, TensorSpec(name="blocks.0.attn.masked_scores", head=0, triangle=True,
                                              dtype="float32"))
    assert not masked.triangle
    np.testing.assert_array_equal(arr(masked), tr["blocks.0.attn.masked_scores"][0].numpy())
    with pytest.raises(InputError, match=r"\(T, S\)"):
        activation_tensor(tr, TensorSpec(name="blocks.0.attn.pattern", head=0, position=-1, triangle=True))
    with pytest.raises(InputError, match=r"\(T, S\)"):
        activation_tensor(tr, TensorSpec(name="blocks.0.resid_pre", triangle=True))
    with pytest.raises(InputError, match="apply to activations"):
        weight_tensor(tiny_model, TensorSpec(name="blocks.0.attn.W_Q", head=0, triangle=True))


# -- the view's request at 1,000 tokens, through the server ------------------------------------------------------


@pytest.fixture(scope="module")
def long_client(tmp_path_factory):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from transformer_explainer.server import ServerSettings, create_app

    folder = make_hf_gpt2(tmp_path_factory.mktemp("gpt2-1024"), n_layer=2, n_head=4, n_embd=64, n_positions=1024)
    model = load_model(str(folder), allow_download=False)
    with TestClient(create_app({"long": model}, ServerSettings())) as c:
        yield c, model


def view_specs(layer: int, head: int, position: int) -> list[dict]:
    """The attention view's request (web/src/lib/pipeline.ts, stage "attention"), as the app sends it."""
    b = f"blocks.{layer}."
    return [{"name": b + "attn.scores", "head": head, "position": position, "dtype": "float32"},
            {"name": b + "attn.scaled_scores", "head": head, "position": position, "dtype": "float32"},
            {"name": b + "attn.masked_scores", "head": head, "position": position, "dtype": "float32"},
            {"name": b + "attn.pattern", "head": head, "triangle": True, "dtype": "float32"}]


def test_the_attention_view_at_1000_tokens_gets_its_slices_only(long_client):
    """A last-word edit of a 1,000-token text (continued from the cached beginning, as typing does): the view's
    request answers the focus head's score rows and its pattern's lower triangle, nothing else, each equal to the
    same trace's whole tensor at that head (asked for whole, by /api/tensors)."""
    c, model = long_client
    ids = [int(i) for i in torch.randint(300, 20000, (1000,), generator=torch.Generator().manual_seed(4))]
    c.post("/api/trace", json={"ids": ids[:-1] + [11], "include": view_specs(1, 3, -1)})  # the text before the edit
    r = c.post("/api/trace", json={"ids": ids, "include": view_specs(1, 3, -1)},
               headers={"accept": BINARY_MEDIA_TYPE})
    assert r.status_code == 200, r.text
    out = unpack_binary(r.content)
    assert out["computed_positions"][0] > 0  # continued: the beginning was not run again
    got = out["tensors"]
    assert [(t["name"], t["shape"], t["triangle"]) for t in got] == [
        ("blocks.1.attn.scores", [1000], False), ("blocks.1.attn.scaled_scores", [1000], False),
        ("blocks.1.attn.masked_scores", [1000], False), ("blocks.1.attn.pattern", [1000, 1000], True)]
    tri = base64.b64decode(got[3]["data"])
    assert len(tri) == 4 * 1000 * 1001 // 2  # 2 MB: the whole pattern would be 4 MB
    assert len(r.content) < 2.1e6  # and little else: the tokens, the overview, the next-token answer
    for t in got:  # the trace's own tensor, asked for whole (every head), then taken at head 3
        whole = c.post("/api/tensors", json={"ids": ids, "tensors": [{"name": t["name"], "dtype": "float32"}]}).json()
        full = decode_array(whole["tensors"][0]["data"], whole["tensors"][0]["shape"], "float32")[3]
        values = np.frombuffer(base64.b64decode(t["data"]), np.float32)
        want = full[-1] if t["position"] is not None else full
        np.testing.assert_array_equal(triangle_rows(values, t["shape"]) if t["triangle"] else values, want)



def test_the_size_check_before_a_pass_counts_a_triangle_as_what_it_sends(tiny_model):
    """Every head's pattern at 1,200 tokens holds 5.76 M values (more than one answer's 4 M); its lower
    triangles, 2.88 M: asked for as triangles it is not refused before the pass, as it would not be after it."""
    cfg = tiny_model.config
    whole = TensorSpec(name="blocks.0.attn.pattern")
    assert cfg.n_head * 1200**2 > MAX_ELEMENTS >= cfg.n_head * 1200 * 1201 // 2
    with pytest.raises(InputError, match="more than the"):
        check_activations_fit(cfg, 1200, [whole])
    check_activations_fit(cfg, 1200, [whole.model_copy(update={"triangle": True})])
