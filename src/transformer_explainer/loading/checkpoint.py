"""HF-format checkpoints <-> our models, for every family: key for key through the family's name map
(`families/`: `model.layers.3.input_layernorm.weight` is our `blocks.3.ln1.weight`), plus the family's
list of transposes (HF stores GPT-2's four projection matrices as `Conv1D` weights, (in, out); our
`nn.Linear`s hold (out, in)). Weights come from `model.safetensors`, sharded `model-0000N-of-0000M.safetensors` with
their `model.safetensors.index.json`, or `pytorch_model.bin`; nothing is unpickled unsafely
(safetensors, or `torch.load(weights_only=True)`).

A folder may be hostile (a config that asks for a million layers, a weights file that is a FIFO), so
loading goes in an order that allocates nothing the files do not justify: the config's values are
checked; the model is built on the meta device (shapes, no memory) once the files are known to hold
tensors for all its blocks; every tensor's name, shape and dtype is compared with the files' headers;
the weights must fit in memory; only then are they read, checked for NaN, and assigned as they are.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from ..config import DecoderConfig
from ..errors import CheckpointError
from ..models.decoder import Decoder
from .budget import check_block_counts, check_expert_counts, check_memory
from .files import is_regular_file, read_json

__all__ = ["WeightFiles", "atomic_write_bytes", "atomic_writer", "hf_state_dict", "load_decoder", "open_weights",
           "read_config", "read_json", "resolve_dtype", "save_decoder"]

SUPPORTED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}  # float16: GPU
# weights we read: safetensors' names of the floating-point dtypes, and torch's
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "float64", "float32", "float16", "bfloat16"}


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str  # "F32", "BF16", ... from a safetensors header; "float32", ... from a pickle


class WeightFiles:
    """The tensors of a checkpoint folder by name: shapes and dtypes from the files' headers (nothing
    else is read until `read`), or from the tensors of a weights-only pickle, which must be loaded whole."""

    def __init__(self, folder: Path, info: dict[str, TensorInfo], shards: list[Path],
                 loaded: dict[str, torch.Tensor] | None = None) -> None:
        self.folder, self.info, self._shards, self._loaded = folder, info, shards, loaded

    def read(self) -> dict[str, torch.Tensor]:
        """Every tensor, read from disk (a pickle's were read already)."""
        if self._loaded is not None:
            return self._loaded
        state: dict[str, torch.Tensor] = {}
        for shard in self._shards:
            state.update(read_safetensors(shard))
        return state


def _safetensors_info(path: Path) -> dict[str, TensorInfo]:
    """The tensor table of a safetensors header; safetensors checks that it covers the file exactly."""
    try:
        with safe_open(str(path), framework="pt") as f:
            slices = {k: f.get_slice(k) for k in f.keys()}
            return {k: TensorInfo(tuple(t.get_shape()), t.get_dtype()) for k, t in slices.items()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
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
    try:
        info = _safetensors_info(st)
    except CheckpointError:
        return None
    numbers: dict[str, int] = {}
    for t in info.values():
        name = _STORED_FLOATS.get(t.dtype)
        if name:
            numbers[name] = numbers.get(name, 0) + math.prod(t.shape)
    return max(numbers, key=lambda k: numbers[k]) if numbers else None


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} is corrupt or truncated: {e}") from None


def _unsafe_pickle_message(binf: Path, e: Exception) -> str:
    """One line for a pickle that weights-only loading refused: what it names, never how to run it."""
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
    what = f" (it refers to {found.group(1)})" if found else ""
    return (f"{binf} holds Python objects other than tensors{what}, and such a pickle is never run here; "
            f"only weights are read from pytorch_model.bin")


def _load_pickle(binf: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(str(binf), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # what weights-only loading refuses
        raise CheckpointError(_unsafe_pickle_message(binf, e)) from None
    except Exception as e:  # not a zip, truncated, ...: torch raises many classes
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise CheckpointError(f"{binf} is not a readable PyTorch weights file: {first}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{binf} does not hold a state dict")
    for key, value in state.items():
        if not isinstance(key, str):
            raise CheckpointError(f"{binf} holds a key that is not a tensor name: {key!r}")
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{binf} holds a {type(value).__name__} under {key!r}, not a tensor")
    return state


def open_weights(folder: Path) -> WeightFiles:
    """The weight files of `folder`, their tensors known by name, shape and dtype."""
    st, binf = folder / "model.safetensors", folder / "pytorch_model.bin"
    index = folder / "model.safetensors.index.json"
    if is_regular_file(st):
        return WeightFiles(folder, _safetensors_info(st), [st])
    if is_regular_file(index):  # sharded: the index maps every tensor name to its shard file
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index} has no weight_map")
        info: dict[str, TensorInfo] = {}
        shards = []
        for shard in sorted(set(map(str, weight_map.values()))):
            if Path(shard).name != shard or shard in (".", ".."):
                raise CheckpointError(f"{index} names a shard outside the folder: {shard!r}")
            if not is_regular_file(folder / shard):
                raise CheckpointError(f"shard {shard} listed in {index.name} is missing from {folder}")
            shards.append(folder / shard)
            info.update(_safetensors_info(folder / shard))
        missing = set(weight_map) - set(info)
        if missing:
            raise CheckpointError(f"tensor {sorted(missing)[0]!r} listed in {index.name} is in none of its shards")
        return WeightFiles(folder, info, shards)
    if is_regular_file(binf):
        state = _load_pickle(binf)
        info = {k: TensorInfo(tuple(t.shape), str(t.dtype).removeprefix("torch.")) for k, t in state.items()}
        return WeightFiles(folder, info, [], state)
    raise CheckpointError(f"{folder} has no weights: expected model.safetensors (or shards with "
                          f"model.safetensors.index.json) or pytorch_model.bin")


def read_config(folder: Path) -> DecoderConfig:
    try:
        return DecoderConfig.from_hf(read_json(folder / "config.json"))
    except (KeyError, ValueError, TypeError) as e:
        raise CheckpointError(f"{folder / 'config.json'} is not a usable model config: {e}") from None


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """float32 (the default), bfloat16 or float16 (on a GPU: `devices.check_dtype`), as a name or a torch dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in SUPPORTED_DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.removeprefix("torch.") in SUPPORTED_DTYPES:
        return SUPPORTED_DTYPES[dtype.removeprefix("torch.")]
    raise CheckpointError(f"dtype {dtype!r} is not supported; use one of {', '.join(SUPPORTED_DTYPES)}")


def _check_info(key: str, info: TensorInfo, shape: tuple[int, ...], folder: Path) -> None:
    if info.shape != tuple(shape):
        raise CheckpointError(
            f"tensor {key!r} in {folder} has shape {info.shape}, but config.json implies {tuple(shape)}"
        )
    if info.dtype not in FLOAT_DTYPES:
        raise CheckpointError(f"tensor {key!r} in {folder} has dtype {info.dtype}, not a floating-point type")


def _finite(key: str, t: torch.Tensor, folder: Path) -> torch.Tensor:
    if not torch.isfinite(t).all():
        raise CheckpointError(f"tensor {key!r} in {folder} contains NaN or infinite values")
    return t


def _meta_model(config: DecoderConfig, files: WeightFiles) -> Decoder:
    """`Decoder(config)` on the meta device, once the files hold tensors enough for all its blocks."""
    check_expert_counts(config, file_tensors=len(files.info), config_path=files.folder / "config.json")
    check_block_counts(Decoder, config, ("n_layer",), file_tensors=len(files.info),
                       config_path=files.folder / "config.json")
    with torch.device("meta"):
        return Decoder(config)


def load_decoder(folder: Path, dtype: str | torch.dtype | None = None, *, config: DecoderConfig | None = None
                 ) -> Decoder:
    """Our model for an HF folder of any supported family (its config's model_type says which), key for key
    through the family's name map. The model is built without memory ("meta" tensors) and takes the
    checkpoint's tensors as they are (GPT-2's Conv1D matrices as transposed views: the input-major layout
    `inference_layout_` wants), cast to `dtype`, so a 1.5 B model in bfloat16 needs its 3 GB once, not
    twice. Errors name the checkpoint's tensor."""
    dt = resolve_dtype(dtype)
    config = config or read_config(folder)
    family = config.declaration
    files = open_weights(folder)
    model = _meta_model(config, files)
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        ours.pop("unembed.weight")
    theirs = {k: family.our_key(k) for k in files.info if not k.endswith(family.ignored)}
    by_ours = {o: k for k, o in theirs.items() if o is not None}
    for key, shape in ours.items():
        hf_key = by_ours.get(key)
        if hf_key is None:
            hint = " (config.json says the embeddings are untied)" if key == "unembed.weight" else ""
            raise CheckpointError(f"checkpoint in {folder} is missing tensor {family.hf_key(key)!r}{hint}")
        info = files.info[hf_key]
        _check_info(hf_key, info, shape[::-1] if family.is_transposed(key) else shape, folder)
    allowed = {*ours, "unembed.weight"}  # a tied checkpoint may store the shared matrix twice
    extra = [k for k, o in theirs.items() if o not in allowed]
    if extra:
        raise CheckpointError(f"checkpoint in {folder} has unexpected tensors, e.g. {sorted(extra)[0]!r}")
    check_memory(model, dt, f"the model in {folder}")
    hf = files.read()
    if config.tie_word_embeddings:
        head_key = next((k for k, o in theirs.items() if o == "unembed.weight"), None)
        head = hf.pop(head_key) if head_key is not None else None
        emb = hf[by_ours["embed.weight"]]
        if head is not None and (head.shape != emb.shape or not torch.equal(head, emb)):
            raise CheckpointError(f"config.json in {folder} says the embeddings are tied, but the checkpoint's "
                                  f"{head_key} differs from {by_ours['embed.weight']}")
    loaded = {}
    for key in ours:
        t = _finite(by_ours[key], hf.pop(by_ours[key]), folder)
        loaded[key] = (t.t() if family.is_transposed(key) else t).to(dt)
    model.load_state_dict(loaded, strict=False, assign=True)  # complete: checked above (the unembedding when tied)
    model.finish_loading_()
    return model.eval()


def hf_state_dict(model: Decoder, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Our weights under the family's HF names and layouts (the unembedding omitted when it is tied)."""
    family = model.config.declaration
    out = {}
    for key, t in model.state_dict().items():
        if key == "unembed.weight" and model.config.tie_word_embeddings:
            continue
        out[family.hf_key(key)] = (t.t() if family.is_transposed(key) else t).to(dtype).contiguous().clone()
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


def save_decoder(model: Decoder, folder: Path, dtype: torch.dtype = torch.float32,
                 special_tokens: dict[str, int] | None = None) -> None:
    """Write `config.json` + `model.safetensors` in HF's format for the model's family (GPT2LMHeadModel,
    LlamaForCausalLM, ...), which transformers and `load_decoder` read back. float16 halves the file; the
    values then loaded (by us and by transformers alike) are those float16 numbers. `special_tokens`: e.g.
    {"bos_token_id": ..., "eos_token_id": ...} for `config.json`."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        tmp_file = Path(tmp) / "model.safetensors"
        save_file(hf_state_dict(model, dtype), str(tmp_file), metadata={"format": "pt"})
        atomic_write_bytes(folder / "model.safetensors", tmp_file.read_bytes())
    hf_config = {**model.config.to_hf(), **(special_tokens or {}), "torch_dtype": str(dtype).removeprefix("torch.")}
    atomic_write_bytes(folder / "config.json", (json.dumps(hf_config, indent=2) + "\n").encode())
