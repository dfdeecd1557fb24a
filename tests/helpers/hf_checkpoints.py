"""Random-weight checkpoints of the decoders people open in 2026, written locally with transformers.

Tiny configs (4 layers, grouped-query attention, local windows shorter than the texts, several layer kinds in
one model where the family has them), random weights of a scale that makes every stage matter, and a small
byte-level BPE tokenizer (tests/conftest.py), so that a folder opens in every face as a downloaded one would.
"""

from __future__ import annotations

from pathlib import Path

import torch

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, vocab_size=320, max_position_embeddings=128, pad_token_id=0, bos_token_id=1,
             eos_token_id=0, tie_word_embeddings=False)
SLIDING = dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"] * 2)

# model_type -> what it needs beyond SMALL (several layer kinds where the family has them)
FAMILIES: dict[str, dict] = {
    "llama": {},
    "qwen3_5_text": dict(layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
                         linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                         linear_value_head_dim=16),
    "qwen3_next": dict(layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
                       linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                       linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=32),
    "deepseek_v3": dict(num_key_value_heads=4, head_dim=8, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                        qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, n_group=2,
                        topk_group=1, first_k_dense_replace=1, moe_intermediate_size=32),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, **SLIDING),
    "gemma4_text": dict(**SLIDING, hidden_size_per_layer_input=8, num_kv_shared_layers=2, global_head_dim=16),
    "olmo3": dict(**SLIDING),
    "phi3": {},
    "smollm3": dict(no_rope_layers=[1, 1, 1, 0]),
    "granite": dict(embedding_multiplier=2.0, residual_multiplier=0.5, logits_scaling=4.0, attention_multiplier=0.2),
    "exaone4": dict(**SLIDING),
    "glm4": {},
    "ernie4_5": {},
    "seed_oss": {},
    "apertus": {},
    "lfm2": dict(layer_types=["conv", "full_attention", "conv", "full_attention"], block_ff_dim=96,
                 block_auto_adjust_ff_dim=False),
    "falcon_h1": dict(mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_chunk_size=4,
                      mamba_n_groups=1, mamba_expand=1),
    "gpt_neox": dict(use_parallel_residual=True, rotary_pct=0.5),  # model_types nobody listed:
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=2),
    "gpt2": {},
}
# the fifteen families of issue 34 (the rest above: model types nobody listed, and GPT-2)
LISTED = ("qwen3_5_text", "qwen3_next", "deepseek_v3", "gpt_oss", "gemma4_text", "olmo3", "phi3", "smollm3", "granite",
          "exaone4", "glm4", "ernie4_5", "seed_oss", "apertus", "lfm2", "falcon_h1")


def write_checkpoint(model_type: str, folder: Path, *, tokenizer: bool = False, seed: int = 0, **overrides) -> Path:
    """A random-weight checkpoint of `model_type` in `folder` (FAMILIES' config, with `overrides`), saved by
    transformers (safetensors); with `tokenizer`, a small byte-level BPE tokenizer.json beside it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, **{**SMALL, **FAMILIES[model_type], **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():  # random weights of a scale that makes every stage matter
        for p in model.parameters():
            p.normal_(0.0, 0.2) if p.ndim > 1 else p.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    if tokenizer:
        from tests.conftest import write_tiny_bpe_tokenizer

        write_tiny_bpe_tokenizer(folder, vocab_size=int(cfg.vocab_size))
    return folder
