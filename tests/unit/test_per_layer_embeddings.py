"""Gemma 4's per-layer embeddings and KV sharing in code of our own (models/per_layer_embeddings.py) against
transformers' Gemma4TextModel: the per-layer inputs against get_per_layer_inputs / project_per_layer_inputs, each
layer's gate against the decoder layer's own computation (caught by hooks inside a whole model's pass), in float32 and
bfloat16, each named internal against an independent computation; which layer's keys and values each layer attends
with against the keys transformers hands on, and the cache they save against transformers' cache and hand arithmetic."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.hf_checkpoints import FAMILIES, SMALL
from transformer_explainer.models.per_layer_embeddings import (
    PerLayerConfig,
    PerLayerEmbeddings,
    PerLayerGate,
    kv_cache_bytes,
    kv_sharing,
)
from transformer_explainer.models.recorder import Recorder, scope
from transformer_explainer.name_options import PER_LAYER_EMBEDDING_ACTIVATIONS, PER_LAYER_GATE_ACTIVATIONS

transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("transformers.models.gemma4.modeling_gemma4")

T = 12  # three times the window (4)
EMBEDDING_KEYS = ("embed_tokens_per_layer.", "per_layer_model_projection.", "per_layer_projection_norm.")
GATE_KEYS = ("per_layer_input_gate.", "per_layer_projection.", "post_per_layer_input_norm.")


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def config(**overrides) -> transformers.PretrainedConfig:
    cfg = transformers.AutoConfig.for_model("gemma4_text", **{**SMALL, **FAMILIES["gemma4_text"],
                                                              "vocab_size_per_layer_input": 320, **overrides})
    cfg._attn_implementation = "eager"
    return cfg


def model(seed: int = 0, **overrides) -> tuple[transformers.PretrainedConfig, torch.nn.Module]:
    """A random Gemma4TextModel: matrices N(0, 0.2), norms' weights in [0.5, 1.5], each layer_scalar in [0.5, 1.5]
    (1 at initialisation: random, it shows the gate's write is added before the block's scalar)."""
    cfg = config(**overrides)
    ref = hf.Gemma4TextModel(cfg).eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)
        for layer in ref.layers:
            layer.layer_scalar.uniform_(0.5, 1.5)
    return cfg, ref


def part(state: dict, prefixes: tuple[str, ...], under: str = "") -> dict:
    return {k[len(under):]: v for k, v in state.items() if k.startswith(tuple(under + p for p in prefixes))}


def ours(cfg, ref) -> tuple[PerLayerEmbeddings, list[PerLayerGate]]:
    c = PerLayerConfig.from_hf(cfg)
    embeddings = PerLayerEmbeddings(c).eval()
    embeddings.load_state_dict(part(ref.state_dict(), EMBEDDING_KEYS), strict=True)
    gates = []
    for i in range(cfg.num_hidden_layers):
        gate = PerLayerGate(c).eval()
        gate.load_state_dict(part(ref.state_dict(), GATE_KEYS, f"layers.{i}."), strict=True)
        gates.append(gate)
    return embeddings, gates


def ids(seed: int = 1, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, 320, (batch, T), generator=torch.Generator().manual_seed(seed))


def caught(ref, tokens: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Inside transformers' own pass, per layer: what it gives its gate (x, after the MLP's write, and its per-layer
    input), what its gate's norm returns, and the layer's output."""
    seen: list[dict[str, torch.Tensor]] = [{} for _ in ref.layers]
    hooks = []
    for i, layer in enumerate(ref.layers):
        def pre(module, args, kwargs, i=i):
            seen[i]["per_layer_input"] = args[1] if len(args) > 1 else kwargs["per_layer_input"]

        hooks += [layer.register_forward_pre_hook(pre, with_kwargs=True),
                  layer.per_layer_input_gate.register_forward_pre_hook(
                      lambda m, a, i=i: seen[i].__setitem__("x", a[0].clone())),
                  layer.post_per_layer_input_norm.register_forward_hook(
                      lambda m, a, out, i=i: seen[i].__setitem__("per_layer_out", out.clone())),
                  layer.register_forward_hook(lambda m, a, out, i=i: seen[i].__setitem__("out", out.clone()))]
    try:
        ref(tokens)
    finally:
        for h in hooks:
            h.remove()
    return seen


