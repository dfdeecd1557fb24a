"""Turn a model spec (built-in name, local folder, hub id, or nothing) into a folder on disk.

Policy when no model is named: GPT-2 small if it is already in the local Hugging Face cache, else
the built-in model. A download starts only when a hub model is named explicitly and the caller
allows it (the command line does: naming a hub model there is the request to download it).

A spec that names an existing path is always local, never a hub id.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from ..errors import ExplainerError, ModelNotFoundError
from .hub import HUB_FILES, KNOWN_HUB_MODELS

log = logging.getLogger(__name__)

BUILTIN_DEFAULT = "explainer-small"



def has_weights(folder: Path) -> bool:
    return any((folder / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json",
                                                 "pytorch_model.bin"))


MODEL_FOLDER_FILES = ("config.json, model.safetensors (or sharded model-*.safetensors with their index, or "
                      "pytorch_model.bin) and tokenizer.json (or vocab.json + merges.txt)")

Source = Literal["builtin", "local", "hub"]


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # what to call it in the UI
    folder: Path
    source: Source
    reason: str = ""  # why this model, when the caller did not name it (or what was done to get it)

    def describe(self) -> str:
        """E.g. "explainer-small (built in)", for start-up messages."""
        where = {"builtin": "built in", "local": f"from {self.folder}", "hub": "Hugging Face cache"}[self.source]
        return f"{self.name} ({where})"


def builtin_root() -> Path:
    return Path(str(resources.files("transformer_explainer") / "builtin"))


def builtin_models() -> dict[str, Path]:
    """Built-in decoder models shipped in the package (any supported architecture: GPT-2 or the
    Llama family, as each folder's config.json says): name -> folder."""
    root = builtin_root()
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / "config.json").is_file() and p.name != "seq2seq"}


def hub_repo(spec: str) -> str:
    return KNOWN_HUB_MODELS[spec][0] if spec in KNOWN_HUB_MODELS else spec


