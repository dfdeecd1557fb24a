"""The decoder model a subcommand runs: its arguments (--model, --offline, --dtype, the text and
--truncate, the sampling parameters) and loading the model they name, checked and announced on
stderr. Shared by `cli.py` and the feature packages' command lines (`analysis/cli.py`), which import
it, not each other."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .cli_args import device_args, dtype_arg, int_range, non_negative_float, positive_int, probability, text_value
from .errors import InputError

log = logging.getLogger("transformer_explainer")

if TYPE_CHECKING:
    from tqdm import tqdm

    from .engine import ExplainerModel
    from .generic import GenericModel


def model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="built-in model name, local HF-format folder, or hub id (gpt2, gpt2-medium, distilgpt2, "
                        "owner/repo), downloaded into the Hugging Face cache if it is not there yet; "
                        "default: GPT-2 small if cached, else the built-in model")
    p.add_argument("--offline", action="store_true", help="never download; use only local models")
    dtype_arg(p)
    device_args(p)


def text_args(p: argparse.ArgumentParser, what: str = "text") -> None:
    """TEXT, the model arguments and --truncate, for a command that runs the model on a text."""
    p.add_argument("text", type=text_value, help=f"the {what} to run the model on (quote it)")
    model_args(p)
    p.add_argument("--truncate", action="store_true",
                   help=f"keep the last tokens of an over-long {what} (those that fit the model's context)")


def sampling_args(p: argparse.ArgumentParser, *, seed: bool) -> None:
    """Temperature, top-k and top-p: the cuts applied, in that order, to the next-token distribution."""
    p.add_argument("--temperature", type=non_negative_float, default=1.0,
                   help="divide the logits by T before the softmax: below 1 sharper, above 1 flatter, "
                        "0 = greedy, always the most likely token (default 1.0)")
    p.add_argument("--top-k", type=positive_int, default=None, metavar="K",
                   help="keep only the K most likely tokens, then renormalise (default: no cut)")
    p.add_argument("--top-p", type=probability, default=None, metavar="P",
                   help="then keep the fewest most likely tokens whose probabilities add up to P or more "
                        "(0 < P <= 1), and renormalise (default: no cut)")
    if seed:
        p.add_argument("--seed", type=int_range(0, 2**63 - 1), default=None,
                       help="seed of the sampling: the same seed gives the same tokens (default: a fresh one)")


def load_model_for(args: argparse.Namespace,
                   check: Callable[[Any], None] | None = None) -> ExplainerModel | GenericModel:
    """Load the model named by --model. The text (when the command has one) and `check` are
    validated against the model before the `model:` line is printed, so a refused input gives one
    line on stderr, the error."""
    from .engine import open_resolved
    from .generic import TRANSFORMERS, which_way
    from .loading.resolve import resolve

    device, device_map = placement_of(args)
    resolved = resolve(args.model, allow_download=not args.offline)
    if which_way(resolved.folder) == TRANSFORMERS and not getattr(args, "verbose", False):
        _quiet_transformers()
    model = open_resolved(resolved, getattr(args, "dtype", None), device=device, device_map=device_map,
                          max_memory=getattr(args, "max_memory", None))
    log.info("model %s: %r%s", resolved.describe(), model, f"; {resolved.reason}" if resolved.reason else "")
    text, truncate = getattr(args, "text", None), getattr(args, "truncate", False)
    kept = encode_text(model, text, truncate=truncate) if text is not None else []
    refuse_unavailable(args, model)
    if check is not None:
        check(model)
    print(f"model: {describe_model(model)} on {model.describe_devices()}", file=sys.stderr)
    if args.model is None and model.source == "builtin":
        print(f"(the built-in model: GPT-2 small is not in the Hugging Face cache; {_gpt2_hint(args.offline)})",
              file=sys.stderr)
    if truncate and len(kept) == model.context_length and (n := len(model.tokenizer.encode(text))) > len(kept):
        print(f"--truncate: kept the last {len(kept)} of {n} tokens ({n - len(kept)} dropped from the start of the "
              f"text)", file=sys.stderr)
    return model


# What a mixer kind is called in a model line ("short_conv" -> "short convolution").
KIND_WORDS = {"attention": "attention", "linear_attention": "linear attention", "short_conv": "short convolution",
              "state_space": "state space", "mixer": "another token mixer"}


def layer_kinds(config: Any) -> str:
    """What the layers of a model that runs through transformers are, counted in order of first appearance:
    "2 short convolution, 2 attention"; a local window and layers with several mixers said so
    ("2 attention in a window of 4", "4 attention + state space")."""
    counts: dict[str, int] = {}
    for layer in config.layers:
        words = " + ".join(KIND_WORDS.get(k, k.replace("_", " ")) for k in layer.kinds) or "no token mixer"
        if layer.window is not None:
            words += f" in a window of {layer.window}"
        counts[words] = counts.get(words, 0) + 1
    return ", ".join(f"{n} {words}" for words, n in counts.items())


def describe_model(model: ExplainerModel | GenericModel) -> str:
    """The model line's words: its name, where it came from, which way it runs and its shape."""
    c = model.config
    kv = f" ({c.n_kv_heads} key/value)" if c.n_kv_heads != c.n_head else ""
    weights = f"{str(model.dtype).removeprefix('torch.')} weights"
    if model.runs == "transformers":
        return (f"{model.name} ({model.source}; runs through transformers' own modules: {c.model_type} "
                f"({c.architecture}), {c.n_layer} layers: {layer_kinds(c)}; {c.n_head} heads{kv} per attention "
                f"layer, d_model {c.n_embd}, context {c.block_size}, {weights})")
    return (f"{model.name} ({model.source}; {c.model_type}, {c.n_layer} layers, {c.n_head} heads{kv}, "
            f"d_model {c.n_embd}, context {c.block_size}, {weights})")