@torch.no_grad()
def test_per_layer_inputs_equal_transformers():
    cfg, ref = model()
    embeddings, _ = ours(cfg, ref)
    tokens = ids()
    x0 = ref.embed_tokens(tokens)
    rec = Recorder()
    got = embeddings(tokens, x0, rec)
    assert set(rec.values) == set(PER_LAYER_EMBEDDING_ACTIVATIONS)  # the table names what is recorded
    want_per_layer = ref.get_per_layer_inputs(tokens)
    assert got.shape == (2, T, 4, 8)
    assert relative(rec.values["embed.per_layer"], want_per_layer) < 1e-5
    assert relative(rec.values["embed.per_layer_projected"], ref.project_per_layer_inputs(x0, None)) < 1e-5
    want = ref.project_per_layer_inputs(x0, want_per_layer)
    assert relative(got, want) < 1e-5
    assert relative(embeddings(tokens, x0), want) < 1e-5  # the fast path


@torch.no_grad()
def test_the_per_layer_inputs_are_the_equations():
    cfg, ref = model(seed=2)
    embeddings, _ = ours(cfg, ref)
    tokens = ids(seed=3)
    x0 = ref.embed_tokens(tokens)
    rec = Recorder()
    embeddings(tokens, x0, rec)
    got = rec.values
    L, P, D = 4, 8, 64
    table = ref.embed_tokens_per_layer.weight  # (V, L * P): layer l's P values at columns l * P ... (l + 1) * P
    per_layer = torch.stack([table[tokens][..., l * P:(l + 1) * P] for l in range(L)], dim=2) * math.sqrt(P)
    assert relative(got["embed.per_layer"], per_layer) < 1e-6
    W = ref.per_layer_model_projection.weight  # (L * P, D)
    raw = torch.stack([x0 @ W[l * P:(l + 1) * P].T for l in range(L)], dim=2) / math.sqrt(D)
    normed = raw / raw.square().mean(-1, keepdim=True).add(1e-6).sqrt() * ref.per_layer_projection_norm.weight
    assert relative(got["embed.per_layer_projected"], normed) < 1e-5
    whole = raw.flatten(2) / raw.flatten(2).square().mean(-1, keepdim=True).add(1e-6).sqrt()
    # one norm over all L * P values together would differ: each layer's P values are normed on their own
    assert relative(whole.view_as(raw) * ref.per_layer_projection_norm.weight, normed) > 0.01
    assert relative(got["embed.per_layer_inputs"], (normed + per_layer) / math.sqrt(2)) < 1e-5


@torch.no_grad()
def test_each_layers_gate_equals_the_decoder_layers_own():
    """Every layer (those reusing keys too): our per-layer inputs slice l equals what transformers passes layer l, our
    gate on the x transformers gives its own gate returns what the layer adds, and times layer_scalar its output."""
    cfg, ref = model(seed=4)
    embeddings, gates = ours(cfg, ref)
    tokens = ids(seed=5)
    seen = caught(ref, tokens)
    inputs = embeddings(tokens, ref.embed_tokens(tokens))
    for i, (gate, s) in enumerate(zip(gates, seen, strict=True)):
        assert relative(inputs[:, :, i], s["per_layer_input"]) < 1e-5, i
        rec = Recorder()
        got = gate(s["x"], inputs[:, :, i], scope(rec, f"blocks.{i}"))
        assert set(rec.values) == {f"blocks.{i}.{n}" for n in PER_LAYER_GATE_ACTIVATIONS}
        assert relative(rec.values[f"blocks.{i}.per_layer_out"], s["per_layer_out"]) < 1e-5, i
        assert relative(got * ref.layers[i].layer_scalar, s["out"]) < 1e-5, i
        assert relative(gate(s["x"], inputs[:, :, i]) * ref.layers[i].layer_scalar, s["out"]) < 1e-5, i


