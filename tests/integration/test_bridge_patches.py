"""The bridge's patches and logit lens (transformer_explainer.bridge) against transformers' own forward.

For every family of tests/helpers/hf_checkpoints.py: a patch that gives back a copy of each value changes
nothing; zeroing one head's z equals transformers' eager forward with that head's slice of the output
projection's input zeroed by a hook of the test's own; a layer's input patched with another run's (all
positions, or some) equals the same replacement made by the test's own hook, and gives that run's downstream
values where the layers read nothing but the residual stream; `residual_logits` of the last layer's output is
the model's logits, whatever its causal-LM head does after the unembedding. Names a model does not compute are
refused in one sentence.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM  # noqa: E402

from transformer_explainer.bridge import (  # noqa: E402
    find_structure,
    load_decoder,
    record,
    residual_logits,
)
from transformer_explainer.errors import InputError  # noqa: E402

from ..helpers.hf_checkpoints import FAMILIES, SMALL, write_checkpoint  # noqa: E402

TOL = 1e-5
T = 11
Models = Callable[[str], tuple[torch.nn.Module, torch.nn.Module]]


def _ids(seed: int, n: int = T) -> torch.Tensor:
    return torch.randint(3, 128, (n,), generator=torch.Generator().manual_seed(seed))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    """model_type -> (the model loaded by the bridge, the same checkpoint loaded with eager attention)."""
    cache: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = {}

    def get(model_type: str) -> tuple[torch.nn.Module, torch.nn.Module]:
        if model_type not in cache:
            folder = write_checkpoint(model_type, tmp_path_factory.mktemp(model_type) / model_type)
            eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
            cache[model_type] = (load_decoder(folder), eager.eval())
        return cache[model_type]

    return get


def _layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    decoder = model.get_decoder()
    return decoder.layers if hasattr(decoder, "layers") else decoder.h  # GPT-2's list is `h`


def _o_proj(layer: torch.nn.Module) -> torch.nn.Module:
    """The attention's output projection, by the names transformers gives it (the test's own lookup)."""
    attn = next(getattr(layer, n) for n in ("self_attn", "attn", "attention") if hasattr(layer, n))
    return next(getattr(attn, n) for n in ("o_proj", "c_proj", "dense", "out_proj") if hasattr(attn, n))


def _eager(model: torch.nn.Module, ids: torch.Tensor, hooks: list[tuple[torch.nn.Module, Callable]]) -> dict:
    """transformers' eager forward with the test's own pre-hooks; the logits and each layer's output."""
    outs: dict[int, torch.Tensor] = {}
    handles = [m.register_forward_pre_hook(h) for m, h in hooks]
    handles += [layer.register_forward_hook(
        lambda _m, _a, o, i=i: outs.__setitem__(i, (o[0] if isinstance(o, tuple) else o)[0].detach()))
        for i, layer in enumerate(_layers(model))]
    try:
        with torch.no_grad():
            logits = model(input_ids=ids[None], use_cache=False).logits[0]
    finally:
        for h in handles:
            h.remove()
    return {"logits": logits, **{f"blocks.{i}.resid_post": o for i, o in outs.items()}}


