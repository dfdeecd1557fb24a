"""HF-format checkpoints <-> our models: GPT-2 (a key-for-key copy plus GPT-2's transposes) and the
Llama family (Llama, Qwen2, Mistral: key for key, HF's own names and layouts).

HF stores GPT-2's four projection matrices as `Conv1D` weights, (in, out); our `nn.Linear`s hold
(out, in). Weights come from `model.safetensors`, sharded `model-0000N-of-0000M.safetensors` with
their `model.safetensors.index.json`, or `pytorch_model.bin`; nothing is unpickled unsafely
(safetensors, or `torch.load(weights_only=True)`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ..config import GPTConfig
from ..errors import CheckpointError
from ..models.gpt import GPT
from ..models.llama import LlamaLM

DecoderLM = GPT | LlamaLM
SUPPORTED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")  # HF's causal-mask buffers in old checkpoints


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or a CheckpointError saying what is wrong with the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is not readable JSON: {e}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return data


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is corrupt or truncated: {e}") from None


# the safetensors header's names of the floating-point types a checkpoint may store its weights in
_STORED_FLOATS = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


def stored_dtype(folder: Path) -> str | None:
    """The type the checkpoint's file stores most of its weights in ("float16", "bfloat16", "float32"), read from
    the safetensors header (of the first shard when sharded) without loading a tensor; None for a pickle
    checkpoint, which tells its types only once unpickled, or a file that cannot be read."""
    st = folder / "model.safetensors"
    if not st.is_file():
        shards = sorted(folder.glob("model-*-of-*.safetensors"))
        if not shards:
            return None
        st = shards[0]
    numbers: dict[str, int] = {}
    try:
        with safe_open(str(st), framework="pt") as f:
            for key in f.keys():
                part = f.get_slice(key)
                name = _STORED_FLOATS.get(part.get_dtype())
                if name:
                    n = 1
                    for d in part.get_shape():
                        n *= d
                    numbers[name] = numbers.get(name, 0) + n
    except (SafetensorError, OSError, ValueError):
        return None
    return max(numbers, key=lambda k: numbers[k]) if numbers else None


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    st, binf = folder / "model.safetensors", folder / "pytorch_model.bin"
    index = folder / "model.safetensors.index.json"
    if st.is_file():
        return _load_safetensors(st)
    if index.is_file():  # sharded: the index maps every tensor name to its shard file
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index} has no weight_map")
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not isinstance(shard, str) or Path(shard).name != shard:
                raise CheckpointError(f"{index} names a shard outside the folder: {shard!r}")
            if not (folder / shard).is_file():
                raise CheckpointError(f"shard {shard} listed in {index.name} is missing from {folder}")
            state.update(_load_safetensors(folder / shard))
        missing = set(weight_map) - set(state)
        if missing:
            raise CheckpointError(f"tensor {sorted(missing)[0]!r} listed in {index.name} is in none of its shards")
        return state
    if binf.is_file():
        try:
            state = torch.load(str(binf), map_location="cpu", weights_only=True)
        except Exception as e:  # unpickling errors come in many classes
            raise CheckpointError(f"{binf} could not be loaded safely (weights only): {e}") from None
        if not isinstance(state, dict):
            raise CheckpointError(f"{binf} does not hold a state dict")
        return state
    raise CheckpointError(f"{folder} has no weights: expected model.safetensors (or shards with "
                          f"model.safetensors.index.json) or pytorch_model.bin")


def read_config(folder: Path) -> GPTConfig:
    try:
        return GPTConfig.from_hf(read_json(folder / "config.json"))
    except (KeyError, ValueError, TypeError) as e:
        raise CheckpointError(f"{folder / 'config.json'} is not a usable model config: {e}") from None


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """float32 (the default) or bfloat16, given as a name or a torch dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in SUPPORTED_DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in SUPPORTED_DTYPES:
        return SUPPORTED_DTYPES[dtype.removeprefix("torch.")]
    raise CheckpointError(f"dtype {dtype!r} is not supported; use one of {', '.join(SUPPORTED_DTYPES)}")


def load_decoder(folder: Path, dtype: str | torch.dtype | None = None) -> DecoderLM:
    """Our model for any supported HF folder: GPT-2 or the Llama family, by its config's model_type."""
    config = read_config(folder)
    if config.family == "llama":
        return load_llama(folder, dtype, config=config)
    return load_gpt(folder, dtype)


def _checked(key: str, t: torch.Tensor, shape: tuple[int, ...], folder: Path) -> torch.Tensor:
    if tuple(t.shape) != tuple(shape):
        raise CheckpointError(
            f"tensor {key!r} in {folder} has shape {tuple(t.shape)}, but config.json implies {tuple(shape)}"
        )
    if t.is_floating_point() and not torch.isfinite(t).all():
        raise CheckpointError(f"tensor {key!r} in {folder} contains NaN or infinite values")
    return t


