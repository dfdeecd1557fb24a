"""The benchmarks' shared models: GPT-2 small's shape, SmolLM2-135M's (a Llama), Qwen3-0.6B's,
Gemma-3-270M's, and the mixtures of experts OLMoE-1B-7B's and Qwen3-30B-A3B's (fewer layers where asked), with random
weights, saved in HF format by transformers (the tests' own fixture builders), reused when the folder
already holds them."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gpt2_small_shape(folder: Path) -> Path:
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_gpt2

    print(f"creating a random GPT-2-small-shape model in {folder} ...", file=sys.stderr)
    return make_hf_gpt2(folder, n_layer=12, n_head=12, n_embd=768, n_positions=1024)


def smollm2_135m_shape(folder: Path) -> Path:
    """HuggingFaceTB/SmolLM2-135M's shape: LlamaForCausalLM, d_model 576, 30 layers, 9 query heads
    sharing 3 key/value heads, MLP 1536, vocabulary 49152, tied embeddings, rope_theta 100000."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_llama_family

    print(f"creating a random SmolLM2-135M-shape model in {folder} ...", file=sys.stderr)
    return make_hf_llama_family(folder, "llama", n_layer=30, hidden=576, n_head=9, intermediate=1536,
                                vocab_size=49152, max_positions=8192, num_key_value_heads=3, rope_theta=100000.0,
                                rope_scaling=None, tie_word_embeddings=True, add_bos=False, max_shard_size=None)


def qwen3_0_6b_shape(folder: Path, n_layer: int = 28) -> Path:
    """Qwen/Qwen3-0.6B's shape: Qwen3ForCausalLM, d_model 1024, 28 layers, 16 query heads of width 128 sharing
    8 key/value heads (QK-norm), MLP 3072, vocabulary 151936, tied embeddings, rope_theta 1000000;
    `n_layer` fewer blocks where memory or time asks."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_llama_family

    print(f"creating a random Qwen3-0.6B-shape model ({n_layer} layers) in {folder} ...", file=sys.stderr)
    return make_hf_llama_family(folder, "qwen3", n_layer=n_layer, hidden=1024, n_head=16, intermediate=3072,
                                vocab_size=151936, max_positions=40960, num_key_value_heads=8, head_dim=128,
                                rope_theta=1_000_000.0, tie_word_embeddings=True, add_bos=False)


def gemma3_270m_shape(folder: Path, n_layer: int = 18) -> Path:
    """google/gemma-3-270m's shape: Gemma3ForCausalLM, d_model 640, 18 layers (every sixth global, the others
    with a window of 512), 4 query heads of width 256 on 1 key/value head, MLP 2048, vocabulary 262144, tied."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_llama_family

    print(f"creating a random Gemma-3-270M-shape model ({n_layer} layers) in {folder} ...", file=sys.stderr)
    types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n_layer)]
    return make_hf_llama_family(folder, "gemma3_text", n_layer=n_layer, hidden=640, n_head=4, intermediate=2048,
                                vocab_size=262144, max_positions=32768, num_key_value_heads=1, head_dim=256,
                                query_pre_attn_scalar=256, sliding_window=512, layer_types=types,
                                tie_word_embeddings=True, add_bos=False, max_shard_size=None)


def olmoe_shape(folder: Path, n_layer: int = 16) -> Path:
    """allenai/OLMoE-1B-7B-0924's shape: OlmoeForCausalLM, d_model 2048, 16 layers, 16 heads (QK-norm over the
    whole projection), 64 experts of width 1024 of which each token gets 8 (not renormalised), vocabulary 50304,
    untied; `n_layer` fewer blocks where memory asks (one block's experts are 403 M parameters, 1.6 GB)."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_llama_family

    print(f"creating a random OLMoE-1B-7B-shape model ({n_layer} layers) in {folder} ...", file=sys.stderr)
    return make_hf_llama_family(folder, "olmoe", n_layer=n_layer, hidden=2048, n_head=16, intermediate=1024,
                                vocab_size=50304, max_positions=4096, num_key_value_heads=16, num_experts=64,
                                num_experts_per_tok=8, norm_topk_prob=False, rope_theta=10000.0,
                                tie_word_embeddings=False, add_bos=False, max_shard_size=None)


def qwen3_moe_shape(folder: Path, n_layer: int = 48) -> Path:
    """Qwen/Qwen3-30B-A3B's shape: Qwen3MoeForCausalLM, d_model 2048, 48 layers, 32 query heads of width 128 on 4
    key/value heads (QK-norm), 128 experts of width 768 of which each token gets 8 (renormalised), vocabulary
    151936, untied; `n_layer` fewer blocks where memory asks (one block's experts are 604 M parameters, 2.4 GB)."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_llama_family

    print(f"creating a random Qwen3-30B-A3B-shape model ({n_layer} layers) in {folder} ...", file=sys.stderr)
    return make_hf_llama_family(folder, "qwen3_moe", n_layer=n_layer, hidden=2048, n_head=32, intermediate=6144,
                                vocab_size=151936, max_positions=40960, num_key_value_heads=4, head_dim=128,
                                num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                                norm_topk_prob=True, mlp_only_layers=[], rope_theta=1_000_000.0,
                                tie_word_embeddings=False, add_bos=False, max_shard_size=None)
