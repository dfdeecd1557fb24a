"""A feature's direction for steering: the decoder row `W_dec[id]` of a sparse autoencoder at
`blocks.L.hook_resid_post` (`features/sae.py`), and the one function the faces (CLI, server) choose any direction
with. Apart from `steering.py`, which the model class reaches (`TextModel.steer`): the autoencoders' package reaches
the engine, so the engine cannot reach it back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torch import Tensor, nn

from .errors import InputError
from .features.sae import SparseAutoencoder, builtin_saes, check_fits, load_sae
from .steering import Direction, TextModel, check_layer, check_vector, make_direction


def feature_hook(layer: int) -> str:
    """The hook (TransformerLens's spelling) whose autoencoder's features steer at `layer`."""
    return f"blocks.{layer}.hook_resid_post"


def feature_direction(model: TextModel, layer: int, feature: int,
                      sae: SparseAutoencoder | str | Path | None = None) -> Direction:
    """The decoder row `W_dec[feature]` of the sparse autoencoder at `blocks.{layer}.hook_resid_post`: `sae` (one
    loaded, or a folder / hub reference `load_sae` reads), or the one shipped with a built-in model."""
    check_layer(model, layer)
    hook = feature_hook(layer)
    if sae is None:
        shipped = builtin_saes(model)  # type: ignore[arg-type]
        steers = sorted(h for h in shipped if h.endswith(".hook_resid_post"))
        if not steers:  # no CLI or API advice here: each face says how it loads one (the CLI: --sae)
            raise InputError(f"{model.name} has no autoencoder at {hook}: it ships none at a block's output "
                             f"(hook_resid_post), so none of its features steers; steer with a contrast of two prompt "
                             f"sets", code="steer_no_saes", model=model.name)
        if hook not in shipped:
            raise InputError(f"{model.name} has no autoencoder at {hook}; its features steer at {', '.join(steers)}",
                             code="steer_no_sae_at", model=model.name, hook=hook, hooks=", ".join(steers))
        sae = shipped[hook]
    if not isinstance(sae, nn.Module):
        sae = load_sae(sae)
    if sae.cfg.hook_name != hook:
        raise InputError(f"the autoencoder reads {sae.cfg.hook_name}, not {hook}: steer at the layer it was trained "
                         f"on")
    check_fits(sae, model)  # type: ignore[arg-type]
    n = sae.W_dec.shape[0]
    if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < n:
        raise InputError(f"feature {feature} is outside 0..{n - 1}: the autoencoder at {hook} has {n} features",
                         code="steer_feature_out_of_range", id=feature, max=n - 1, hook=hook)
    vector = check_vector(model, sae.W_dec[feature].detach(), f"feature {feature}'s decoder row")
    return Direction(vector, layer, "feature", f"feature {feature} of the autoencoder at {hook}", feature)


def choose_direction(model: TextModel, *, feature: tuple[int, int] | None = None,
                     contrast: tuple[Sequence[str], Sequence[str]] | None = None, layer: int | None = None,
                     vector: Tensor | Sequence[float] | None = None,
                     sae: SparseAutoencoder | str | Path | None = None) -> Direction:
    """One direction from exactly one of: `feature` (layer, id), `contrast` (prompts A, prompts B) at `layer`, or
    `vector` at `layer`."""
    if sum(x is not None for x in (feature, contrast, vector)) != 1:
        raise InputError("give exactly one direction: a feature (layer, id), a contrast of two prompt sets with a "
                         "layer, or a vector with a layer", code="steer_one_direction")
    if feature is None:
        return make_direction(model, contrast=contrast, layer=layer, vector=vector)
    if layer is not None and layer != feature[0]:
        raise InputError(f"the feature is at layer {feature[0]} but layer {layer} was asked for")
    return feature_direction(model, feature[0], feature[1], sae)
