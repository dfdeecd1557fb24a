"""Reading the values of an HF `config.json`: each of the types it must have (a hostile file may put a string
where a number belongs), the rotary settings in both spellings, and `layer_types`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REQUIRED = object()


def value(hf: Mapping[str, Any], key: str, default: Any) -> Any:
    if default is REQUIRED:
        return hf[key]  # a KeyError names the missing key
    v = hf.get(key, default)
    return default if v is None else v


def whole(hf: Mapping[str, Any], key: str, default: Any = REQUIRED) -> Any:
    """config.json's whole number `key` (or `default` when absent or null): a JSON integer, not a string,
    a float or a boolean. Its range is checked by the config."""
    v = value(hf, key, default)
    if v is not default and (isinstance(v, bool) or not isinstance(v, int)):
        raise ValueError(f"{key} must be a whole number, got {v!r}")
    return v


def real(hf: Mapping[str, Any], key: str, default: Any = REQUIRED) -> Any:
    """A number (or `default`, which may be None, when absent or null)."""
    v = value(hf, key, default)
    if v is None and default is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{key} must be a number, got {v!r}")
    return float(v)


def flag(hf: Mapping[str, Any], key: str, default: bool) -> bool:
    v = value(hf, key, default)
    if not isinstance(v, bool):
        raise ValueError(f"{key} must be true or false, got {v!r}")
    return v


def architecture(hf: Mapping[str, Any], expected: str) -> None:
    """Refuse a config whose `architectures` names another class than the causal LM we run."""
    archs = hf.get("architectures") or [expected]
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ValueError(f"architectures must be a list of names, got {archs!r}")
    if archs[0] != expected:
        raise ValueError(f"architecture {archs[0]!r} is not a causal LM we run (expected {expected!r})")


def activation(hf: Mapping[str, Any], key: str, supported: tuple[str, ...]) -> str:
    act = hf.get(key, supported[0])
    if act not in supported:
        raise ValueError(f"{key} {act!r} is not supported (expected {' or '.join(map(repr, supported))})")
    return act


def rope_settings(params: Mapping[str, Any], hf: Mapping[str, Any] | None = None,
                  theta_key: str = "rope_theta", default_theta: float = 10000.0) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling fields or None) from a `rope_parameters` dict (transformers 5), falling back on the
    hub's top-level `rope_theta` / `rope_scaling` in `hf`. Scaling: Llama 3.1's ("llama3") or a linear
    stretch ("linear"); other kinds change the maths and are refused."""
    scaling = (hf or {}).get("rope_scaling") or {}
    if not isinstance(params, Mapping) or not isinstance(scaling, Mapping):
        raise ValueError("rope_parameters / rope_scaling must be objects")
    theta = real(params, "rope_theta", real(hf or {}, theta_key, default_theta))
    merged = {**scaling, **params}
    kind = merged.get("rope_type", merged.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, {"rope_type": "linear", "factor": real(merged, "factor")}
    if kind != "llama3":
        raise ValueError(f"rope type {kind!r} is not supported (supported: default, linear, llama3)")
    return theta, {"rope_type": "llama3", "factor": real(merged, "factor"),
                   "low_freq_factor": real(merged, "low_freq_factor"),
                   "high_freq_factor": real(merged, "high_freq_factor"),
                   "original_max_position_embeddings": whole(merged, "original_max_position_embeddings")}


FULL, SLIDING = "full_attention", "sliding_attention"  # HF's names of the two kinds of layers


def layer_types(hf: Mapping[str, Any], n_layer: int, pattern_default: int | None) -> tuple[str, ...]:
    """Each block's attention: `layer_types` as the config lists them, else every `sliding_window_pattern`-th
    block global and the others local (Gemma's rule), else all global. A list of the wrong length or with
    other names is refused with a sentence."""
    types = hf.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(t in (FULL, SLIDING) for t in types):
            raise ValueError(f"layer_types must be a list of {FULL!r} and {SLIDING!r}, got {types!r}")
        if len(types) != n_layer:
            raise ValueError(f"layer_types lists {len(types)} layers, but num_hidden_layers is {n_layer}")
        return tuple(types)
    if pattern_default is None:
        return (FULL,) * n_layer
    pattern = whole(hf, "sliding_window_pattern", whole(hf, "_sliding_window_pattern", pattern_default))
    if pattern < 1:
        raise ValueError(f"sliding_window_pattern must be at least 1, got {pattern}")
    return tuple(SLIDING if (i + 1) % pattern else FULL for i in range(n_layer))
