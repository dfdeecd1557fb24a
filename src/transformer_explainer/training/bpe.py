"""Train a byte-level BPE tokenizer built exactly like GPT-2's, with the `tokenizers` library.

The result is the same kind of tokenizer GPT-2 uses: GPT-2's pre-tokenization regex (via
``pre_tokenizers.ByteLevel``), no prefix space, every one of the 256 byte symbols in the base
vocabulary (so any text, emoji or Chinese included, round-trips), merges learned on the given files,
and ``<|endoftext|>`` as the highest id (GPT-2: 50256 = vocab_size - 1). The output folder holds
``tokenizer.json`` and GPT-2's ``vocab.json`` + ``merges.txt``, so it loads like a Hugging Face GPT-2
tokenizer folder.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

log = logging.getLogger(__name__)

EOT_TOKEN = "<|endoftext|>"
MIN_VOCAB_SIZE = 257  # the 256 byte symbols + <|endoftext|>


def gpt2_style_tokenizer(model: models.BPE | None = None) -> Tokenizer:
    """An (untrained, unless ``model`` is given) tokenizer with GPT-2's byte-level pipeline."""
    tok = Tokenizer(model if model is not None else models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def train_bpe_tokenizer(
    files: list[Path],
    vocab_size: int,
    out_dir: Path,
    *,
    min_frequency: int = 2,
    show_progress: bool = False,
) -> Tokenizer:
    """Learn a GPT-2-style byte-level BPE of ``vocab_size`` ids on ``files`` and save it in ``out_dir``.

    Ids ``0..255`` are the byte symbols, then the merges in the order learned, and ``<|endoftext|>`` is
    the last id (``vocab_size - 1`` unless the text is too small to learn that many merges, in which case
    the vocabulary is smaller and a warning is logged). Writes ``tokenizer.json``, ``vocab.json`` (with
    ``<|endoftext|>``, as GPT-2's has), ``merges.txt`` (``#version: 0.2`` header), plus
    ``tokenizer_config.json`` and ``special_tokens_map.json`` for Hugging Face ``AutoTokenizer``.
    Returns the trained tokenizer.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB_SIZE} (256 bytes + {EOT_TOKEN})")
    missing = [str(f) for f in files if not Path(f).is_file()]
    if not files or missing:
        raise FileNotFoundError(f"training files not found: {missing or 'none given'}")
    t0 = time.perf_counter()
    tok = gpt2_style_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1,  # the special token is appended afterwards, as the highest id
        min_frequency=min_frequency,
        show_progress=show_progress,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train([str(f) for f in files], trainer=trainer)
    learned = tok.get_vocab_size(with_added_tokens=False)
    if learned < vocab_size - 1:
        log.warning("only %d merges+bytes could be learned (asked for %d); %s gets id %d",
                    learned, vocab_size - 1, EOT_TOKEN, learned)
    tok.add_special_tokens([EOT_TOKEN])
    save_tokenizer(tok, out_dir)
    log.info("trained a %d-id byte-level BPE on %d file(s) in %.1f s -> %s",
             tok.get_vocab_size(with_added_tokens=True), len(files), time.perf_counter() - t0, out_dir)
    return tok


def save_tokenizer(tok: Tokenizer, out_dir: Path) -> None:
    """Write ``tokenizer.json``, ``vocab.json``, ``merges.txt`` and the Hugging Face config files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    tok.model.save(str(out_dir))  # vocab.json (model vocabulary only) + merges.txt
    vocab = tok.get_vocab(with_added_tokens=True)
    ordered = dict(sorted(vocab.items(), key=lambda kv: kv[1]))
    (out_dir / "vocab.json").write_text(json.dumps(ordered, ensure_ascii=False), encoding="utf-8")
    eot_id = vocab.get(EOT_TOKEN)
    if eot_id is not None:
        special = {"bos_token": EOT_TOKEN, "eos_token": EOT_TOKEN, "unk_token": EOT_TOKEN}
        (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")
        config = {
            "tokenizer_class": "GPT2Tokenizer",
            "add_prefix_space": False,
            "model_max_length": 1024,
            **special,
            "added_tokens_decoder": {
                str(eot_id): {"content": EOT_TOKEN, "lstrip": False, "normalized": True, "rstrip": False,
                              "single_word": False, "special": True},
            },
        }
        (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def load_tokenizer(folder: Path) -> Tokenizer:
    """Load a folder written by :func:`train_bpe_tokenizer` (``tokenizer.json``)."""
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def bytes_per_token(tok: Tokenizer, texts: Iterable[str], batch_size: int = 1024) -> float:
    """UTF-8 bytes per token over ``texts`` (higher means better compression)."""
    n_bytes = n_tokens = 0
    batch: list[str] = []

    def flush() -> None:
        nonlocal n_tokens
        for enc in tok.encode_batch(batch, add_special_tokens=False):
            n_tokens += len(enc.ids)
        batch.clear()

    for text in texts:
        n_bytes += len(text.encode("utf-8"))
        batch.append(text)
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    return n_bytes / max(n_tokens, 1)
