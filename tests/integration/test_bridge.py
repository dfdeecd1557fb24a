"""The bridge (transformer_explainer.bridge) against transformers' own forward, family by family.

Random-weight checkpoints are written locally (no network) from tiny configs: 2-4 layers, several layer kinds
in one model, local windows shorter than the text. For each, what the bridge records must equal transformers'
eager forward: the logits, every block's input and output (within 1e-5 of the tensor's scale, fp32), and every
attention pattern that eager returns with output_attentions.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from transformer_explainer.bridge import ATTENTION_NAME, check_config, load_decoder, record  # noqa: E402
from transformer_explainer.errors import CheckpointError, InputError  # noqa: E402

from ..helpers.hf_checkpoints import FAMILIES, write_checkpoint  # noqa: E402

TOL = 1e-5
T = 11  # tokens: longer than every window below



def _write(model_type: str, folder: Path) -> Path:
    return write_checkpoint(model_type, folder)


def _ids(seed: int, n: int = T) -> torch.Tensor:
    return torch.randint(3, 128, (n,), generator=torch.Generator().manual_seed(seed))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))


def _reference(model: torch.nn.Module, ids: torch.Tensor):
    """transformers' eager forward with output_attentions and output_hidden_states, plus each layer's output
    from a plain torch hook of the test's own."""
    decoder = model.get_decoder()
    layers = decoder.layers if hasattr(decoder, "layers") else decoder.h  # GPT-2's list is `h`
    outs: dict[int, torch.Tensor] = {}
    handles = [layer.register_forward_hook(
        lambda _m, _a, o, i=i: outs.__setitem__(i, (o[0] if isinstance(o, tuple) else o)[0].detach()))
        for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            ref = model(input_ids=ids[None], output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return ref, outs


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_records_equal_transformers_forward(model_type: str, tmp_path: Path) -> None:
    folder = _write(model_type, tmp_path / model_type)
    model = load_decoder(folder)
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    ids = _ids(1)
    rec = record(model, ids)
    ref, outs = _reference(eager, ids)
    v = rec.values
    n = len(rec.layers)
    assert _rel(v["logits"], ref.logits[0]) < TOL
    assert _rel(v["ln_final.out"], ref.hidden_states[-1][0]) < TOL
    for i in range(n):
        assert _rel(v[f"blocks.{i}.resid_pre"], ref.hidden_states[i][0]) < TOL, i
        assert _rel(v[f"blocks.{i}.resid_post"], outs[i]) < TOL, i
        assert f"blocks.{i}.attn_out" in v or any(f"blocks.{i}.{p}.out" in v for p in ("linear_attn", "conv", "ssm"))
        assert f"blocks.{i}.mlp_out" in v
    attention_layers = [k.index for k in rec.layers if "attention" in k.kinds]
    ref_patterns = [a for a in ref.attentions if a is not None]
    assert len(ref_patterns) == len(attention_layers) > 0
    for i, expected in zip(attention_layers, ref_patterns, strict=True):
        pattern = v[f"blocks.{i}.attn.pattern"]
        assert _rel(pattern, expected[0]) < TOL, i
        scores = v[f"blocks.{i}.attn.masked_scores"]
        if f"blocks.{i}.attn.sink" in v:  # the sink's weight is what the keys' weights leave
            sink = v[f"blocks.{i}.attn.sink"][:, None, None].expand(-1, scores.shape[1], 1)
            full = torch.softmax(torch.cat([scores, sink], -1), -1)
            assert _rel(full[..., :-1], pattern) < TOL and _rel(full[..., -1], v[f"blocks.{i}.attn.sink_weight"]) < TOL
        else:  # the scores recorded are the ones the softmax read
            assert _rel(torch.softmax(scores, -1), pattern) < TOL, i
        z = v[f"blocks.{i}.attn.z"]
        vals = v[f"blocks.{i}.attn.v"].repeat_interleave(pattern.shape[0] // v[f"blocks.{i}.attn.v"].shape[0], 0)
        assert _rel(z, pattern @ vals) < 1e-4, i
        window = rec.layers[i].window
        if window is not None and window < T:  # a local layer's mask hides the keys beyond its window
            mask = v[f"blocks.{i}.attn.mask"]
            assert mask[T - 1, 0] < -1e30 and mask[T - 1, T - 1] == 0


def test_layer_kinds_and_resid_mid(tmp_path: Path) -> None:
    """A hybrid model's layers say what they are; resid_mid is where the residual stands between the sublayers
    (pre-norm: resid_pre + attn_out exactly), and absent in a model with parallel sublayers."""
    q = record(load_decoder(_write("qwen3_5_text", tmp_path / "q")), _ids(2))
    assert [k.kinds for k in q.layers] == [("linear_attention",), ("attention",)] * 2
    assert "blocks.0.linear_attn.in" in q.values and "blocks.0.attn.pattern" not in q.values
    for i in range(4):
        mixer = q.values[f"blocks.{i}.attn_out"] if i % 2 else q.values[f"blocks.{i}.linear_attn.out"]
        assert torch.equal(q.values[f"blocks.{i}.resid_mid"], q.values[f"blocks.{i}.resid_pre"] + mixer)
    o = record(load_decoder(_write("olmo3", tmp_path / "o")), _ids(2))
    assert [k.window for k in o.layers] == [4, None, 4, None] and all(k.has_resid_mid for k in o.layers)
    n = record(load_decoder(_write("gpt_neox", tmp_path / "n")), _ids(2))
    assert not any(k.has_resid_mid for k in n.layers) and "blocks.0.resid_mid" not in n.values
    f = record(load_decoder(_write("falcon_h1", tmp_path / "f")), _ids(2))
    assert f.layers[0].kinds == ("state_space", "attention") and "blocks.0.ssm.out" in f.values


def _hook_counts(model: torch.nn.Module) -> list[int]:
    return [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()]


@pytest.mark.parametrize(("model_type", "impl"), [("gpt_oss", "eager"), ("qwen3_5_text", "sdpa")])
def test_recording_leaves_no_trace(model_type: str, impl: str, tmp_path: Path) -> None:
    folder = _write(model_type, tmp_path / model_type)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=impl, dtype=torch.float32).eval()
    ids = _ids(3)
    hooks = _hook_counts(model)
    with torch.no_grad():
        before = model(input_ids=ids[None]).logits
    rec = record(model, ids)
    assert model.config._attn_implementation == impl and _hook_counts(model) == hooks
    with torch.no_grad():
        after = model(input_ids=ids[None]).logits
    assert torch.equal(before, after)
    assert _rel(rec.values["logits"], before[0]) < TOL


def test_concurrent_recordings_keep_their_values(tmp_path: Path) -> None:
    model = load_decoder(_write("qwen3_5_text", tmp_path / "q"))
    inputs = [_ids(10), _ids(11, 7)]
    alone = [record(model, ids).values for ids in inputs]
    got: dict[int, list[dict[str, torch.Tensor]]] = {0: [], 1: []}
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            for _ in range(4):
                barrier.wait()
                got[k].append(record(model, inputs[k]).values)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in (0, 1):
        for values in got[k]:
            assert values.keys() == alone[k].keys()
            assert all(torch.equal(values[name], alone[k][name]) for name in values)
    assert model.config._attn_implementation == ATTENTION_NAME and not any(_hook_counts(model))


@pytest.mark.parametrize(("config", "words"), [
    ({"model_type": "not_a_model_anyone_made"}, "does not know"),
    ({"model_type": "bert"}, "encoder"),
    ({"model_type": "t5", "is_encoder_decoder": True}, "encoder"),
    ({"model_type": "vit"}, "not a text decoder"),
    ({"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "modeling_x.X"}}, "never run"),
    ({}, "no model_type"),
])
def test_refusals_are_one_sentence(config: dict, words: str) -> None:
    with pytest.raises(CheckpointError, match=words) as e:
        check_config(config)
    assert str(e.value).count(". ") == 0 and str(e.value).endswith(".")


def test_loading_refuses_an_encoder_and_bad_ids(tmp_path: Path) -> None:
    cfg = AutoConfig.for_model("bert", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32, vocab_size=64)
    transformers.BertForMaskedLM(cfg).save_pretrained(tmp_path / "bert")
    with pytest.raises(CheckpointError, match="encoder"):
        load_decoder(tmp_path / "bert")
    model = load_decoder(_write("llama", tmp_path / "l"))
    with pytest.raises(InputError):
        record(model, [])
    with pytest.raises(InputError, match="outside the vocabulary"):
        record(model, [5, 320])
