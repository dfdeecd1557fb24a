"""Device maps for models that run through transformers (issue 34): our parts (embed, blocks.L, ln_final, unembed) as
the model's own modules, loaded by transformers' `from_pretrained(device_map=...)` through accelerate, each part
whole and computing where its weights are. A map that puts some layers on the simulated GPU of `device_sim.py` gives
the unmapped model's numbers (every recorded stage, the lens, attribution, patching, greedy generation); the maps
that cannot run here are refused in one sentence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("accelerate")

from tests.device_sim import SIM, on_sim, simulated_device  # noqa: E402
from tests.helpers.hf_checkpoints import write_checkpoint  # noqa: E402
from transformer_explainer import cli, load_model  # noqa: E402
from transformer_explainer.analysis.lens import logit_lens  # noqa: E402
from transformer_explainer.bridge import load_decoder  # noqa: E402
from transformer_explainer.bridge.placement import module_map, part_modules  # noqa: E402
from transformer_explainer.encoding import decode_array, encode_array  # noqa: E402
from transformer_explainer.errors import InputError  # noqa: E402
from transformer_explainer.generic import GenericModel, _meta_model  # noqa: E402
from transformer_explainer.loading.tokenizer import TextTokenizer  # noqa: E402
from transformer_explainer.sampling import SamplingParams  # noqa: E402

TEXT = "the cat sat on the mat and the cat"
CPU = torch.device("cpu")


@pytest.fixture(scope="module", params=["qwen3_5_text", "olmo3"])
def folder(request, tmp_path_factory):
    return write_checkpoint(request.param, tmp_path_factory.mktemp(f"gmap-{request.param}"), tokenizer=True)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.cpu().float(), b.float()
    return a.shape == b.shape and bool((a - b).abs().max() <= 1e-5 * max(1.0, float(b.abs().max())))


def test_layers_on_another_device_give_the_unmapped_numbers(folder, monkeypatch):
    """Layers 1 and 2 and the unembedding on the simulated GPU, the rest on the CPU: every value is recorded where
    its layer computed it, and the trace, the lens, attribution, patching and greedy generation equal the CPU
    model's."""
    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "1")  # the simulated device is this thread's: load in it
    cpu = load_model(str(folder), allow_download=False)
    assert isinstance(cpu, GenericModel)
    meta = _meta_model(folder)
    placement = {p: SIM if p in ("blocks.1", "blocks.2", "unembed") else CPU for p in part_modules(meta)}
    with simulated_device():
        hf = load_decoder(folder, torch.float32, module_map(meta, placement))
        model = GenericModel(hf, TextTokenizer.from_folder(folder, True), "mapped", folder=folder)
        assert model.device_map == placement
        assert model.describe_devices() == ("block 0 on cpu, blocks 1-2 on lazy:0, block 3 on cpu; embedding on cpu, "
                                            "final norm on cpu, unembedding on lazy:0")
        trace, ref = model.trace(TEXT), cpu.trace(TEXT)
        assert set(trace.memory.kept) == set(ref.memory.kept)
        for name in ref.memory.kept:
            value = trace.memory.kept[name]
            if name.startswith("blocks."):
                assert on_sim(value) == (placement[".".join(name.split(".")[:2])] == SIM), name
            assert _close(value, ref.memory.kept[name]), name
        for name in cpu.config.activation_names():  # what is derived on access too, and what the server sends
            assert _close(trace[name], ref[name]), name
            assert np.allclose(decode_array(encode_array(trace[name], "float32"), ref[name].shape, "float32"),
                               ref[name].float().numpy(), atol=1e-5 * max(1.0, float(ref[name].abs().max()))), name
        lens, ref_lens = logit_lens(model, trace), logit_lens(cpu, ref)
        assert torch.equal(lens.top_ids.cpu(), ref_lens.top_ids) and _close(lens.target_prob, ref_lens.target_prob)
        a, b = cpu.attribute(ref), model.attribute(trace)
        assert (a.target, a.position, [(c.kind, c.layer, c.head) for c in a.components]) == (
            b.target, b.position, [(c.kind, c.layer, c.head) for c in b.components])
        assert all(abs(c.value - d.value) <= 1e-4 * max(1.0, abs(a.metric)) for c, d in zip(a.components,
                                                                                           b.components, strict=True))
        ids = cpu.encode(TEXT)
        greedy = SamplingParams(temperature=0)
        assert list(model.generate_ids(ids, 6, greedy, stop_at_eos=False)) == list(
            cpu.generate_ids(ids, 6, greedy, stop_at_eos=False))
        # patching runs a forward per (layer, position) cell, each op dispatched in Python on the simulated device:
        # a 3-token text keeps it to 24 passes
        short = ids[:3]
        corrupted = [*short[:-1], (short[-1] + 1) % cpu.config.vocab_size]
        p, q = (m.patch(short, corrupted, ids[1], ids[2], ("resid_pre", "attn_out")) for m in (model, cpu))
        for kind in q.grids:
            assert torch.allclose(torch.as_tensor(p.grids[kind]).cpu(), torch.as_tensor(q.grids[kind]),
                                  atol=1e-4, equal_nan=True), kind


