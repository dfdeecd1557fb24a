"""The shipped checkpoints: they load (safetensors only), match their task, and still reach the
accuracy their README claims on fresh held-out samples."""

from __future__ import annotations

import pytest
import torch

from transformer_explainer.seq2seq.checkpoint import builtin_checkpoints, builtin_root, load_seq2seq
from transformer_explainer.seq2seq.decoding import beam_search, greedy_decode
from transformer_explainer.seq2seq.tasks import BUILTIN_TASKS, chinese_number, english_number, make_task
from transformer_explainer.seq2seq.training import exact_match

SHIPPED = builtin_checkpoints()


def test_every_builtin_task_ships_a_small_checkpoint():
    assert set(SHIPPED) == set(BUILTIN_TASKS)
    total = sum(f.stat().st_size for f in builtin_root().rglob("*") if f.is_file())
    assert total < 10e6, f"shipped seq2seq checkpoints take {total / 1e6:.1f} MB"
    for folder in SHIPPED.values():
        assert {p.name for p in folder.iterdir()} == {"config.json", "model.safetensors", "vocab.json", "README.md"}


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILTIN_TASKS)
def test_shipped_checkpoint_reaches_its_accuracy(name):
    m = load_seq2seq(SHIPPED[name])
    task = make_task(name)
    assert m.task_name == name
    assert (m.src_vocab, m.tgt_vocab) == (task.src_vocab, task.tgt_vocab)
    assert m.training["exact_match"] >= 0.99  # what the README reports, measured at export
    pairs = task.samples(300, seed=2024)  # held-out pairs other than the ones measured at export
    acc = exact_match(m.net, task, pairs, m.max_decode_len)
    assert acc >= 0.98, f"{name}: {acc:.1%} exact match"
    for text in task.examples:
        assert greedy_decode(m, m.encode_source(text)).text == task.reference(text)
        assert beam_search(m, m.encode_source(text), 3).text == task.reference(text)


@pytest.mark.parametrize("name, words", [("number_words", english_number), ("number_words_zh", chinese_number)])
def test_numbers_below_1000_are_all_right(name, words):
    """The numbers too few to hold out are all trained on; check every one of them."""
    m = load_seq2seq(SHIPPED[name])
    task = make_task(name)
    pairs = [(str(n), words(n)) for n in range(1000)]
    assert exact_match(m.net, task, pairs, m.max_decode_len) >= 0.99


def test_reverse_cross_attention_is_anti_diagonal():
    """Reversing: when writing output position t of n, the last decoder layer looks at source
    position n - 1 - t (averaged over heads, the strongest weight sits on the anti-diagonal)."""
    m = load_seq2seq(SHIPPED["reverse"])
    last = m.config.n_decoder_layers - 1
    hits = total = 0
    for text in ("transformer", "hello", "abcdefghijkl", "zyxwv", "attention"):
        r = greedy_decode(m, m.encode_source(text), record=True)
        assert r.text == text[::-1]
        n = len(text)
        for t, step in enumerate(r.steps[:n]):
            focus = int(step.trace[f"decoder.blocks.{last}.cross_attn.pattern"][:, -1].mean(0).argmax())
            hits += focus == n - 1 - t
            total += 1
    assert hits / total >= 0.9, f"{hits}/{total} steps on the anti-diagonal"


def test_chinese_output_is_readable():
    m = load_seq2seq(SHIPPED["number_words_zh"])
    r = greedy_decode(m, m.encode_source("1234"))
    assert r.text == "一千二百三十四" and r.tokens == list("一千二百三十四")


def test_weights_are_stored_in_float16_and_compute_in_float32():
    from safetensors import safe_open

    for folder in SHIPPED.values():
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            assert all(f.get_slice(k).get_dtype() == "F16" for k in f.keys())
        m = load_seq2seq(folder)
        assert all(p.dtype == torch.float32 for p in m.net.parameters())
