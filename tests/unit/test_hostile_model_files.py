"""Hostile model folders, built here from a tiny random checkpoint: each is refused with one clear line
(a CheckpointError or InputError) before anything large is allocated, never a crash, a hang, a
traceback or an "internal error"."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from tests.conftest import make_hf_llama_family
from transformer_explainer import CheckpointError, InputError, load_model
from transformer_explainer.loading.budget import check_memory
from transformer_explainer.models.decoder import Decoder
from transformer_explainer.seq2seq.checkpoint import load_seq2seq

BUILTIN_SEQ2SEQ = Path(__file__).parents[2] / "src/transformer_explainer/builtin/seq2seq/reverse"
# (\w+\s?)*$ backtracks exponentially on words followed by a non-word character, and the regex engine
# behind tokenizers (Oniguruma) gives up after its retry limit by panicking
PATHOLOGICAL_REGEX = r"(\w+\s?)*$"
PATHOLOGICAL_TEXT = "hello world " * 5 + "!"


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hf_llama_family(tmp_path_factory.mktemp("tiny-qwen2"), "qwen2")


def _copy(src: Path, dst: Path, **config: object) -> Path:
    shutil.copytree(src, dst)
    if config:
        c = json.loads((dst / "config.json").read_text())
        c.update(config)
        (dst / "config.json").write_text(json.dumps(c))
    return dst


@pytest.fixture
def gpt2(tmp_path_factory: pytest.TempPathFactory, tiny_gpt2_dir: Path):
    """A fresh copy of the tiny GPT-2 per call, with `config` written over its config.json."""
    return lambda **config: _copy(tiny_gpt2_dir, tmp_path_factory.mktemp("gpt2") / "m", **config)


@pytest.fixture
def llama(tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path):
    return lambda **config: _copy(tiny_llama_dir, tmp_path_factory.mktemp("llama") / "m", **config)


def refused(folder: Path, match: str, error: type[Exception] = CheckpointError) -> str:
    with pytest.raises(error, match=match) as e:
        load_model(str(folder), allow_download=False)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def within(load, folder: Path, timeout_s: float = 30) -> BaseException | None:
    """Run `load(folder)` in a thread and return what it raised. If it is still blocked after
    `timeout_s` (on a FIFO no one writes to), fail, after opening the folder's FIFOs for writing so
    that the blocked reader returns and nothing is left hanging."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            load(folder)
            outcome.append(None)
        except BaseException as e:  # noqa: B036 - handed to the test's thread
            outcome.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        for p in folder.iterdir():
            if p.is_fifo():
                try:
                    os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
                except OSError as e:
                    assert e.errno == errno.ENXIO  # no reader is waiting on this one
        t.join(10)
        pytest.fail(f"loading {folder} blocked for {timeout_s} s")
    return outcome[0]


def load_folder(folder: Path) -> None:
    load_model(str(folder), allow_download=False)


# -- files that are not regular files (item 2) --------------------------------------------------------

def test_config_symlinked_to_dev_zero_is_refused(gpt2):
    folder = gpt2()
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to("/dev/zero")
    refused(folder, r"config\.json is a device, not a regular file")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, tiny_gpt2_dir: Path, tiny_llama_dir: Path, name: str):
    folder = _copy(tiny_llama_dir if name == "tokenizer.json" else tiny_gpt2_dir, tmp_path / "m")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    e = within(load_folder, folder)
    assert isinstance(e, CheckpointError) and f"{name} is a FIFO, not a regular file" in str(e), e


def test_a_symlink_to_a_regular_file_still_loads(gpt2):
    """The Hugging Face cache is made of symlinks into blobs/: those are regular files."""
    folder = gpt2()
    (folder / "weights").mkdir()
    (folder / "model.safetensors").rename(folder / "weights" / "blob")
    (folder / "model.safetensors").symlink_to(folder / "weights" / "blob")
    assert load_model(str(folder), allow_download=False).config.n_layer == 2


# -- sizes beyond what the files hold or the machine has (item 2) ------------------------------------

@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_million_layers_is_refused_before_building_them(family: str, gpt2, llama):
    folder = gpt2(n_layer=10**6) if family == "gpt2" else llama(num_hidden_layers=10**6)
    refused(folder, r"says n_layer is 1,000,000, but the weight files hold \d+ tensors, enough for at most 2 blocks")


def test_huge_dimensions_are_refused_by_the_files_shapes(gpt2):
    refused(gpt2(n_embd=8192, n_head=64, n_layer=200), "n_layer is 200, but the weight files hold 28 tensors")
    msg = refused(gpt2(n_embd=8192, n_head=64), "shape")
    assert "'transformer.wte.weight'" in msg and "(50257, 8192)" in msg