def _patchable(rec_layers: tuple, n: int) -> list[str]:
    names = []
    for k in rec_layers[:n]:
        names += [f"blocks.{k.index}.resid_pre", f"blocks.{k.index}.mlp_out", f"blocks.{k.index}.resid_post"]
        if "attention" in k.kinds:
            names += [f"blocks.{k.index}.attn_out", f"blocks.{k.index}.attn.z"]
    return names


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_identity_patches_change_nothing(model_type: str, models: Models) -> None:
    model, _ = models(model_type)
    ids = _ids(1)
    base = record(model, ids)
    seen: dict[str, tuple[int, ...]] = {}

    def copy(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
        def patch(v: torch.Tensor) -> torch.Tensor:
            seen[name] = tuple(v.shape)
            return v.clone()  # a new tensor: the hooks put it in place of the value
        return patch

    names = _patchable(base.layers, len(base.layers))
    patched = record(model, ids, patches={n: copy(n) for n in names})
    assert set(seen) == set(names)
    for name, shape in seen.items():  # the value with its batch dimension, as the engine's patches see it
        stage = name.split(".", 2)[2]
        recorded = tuple(base.values[name].shape)
        assert shape == (1, *recorded), (name, shape)
        assert stage != "attn.z" or shape[1] == model.config.num_attention_heads
    assert patched.values.keys() == base.values.keys()
    for name, v in base.values.items():
        assert torch.equal(patched.values[name], v), name


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_zeroing_a_head_equals_its_output_projection_input_zeroed(model_type: str, models: Models) -> None:
    model, eager = models(model_type)
    ids = _ids(2)
    base = record(model, ids)
    layer = next(k.index for k in base.layers if "attention" in k.kinds)
    heads, _, dv = base.values[f"blocks.{layer}.attn.z"].shape
    head = 1

    def zero_head(z: torch.Tensor) -> torch.Tensor:  # (1, H, T, Dv)
        z = z.clone()
        z[:, head] = 0.0
        return z

    def zero_slice(_m: torch.nn.Module, args: tuple) -> tuple:  # o_proj's input: (1, T, H * Dv), heads in order
        x = args[0].clone()
        x[..., head * dv:(head + 1) * dv] = 0.0
        return (x, *args[1:])

    got = record(model, ids, patches={f"blocks.{layer}.attn.z": zero_head})
    ref = _eager(eager, ids, [(_o_proj(_layers(eager)[layer]), zero_slice)])
    z = got.values[f"blocks.{layer}.attn.z"]
    assert z.shape == (heads, T, dv) and not z[head].any()
    assert torch.equal(z[0], base.values[f"blocks.{layer}.attn.z"][0])  # the other heads as they were
    assert _rel(got.values["logits"], ref["logits"]) < TOL
    assert _rel(got.values["logits"], base.values["logits"]) > 1e-3  # the head mattered
    for i in range(len(base.layers)):
        assert _rel(got.values[f"blocks.{i}.resid_post"], ref[f"blocks.{i}.resid_post"]) < TOL, i


@pytest.mark.parametrize("positions", [None, [4, 8]])
@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_patching_resid_pre_with_another_run(model_type: str, positions: list[int] | None, models: Models) -> None:
    model, eager = models(model_type)
    a, b = _ids(3), _ids(4)
    rec_a, rec_b = record(model, a), record(model, b)
    n = len(rec_a.layers)
    layer = n // 2
    donor = rec_b.values[f"blocks.{layer}.resid_pre"]  # (T, D)
    where = slice(None) if positions is None else positions

    def put(v: torch.Tensor) -> torch.Tensor:  # (1, T, D)
        v = v.clone()
        v[0, where] = donor[where]
        return v

    got = record(model, a, patches={f"blocks.{layer}.resid_pre": put})
    ref = _eager(eager, a, [(_layers(eager)[layer], lambda _m, args: (put(args[0]), *args[1:]))])
    assert torch.equal(got.values[f"blocks.{layer}.resid_pre"][where], donor[where])
    assert _rel(got.values["logits"], ref["logits"]) < TOL
    for i in range(n):
        assert _rel(got.values[f"blocks.{i}.resid_post"], ref[f"blocks.{i}.resid_post"]) < TOL, i
    for i in range(layer):  # upstream of the patch: run a's own values
        assert torch.equal(got.values[f"blocks.{i}.resid_post"], rec_a.values[f"blocks.{i}.resid_post"]), i
    # Gemma 4's layers also read a per-layer embedding of the token ids (and share keys and values with earlier
    # layers), so a layer's input alone does not decide what follows it there
    if getattr(model.config, "hidden_size_per_layer_input", None):
        return
    for i in range(layer, n):
        post, donor_post = got.values[f"blocks.{i}.resid_post"], rec_b.values[f"blocks.{i}.resid_post"]
        if positions is None:  # the whole stream replaced: run b's downstream values
            assert _rel(post, donor_post) < TOL, i
        else:  # causal: positions before the first patched one are run a's; the first patched one is run b's
            first = positions[0]
            assert _rel(post[:first], rec_a.values[f"blocks.{i}.resid_post"][:first]) < TOL, i
    if positions is None:
        assert _rel(got.values["logits"], rec_b.values["logits"]) < TOL


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_residual_logits_of_the_last_layer_are_the_logits(model_type: str, models: Models) -> None:
    model, _ = models(model_type)
    rec = record(model, _ids(5))
    v = rec.values
    last = v[f"blocks.{len(rec.layers) - 1}.resid_post"]
    norm = find_structure(model).final_norm
    assert norm is not None
    with torch.no_grad():
        assert _rel(norm(last[None])[0], v["ln_final.out"]) < TOL  # the final norm is the one the head reads
    lens = residual_logits(model, last)
    assert lens.shape == v["logits"].shape and _rel(lens, v["logits"]) < TOL
    assert _rel(residual_logits(model, last[3:6]), v["logits"][3:6]) < TOL  # position by position
    early = residual_logits(model, v["blocks.0.resid_post"])
    assert early.shape == lens.shape and _rel(early, lens) > 1e-3


def _changed_by_the_head(model: torch.nn.Module, rec_values: dict[str, torch.Tensor]) -> bool:
    """Whether the model's logits differ from the unembedding of the final norm's output."""
    with torch.no_grad():
        plain = model.get_output_embeddings()(rec_values["ln_final.out"])
    return _rel(plain, rec_values["logits"]) > 1e-3


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_which_heads_change_the_logits_after_the_unembedding(model_type: str, models: Models) -> None:
    """With the checkpoints' configs, Granite's head alone changes the logits after the unembedding (its
    logits_scaling); the others' do nothing there unless their config says (below)."""
    model, _ = models(model_type)
    assert _changed_by_the_head(model, record(model, _ids(6)).values) == (model_type == "granite"), model_type


# the heads that change the logits after the unembedding where their config says so (transformers 5.24's
# modeling files): model_type -> the config that makes them do it
HEADS: dict[str, dict] = {"granite": dict(logits_scaling=4.0), "falcon_h1": dict(lm_head_multiplier=0.25),
                          "gemma4_text": dict(final_logit_softcapping=2.0), "cohere": dict(logit_scale=0.25),
                          "gemma2": dict(final_logit_softcapping=2.0, query_pre_attn_scalar=16)}


def _write_any(model_type: str, folder: Path, **overrides: object) -> Path:
    """A random-weight checkpoint of a model_type that hf_checkpoints.FAMILIES may not list (its init)."""
    if model_type in FAMILIES:
        return write_checkpoint(model_type, folder, **overrides)
    cfg = transformers.AutoConfig.for_model(model_type, **{**SMALL, **overrides})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("model_type", "overrides"), list(HEADS.items()))
