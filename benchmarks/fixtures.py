"""The benchmarks' shared models: GPT-2 small's shape, and SmolLM2-135M's (a Llama), with random
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