@pytest.mark.parametrize(("key", "value"), [("vocab_size", 10**10), ("n_positions", 10**9)])
def test_huge_whole_numbers_are_refused_by_the_files_shapes(gpt2, key: str, value: int):
    refused(gpt2(**{key: value}), f"has shape .*, but config.json implies \\({value}, 64\\)")


def test_a_huge_llama_head_width_is_refused_before_the_rotary_table(llama):
    """head_dim sizes the rotary frequency table, computed on the CPU: it must wait for the shape check."""
    refused(llama(head_dim=2**38), r"q_proj\.weight' .* implies \(1099511627776, 64\)")


def test_weights_beyond_the_memory_available_are_refused():
    from transformer_explainer.config import GPT2_PRESETS

    with torch.device("meta"):
        model = Decoder(GPT2_PRESETS["gpt2-xl"])
    with pytest.raises(CheckpointError, match=r"gpt2-xl has 1,557,611,200 parameters, which need 6\.2 GB of memory "
                                              r"in float32, but this machine has 4\.0 GB available; in bfloat16"):
        check_memory(model, torch.float32, "gpt2-xl", memory=4 * 10**9)
    check_memory(model, torch.bfloat16, "gpt2-xl", memory=4 * 10**9)  # 3.1 GB: fits


# -- values that would crash, or load and then fail every call (items 7 and 8) -----------------------

@pytest.mark.parametrize(("config", "match"), [
    ({"n_head": 0}, "n_head must be a whole number from 1 to 2\\*\\*40, got 0"),
    ({"n_inner": -5}, "n_inner must be a whole number from 1 to 2\\*\\*40, got -5"),
    ({"n_inner": "256"}, "n_inner must be a whole number, got '256'"),
    ({"n_inner": 1e12}, "n_inner must be a whole number, got 1000000000000.0"),
    ({"vocab_size": 1e10}, "vocab_size must be a whole number, got 10000000000.0"),
    ({"n_positions": 1e9}, "n_positions must be a whole number, got 1000000000.0"),
    ({"layer_norm_epsilon": float("nan")}, "layer_norm_epsilon must be a finite number above 0, got nan"),
    ({"layer_norm_epsilon": 0}, "layer_norm_epsilon must be a finite number above 0, got 0"),
])
def test_gpt2_config_values_are_checked_at_load(gpt2, config: dict, match: str):
    msg = refused(gpt2(**config), match)
    assert "is not a usable model config" in msg


def _llama3_scaling(**overrides: float) -> dict:
    return {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64, **overrides}


@pytest.mark.parametrize(("config", "match"), [
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps must be a finite number above 0, got nan"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 0}}, "rope_theta must be a finite number above 0"),
    ({"rope_parameters": None, "rope_theta": float("inf")}, "rope_theta must be a finite number above 0, got inf"),
    ({"rope_parameters": _llama3_scaling(factor=0)}, "rope scaling factor must be a finite number above 0, got 0"),
    ({"rope_parameters": _llama3_scaling(low_freq_factor=4.0)}, "low_freq_factor .* must be below high_freq_factor"),
    ({"num_key_value_heads": 0}, "num_key_value_heads must be a whole number from 1"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false"),
])
def test_llama_config_values_are_checked_at_load(llama, config: dict, match: str):
    refused(llama(**config), match)


def test_a_deeply_nested_config_is_refused(gpt2):
    folder = gpt2()
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    refused(folder, r"config\.json is not usable JSON: it is nested too deeply")


# -- pickles (item 7) ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("content", "match"), [
    (lambda sd: {"transformer.wte.weight": "hello"}, "holds a str under 'transformer.wte.weight', not a tensor"),
    (lambda sd: dict(enumerate(sd.values())), "holds a key that is not a tensor name: 0"),
    (lambda sd: [1, 2], "does not hold a state dict"),
])
def test_a_pickle_of_other_things_than_named_tensors_is_refused(gpt2, content, match: str):
    folder = gpt2()
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(content(state), folder / "pytorch_model.bin")
    refused(folder, match)


def test_a_pickle_of_named_tensors_loads(gpt2, tiny_model):
    folder = gpt2()
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    m = load_model(str(folder), allow_download=False)
    torch.testing.assert_close(m.trace("hello world")["logits"], tiny_model.trace("hello world")["logits"])


def test_a_tensor_of_integers_is_refused(gpt2):
    from safetensors.torch import save_file

    folder = gpt2()
    state = load_file(folder / "model.safetensors")
    state["transformer.ln_f.bias"] = torch.zeros(64, dtype=torch.int64)
    save_file(state, folder / "model.safetensors")
    refused(folder, "'transformer.ln_f.bias' .* has dtype I64, not a floating-point type")