@torch.no_grad()
def test_the_gate_is_the_equations():
    cfg, ref = model(seed=6)
    _, gates = ours(cfg, ref)
    x = torch.randn(2, T, 64, generator=torch.Generator().manual_seed(7))
    p = torch.randn(2, T, 8, generator=torch.Generator().manual_seed(8))
    rec = Recorder()
    out = gates[1](x, p, rec)
    got, layer = rec.values, ref.layers[1]
    gate = x @ layer.per_layer_input_gate.weight.T
    act = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
    assert relative(got["per_layer.act"], act) < 1e-5
    assert relative(got["per_layer.post"], act * p) < 1e-5
    proj = (act * p) @ layer.per_layer_projection.weight.T
    assert relative(got["per_layer.out"], proj) < 1e-5
    written = proj / proj.square().mean(-1, keepdim=True).add(1e-6).sqrt() * layer.post_per_layer_input_norm.weight
    assert relative(got["per_layer_out"], written) < 1e-5
    assert torch.equal(out, x + got["per_layer_out"])
    zero = gates[1](x, torch.zeros_like(p))  # no per-layer input, nothing added: the norm of 0 is 0
    assert torch.equal(zero, x)


@torch.no_grad()
def test_bfloat16_rounds_as_transformers_does():
    cfg, ref = model(seed=9)
    ref.bfloat16()
    embeddings, gates = ours(cfg, ref)
    embeddings.bfloat16(), [g.bfloat16() for g in gates]
    tokens = ids(seed=10)
    x0 = ref.embed_tokens(tokens)
    rec = Recorder()
    got = embeddings(tokens, x0, rec)
    assert got.dtype == torch.bfloat16
    # a lookup times a scalar, no sum: bit for bit, sqrt(P) rounded to bfloat16 first (2.828125, not 2.828427)
    assert torch.equal(rec.values["embed.per_layer"], ref.get_per_layer_inputs(tokens))
    want = ref.project_per_layer_inputs(x0, ref.get_per_layer_inputs(tokens))
    assert relative(got, want) < 1e-3  # well under one bfloat16 step (2^-8)
    seen = caught(ref, tokens)
    for i, (gate, s) in enumerate(zip(gates, seen, strict=True)):
        assert relative(gate(s["x"], got[:, :, i]) * ref.layers[i].layer_scalar, s["out"]) < 1e-3, i


