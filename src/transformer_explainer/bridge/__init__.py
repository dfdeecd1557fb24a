"""The bridge: any transformers decoder recorded through transformers' own modules, no code per family.

How it works:
- attention.py registers `te_record` with transformers' `AttentionInterface` (and the eager mask with
  `AttentionMaskInterface`). It calls through to the model's own eager attention function and records what that
  call sees and returns: queries and keys after the model's norms and rotations, values, the mask as applied
  (local windows included), the scores the softmax reads, the pattern, z, and a sink's logit and weight.
- structure.py finds the parts by the model's own accessors and each layer's children by class: the embedding,
  the decoder layers, each layer's mixers (attention, linear attention, short convolution, state space) and MLP,
  the final norm and the unembedding.
- hooks.py puts forward hooks on those parts: resid_pre, resid_post, attn_out, mlp_out, a non-attention mixer's
  input and output, embed.token, ln_final.out (the unembedding's input). The same hooks (and te_record, for
  attn.z) apply a call's patches: the value replaced as it is computed, seen with its batch dimension.
- record.py runs one forward: the model is switched to `te_record` and hooked while calls are in flight, and
  set back after the last one; resid_mid is found where the layer has one (record.resid_mid). `record(model,
  ids, patches={...})` patches resid_pre, attn_out, attn.z, mlp_out, resid_post; `residual_logits(model, x)` is
  the logit lens: the model's own code from its final norm on (post-unembedding scalings and soft caps
  included), reading x instead of the last layer's output.
- state.py holds one call's values in a recorder reached through a context variable, so concurrent calls on one
  model keep their values apart; vocabulary.py declares the names (TransformerLens's, as names.py).
- load.py refuses, in one sentence, what is not a decoder transformers implements (remote code never runs).
- mechanisms.py is the mechanism lens: where our own code implements a layer's module (Gated DeltaNet; DeepSeek-V3's
  multi-head latent attention, latent_lens.py; Gemma 4's per-layer inputs and each layer's gated write from them,
  per_layer_lens.py; the norm after each sublayer, found by what a layer computes, post_norm_lens.py), a mechanism
  built from the module's weights derives its internals, in our names, from the module's recorded input or its
  layer's (on access, by `memo.values.TraceValues`): the forward stays transformers'.

The values are transformers' own, so they equal its forward by construction; tests/integration/test_bridge.py
checks it anyway, family by family.
"""

from .attention import ATTENTION_NAME, record_attention, register
from .load import check_config, load_decoder
from .mechanisms import MECHANISMS, Mechanism, find_mechanisms
from .record import PATCHABLE, LayerKind, Recording, record, residual_logits
from .state import Patch
from .structure import Structure, find_structure
from .vocabulary import GENERIC_BLOCK_ACTIVATIONS, GENERIC_GLOBAL_ACTIVATIONS, generic_block_name

__all__ = ["ATTENTION_NAME", "GENERIC_BLOCK_ACTIVATIONS", "GENERIC_GLOBAL_ACTIVATIONS", "PATCHABLE", "LayerKind",
           "MECHANISMS", "Mechanism", "Patch", "Recording", "Structure", "check_config", "find_mechanisms",
           "find_structure", "generic_block_name", "load_decoder",
           "record", "record_attention", "register", "residual_logits"]