def test_load_model_accepts_a_map_of_parts_and_auto_within_a_budget(folder):
    model = load_model(str(folder), allow_download=False, device_map={"": "cpu", "blocks": "cpu"})
    assert isinstance(model, GenericModel) and set(model.device_map.values()) == {CPU}
    assert model.describe_devices() == "cpu"
    auto = load_model(str(folder), allow_download=False, max_memory={"cpu": "1GB"})  # a budget alone means "auto"
    assert isinstance(auto, GenericModel) and set(auto.device_map.values()) == {CPU}
    assert torch.equal(auto.trace(TEXT)["logits"], model.trace(TEXT)["logits"])


def test_maps_that_cannot_be_run_here_are_refused_in_one_sentence(folder):
    n = 4
    for kwargs, words in [
        (dict(max_memory={"cpu": "10KB"}), "offloaded to the disk"),
        (dict(device_map={"": "cuda:1"}), "not available"),
        (dict(device_map={"": "cpu", "decoder": "cpu"}), "no part of this model"),
        (dict(device_map={"": "cpu", "blocks.0.mlp": "cpu"}), "a piece of 'blocks.0'"),
        (dict(device_map={"blocks": "cpu"}), "does not say where 'embed' goes"),
        (dict(device_map="balanced"), "use 'auto' or a mapping"),
        (dict(device_map={"": "cpu"}, device="cpu"), "contradict"),
        (dict(max_memory={"gpu": "1GB"}), "max memory names the device 'gpu'"),
        (dict(max_memory={7: "1GB"}), "not available"),
    ]:
        with pytest.raises(InputError, match=words) as e:
            load_model(str(folder), allow_download=False, **kwargs)
        assert "\n" not in str(e.value)
    with pytest.raises(InputError, match=rf"embed, blocks.0 ... blocks.{n - 1}, ln_final and unembed"):
        load_model(str(folder), allow_download=False, device_map={"": "cpu", "lm_head": "cpu"})


def test_the_command_line_places_a_model_that_runs_through_transformers(folder, capsys):
    """`--device-map auto --max-memory` (what `serve` takes too) reach a model that runs through transformers."""
    assert cli.main(["explain", TEXT, "--model", str(folder), "--offline", "--top", "1", "--device-map", "auto",
                     "--max-memory", "cpu=1GB"]) == 0
    assert capsys.readouterr().err.splitlines()[0].endswith(" on cpu")
    assert cli.main(["explain", TEXT, "--model", str(folder), "--offline", "--max-memory", "cpu=10KB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "offloaded to the disk" in err and "Traceback" not in err, err


def test_a_tied_embedding_and_unembedding_stay_on_one_device(tmp_path):
    tied = write_checkpoint("olmo3", tmp_path / "tied", tokenizer=True, tie_word_embeddings=True)
    with pytest.raises(InputError, match="share one matrix"):
        load_model(str(tied), allow_download=False, device_map={"": "cpu", "unembed": 0})
    model = load_model(str(tied), allow_download=False, device_map={"": "cpu"})
    assert model.hf.get_input_embeddings().weight is model.hf.get_output_embeddings().weight
