"""The engine on a device that is not the CPU, on a machine that has only a CPU: the simulated device of
`tests/device_sim.py` holds real numbers, and refuses, as a GPU does, any operation that mixes its tensors
with CPU ones. Every intermediate of a trace, the KV cache, generation, sampling and every analysis run
there, stay there, and give exactly the CPU's numbers; a device map that splits the blocks between the
two devices gives them too. And a device that is not on this machine is refused in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import make_hf_gpt2, make_hf_llama_family
from tests.device_sim import SIM, DeviceMismatch, SimTensor, on_sim, simulated_device
from transformer_explainer import cli, load_model
from transformer_explainer.analysis.ablation import ablate, head_means
from transformer_explainer.analysis.attention_statistics import attention_stats
from transformer_explainer.analysis.embeddings import analogy, nearest_tokens, project_2d
from transformer_explainer.analysis.lens import logit_lens
from transformer_explainer.analysis.roles import head_roles
from transformer_explainer.devices import resolve_device
from transformer_explainer.errors import InputError
from transformer_explainer.models.kv_cache import KVCache
from transformer_explainer.names import FAMILY_NAMES, parse_name
from transformer_explainer.sampling import SamplingParams, next_token_distribution

TEXT = "the cat sat on the mat and the cat ran"
FAMILIES = ("gpt2", "llama", "gemma3_text")  # learned positions, tied + rope scaling + GQA, Gemma's every option


@pytest.fixture(scope="module", params=FAMILIES)
def folder(request, tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp(f"dev-{request.param}")
    if request.param == "gpt2":
        return make_hf_gpt2(where, n_layer=2, n_embd=32, n_head=4)
    return make_hf_llama_family(where, request.param)


@pytest.fixture(scope="module")
def cpu(folder: Path):
    return load_model(str(folder), allow_download=False)


def _placed(folder: Path, where: dict[str, torch.device] | torch.device):
    model = load_model(str(folder), allow_download=False)
    placement = where if isinstance(where, dict) else dict.fromkeys(model.device_map, where)
    with simulated_device():
        return model.place(placement)


@pytest.fixture(scope="module")
def sim(folder: Path):
    return _placed(folder, SIM)


@pytest.fixture(scope="module")
def split(folder: Path, cpu):
    """Blocks on both devices, alternating, the embedding on the simulated one and the final norm on the CPU (an
    untied unembedding on the CPU too): every hand-over between parts crosses devices."""
    L = cpu.config.n_layer
    placement = {"embed": SIM, "pos_embed": SIM, **{f"blocks.{i}": SIM if i % 2 else torch.device("cpu")
                                                   for i in range(L)},
                 "ln_final": torch.device("cpu"),
                 "unembed": SIM if cpu.config.tie_word_embeddings else torch.device("cpu")}
    return _placed(folder, {k: v for k, v in placement.items() if k in cpu.device_map})


@pytest.fixture(autouse=True)
def _device():
    with simulated_device():
        yield


@pytest.fixture
def cpu_generators(monkeypatch) -> list[torch.device]:
    """torch makes no random generator for the simulated device: draws use the CPU's (the rest of sampling runs on
    the device); the list records the device each generator was asked for."""
    import transformer_explainer.overview as overview
    import transformer_explainer.text_model as text_model  # generation's sampling loop, for every kind of model

    asked: list[torch.device] = []

    def cpu_generator(seed, device="cpu"):
        asked.append(torch.device(device))
        g = torch.Generator(device="cpu")
        return g.manual_seed(seed) if seed is not None else g

    monkeypatch.setattr(text_model, "make_generator", cpu_generator)
    monkeypatch.setattr(overview, "make_generator", cpu_generator)
    return asked


def _on(t: torch.Tensor, device: torch.device) -> bool:
    return on_sim(t) if device == SIM else t.device.type == "cpu" and not isinstance(t, SimTensor)


def _block_device(model, name: str) -> torch.device:
    """Where a value of a trace must be: a recorded one where its part computed it, a derived one where its first
    source is (the logits of every position: where the unembedding is)."""
    parts = model.device_map
    if name == "logits":
        return parts["unembed"]
    p = parse_name(name, model.config.family)
    derivation = FAMILY_NAMES[model.config.family].derivations.get(p.suffix)
    if derivation is not None:
        source = derivation.sources[0]
        return _block_device(model, source if p.layer is None else f"blocks.{p.layer}.{source}")
    if p.layer is not None:
        return parts[f"blocks.{p.layer}"]
    return parts["ln_final" if name.startswith("ln_final") else "embed"]  # embed.*, rope.*: the input's device


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.cpu(), b)


def test_the_simulated_device_refuses_what_a_gpu_refuses():
    x = torch.ones(3, device=SIM)
    with pytest.raises(DeviceMismatch):
        x + torch.ones(3)  # noqa: B018
    with pytest.raises(RuntimeError, match="subclass"):
        x.numpy()
    assert _equal(x * torch.tensor(2.0), torch.full((3,), 2.0)) and on_sim(x[torch.tensor([0])])


@pytest.mark.parametrize("model_name", ["sim", "split"])
def test_every_intermediate_stays_where_it_was_computed_and_equals_the_cpu_trace(model_name, request, cpu):
    model = request.getfixturevalue(model_name)
    trace, ref = model.trace(TEXT), cpu.trace(TEXT)
    assert trace.names() == ref.names()
    for name in trace.names():
        t = trace[name]
        where = _block_device(model, name)
        assert _on(t, where), (name, t.device, type(t).__name__, where)
        assert _equal(t, ref[name]), name
    assert _on(trace.next_token_logits(), model.device_map["unembed"])
    assert _equal(trace.next_token_logits(), ref.next_token_logits())
    assert _equal(model.logits(TEXT), cpu.logits(TEXT))  # the fast path: fused attention, nothing recorded


@pytest.mark.parametrize("model_name", ["sim", "split"])
def test_kv_cache_and_continued_traces_stay_on_the_device(model_name, request, cpu):
    model = request.getfixturevalue(model_name)
    ids = cpu.encode(TEXT)
    cache = KVCache()
    model.trace_ids(ids[:4], cache=cache)
    for i, (k, v) in enumerate(cache.layers):
        assert _on(k, model.device_map[f"blocks.{i}"]) and _on(v, model.device_map[f"blocks.{i}"])
    step = model.trace_ids(ids[4:], cache=cache)
    ref = cpu.trace_ids(ids[4:], cache=_cpu_cache(cpu, ids[:4]))
    for name in step.memory.kept:
        assert _equal(step[name], ref[name]), name
    extended, ref_extended = model.extend_trace(model.trace_ids(ids[:4]), ids[4:]), cpu.extend_trace(
        cpu.trace_ids(ids[:4]), ids[4:])
    for name in extended.names():
        assert _on(extended[name], _block_device(model, name)) and _equal(extended[name], ref_extended[name]), name


def _cpu_cache(cpu, prefix: list[int]) -> KVCache:
    cache = KVCache()
    cpu.trace_ids(prefix, cache=cache)
    return cache


@pytest.mark.parametrize("model_name", ["sim", "split"])
def test_generation_and_sampling_on_the_device(model_name, request, cpu, cpu_generators):
    model = request.getfixturevalue(model_name)
    ids = cpu.encode(TEXT)
    greedy = SamplingParams(temperature=0)
    assert list(model.generate_ids(ids, 6, greedy, stop_at_eos=False)) == list(
        cpu.generate_ids(ids, 6, greedy, stop_at_eos=False))
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=3)
    logits = model.trace(TEXT).next_token_logits()
    dist, ref = next_token_distribution(logits, params), next_token_distribution(cpu.trace(TEXT).next_token_logits(),
                                                                                 params)
    for field in ("logits", "scaled_logits", "kept", "probs"):
        t = getattr(dist, field)
        assert _on(t, model.device_map["unembed"]) and _equal(t, getattr(ref, field)), field
    greedy_dist = next_token_distribution(logits, greedy)
    assert _on(greedy_dist.kept, model.device_map["unembed"]) and _on(greedy_dist.probs, model.device_map["unembed"])
    assert list(model.generate_ids(ids, 6, params, stop_at_eos=False)) == list(
        cpu.generate_ids(ids, 6, params, stop_at_eos=False))
    assert cpu_generators == [model.device_map["unembed"], torch.device("cpu")]  # each where its probabilities are


@pytest.mark.parametrize("model_name", ["sim", "split"])
def test_every_analysis_answers_on_the_device_as_on_the_cpu(model_name, request, cpu):
    model = request.getfixturevalue(model_name)
    trace, ref = model.trace(TEXT), cpu.trace(TEXT)
    ids = cpu.encode(TEXT)
    text = cpu.tokenizer.token_text
    assert logit_lens(model, trace, top=3).to_dict() == logit_lens(cpu, ref, top=3).to_dict()
    chosen = dict(top=2, positions=[1, -1], target_ids=ids[2:4])
    assert logit_lens(model, trace, **chosen).to_dict() == logit_lens(cpu, ref, **chosen).to_dict()
    heads = [(0, 1), (1, 0)]
    assert ablate(model, ids, heads).to_dict(text) == ablate(cpu, ids, heads).to_dict(text)
    means = head_means(model, [TEXT])
    assert on_sim(means) == (model.device == SIM) and _equal(means, head_means(cpu, [TEXT]))
    assert ablate(model, ids, heads, mode="mean", means=means).to_dict(text) == ablate(
        cpu, ids, heads, mode="mean", means=head_means(cpu, [TEXT])).to_dict(text)
    assert model.attribute(trace).to_dict() == cpu.attribute(ref).to_dict()
    clean, corrupted = ids[:6], ids[:2] + [ids[5]] + ids[3:6]
    answer, wrong = ids[6], ids[7]
    patched = model.patch(clean, corrupted, answer, wrong).to_dict()
    assert patched == cpu.patch(clean, corrupted, answer, wrong).to_dict()
    assert head_roles(trace).to_dict() == head_roles(ref).to_dict()
    assert attention_stats(trace).to_dict() == attention_stats(ref).to_dict()
    t = ids[2]
    assert nearest_tokens(model, t, 5) == nearest_tokens(cpu, t, 5)
    assert analogy(model, [ids[1], ids[2]], [ids[3]], 5).neighbours == analogy(cpu, [ids[1], ids[2]], [ids[3]],
                                                                                 5).neighbours
    assert project_2d(model, ids[:5]).to_dict() == project_2d(cpu, ids[:5]).to_dict()


@pytest.mark.parametrize("model_name", ["sim", "split"])
def test_the_answers_the_server_encodes_copy_only_their_slices(model_name, request, cpu, cpu_generators):
    pytest.importorskip("pydantic")
    from transformer_explainer.overview import Found, OverviewAsk, trace_overview
    from transformer_explainer.schemas import SamplingIn, TensorSpec
    from transformer_explainer.slicing import activation_tensors, weight_tensors

    model = request.getfixturevalue(model_name)
    long_text = " ".join([TEXT] * 6)  # more tokens than a thumbnail has cells: the pooled path
    specs = [TensorSpec(name="blocks.1.attn.pattern", head=1), TensorSpec(name="blocks.0.resid_post", position=2),
             TensorSpec(name="blocks.1.attn.v", head=3)]
    weights = [TensorSpec(name="blocks.1.attn.W_Q", head=2), TensorSpec(name="embed.W_E", row=5)]

    def answers(m):
        trace = m.trace(long_text)
        ask = OverviewAsk(SamplingIn(temperature=0.7, seed=1), top_n=5, include=specs)
        out = trace_overview("tiny", m, trace, ask=ask, found=Found(False, [0, trace.n_tokens])).model_dump()
        out.pop("timings_ms")
        return out, activation_tensors(trace, specs), weight_tensors(m, weights)

    assert answers(model) == answers(cpu)


def test_a_device_that_is_not_here_is_refused_in_one_sentence():
    assert resolve_device("auto") == torch.device("cpu")  # this machine has no GPU
    assert resolve_device("CPU") == torch.device("cpu")
    for spec, words in [("cuda", "not available"), ("cuda:3", "not available"), ("mps", "not available"),
                        ("cdua", "unknown device 'cdua'"), ("meta", "cannot run a model"), ("cpu:1", "no number"),
                        (3, "a device is a name")]:
        with pytest.raises(InputError, match=words) as e:
            resolve_device(spec)
        assert "\n" not in str(e.value)


def test_the_command_line_names_the_device_first_and_refuses_one_that_is_not_here(tiny_gpt2_dir, capsys):
    assert cli.main(["explain", "Hello", "--model", str(tiny_gpt2_dir), "--offline", "--top", "1"]) == 0
    assert capsys.readouterr().err.splitlines()[0].endswith(" on cpu")
    for flags, words in [(["--device", "cuda"], "device 'cuda' is not available"),
                         (["--device", "cuda:3"], "device 'cuda:3' is not available"),
                         (["--device", "gpu"], "unknown device 'gpu'"),
                         (["--dtype", "float16"], "float16 runs on a GPU only"),
                         (["--device", "cpu", "--device-map", "auto"], "contradict"),
                         (["--max-memory", "0=1GiB,cpu=1GiB"], "device 'cuda:0' is not available"),
                         (["--max-memory", "cpu=lots"], "is not DEVICE=SIZE")]:
        assert cli.main(["explain", "Hello", "--model", str(tiny_gpt2_dir), "--offline", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err, (flags, err)


def test_serve_says_where_the_models_run_before_it_loads_them():
    from transformer_explainer.server.run import ServeConfig, devices_words

    assert devices_words(ServeConfig()) == "cpu"  # auto, on a machine without a GPU
    assert devices_words(ServeConfig(device=None, device_map="auto", max_memory={"0": "20GiB", "cpu": "64GiB"})) == (
        "a device map (auto, within 0=20GiB,cpu=64GiB: whole blocks, GPUs first)")
    with pytest.raises(InputError, match="device 'cuda:1' is not available"):
        devices_words(ServeConfig(device="cuda:1"))
