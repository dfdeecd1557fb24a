"""Models larger than one GPU: the device map accelerate's `infer_auto_device_map` makes for our decoder (whole
parts, the GPUs first in order, then the CPU, within each device's budget; the tied embedding and unembedding
together), for random shapes and budgets; the maps we refuse; and a model placed by such a map traces and
generates the unmapped model's numbers (with the GPUs' parts on the simulated device of `device_sim.py`)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("accelerate")

from tests.conftest import make_hf_gpt2, make_hf_llama_family  # noqa: E402
from tests.device_sim import SIM, on_sim, simulated_device  # noqa: E402
from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.config import DecoderConfig  # noqa: E402
from transformer_explainer.errors import InputError  # noqa: E402
from transformer_explainer.loading.budget import model_bytes  # noqa: E402
from transformer_explainer.models.decoder import Decoder  # noqa: E402
from transformer_explainer.models.placement import (  # noqa: E402
    describe_map,
    expand_map,
    infer_device_map,
    part_names,
    resolve_map,
)
from transformer_explainer.sampling import SamplingParams  # noqa: E402

RANK = {"cpu": 100, "disk": 101}  # accelerate's order: GPUs by number, then the CPU, then the disk


def _rank(device: int | str) -> int:
    return device if isinstance(device, int) else RANK[device]


def _config(family: str, layers: int, width: int, tied: bool) -> DecoderConfig:
    if family == "gpt2":
        return DecoderConfig.from_hf({"model_type": "gpt2", "n_layer": layers, "n_head": 4, "n_embd": width,
                                      "vocab_size": 500, "n_positions": 64})
    return DecoderConfig.from_hf({"model_type": "llama", "num_hidden_layers": layers, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "hidden_size": width, "intermediate_size": 3 * width,
                                  "vocab_size": 500, "max_position_embeddings": 64, "tie_word_embeddings": tied})


def _meta(config: DecoderConfig) -> Decoder:
    with torch.device("meta"):
        return Decoder(config)


def _bytes(net: Decoder, part: str) -> int:
    return model_bytes(net.get_submodule(part), torch.float32)[1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(["gpt2", "llama"]), layers=st.integers(1, 12), width=st.sampled_from([32, 64, 128]),
       tied=st.booleans(), gpus=st.integers(1, 2), shares=st.lists(st.floats(0.0, 1.2), min_size=3, max_size=3))
def test_accelerate_places_whole_parts_gpus_first_within_their_budgets(family, layers, width, tied, gpus, shares):
    net = _meta(_config(family, layers, width, tied))
    total = model_bytes(net, torch.float32)[1]
    budget: dict[int | str, int] = {g: int(shares[g] * total) for g in range(gpus)}
    budget["cpu"] = int(shares[2] * total)
    placed = infer_device_map(net, torch.float32, budget)
    parts = part_names(net)
    assert list(placed) == parts  # every part, each whole: the map has no key inside a part
    if net.config.tie_word_embeddings:
        assert placed["unembed"] == placed["embed"]  # one matrix, one device
    # along the computation (the tied unembedding goes with the embedding), the devices only move on: GPU 0,
    # then GPU 1, then the CPU, then the disk
    order = [p for p in parts if not (p == "unembed" and net.config.tie_word_embeddings)]
    ranks = [_rank(placed[p]) for p in order]
    assert ranks == sorted(ranks), placed
    for device, limit in budget.items():  # no device holds more than its budget (a tied matrix counted once)
        held = {id(t): t for p in parts if placed[p] == device for t in net.get_submodule(p).parameters()}
        assert sum(t.numel() * 4 for t in held.values()) <= limit, (device, placed)
    # a GPU with room for the whole model and the largest part again (accelerate keeps that much spare) takes it all
    roomy = {0: total + max(_bytes(net, p) for p in parts), "cpu": 0}
    assert set(infer_device_map(net, torch.float32, roomy).values()) == {0}
    # more memory on GPU 0 never puts fewer blocks there
    more = infer_device_map(net, torch.float32, {**budget, 0: budget[0] + total // 4})
    blocks = [p for p in parts if p.startswith("blocks.")]
    assert sum(more[b] == 0 for b in blocks) >= sum(placed[b] == 0 for b in blocks)


def test_a_real_split_puts_the_first_blocks_on_the_gpu_and_the_rest_on_the_cpu():
    net = _meta(_config("llama", 8, 64, tied=False))
    per_block, first = _bytes(net, "blocks.0"), _bytes(net, "embed")
    largest = max(_bytes(net, p) for p in part_names(net))
    # room on GPU 0 for the embedding, three blocks and the spare room accelerate keeps for the largest part
    placed = infer_device_map(net, torch.float32, {0: largest + first + 3 * per_block + 1, "cpu": 10**9})
    assert placed == {"embed": 0, **{f"blocks.{i}": 0 if i < 3 else "cpu" for i in range(8)}, "ln_final": "cpu",
                      "unembed": "cpu"}
    assert describe_map({k: torch.device("cuda", 0) if v == 0 else torch.device(v) for k, v in placed.items()}) == (
        "blocks 0-2 on cuda:0, blocks 3-7 on cpu; embedding on cuda:0, final norm on cpu, unembedding on cpu")


def test_maps_that_cannot_be_run_here_are_refused_in_one_sentence():
    net = _meta(_config("gpt2", 2, 32, tied=True))
    with pytest.raises(InputError, match="offloaded to the disk"):
        resolve_map(net, infer_device_map(net, torch.float32, {"cpu": 1000}))
    for placement, words in [({"blocks.0.attn": "cpu", "": "cpu"}, "a piece of 'blocks.0'"),
                         ({"decoder": "cpu"}, "no part of this model"),
                         ({"blocks": "cpu"}, "does not say where 'embed' goes"),
                         ({"": "cpu", "unembed": 0}, "share one matrix"),
                         ({"": "cuda:1"}, "device 'cuda:1' is not available"),
                         ({"": "cpu", "blocks.1": [0]}, "a GPU's number or a device's name")]:
        with pytest.raises(InputError, match=words):
            resolve_map(net, placement)
    assert expand_map(net, {"": "cpu", "blocks": 0, "blocks.1": 1}) == {
        "embed": "cpu", "pos_embed": "cpu", "blocks.0": 0, "blocks.1": 1, "ln_final": "cpu", "unembed": "cpu"}
    with pytest.raises(InputError, match="max memory names the device 'gpu'"):
        infer_device_map(net, torch.float32, {"gpu": "1GB"})


@pytest.fixture(scope="module", params=["gpt2", "qwen3"])
def folder(request, tmp_path_factory):
    where = tmp_path_factory.mktemp(f"map-{request.param}")
    if request.param == "gpt2":
        return make_hf_gpt2(where, n_layer=4, n_embd=32, n_head=4)
    return make_hf_llama_family(where, "qwen3")


def test_a_model_placed_by_accelerates_map_gives_the_unmapped_numbers(folder):
    """accelerate's map for a budget that splits the blocks, its GPU 0 played by the simulated device: the trace
    follows the map (each block's values where it ran) and gives the CPU model's numbers exactly, and so do
    continued traces (KV cache) and greedy generation."""
    cpu = load_model(str(folder), allow_download=False)
    net = cpu.net
    def on_gpu0(budget: int) -> dict:
        return infer_device_map(net, cpu.dtype, {0: budget, "cpu": 10**10})

    lo, hi = 0, 4 * model_bytes(net, cpu.dtype)[1]  # the least GPU budget that takes block 0 (bisected)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if on_gpu0(mid)["blocks.0"] == 0 else (mid + 1, hi)
    inferred = on_gpu0(lo)
    on_gpu = [p for p, d in inferred.items() if d == 0]
    assert "blocks.0" in on_gpu and f"blocks.{net.config.n_layer - 1}" not in on_gpu, inferred
    model = load_model(str(folder), allow_download=False)
    text = "the cat sat on the mat and the cat"
    with simulated_device():
        model.place({p: SIM if d == 0 else torch.device(d) for p, d in inferred.items()})
        trace, ref = model.trace(text), cpu.trace(text)
        for name in trace.memory.kept:
            part = ".".join(name.split(".")[:2]) if name.startswith("blocks.") else None
            if part is not None:
                assert on_sim(trace.memory.kept[name]) == (inferred[part] == 0), name
            assert torch.equal(trace.memory.kept[name].cpu(), ref.memory.kept[name]), name
        ids = cpu.encode(text)
        extended = model.extend_trace(model.trace_ids(ids[:3]), ids[3:])
        ref_extended = cpu.extend_trace(cpu.trace_ids(ids[:3]), ids[3:])
        assert all(torch.equal(extended[n].cpu(), ref_extended[n]) for n in ref_extended.memory.kept)
        greedy = SamplingParams(temperature=0)
        assert list(model.generate_ids(ids, 5, greedy, stop_at_eos=False)) == list(
            cpu.generate_ids(ids, 5, greedy, stop_at_eos=False))


def test_load_model_makes_the_map_within_the_budget_given(folder):
    model = load_model(str(folder), allow_download=False, device_map="auto", max_memory={"cpu": "1GB"})
    assert set(model.device_map.values()) == {torch.device("cpu")} and model.describe_devices() == "cpu"
    with pytest.raises(InputError, match="offloaded to the disk"):
        load_model(str(folder), allow_download=False, max_memory={"cpu": "10KB"})  # a budget alone means "auto"
    with pytest.raises(InputError, match="contradict"):
        load_model(str(folder), allow_download=False, device="cpu", device_map="auto")
