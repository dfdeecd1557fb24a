"""`transformer-explainer train lm` end to end on a small corpus written here: GPT-2, the Llama family and
Mixtral (a mixture of experts) train (the loss falls), export an HF folder that transformers loads with the
same logits as ours, and write a model card; the Llama family's and the experts' options reach the exported
config; the load-balancing loss keeps every expert in use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from transformer_explainer.cli import main

SENTENCES = [
    "The cat sat on the mat and looked at the door.",
    "A dog ran in the park while the sun was warm.",
    "She wrote a letter to her brother in the city.",
    "The river runs to the sea past the old mill.",
    "In the morning the birds sing in the tall trees.",
]


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [" ".join(SENTENCES[(i + j) % len(SENTENCES)] for j in range(4)) for i in range(60)]
    (folder / "train.txt").write_text("\n\n".join(docs) + "\n")
    (folder / "valid.txt").write_text("\n\n".join(docs[:6]) + "\n")
    return folder


def train(tmp_path: Path, family_args: list[str], steps: int = 40) -> tuple[Path, Path]:
    corpus = write_corpus(tmp_path / "corpus")
    run, export = tmp_path / "run", tmp_path / "export"
    argv = ["train", "lm", "--corpus", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--vocab-size", "300",
            "--out", str(run), "--n-layer", "2", "--n-head", "4", "--n-embd", "32", "--block-size", "32",
            "--batch-size", "8", "--max-steps", str(steps), "--warmup", "5", "--lr", "0.01",
            "--eval-interval", str(steps), "--checkpoint-interval", str(steps), "--threads", "1", "--no-progress",
            "--export", str(export), "--export-dtype", "float32", *family_args]
    assert main(argv) == 0
    return run, export


@pytest.mark.parametrize("family_args, arch", [
    ([], "GPT2LMHeadModel"),
    (["--family", "llama", "--n-kv-head", "2"], "LlamaForCausalLM"),
    (["--family", "mixtral", "--n-kv-head", "2", "--n-experts", "4", "--top-k", "2", "--n-inner", "48"],
     "MixtralForCausalLM"),
])
def test_train_export_and_reload(tmp_path: Path, family_args: list[str], arch: str):
    from transformers import AutoModelForCausalLM

    from transformer_explainer.engine import load_model

    run, export = train(tmp_path, family_args)
    cfg = json.loads((export / "config.json").read_text())
    assert cfg["architectures"] == [arch]
    last = json.loads((run / "history.json").read_text())["last_eval"]
    # 300 tokens' uniform loss is ln 300 = 5.7 nats; a few dozen steps on five repeated sentences go far below
    assert last["val_loss"] < 3.0, last

    ours = load_model(str(export), allow_download=False)
    hf = AutoModelForCausalLM.from_pretrained(export, attn_implementation="eager").eval()
    ids = ours.encode("The cat sat on the mat")
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
        got = ours.net(torch.tensor([ids]))[0]
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)

    card = (export / "MODEL_CARD.md").read_text()
    assert "bits per byte" in card
    if arch == "LlamaForCausalLM":
        assert cfg["num_key_value_heads"] == 2 and cfg["num_attention_heads"] == 4
        assert cfg["intermediate_size"] == 64  # 8/3 x 32 rounded to a multiple of 64
        assert cfg["eos_token_id"] == cfg["bos_token_id"] == ours.tokenizer.eos_id()
        assert "sharing 2 key/value heads" in card and "Llama-architecture" in card
        assert ours.config.family == "llama"
    elif arch == "MixtralForCausalLM":
        assert cfg["num_local_experts"] == 4 and cfg["num_experts_per_tok"] == 2 and cfg["intermediate_size"] == 48
        assert "4 experts of width 48 (gated), 2 per token" in card and "mixture-of-experts" in card
        c = ours.config
        assert c.family == "mixtral" and f"{ours.net.num_active_params() / 1e6:.2f} M of them used per token" in card
        # the router sends tokens to every expert: none is starved (the load-balancing loss's work)
        trace = ours.trace(" ".join(SENTENCES), truncate=True)
        for layer in range(c.n_layer):
            used = trace[f"blocks.{layer}.mlp.expert_indices"].flatten().bincount(minlength=4)
            assert (used > 0).all(), (layer, used)
    else:
        assert "GPT-2-architecture" in card


def test_key_value_heads_are_refused_for_gpt2(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    corpus = write_corpus(tmp_path / "corpus")
    code = main(["train", "lm", "--corpus", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--vocab-size", "300",
                 "--out", str(tmp_path / "run"), "--n-kv-head", "2", "--max-steps", "1"])
    assert code == 2
    assert "--n-kv-head is for --family llama" in capsys.readouterr().err