def test_residual_logits_run_the_models_own_head(model_type: str, overrides: dict, tmp_path: Path) -> None:
    model = load_decoder(_write_any(model_type, tmp_path / model_type, **overrides))
    rec = record(model, _ids(12))
    assert _changed_by_the_head(model, rec.values)  # the lens would be wrong without the head's own step
    lens = residual_logits(model, rec.values[f"blocks.{len(rec.layers) - 1}.resid_post"])
    assert _rel(lens, rec.values["logits"]) < TOL


def test_concurrent_patched_recordings_keep_their_patches(models: Models) -> None:
    model, _ = models("qwen3_5_text")
    ids = _ids(7)
    plans = [{"blocks.1.attn.z": lambda z: z * 0.0}, {"blocks.2.resid_pre": lambda x: x * 2.0}, {}]
    alone = [record(model, ids, patches=p).values["logits"] for p in plans]
    assert _rel(alone[0], alone[2]) > 1e-3 and _rel(alone[1], alone[2]) > 1e-3
    lens_alone = residual_logits(model, record(model, ids).values["blocks.3.resid_post"])
    got: dict[int, list[torch.Tensor]] = {0: [], 1: [], 2: [], 3: []}
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for _ in range(3):
                barrier.wait()
                if k == 3:
                    got[k].append(residual_logits(model, record(model, ids).values["blocks.3.resid_post"]))
                else:
                    got[k].append(record(model, ids, patches=plans[k]).values["logits"])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(3):
        assert all(torch.equal(x, alone[k]) for x in got[k]), k
    assert all(torch.equal(x, lens_alone) for x in got[3])


@pytest.mark.parametrize(("model_type", "name", "words"), [
    ("qwen3_5_text", "blocks.0.attn.z", "no attention"),
    ("lfm2", "blocks.0.attn_out", "no attention"),
    ("llama", "blocks.0.attn.pattern", "cannot be patched"),
    ("llama", "blocks.4.resid_pre", "layers are 0..3"),
    ("llama", "ln_final.out", "cannot be patched"),
])
def test_patches_refuse_what_the_model_does_not_compute(model_type: str, name: str, words: str,
                                                         models: Models) -> None:
    model, _ = models(model_type)
    with pytest.raises(InputError, match=words) as e:
        record(model, _ids(8), patches={name: lambda v: v})
    assert str(e.value).count(". ") == 0 and str(e.value).endswith(".")


def test_a_patch_of_the_wrong_shape_is_refused(models: Models) -> None:
    model, _ = models("llama")
    with pytest.raises(InputError, match=r"shape it is given, \(1, 4, 11, 16\)"):
        record(model, _ids(9), patches={"blocks.1.attn.z": lambda z: z[:, :2]})
    assert torch.equal(record(model, _ids(9)).values["logits"], record(model, _ids(9)).values["logits"])


def test_residual_logits_refuses_what_it_cannot_compute(models: Models) -> None:
    model, _ = models("llama")
    x = record(model, _ids(10)).values["blocks.3.resid_post"]
    with pytest.raises(InputError, match="shape"):
        residual_logits(model, x[None])
    with pytest.raises(InputError, match="shape"):
        residual_logits(model, x[:, :10])
    # the decoder does something between its last layer and the final norm: the logits would not be x's
    handle = model.get_decoder().norm.register_forward_pre_hook(lambda _m, args: (args[0] * 2.0, *args[1:]))
    try:
        with pytest.raises(InputError, match="straight to its last layer's output") as e:
            residual_logits(model, x)
    finally:
        handle.remove()
    assert str(e.value).count(". ") == 0
    assert _rel(residual_logits(model, x), record(model, _ids(10)).values["logits"]) < TOL


def test_residual_logits_refuses_a_decoder_without_a_final_norm(tmp_path: Path) -> None:
    model = load_decoder(write_checkpoint("llama", tmp_path / "l"))
    model.get_decoder().norm = torch.nn.Identity()  # a decoder with no norm of its own
    assert find_structure(model).final_norm is None
    x = record(model, _ids(11)).values["blocks.3.resid_post"]
    with pytest.raises(InputError, match="no final norm"):
        residual_logits(model, x)
