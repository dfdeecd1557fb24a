"""Any transformers decoder opens through the Python API (issue 34): `load_model` on a checkpoint folder whose
model_type none of our families declares gives a `GenericModel` that runs through transformers' own modules; its
trace, next-token distribution and generation equal transformers' own forward and generate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from transformer_explainer import load_model
from transformer_explainer.engine import ExplainerModel
from transformer_explainer.errors import CheckpointError, InputError
from transformer_explainer.families import BY_MODEL_TYPE
from transformer_explainer.generic import OWN, TRANSFORMERS, GenericModel, which_way
from transformer_explainer.sampling import SamplingParams

from ..helpers.hf_checkpoints import FAMILIES, LISTED, write_checkpoint

TOL = 1e-5
TEXT = "The king said, 'Hello!' and then left the room; the queen stayed."
OWN_CODE = [t for t in FAMILIES if t in BY_MODEL_TYPE]  # llama, qwen3_moe, gpt2: families with code of our own
GENERIC = [t for t in FAMILIES if t not in BY_MODEL_TYPE]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a - b).abs().max() <= TOL * max(1.0, float(b.abs().max())))


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("generic")
    return {t: write_checkpoint(t, root / t, tokenizer=True) for t in FAMILIES}


def test_the_fifteen_families_and_one_nobody_listed_run_through_transformers() -> None:
    assert len(LISTED) >= 15 and set(LISTED) <= set(GENERIC)
    assert "gpt_neox" in GENERIC  # a model_type nobody listed


@pytest.mark.parametrize("model_type", GENERIC)
def test_trace_equals_transformers_forward(model_type: str, folders: dict[str, Path]) -> None:
    folder = folders[model_type]
    assert which_way(folder) == TRANSFORMERS
    model = load_model(str(folder))
    assert isinstance(model, GenericModel) and model.runs == TRANSFORMERS
    assert "through transformers" in repr(model)
    trace = model.trace(TEXT)
    assert trace.text == TEXT and trace.n_tokens > 8
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = eager(torch.tensor([trace.token_ids]), output_attentions=True, output_hidden_states=True,
                    use_cache=False)
    assert _close(trace.logits, out.logits[0])
    assert torch.equal(trace.next_token_logits(), trace.logits[-1])
    c = model.config
    patterns = [a for a in out.attentions if a is not None]  # one per attention layer, in order
    assert len(patterns) == len(c.attention_layers) > 0
    for i, expected in zip(c.attention_layers, patterns, strict=True):
        assert _close(trace[f"blocks.{i}.attn.pattern"], expected[0]), i
    for i in range(c.n_layer):  # each layer's output: transformers' hidden states after it (the last one normed)
        if i + 1 < c.n_layer:
            assert _close(trace[f"blocks.{i}.resid_post"], out.hidden_states[i + 1][0]), i
    # every name the trace lists answers, with the shape its dims say
    for name in trace.names():
        assert trace[name].shape[0] > 0, name
    # a layer without attention answers no attention stage, in a sentence
    other = [i for i in range(c.n_layer) if i not in c.attention_layers]
    for i in other:
        with pytest.raises(KeyError, match="not an activation recorded"):
            trace[f"blocks.{i}.attn.pattern"]
    # the next-token distribution reads the same logits
    dist = model.next_token(TEXT, SamplingParams(temperature=1.0, top_k=None, top_p=1.0))
    assert _close(dist.logits, out.logits[0, -1])


@pytest.mark.parametrize("model_type", ["phi3", "qwen3_5_text", "gpt_oss", "lfm2", "gemma4_text", "falcon_h1"])
def test_greedy_generation_equals_transformers_generate(model_type: str, folders: dict[str, Path]) -> None:
    folder = folders[model_type]
    model = load_model(str(folder))
    ids = model.encode("The king said")
    ours = [t.id for t in model.generate_ids(ids, 8, SamplingParams(temperature=0.0), stop_at_eos=False)]
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = eager.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, min_new_tokens=8,
                                pad_token_id=0)[0, len(ids):].tolist()
    assert ours == theirs


def test_sampled_generation_is_seeded(folders: dict[str, Path]) -> None:
    model = load_model(str(folders["qwen3_5_text"]))
    params = SamplingParams(temperature=1.0, top_k=None, top_p=1.0, seed=7)
    a = [t.id for t in model.generate("The king", 6, params)]
    assert a == [t.id for t in model.generate("The king", 6, params)]


def test_families_with_code_of_our_own_keep_it(folders: dict[str, Path]) -> None:
    assert OWN_CODE == ["llama", "qwen3_moe", "gpt2"]
    for model_type in OWN_CODE:
        assert which_way(folders[model_type]) == OWN
    for model_type in ("llama", "qwen3_moe"):  # (the GPT-2 fixture's untied head is refused by GPT-2's own code)
        assert isinstance(load_model(str(folders[model_type])), ExplainerModel)


def test_bad_input_is_one_sentence(folders: dict[str, Path]) -> None:
    model = load_model(str(folders["lfm2"]))
    with pytest.raises(InputError, match="empty"):
        model.trace("")
    with pytest.raises(InputError, match="reads at most"):
        model.trace("word " * 400)
    with pytest.raises(InputError, match="not named here"):
        model.weight("blocks.0.attn.W_Q")
    with pytest.raises(InputError, match="outside the vocabulary"):
        model.trace_ids([10_000])


def _config_folder(tmp_path: Path, config: dict, name: str = "m") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize(("config", "says"), [
    ({"model_type": "no_such_model"}, "does not know the model_type"),
    ({"model_type": "llama_x", "auto_map": {"AutoModelForCausalLM": "modeling_x.X"}}, "never run"),
    ({"model_type": "bert"}, "encoder"),
    ({"model_type": "t5", "is_encoder_decoder": True}, "encoder"),
    ({"model_type": "clip"}, "no causal language model"),
    ({"model_type": "gemma4"}, "text with images or audio"),  # Gemma4ForConditionalGeneration: gemma4_text opens
])
def test_what_is_not_a_transformers_decoder_is_refused(config: dict, says: str, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=says):
        load_model(str(_config_folder(tmp_path, config)))


def test_weights_only_from_safetensors(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "pickled"
    folder.mkdir()
    for f in folders["lfm2"].iterdir():
        if f.suffix != ".safetensors":
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(CheckpointError, match="safetensors files only"):
        load_model(str(folder))


def test_a_config_that_would_exhaust_memory_is_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "huge"
    folder.mkdir()
    for f in folders["phi3"].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_size=65536, intermediate_size=262144, num_hidden_layers=200)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="parameters, which need"):
        load_model(str(folder))


def test_a_config_transformers_refuses_is_one_sentence(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "inconsistent"
    folder.mkdir()
    for f in folders["lfm2"].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config.update(num_hidden_layers=7)  # its layer_types list 4
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="not a config transformers can build a model from: .*layer_types"):
        load_model(str(folder))


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_a_checkpoint_that_lacks_a_weight_is_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = _copy(folders["phi3"], tmp_path / "lacking")
    state = load_file(folder / "model.safetensors")
    del state["model.layers.1.mlp.down_proj.weight"]  # transformers alone would fill it with random numbers
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="lacks 'model.layers.1.mlp.down_proj.weight'.*made-up weights"):
        load_model(str(folder))


def test_non_finite_or_corrupt_weights_are_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = _copy(folders["phi3"], tmp_path / "nan")
    state = load_file(folder / "model.safetensors")
    state["model.layers.0.mlp.down_proj.weight"][0, 0] = float("nan")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        load_model(str(folder))
    folder = _copy(folders["phi3"], tmp_path / "cut")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        load_model(str(folder))


def test_a_tensor_shaped_other_than_the_config_says_is_one_sentence(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = _copy(folders["phi3"], tmp_path / "misshapen")
    config = json.loads((folder / "config.json").read_text())
    config.update(intermediate_size=100)  # the weights say 96
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="a tensor's shape differs from what config.json implies") as e:
        load_model(str(folder))
    assert "\n" not in str(e.value) and "above report" not in str(e.value)


def test_the_text_decoder_of_a_checkpoint_with_a_vision_part_opens(tmp_path: Path) -> None:
    """Qwen3.5's checkpoints carry a vision tower beside the text decoder (model_type qwen3_5): transformers' causal
    LM for it is the text decoder alone, which opens; the vision weights are not read."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from tests.conftest import write_tiny_bpe_tokenizer

    from ..helpers.hf_checkpoints import SMALL

    cfg = AutoConfig.for_model("qwen3_5", text_config={**SMALL, **FAMILIES["qwen3_5_text"]},
                               vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32,
                                                  out_hidden_size=64))
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(cfg).save_pretrained(tmp_path / "q")
    write_tiny_bpe_tokenizer(tmp_path / "q", vocab_size=320)
    model = load_model(str(tmp_path / "q"))
    assert isinstance(model, GenericModel) and model.config.attention_layers == (1, 3)
    trace = model.trace(TEXT)
    eager = AutoModelForCausalLM.from_pretrained(tmp_path / "q", attn_implementation="eager").eval()
    with torch.no_grad():
        assert _close(trace.logits, eager(torch.tensor([trace.token_ids]), use_cache=False).logits[0])
