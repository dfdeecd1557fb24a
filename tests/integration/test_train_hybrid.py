"""`transformer-explainer train lm --family qwen3_5_text`: a decoder that transformers builds (Qwen3.5's hybrid of
Gated DeltaNet and full attention layers) trains in the project's loop, resumes from its checkpoint, and exports
a folder that `load_model` opens through transformers' own modules with transformers' logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.integration.test_train_lm import train
from transformer_explainer.cli import main

HYBRID = ["--family", "qwen3_5_text", "--n-layer", "4", "--n-kv-head", "2", "--linear-key-heads", "2",
          "--linear-value-heads", "4", "--linear-head-dim", "8", "--n-inner", "64"]


def test_train_export_and_reload_hybrid(tmp_path: Path):
    from transformers import AutoModelForCausalLM

    from transformer_explainer.engine import load_model
    from transformer_explainer.generic import GenericModel

    run, export = train(tmp_path, HYBRID)
    cfg = json.loads((export / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and cfg["architectures"] == ["Qwen3_5ForCausalLM"]
    assert cfg["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert (cfg["linear_num_key_heads"], cfg["linear_num_value_heads"], cfg["linear_key_head_dim"]) == (2, 4, 8)
    assert cfg["num_key_value_heads"] == 2 and cfg["tie_word_embeddings"] is True
    last = json.loads((run / "history.json").read_text())["last_eval"]
    # 300 tokens' uniform loss is ln 300 = 5.7 nats; a few dozen steps on five repeated sentences go far below
    assert last["val_loss"] < 3.0, last
    assert 0 < last["val_bpb"] < last["val_loss"] / 0.69, last

    ours = load_model(str(export), allow_download=False)
    assert isinstance(ours, GenericModel)
    assert cfg["eos_token_id"] == ours.tokenizer.eos_id()
    hf = AutoModelForCausalLM.from_pretrained(export).eval()
    ids = ours.encode("The cat sat on the mat")
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    trace = ours.trace_ids(ids)
    torch.testing.assert_close(trace["logits"], ref, atol=1e-4, rtol=1e-4)
    card = (export / "MODEL_CARD.md").read_text()
    assert "bits per byte" in card and "3 of its 4 layers are Gated DeltaNet" in card and "1 is full" in card


def test_hybrid_resumes_where_it_stopped(tmp_path: Path):
    """Stopped after 10 of 20 steps and rerun: the run continues from its checkpoint to the same weights as
    one that was never stopped (batches depend on the step alone)."""
    from safetensors.torch import load_file

    def weights(run: Path) -> dict[str, torch.Tensor]:
        return load_file(run / "checkpoints" / (run / "checkpoints" / "latest").read_text() / "model.safetensors")

    _, whole = train(tmp_path / "whole", HYBRID, steps=20)
    part = tmp_path / "part"
    train(part, [*HYBRID, "--max-minutes", "1e-9"], steps=20)  # stops after its first step
    first = json.loads((part / "run" / "history.json").read_text())["step"]
    assert first < 20
    train(part, HYBRID, steps=20)
    a, b = weights(tmp_path / "whole" / "run"), weights(part / "run")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.parametrize("extra, says", [
    (["--linear-value-heads", "3"], "--linear-value-heads 3 is not a multiple of --linear-key-heads 2"),
    (["--n-kv-head", "3"], "--n-head 4 is not a multiple of --n-kv-head 3"),
    (["--dropout", "0.1"], "--dropout is not supported with --family qwen3_5_text"),
])
def test_bad_hybrid_shapes_are_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                            says: str):
    from tests.integration.test_train_lm import write_corpus

    corpus = write_corpus(tmp_path / "corpus")
    argv = ["train", "lm", "--corpus", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--out",
            str(tmp_path / "run"), "--n-head", "4", "--n-embd", "32", *HYBRID, *extra]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not (tmp_path / "tok").exists()  # refused before a tokenizer was trained


def test_mamba2_decay_init_starts_every_head_with_a_memory():
    """transformers' own initialisation makes most Gated DeltaNet heads' decay exp(g) nearly 0 (dt_bias 1, A up to
    16: the state is wiped at every token); `--decay-init mamba2` (the Gated DeltaNet paper's code's) starts every
    head's decay between 0.2 and 1 on a neutral input (a = 0), and leaves the other weights alone."""
    import torch.nn.functional as F
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from transformer_explainer.training.lm import CausalLMLogits
    from transformer_explainer.training.lm_run import mamba2_decay_init_

    torch.manual_seed(0)
    cfg = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=4,
                            linear_num_value_heads=16, linear_key_head_dim=8, linear_value_head_dim=8)
    model = CausalLMLogits(Qwen3_5ForCausalLM(cfg))

    def decays() -> torch.Tensor:
        return torch.cat([(-la.A_log.exp() * F.softplus(la.dt_bias)).exp() for la in
                          (layer.linear_attn for layer in model.lm.model.layers[:3])]).detach()

    assert (decays() < 0.05).float().mean() > 0.5  # transformers' own: most heads forget almost everything
    before = {k: v.clone() for k, v in model.state_dict().items() if "A_log" not in k and "dt_bias" not in k}
    mamba2_decay_init_(model)
    d = decays()
    assert ((d > 0.2) & (d < 1)).all(), d
    after = model.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