# -- KV sharing ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers, want", [(4, (0, 1, 0, 1)), (6, (0, 1, 2, 3, 2, 3))])
@torch.no_grad()
def test_kv_sharing_is_the_keys_and_values_transformers_hands_on(layers, want):
    """FAMILIES' Gemma 4 (sliding and full alternating; the last 2 sharing), 4 layers and 6: each sharing layer
    attends with the values of the last computing layer of its kind (not the first), caught as they leave each
    computing layer's v_norm, and with no other layer's."""
    kinds = ["sliding_attention", "full_attention"] * (layers // 2)
    cfg, ref = model(seed=11, num_hidden_layers=layers, layer_types=kinds)
    assert kv_sharing(cfg) == want
    values: dict[int, torch.Tensor] = {}
    hooks = [layer.self_attn.v_norm.register_forward_hook(lambda m, a, out, i=i: values.__setitem__(i, out))
             for i, layer in enumerate(ref.layers) if hasattr(layer.self_attn, "v_norm")]
    try:
        shared = ref(ids(seed=12), return_shared_kv_states=True).shared_kv_states
    finally:
        for h in hooks:
            h.remove()
    assert sorted(values) == list(range(layers - 2))  # the sharing layers compute none
    for i, j in enumerate(kv_sharing(cfg)):
        if i == j:  # its own: it computed them (above)
            continue
        _, v = shared[cfg.layer_types[i]]  # what transformers hands a sharing layer of this kind
        assert torch.equal(v, values[j].transpose(1, 2)), i
        assert all(not torch.equal(v, values[k].transpose(1, 2)) for k in values if k != j), i


@pytest.mark.parametrize("layers, shared, pattern", [(35, 20, 5), (12, 4, 6), (8, 3, 2), (6, 0, 3), (5, 3, 2)])
def test_kv_sharing_agrees_with_transformers_modes(layers, shared, pattern):
    """transformers' kv_sharing_modes: a layer reuses exactly where it is not its own source, and the layers that
    store are the last of each kind before the shared ones (every source among them). (35, 20, 5): Gemma 4 E2B's
    shape, four sliding layers then a full one."""
    types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    types[-1] = "full_attention"
    cfg = transformers.Gemma4TextConfig(num_hidden_layers=layers, num_kv_shared_layers=shared, layer_types=types)
    sources = kv_sharing(cfg)
    modes = cfg.kv_sharing_modes
    assert [m == "reuse" for m in modes] == [j != i for i, j in enumerate(sources)]
    stores = {i for i, m in enumerate(modes) if m == "store"}
    assert {j for i, j in enumerate(sources) if j != i} <= stores
    assert all(types[j] == types[i] and j < layers - shared for i, j in enumerate(sources))
    if (layers, shared) == (35, 20):
        assert sources[15:] == tuple(13 if t == "sliding_attention" else 14 for t in types[15:])


@torch.no_grad()
def test_kv_cache_bytes_equal_transformers_cache():
    """After 24 tokens, float32: `shared` is what transformers' cache holds, `unshared` what it holds for the same
    model with no sharing."""
    for n_shared, key in ((2, "shared"), (0, "unshared")):
        cfg, ref = model(seed=13, num_kv_shared_layers=n_shared)
        cache = ref(torch.randint(0, 320, (1, 24), generator=torch.Generator().manual_seed(14)),
                    use_cache=True).past_key_values
        held = sum(t.numel() * t.element_size() for layer in cache.layers
                   for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if t is not None)
        assert kv_cache_bytes(config(), 24, bytes_per_value=4)[key] == held, n_shared


def test_kv_cache_bytes_by_hand():
    """FAMILIES' Gemma 4, bfloat16: a layer keeps 2 (keys, values) * 2 heads * 16 wide * 2 bytes = 128 bytes a
    position; a sliding one (window 4) keeps 3 positions, a full one all of them. Layers 2 (sliding) and 3 (full) reuse
    0's and 1's, so they save 3 * 128 + tokens * 128."""
    cfg = config()
    for tokens, saved in ((1024, 384 + 131_072), (32_768, 384 + 4_194_304), (1_000_000, 384 + 128_000_000)):
        got = kv_cache_bytes(cfg, tokens)
        assert got == {"unshared": 2 * saved, "shared": saved, "saved": saved}, tokens
    assert kv_cache_bytes(config(num_kv_shared_layers=0), 1024)["saved"] == 0


@pytest.mark.parametrize("make, message", [
    (lambda: kv_sharing(config(num_kv_shared_layers=4)), "leaves none"),
    (lambda: kv_sharing(config(num_kv_shared_layers=1, layer_types=["sliding_attention"] * 3 + ["full_attention"])),
     "no earlier layer of its kind"),
    (lambda: PerLayerConfig.from_hf(config(hidden_activation="silu")), "not silu"),
    (lambda: PerLayerConfig(320, 64, 4, 0), "nothing to read"),
])
def test_what_it_cannot_handle_is_refused_in_one_sentence(make, message):
    with pytest.raises(ValueError, match=message) as refusal:
        make()
    text = str(refusal.value)
    if "earlier layer" in message:  # transformers refuses that model too
        with pytest.raises(ValueError, match="layer types"):
            _ = config(num_kv_shared_layers=1, layer_types=["sliding_attention"] * 3 + ["full_attention"]
                       ).kv_sharing_modes
    assert "\n" not in text and text.count(". ") == 0 and len(text) < 160