def cached_hub_folder(repo: str) -> Path | None:
    """The local snapshot of a hub repo if its config and weights are already cached."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo, allow_patterns=HUB_FILES, local_files_only=True))
    except Exception:  # not cached (or a broken cache entry): treated alike
        return None
    return folder if (folder / "config.json").is_file() and has_weights(folder) else None


def cached_gpt2_models() -> dict[str, Path]:
    """Known GPT-2 checkpoints present in the local hub cache."""
    out = {}
    for short, (repo, _, _) in KNOWN_HUB_MODELS.items():
        folder = cached_hub_folder(repo)
        if folder is not None:
            out[short] = folder
    return out


def default_spec() -> str:
    return "gpt2" if cached_hub_folder(KNOWN_HUB_MODELS["gpt2"][0]) is not None else BUILTIN_DEFAULT


def gpt2_download_hint() -> str:
    """How to get GPT-2 small, for messages shown when the built-in model stands in for it."""
    size = KNOWN_HUB_MODELS["gpt2"][2]
    return f"run `transformer-explainer serve --model gpt2` to download it (about {size / 1e6:.0f} MB)"


def _default_reason(spec: str) -> str:
    if spec == "gpt2":
        return "no model named, and GPT-2 small is in the Hugging Face cache"
    return f"no model named, and GPT-2 small is not in the Hugging Face cache; {gpt2_download_hint()}"


def _looks_like_path(spec: str) -> bool:
    """A spec written as a path (./x, /x, ~/x, a\\b, x/y/z) names a folder here, never a hub repo."""
    return spec.startswith((".", "/", "~")) or "\\" in spec or spec.count("/") > 1


def close_model_name(spec: str, builtins: Mapping[str, Path]) -> str | None:
    """The built-in or known GPT-2 name that `spec` (a name with no owner/, not a folder here) is a typo of, if it
    is close to one ('explainer-smal', 'gtp2'), else None: such a name is a typo more likely than a hub id."""
    if "/" in spec or spec in KNOWN_HUB_MODELS:
        return None
    known = [*builtins, *KNOWN_HUB_MODELS]
    near = difflib.get_close_matches(spec.lower(), known, n=1, cutoff=0.75)
    return near[0] if near else None


def resolve(spec: str | None = None, *, allow_download: bool = True) -> ResolvedModel:
    """Find the folder for `spec`; download a hub model only if it was named, is not cached and
    `allow_download` is set."""
    reason = ""
    if spec is None or spec == "" or spec == "default":
        spec = default_spec()
        reason = _default_reason(spec)
    builtins = builtin_models()
    if spec in builtins:
        return ResolvedModel(spec, builtins[spec], "builtin", reason)
    path = Path(spec).expanduser()
    if path.is_dir():
        return ResolvedModel(path.resolve().name, path.resolve(), "local")
    if path.exists():
        raise ModelNotFoundError(f"{spec} is a file; a model folder holds {MODEL_FOLDER_FILES}")
    if _looks_like_path(spec):
        raise ModelNotFoundError(f"no such folder: {spec} (a model folder holds {MODEL_FOLDER_FILES})")
    repo = hub_repo(spec)
    folder = cached_hub_folder(repo)
    if folder is not None:
        return ResolvedModel(spec, folder, "hub", reason)
    near = close_model_name(spec, builtins)
    if near is not None:
        raise ModelNotFoundError(f"no model {spec!r}: did you mean {near!r}? (a model on the Hugging Face hub is "
                                 f"named owner/name, e.g. openai-community/gpt2)")
    if not allow_download:
        size = KNOWN_HUB_MODELS.get(spec, (None, None, 0))[2]
        about = f" (about {size / 1e6:.0f} MB)" if size else ""
        raise ModelNotFoundError(
            f"model {spec!r} is not built in, not a local folder, and not in the local Hugging Face cache, and "
            f"downloading is off (--offline); run without --offline to download it{about}. "
            f"Built-in models: {', '.join(builtins) or 'none'}"
        )
    return ResolvedModel(spec, _download(spec, repo), "hub", f"downloaded from the Hugging Face hub ({repo})")


def _download(spec: str, repo: str) -> Path:
    """The hub repo's files, fetched through download.py: verified against their hashes, and resumed,
    not restarted, after an interruption, even of a process killed mid-transfer."""
    from huggingface_hub.errors import GatedRepoError, OfflineModeIsEnabled, RepositoryNotFoundError

    from .download import fetch_repo, is_network_error

    def announce(n_bytes: int) -> None:
        log.warning("downloading %s from the Hugging Face hub into its cache (%.0f MB)", repo, n_bytes / 1e6)

    try:
        # the file list comes first: offline, or a repo that does not exist, fails there in one line,
        # before the notice of a download that cannot happen
        return fetch_repo(repo, announce=announce)
    except (RepositoryNotFoundError, GatedRepoError):
        raise ModelNotFoundError(
            f"{spec!r} is not a built-in model, not a local folder, and no model {repo!r} exists on the "
            f"Hugging Face hub (built-in models: {', '.join(builtin_models()) or 'none'})"
        ) from None
    except ExplainerError as e:
        raise ModelNotFoundError(f"could not download {repo!r}: {e}") from None
    except Exception as e:  # network stacks raise many classes; keep the message, drop the trace
        if isinstance(e, OfflineModeIsEnabled) or is_network_error(e) or isinstance(e, OSError):
            from huggingface_hub import constants

            offline_mode = isinstance(e, OfflineModeIsEnabled) or constants.HF_HUB_OFFLINE
            why = "HF_HUB_OFFLINE is set" if offline_mode else "huggingface.co cannot be reached"
            # read by Python users and the command line alike: the model's name, not a flag of either
            raise ModelNotFoundError(
                f"cannot download {spec!r}: this machine is offline ({why}) and {repo} is not in the Hugging Face "
                f"cache. Connect and try again, or load a local HF-format model folder or the built-in model "
                f"{BUILTIN_DEFAULT!r}"
            ) from None
        raise ModelNotFoundError(f"could not download {repo!r}: {type(e).__name__}: {e}") from None