def _quiet_transformers() -> None:
    """transformers' own notes while it loads a model (a progress bar of its weights, a slower reference kernel
    it falls back to) are left out of a command's output; -v keeps them."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


# The commands that are not available yet for a model that runs through transformers' own modules: what each
# shows, and why (each needs something only the families with code of our own have).
NOT_FOR_TRANSFORMERS: dict[str, str] = {
    "neighbours": "the embedding explorer reads the token embedding by its name (embed.W_E), which its weights do "
                  "not have here",
    "analogy": "the embedding explorer reads the token embedding by its name (embed.W_E), which its weights do not "
               "have here",
}


def refuse_unavailable(args: argparse.Namespace, model: ExplainerModel | GenericModel) -> None:
    """One sentence, before the model line, where the command needs what `model` does not have."""
    why = NOT_FOR_TRANSFORMERS.get(getattr(args, "command", ""))
    if why is not None and model.runs == "transformers":
        from .families import supported_model_types

        raise InputError(f"{model.name} runs through transformers' own modules ({model.config.model_type}), and "
                         f"{why}; the models with code of our own have it: {supported_model_types()}")


def progress_bar(args: argparse.Namespace, total: int, what: str, unit: str = "pass") -> tqdm:
    """A progress bar on stderr for a command's long work (`total` steps of `unit`), as the download shows one:
    only where stderr is a terminal and the answer is not --json (a script reading either sees nothing extra);
    it is erased when the work ends."""
    from tqdm import tqdm

    quiet = True if getattr(args, "json", False) else None  # None: tqdm stays silent unless stderr is a terminal
    return tqdm(total=total, desc=what, unit=unit, file=sys.stderr, disable=quiet, leave=False, dynamic_ncols=True)


def placement_of(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(--device, --device-map) of a command: a device (auto when neither is given), or a map (which --max-memory
    alone implies); both at once are refused."""
    device, device_map = getattr(args, "device", None), getattr(args, "device_map", None)
    if getattr(args, "max_memory", None) is not None and device_map is None:
        device_map = "auto"
    if device is not None and device_map is not None:
        raise InputError(f"--device {device} and a device map (--device-map or --max-memory) contradict each other: "
                         f"the map says where each block runs; give one of them")
    return (device or "auto") if device_map is None else None, device_map


def encode_text(model: ExplainerModel, text: str, *, truncate: bool) -> list[int]:
    """The text's token ids; an over-long text is refused with the flag that keeps its last tokens
    (the engine's message speaks of truncation in general: it serves the API and Python too)."""
    try:
        return model.encode(text, truncate=truncate)
    except InputError:
        n, ctx = len(model.tokenizer.encode(text)), model.context_length
        if truncate or n <= ctx:  # refused for another reason: the engine's message says which
            raise
        raise InputError(f"the text is {n} tokens long but {model.name} reads at most {ctx}; shorten it, "
                         f"or add --truncate to keep its last {ctx} tokens") from None


def _gpt2_hint(offline: bool) -> str:
    """How to get GPT-2 small from the command being run: the same command with --model gpt2."""
    from .loading.resolve import KNOWN_HUB_MODELS

    size = KNOWN_HUB_MODELS["gpt2"][2]
    how = "drop --offline and add --model gpt2" if offline else "add --model gpt2"
    return f"{how} to download it (about {size / 1e6:.0f} MB) and use it"
