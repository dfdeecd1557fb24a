"""Loading: every way a model folder can be wrong gets a clear error naming the problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from transformer_explainer import CheckpointError, InputError, ModelNotFoundError, load_model
from transformer_explainer.loading.checkpoint import save_decoder


@pytest.fixture
def folder(tmp_path: Path, tiny_gpt2_dir: Path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(tiny_gpt2_dir, dst)
    return dst


def test_missing_tensor_is_named(folder: Path):
    state = load_file(folder / "model.safetensors")
    del state["transformer.h.1.mlp.c_fc.weight"]
    save_file(state, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"h\.1\.mlp\.c_fc\.weight"):
        load_model(str(folder), allow_download=False)


def test_mismatched_shape_is_named(folder: Path):
    cfg = json.loads((folder / "config.json").read_text())
    cfg["n_embd"] = 128
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="shape"):
        load_model(str(folder), allow_download=False)


def test_truncated_weights(folder: Path):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_model(str(folder), allow_download=False)


def test_nan_weights(folder: Path):
    state = load_file(folder / "model.safetensors")
    state["transformer.h.0.ln_1.weight"][3] = float("nan")
    save_file(state, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match="NaN"):
        load_model(str(folder), allow_download=False)


def test_missing_files(folder: Path):
    (folder / "vocab.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer"):
        load_model(str(folder), allow_download=False)
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        load_model(str(folder), allow_download=False)


def test_bad_config(folder: Path):
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="JSON"):
        load_model(str(folder), allow_download=False)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": 5}))
    with pytest.raises(CheckpointError, match="'bert' is an encoder .* code of our own: gpt2, llama, qwen2, mistral"):
        load_model(str(folder), allow_download=False)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 5}))
    with pytest.raises(CheckpointError, match="num_hidden_layers"):
        load_model(str(folder), allow_download=False)


def test_pickle_is_refused(folder: Path):
    """A pytorch_model.bin holding arbitrary objects must not be unpickled."""
    (folder / "model.safetensors").unlink()

    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    torch.save({"x": Evil()}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="holds Python objects other than tensors") as e:
        load_model(str(folder), allow_download=False)
    msg = str(e.value)  # one line, naming what the pickle refers to, and no advice to load it unsafely
    assert "\n" not in msg and "(it refers to print)" in msg and "weights_only" not in msg, msg


def test_unknown_model_offline():
    with pytest.raises(ModelNotFoundError, match="not in the local Hugging Face cache"):
        load_model("no-such-model-xyz", allow_download=False)
    with pytest.raises(ModelNotFoundError, match="no such folder"):
        load_model("./no/such/folder", allow_download=False)


def test_an_existing_path_is_never_a_hub_id(tmp_path: Path, monkeypatch):
    (tmp_path / "README.md").write_text("hello\n")
    monkeypatch.chdir(tmp_path)
    for spec in ("README.md", str(tmp_path / "README.md")):  # relative and absolute: a file, not a download
        with pytest.raises(ModelNotFoundError, match="is a file; a model folder holds config.json"):
            load_model(spec)
    with pytest.raises(ModelNotFoundError, match="no such folder"):
        load_model(str(tmp_path / "missing"))


def test_unreachable_hub_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import importlib

    import huggingface_hub.constants as c

    importlib.reload(c)
    try:
        with pytest.raises(ModelNotFoundError) as e:
            load_model("gpt2-medium")
        msg = str(e.value)
        assert "\n" not in msg and "openai-community/gpt2-medium" in msg and "this machine is offline" in msg
    finally:
        monkeypatch.undo()
        importlib.reload(c)


def test_input_errors(tiny_model):
    with pytest.raises(InputError, match="empty"):
        tiny_model.trace("")
    long = "hello " * 200  # 200+ tokens, context is 128
    with pytest.raises(InputError, match="at most 128"):
        tiny_model.trace(long)
    t = tiny_model.trace(long, truncate=True)
    assert t.n_tokens == 128


def test_save_roundtrip_float16(tmp_path: Path, tiny_model):
    save_decoder(tiny_model.net, tmp_path / "m", torch.float16)
    shutil.copy(tiny_model.folder / "vocab.json", tmp_path / "m")
    shutil.copy(tiny_model.folder / "merges.txt", tmp_path / "m")
    m2 = load_model(str(tmp_path / "m"), allow_download=False)
    a = tiny_model.trace("hello world")["logits"]
    b = m2.trace("hello world")["logits"]
    torch.testing.assert_close(a, b, atol=2e-2, rtol=0)  # float16 weights


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_the_files_weight_type_is_read_from_its_header(tmp_path: Path, tiny_model, dtype):
    from transformer_explainer.loading.checkpoint import stored_dtype

    save_decoder(tiny_model.net, tmp_path / "m", dtype)
    shutil.copy(tiny_model.folder / "vocab.json", tmp_path / "m")
    shutil.copy(tiny_model.folder / "merges.txt", tmp_path / "m")
    name = str(dtype).removeprefix("torch.")
    assert stored_dtype(tmp_path / "m") == name
    m2 = load_model(str(tmp_path / "m"), allow_download=False)
    assert m2.file_dtype == name and m2.dtype == torch.float32  # stored small, computed in float32
    # a pickle checkpoint tells its types only once unpickled: unknown
    torch.save(load_file(tmp_path / "m" / "model.safetensors"), tmp_path / "m" / "pytorch_model.bin")
    (tmp_path / "m" / "model.safetensors").unlink()
    assert stored_dtype(tmp_path / "m") is None


def test_saved_folder_loads_in_transformers(tmp_path: Path, tiny_model):
    from transformers import GPT2LMHeadModel

    save_decoder(tiny_model.net, tmp_path / "m")
    hf = GPT2LMHeadModel.from_pretrained(tmp_path / "m").eval()
    ids = tiny_model.encode("hello world, again")
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(tiny_model.trace_ids(ids)["logits"], ref, atol=1e-5, rtol=0)
