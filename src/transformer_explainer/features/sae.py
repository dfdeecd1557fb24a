"""Sparse autoencoders on a model's activations, in the community's on-disk format.

A sparse autoencoder (SAE) rewrites an activation vector x (d_in) as a sum of a few directions out of many
(d_sae): `f = encode(x)` has few nonzero entries, the features, and `decode(f) = f @ W_dec + b_dec` rebuilds
x up to an error, `x = decode(f) + error`. Row i of W_dec is feature i's direction in the residual stream.

The format is SAELens's (read by Neuronpedia too): a folder with `cfg.json` and `sae_weights.safetensors`
holding `W_enc` [d_in, d_sae], `b_enc` [d_sae], `W_dec` [d_sae, d_in], `b_dec` [d_in] (and `threshold` [d_sae]
for a JumpReLU one). `cfg.json` names the hook point in TransformerLens's spelling (`blocks.3.hook_resid_post`)
and the architecture:
- `topk` (Gao et al. 2024; what this project trains and ships): keep the k largest pre-activations of each
  vector, ReLU them, zero the rest;
- `standard`: ReLU of every pre-activation (GPT-2 small's public residual-stream SAEs are of this kind);
- `jumprelu` (Gemma Scope): a pre-activation counts only above its latent's threshold.
The encoder reads `x - b_dec` where `apply_b_dec_to_input` is set (SAELens's default). A file is written flat, as
SAELens wrote cfg.json before its version 6 (which still reads it); a reader also finds the hook in a nested
`metadata` object, as version 6 writes it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import Tensor, nn

from ..errors import CheckpointError, InputError, ModelNotFoundError
from ..loading.checkpoint import atomic_write_bytes
from ..loading.files import read_json

if TYPE_CHECKING:
    from ..text_model import TextModel

log = logging.getLogger(__name__)

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
HUB_PREFIX = "hf:"
ARCHITECTURES = ("topk", "standard", "jumprelu")
# TransformerLens's hook names of a block -> this project's trace stage (names.py)
HOOK_STAGES = {"hook_resid_pre": "resid_pre", "hook_resid_mid": "resid_mid", "hook_resid_post": "resid_post",
               "hook_attn_out": "attn_out", "hook_mlp_out": "mlp_out"}
_HOOK = re.compile(r"blocks\.(\d{1,4})\.(hook_[a-z_]+)")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "float64": torch.float64}


def parse_hook(hook_name: str) -> tuple[int, str]:
    """(layer, trace stage) of a TransformerLens block hook name, e.g. `blocks.3.hook_resid_post` -> (3, "resid_post");
    an InputError in one sentence for any other name."""
    m = _HOOK.fullmatch(hook_name) if isinstance(hook_name, str) else None
    if m is None or m.group(2) not in HOOK_STAGES:
        hooks = ", ".join(f"blocks.L.{h}" for h in HOOK_STAGES)
        raise InputError(f"{hook_name!r} is not a hook point an autoencoder can read here; the hook points are {hooks}")
    return int(m.group(1)), HOOK_STAGES[m.group(2)]


def trace_name(hook_name: str) -> str:
    """This project's trace name of a TransformerLens hook name: `blocks.3.hook_resid_post` -> `blocks.3.resid_post`."""
    layer, stage = parse_hook(hook_name)
    return f"blocks.{layer}.{stage}"