# -- a tokenizer whose pattern the regex engine gives up on (item 7) --------------------------------

def _pathological_tokenizer(folder: Path) -> Path:
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": PATHOLOGICAL_REGEX}, "behavior": "Isolated",
                            "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    return folder


def test_a_regex_the_engine_gives_up_on_is_an_input_error(llama):
    model = load_model(str(_pathological_tokenizer(llama())), allow_download=False)
    assert model.encode("hello")  # short texts tokenize
    with pytest.raises(InputError, match="the model's tokenizer failed on this text .*retry-limit-in-match over"):
        model.encode(PATHOLOGICAL_TEXT)


def test_the_server_answers_such_a_tokenizer_with_a_json_error(llama):
    from transformer_explainer.server import create_app

    model = load_model(str(_pathological_tokenizer(llama())), allow_download=False)
    with TestClient(create_app({"odd": model}), raise_server_exceptions=False) as c:
        r = c.post("/api/trace", json={"text": PATHOLOGICAL_TEXT})
        assert r.status_code == 422 and r.headers["content-type"].startswith("application/json"), r.text
        assert "tokenizer failed on this text" in r.json()["detail"]


# -- through the CLI and the server -------------------------------------------------------------------

@pytest.mark.parametrize("case", ["n_head_0", "eps_nan", "million_layers", "dev_zero", "deep_json", "pickle_str"])
def test_the_cli_says_one_line_and_exits_2(case: str, gpt2, capsys: pytest.CaptureFixture[str]):
    from transformer_explainer.cli import main

    folder = gpt2(**{"n_head_0": {"n_head": 0}, "eps_nan": {"layer_norm_epsilon": float("nan")},
                     "million_layers": {"n_layer": 10**6}}.get(case, {}))
    if case == "dev_zero":
        (folder / "config.json").unlink()
        (folder / "config.json").symlink_to("/dev/zero")
    elif case == "deep_json":
        (folder / "config.json").write_text('{"a":' * 200_000 + "1" + "}" * 200_000)
    elif case == "pickle_str":
        (folder / "model.safetensors").unlink()
        torch.save({"transformer.wte.weight": "hello"}, folder / "pytorch_model.bin")
    code = main(["explain", "hi", "--model", str(folder)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("transformer-explainer") and ": error: " in err, err
    assert "internal error" not in err and "Traceback" not in err


def test_the_server_answers_a_hostile_folder_with_a_json_error(gpt2, tiny_model):
    from transformer_explainer.server import ModelRegistry, create_app

    registry = ModelRegistry.from_models({"tiny": tiny_model})
    registry.add_folder("bad", gpt2(layer_norm_epsilon=float("nan")), "local")
    with TestClient(create_app(registry), raise_server_exceptions=False) as c:
        r = c.post("/api/trace", json={"model": "bad", "text": "hello"})
        assert r.status_code == 503 and r.headers["content-type"].startswith("application/json"), r.text
        assert "layer_norm_epsilon must be a finite number above 0, got nan" in r.json()["detail"]


# -- seq2seq checkpoints: the same holes ------------------------------------------------------------

def _seq2seq(tmp_path: Path, **model: object) -> Path:
    folder = _copy(BUILTIN_SEQ2SEQ, tmp_path / "s2s")
    meta = json.loads((folder / "config.json").read_text())
    meta["model"].update(model)
    (folder / "config.json").write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize(("model", "match"), [
    ({"n_encoder_layers": 10**6}, "says n_encoder_layers is 1,000,000, but the weight files hold"),
    ({"max_len": 10**9}, r"has \d[\d,]* parameters, which need .* GB of memory in float32"),
    ({"layer_norm_eps": float("nan")}, "layer_norm_eps must be a finite number above 0, got nan"),
    ({"d_model": "128"}, "d_model must be a whole number from 1 to 2\\*\\*40, got '128'"),
])
def test_seq2seq_configs_are_checked_before_allocating(tmp_path: Path, model: dict, match: str, monkeypatch):
    monkeypatch.setattr("transformer_explainer.loading.budget.available_memory", lambda: 16 * 10**9)
    with pytest.raises(CheckpointError, match=match):
        load_seq2seq(_seq2seq(tmp_path, **model))


def test_a_seq2seq_fifo_is_refused_without_blocking(tmp_path: Path):
    folder = _seq2seq(tmp_path)
    (folder / "vocab.json").unlink()
    os.mkfifo(folder / "vocab.json")
    e = within(load_seq2seq, folder)
    assert isinstance(e, CheckpointError) and "vocab.json is a FIFO, not a regular file" in str(e), e