def load_llama(folder: Path, dtype: str | torch.dtype | None = None, *, config: GPTConfig | None = None) -> LlamaLM:
    """Build our LlamaLM from an HF Llama / Qwen2 / Mistral folder, key for key. The model is built
    without memory ("meta" tensors) and takes the checkpoint's tensors as they are, cast to `dtype`,
    so a 1.5 B model in bfloat16 needs its 3 GB once, not twice."""
    dt = resolve_dtype(dtype)
    config = config or read_config(folder)
    hf = read_state_dict(folder)
    with torch.device("meta"):
        model = LlamaLM(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop("lm_head.weight")
        head = hf.pop("lm_head.weight", None)  # some tied checkpoints store the shared matrix twice
        emb = hf.get("model.embed_tokens.weight")
        if head is not None and (emb is None or head.shape != emb.shape or not torch.equal(head, emb)):
            raise CheckpointError(f"config.json in {folder} says the embeddings are tied, but the checkpoint's "
                                  f"lm_head.weight differs from model.embed_tokens.weight")
    loaded: dict[str, torch.Tensor] = {}
    for key, shape in expected.items():
        if key not in hf:
            hint = " (config.json says the embeddings are untied)" if key == "lm_head.weight" else ""
            raise CheckpointError(f"checkpoint in {folder} is missing tensor {key!r}{hint}")
        loaded[key] = _checked(key, hf.pop(key), shape, folder).to(dt)
    extra = [k for k in hf if not k.endswith("rotary_emb.inv_freq")]  # old checkpoints kept this buffer
    if extra:
        raise CheckpointError(f"checkpoint in {folder} has unexpected tensors, e.g. {sorted(extra)[0]!r}")
    model.load_state_dict(loaded, strict=False, assign=True)  # complete: checked above (lm_head when tied)
    model.tie_weights_()
    return model.eval()


def load_gpt(folder: Path, dtype: str | torch.dtype | None = None) -> GPT:
    """Build our GPT from an HF GPT-2 folder (`config.json` + weights); errors name the bad tensor."""
    dt = resolve_dtype(dtype)
    config = read_config(folder)
    if config.family != "gpt2":
        raise CheckpointError(f"{folder} holds a {config.model_type} model, not GPT-2")
    hf = read_state_dict(folder)
    model = GPT(config)
    ours = model.state_dict()
    # HF GPT2LMHeadModel keys start with "transformer."; a bare GPT2Model's do not.
    hf = {(k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}"): v for k, v in hf.items()}
    hf = {k: v for k, v in hf.items() if not k.endswith(IGNORED_SUFFIXES)}
    loaded: dict[str, torch.Tensor] = {}
    for key, target in ours.items():
        if key == "lm_head.weight":  # tied to wte
            continue
        if key not in hf:
            raise CheckpointError(f"checkpoint in {folder} is missing tensor {key!r}")
        t = hf[key]
        if key.endswith(TRANSPOSED):
            t = t.t()
        if tuple(t.shape) != tuple(target.shape):
            raise CheckpointError(
                f"tensor {key!r} in {folder} has shape {tuple(t.shape)}, but config.json implies "
                f"{tuple(target.shape)}"
            )
        if not torch.isfinite(t).all():
            raise CheckpointError(f"tensor {key!r} in {folder} contains NaN or infinite values")
        loaded[key] = t.to(torch.float32)
    extra = set(hf) - set(ours)
    if extra:
        raise CheckpointError(f"checkpoint in {folder} has unexpected tensors, e.g. {sorted(extra)[0]!r}")
    model.load_state_dict(loaded, strict=False)
    model.eval()
    return model.to(dt)


def hf_state_dict(model: GPT, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Our weights under HF GPT2LMHeadModel's keys and layouts (lm_head omitted: it is tied)."""
    out = {}
    for key, t in model.state_dict().items():
        if key == "lm_head.weight":
            continue
        out[key] = (t.t() if key.endswith(TRANSPOSED) else t).to(dtype).contiguous().clone()
    return out


@contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write `path` through: written beside it, fsynced, renamed over it at the end
    of the block. A reader sees the old file or the new one, never half of one; an error inside the
    block leaves no file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write, fsync, rename: a reader sees the old file or the new one, never half of one."""
    with atomic_writer(path) as f:
        f.write(data)


def save_gpt(model: GPT, folder: Path, dtype: torch.dtype = torch.float32) -> None:
    """Write `config.json` + `model.safetensors` in exactly HF GPT-2's format. float16 halves the
    file; the values then loaded (by us and by transformers alike) are those float16 numbers."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        tmp_file = Path(tmp) / "model.safetensors"
        save_file(hf_state_dict(model, dtype), str(tmp_file), metadata={"format": "pt"})
        atomic_write_bytes(folder / "model.safetensors", tmp_file.read_bytes())
    hf_config = {**model.config.to_hf(), "torch_dtype": str(dtype).removeprefix("torch.")}
    atomic_write_bytes(folder / "config.json", (json.dumps(hf_config, indent=2) + "\n").encode())


def save_llama(model: LlamaLM, folder: Path, dtype: torch.dtype = torch.float32,
               special_tokens: dict[str, int] | None = None) -> None:
    """Write `config.json` + `model.safetensors` in HF's format for the model's architecture
    (LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM): our parameter names are HF's, so the
    state dict is written as it is, without `lm_head.weight` when the embeddings are tied.
    `special_tokens`: e.g. {"bos_token_id": ..., "eos_token_id": ...} for `config.json`."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        tmp_file = Path(tmp) / "model.safetensors"
        save_file(state, str(tmp_file), metadata={"format": "pt"})
        atomic_write_bytes(folder / "model.safetensors", tmp_file.read_bytes())
    hf_config = {**model.config.to_hf(), **(special_tokens or {}), "torch_dtype": str(dtype).removeprefix("torch.")}
    atomic_write_bytes(folder / "config.json", (json.dumps(hf_config, indent=2) + "\n").encode())