@dataclass
class SAEConfig:
    """What cfg.json says about an autoencoder: the fields a reader needs, in SAELens's spelling."""

    d_in: int  # width of the activation it reads (d_model for the residual stream)
    d_sae: int  # number of latents (features)
    k: int | None  # topk: latents kept per vector; None for the other architectures
    hook_name: str  # TransformerLens spelling, e.g. blocks.3.hook_resid_post
    architecture: str = "topk"  # one of ARCHITECTURES
    model_name: str | None = None  # the model it was trained on (a built-in name or a hub id)
    dtype: str = "float32"  # the type the weights file stores
    apply_b_dec_to_input: bool = True  # the encoder reads x - b_dec
    normalize_activations: str = "none"  # only "none" is read here (others need a scale the files do not carry)
    context_size: int | None = None  # the token windows it was trained on
    prepend_bos: bool = False  # whether those windows began with a BOS token the text did not have
    dataset_path: str | None = None  # what it was trained on

    def __post_init__(self) -> None:
        parse_hook(self.hook_name)
        if self.architecture not in ARCHITECTURES:
            raise InputError(f"architecture {self.architecture!r} is not one this project runs; it runs "
                             f"{', '.join(ARCHITECTURES)}")
        if self.d_in < 1 or self.d_sae < 1:
            raise InputError(f"an autoencoder needs d_in and d_sae >= 1, not {self.d_in} and {self.d_sae}")
        if self.architecture == "topk" and (self.k is None or not 1 <= self.k <= self.d_sae):
            raise InputError(f"a topk autoencoder needs k between 1 and d_sae ({self.d_sae}), not {self.k}")

    @property
    def layer(self) -> int:
        return parse_hook(self.hook_name)[0]

    @property
    def trace_name(self) -> str:
        return trace_name(self.hook_name)

    def to_json(self) -> dict[str, Any]:
        """cfg.json's object (flat, as SAELens before version 6 wrote it; `activation_fn` too, which it read)."""
        out: dict[str, Any] = asdict(self)
        if self.k is None:
            del out["k"]
        out["activation_fn"] = {"topk": "topk", "standard": "relu", "jumprelu": "relu"}[self.architecture]
        if self.k is not None:
            out["activation_fn_kwargs"] = {"k": self.k}
        out["hook_layer"] = self.layer
        out["hook_head_index"] = None
        out["device"] = "cpu"
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], where: str = CFG_FILE) -> SAEConfig:
        """Read a cfg.json object (SAELens's formats before and after version 6); a CheckpointError in one sentence
        for one this project cannot run."""
        meta: dict[str, Any] = {}
        for key in ("meta", "metadata"):  # where SAELens 6 keeps the hook and the model
            if isinstance(raw.get(key), Mapping):
                meta.update(raw[key])

        def get(key: str, default: Any = None) -> Any:
            return raw[key] if key in raw else meta.get(key, default)

        arch = get("architecture", "standard")
        activation = get("activation_fn", get("activation_fn_str", "relu"))
        kwargs = get("activation_fn_kwargs") or {}
        k = get("k", kwargs.get("k") if isinstance(kwargs, Mapping) else None)
        if arch in ("standard", "relu") and activation == "topk":  # SAELens before 6: topk as an activation
            arch = "topk"
        if arch == "relu":
            arch = "standard"
        if arch not in ARCHITECTURES:
            raise CheckpointError(f"{where}: architecture {arch!r} is not one this project runs "
                                  f"({', '.join(ARCHITECTURES)})")
        hook = get("hook_name", get("hook_point"))
        if not isinstance(hook, str):
            raise CheckpointError(f"{where} names no hook point (hook_name)")
        norm = get("normalize_activations", "none")
        if norm not in ("none", None, False):
            raise CheckpointError(f"{where}: normalize_activations {norm!r} needs a scale the files do not carry; "
                                  "only 'none' is read here")
        if get("finetuning_scaling_factor"):
            raise CheckpointError(f"{where}: a finetuning scaling factor is not read here")
        heads = (get("hook_head_index"), get("hook_point_head_index"))  # the latter: SAELens before 6
        if any(h is not None for h in heads) or get("reshape_activations", "none") not in ("none", None):
            raise CheckpointError(f"{where}: an autoencoder of one attention head's values is not read here")
        try:
            d_in, d_sae = int(get("d_in")), int(get("d_sae"))
            k = None if arch != "topk" else int(k)
            context = get("context_size")
            return cls(d_in=d_in, d_sae=d_sae, k=k, hook_name=hook, architecture=arch,
                       model_name=get("model_name"), dtype=str(get("dtype", "float32")).removeprefix("torch."),
                       apply_b_dec_to_input=bool(get("apply_b_dec_to_input", True)), normalize_activations="none",
                       context_size=None if context is None else int(context),
                       prepend_bos=bool(get("prepend_bos", False)), dataset_path=get("dataset_path"))
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{where} does not describe an autoencoder: {e}") from None
        except InputError as e:
            raise CheckpointError(f"{where}: {e}") from None


def weight_shapes(cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
    """The tensors of the weights file and their shapes."""
    shapes = {"W_enc": (cfg.d_in, cfg.d_sae), "b_enc": (cfg.d_sae,), "W_dec": (cfg.d_sae, cfg.d_in),
              "b_dec": (cfg.d_in,)}
    if cfg.architecture == "jumprelu":
        shapes["threshold"] = (cfg.d_sae,)
    return shapes


class SparseAutoencoder(nn.Module):
    """x (..., d_in) -> features f (..., d_sae), few of them nonzero -> reconstruction f @ W_dec + b_dec."""

    def __init__(self, cfg: SAEConfig, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.cfg = cfg

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.zeros(shape, dtype=dtype, device=device))

        self.W_enc = param(cfg.d_in, cfg.d_sae)
        self.b_enc = param(cfg.d_sae)
        self.W_dec = param(cfg.d_sae, cfg.d_in)
        self.b_dec = param(cfg.d_in)
        self.threshold = param(cfg.d_sae) if cfg.architecture == "jumprelu" else None

    def pre_activation(self, x: Tensor) -> Tensor:
        """The encoder's affine map, before the activation: (x - b_dec) @ W_enc + b_enc (..., d_sae)."""
        x = x.to(self.W_enc.dtype)
        if self.cfg.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def activate(self, pre: Tensor) -> Tensor:
        """The architecture's activation of the pre-activations: dense (..., d_sae), mostly zeros."""
        if self.cfg.architecture == "topk":
            assert self.cfg.k is not None
            top = pre.topk(min(self.cfg.k, pre.shape[-1]), dim=-1)
            return torch.zeros_like(pre).scatter_(-1, top.indices, top.values.relu())
        if self.cfg.architecture == "jumprelu":
            assert self.threshold is not None
            return pre.relu() * (pre > self.threshold)
        return pre.relu()

    def encode(self, x: Tensor) -> Tensor:
        """Features of x (..., d_in) -> (..., d_sae); a topk autoencoder leaves at most k nonzero per vector."""
        return self.activate(self.pre_activation(x))

    def decode(self, f: Tensor) -> Tensor:
        """The reconstruction f @ W_dec + b_dec (..., d_in): each feature's activation times its direction, summed."""
        return f.to(self.W_dec.dtype) @ self.W_dec + self.b_dec

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(reconstruction (..., d_in), features (..., d_sae))."""
        f = self.encode(x)
        return self.decode(f), f


# -- files ------------------------------------------------------------------------------------------------


def _finite(name: str, t: Tensor, where: Path) -> None:
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise CheckpointError(f"{where} holds {name} with values that are not finite (NaN or infinity)")


def load_folder(folder: Path, *, device: torch.device | str | None = None,
                dtype: str | torch.dtype | None = None) -> SparseAutoencoder:
    """An autoencoder from a folder with cfg.json and sae_weights.safetensors (never a pickle)."""
    if not folder.is_dir():
        raise ModelNotFoundError(f"no autoencoder folder {folder} (one holds {CFG_FILE} and {WEIGHTS_FILE})")
    cfg = SAEConfig.from_json(read_json(folder / CFG_FILE), str(folder / CFG_FILE))
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing (an autoencoder folder holds {CFG_FILE} and {WEIGHTS_FILE})")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} is corrupt or truncated: {e}") from None
    want = weight_shapes(cfg)
    missing = [k for k in want if k not in tensors]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)} (it holds {', '.join(sorted(tensors)) or 'nothing'})")
    for key, shape in want.items():
        if tuple(tensors[key].shape) != shape:
            raise CheckpointError(f"{path}: {key} has shape {list(tensors[key].shape)} but cfg.json's d_in "
                                  f"{cfg.d_in} and d_sae {cfg.d_sae} make it {list(shape)}")
        _finite(key, tensors[key], path)
    extra = sorted(set(tensors) - set(want))
    if extra:
        log.debug("%s: ignoring %s", path, ", ".join(extra))
    torch_dtype = _DTYPES.get(str(dtype).removeprefix("torch."), None) if dtype is not None else torch.float32
    if torch_dtype is None:
        raise InputError(f"dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    sae = SparseAutoencoder(cfg, dtype=torch_dtype, device=device)
    with torch.no_grad():
        for key in want:
            getattr(sae, key).copy_(tensors[key])
    return sae.eval().requires_grad_(False)


def hub_folder(reference: str, *, cache_dir: Path | str | None = None) -> Path:
    """The local folder of a hub reference `hf:owner/repo/sub/folder`: from the Hugging Face cache, or downloaded
    when the hub may be reached (huggingface_hub's offline mode, HF_HUB_OFFLINE=1, keeps to the cache)."""
    from huggingface_hub import constants, hf_hub_download

    parts = reference.removeprefix(HUB_PREFIX).strip("/").split("/")
    if len(parts) < 2 or not all(parts):
        raise InputError(f"{reference!r} is not a hub reference: write hf:owner/repo or hf:owner/repo/folder")
    repo, sub = "/".join(parts[:2]), "/".join(parts[2:])
    names = [f"{sub}/{n}" if sub else n for n in (CFG_FILE, WEIGHTS_FILE)]
    paths: list[str] = []
    for name in names:
        try:
            paths.append(hf_hub_download(repo, name, cache_dir=cache_dir, local_files_only=True))
            continue
        except Exception:  # not in the cache: download it, unless offline
            if constants.HF_HUB_OFFLINE:
                raise ModelNotFoundError(f"{repo}/{name} is not in the Hugging Face cache and the hub is offline "
                                         "(HF_HUB_OFFLINE): download it once while online") from None
        try:
            paths.append(hf_hub_download(repo, name, cache_dir=cache_dir))
        except Exception as e:  # no repo, no file, no network: one sentence each, from the hub's own words
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelNotFoundError(f"cannot get {name} of the hub repo {repo}: {reason}") from None
    return Path(paths[0]).parent


def load_sae(source: str | Path, *, device: torch.device | str | None = None,
             dtype: str | torch.dtype | None = None, cache_dir: Path | str | None = None) -> SparseAutoencoder:
    """An autoencoder from a folder (cfg.json + sae_weights.safetensors) or a hub reference `hf:owner/repo/folder`.
    It computes in `dtype` (float32 unless asked: the shipped files store float16). Bad files: one sentence."""
    if isinstance(source, str) and source.startswith(HUB_PREFIX):
        return load_folder(hub_folder(source, cache_dir=cache_dir), device=device, dtype=dtype)
    return load_folder(Path(source).expanduser(), device=device, dtype=dtype)


def save_sae(sae: SparseAutoencoder, folder: Path | str, *, dtype: torch.dtype | None = None) -> Path:
    """Write `sae` as cfg.json + sae_weights.safetensors in `folder` (the weights in `dtype`, their own by default)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = dtype or sae.W_enc.dtype
    name = next(n for n, d in _DTYPES.items() if d == dtype)
    tensors = {k: getattr(sae, k).detach().to("cpu", dtype).contiguous() for k in weight_shapes(sae.cfg)}
    cfg = SAEConfig(**{f.name: getattr(sae.cfg, f.name) for f in fields(SAEConfig)})
    cfg.dtype = name
    atomic_write_bytes(folder / WEIGHTS_FILE, safetensors_bytes(tensors))
    atomic_write_bytes(folder / CFG_FILE, (json.dumps(cfg.to_json(), indent=2) + "\n").encode())
    return folder


# -- models -----------------------------------------------------------------------------------------------


def check_fits(sae: SparseAutoencoder, model: TextModel) -> None:
    """An InputError in one sentence when `model` lacks the autoencoder's hook point or its width differs."""
    layer, stage = parse_hook(sae.cfg.hook_name)
    config = model.config
    n = int(config.n_layer)
    if layer >= n:
        raise InputError(f"the autoencoder reads {sae.cfg.hook_name} but {model.name} has {n} layers "
                         f"(blocks 0..{n - 1})")
    has = getattr(config, "has", None)
    if stage not in config.names.block_activations or (callable(has) and not has(f"blocks.{layer}.{stage}")):
        raise InputError(f"{model.name} has no hook point {sae.cfg.hook_name} (its trace has no "
                         f"blocks.{layer}.{stage})")
    if sae.cfg.d_in != int(config.n_embd):
        raise InputError(f"the autoencoder reads vectors of width {sae.cfg.d_in} but {model.name}'s "
                         f"{sae.cfg.hook_name} has width {config.n_embd}")


def builtin_sae_root(model: TextModel | str) -> Path | None:
    """The `saes` folder of a built-in model (by model or by name), or None for a model that is not built in."""
    from ..loading.resolve import builtin_models

    if isinstance(model, str):
        folder = builtin_models().get(model)
    else:
        folder = model.folder if model.source == "builtin" else None
    return None if folder is None else Path(folder) / "saes"


def builtin_saes(model: TextModel | str) -> dict[str, Path]:
    """hook_name -> folder of the autoencoders shipped with a built-in model (`builtin/<model>/saes/<hook>/`), in
    the order of their layers; empty for other models."""
    root = builtin_sae_root(model)
    if root is None or not root.is_dir():
        return {}
    found = {p.name: p for p in root.iterdir() if (p / CFG_FILE).is_file() and _HOOK.fullmatch(p.name)}
    return dict(sorted(found.items(), key=lambda kv: (parse_hook(kv[0])[0], kv[0])))


__all__ = ["ARCHITECTURES", "CFG_FILE", "HOOK_STAGES", "WEIGHTS_FILE", "SAEConfig",
           "SparseAutoencoder", "builtin_sae_root", "builtin_saes", "check_fits", "hub_folder", "load_folder",
           "load_sae", "parse_hook", "save_sae", "trace_name", "weight_shapes"]
