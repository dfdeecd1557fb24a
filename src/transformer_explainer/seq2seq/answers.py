"""The answers of the encoder-decoder API (/api/seq2seq) as plain JSON (their shapes are
`schemas.py`'s): the tasks with their shipped checkpoints, a traced decoding, the sinusoidal
positional encoding, and teacher forcing against free running. Floats are rounded to 6 digits:
plenty for drawing, a third of the bytes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError
from .checkpoint import builtin_checkpoints
from .decoding import DecodeResult, beam_search, greedy_decode, teacher_forced_vs_free_running, translate
from .engine import Seq2SeqModel
from .live_training import MAX_STEPS
from .model import positional_encoding
from .tasks import BUILTIN_TASKS, make_task

DIGITS = 6


def rounded(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, float):
        return round(x, DIGITS)
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def tasks_json() -> dict[str, Any]:
    """Every built-in task, with its examples, vocabulary and shipped checkpoint (if any)."""
    shipped = builtin_checkpoints()
    rows = []
    for name in BUILTIN_TASKS:
        t = make_task(name)
        rows.append({"name": name, "description": t.description, "examples": list(t.examples),
                     "max_src_len": t.max_src_len, "has_checkpoint": name in shipped,
                     "src_level": t.src_vocab.level, "tgt_level": t.tgt_vocab.level,
                     "src_vocab": list(t.src_vocab.tokens[3:]),  # what may be typed (specials left out)
                     "checkpoint": _checkpoint_card(shipped[name] / "config.json") if name in shipped else None})
    return {"tasks": rows, "max_train_steps": MAX_STEPS}


def _checkpoint_card(config_file: Path) -> dict[str, Any] | None:
    """Shape and measured accuracy of a shipped checkpoint, from its config.json (no weights read)."""
    try:
        meta = json.loads(config_file.read_text(encoding="utf-8"))
        m, tr = meta["model"], meta.get("training") or {}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    keys = ("n_encoder_layers", "n_decoder_layers", "d_model", "n_head", "d_ff")
    return {**{k: m.get(k) for k in keys}, "exact_match": tr.get("exact_match"), "steps": tr.get("steps")}


def decode_json(m: Seq2SeqModel, r: DecodeResult) -> dict[str, Any]:
    c = m.config
    steps = []
    for s in r.steps:
        tr = s.trace
        assert tr is not None
        steps.append({
            "step": s.step,
            "input_tokens": s.input_tokens,
            "token": s.token,
            "prob": rounded(s.prob),
            "top": [{"token": t.token, "prob": rounded(t.prob)} for t in s.top],
            # the new position's attention: (layers, heads, source) and (layers, heads, step + 1)
            "cross_attn": rounded(tr.cross_attention()[:, :, -1, :]),
            "self_attn": rounded(tr.self_attention()[:, :, -1, :]),
        })
    beams = [{"step": b.step,
              "alive": [{"tokens": m.tgt_vocab.token_texts(h.ids), "score": rounded(h.score)} for h in b.alive],
              "finished": [{"tokens": m.tgt_vocab.token_texts(h.ids), "score": rounded(h.score)} for h in b.finished]}
             for b in r.beam_steps]
    first = r.steps[0].trace if r.steps else None
    encoder_attn = ([rounded(first.pattern("encoder", i)) for i in range(c.n_encoder_layers)]
                    if first is not None else [])
    # the source on its way into the encoder: token embedding x sqrt(d_model), plus the sinusoid
    source = ({"embed": rounded(first["encoder.embed"]), "pos_encoding": rounded(first["encoder.pos_encoding"]),
               "embed_sum": rounded(first["encoder.embed_sum"])} if first is not None else None)
    return {"src_tokens": r.src_tokens, "src_ids": r.src_ids, "output": r.text, "tokens": r.tokens,
            "finished": r.finished, "score": rounded(r.score), "beam": r.beam_size, "d_model": c.d_model,
            "d_ff": c.d_ff, "n_params": m.net.num_params(), "src_vocab_size": c.src_vocab_size,
            "tgt_vocab_size": c.tgt_vocab_size, "embed_scale": rounded(c.d_model ** 0.5), "max_src_len": m.max_src_len,
            "max_output_len": m.max_decode_len,
            "n_encoder_layers": c.n_encoder_layers, "n_decoder_layers": c.n_decoder_layers, "n_heads": c.n_head,
            "source": source, "encoder_attn": encoder_attn, "steps": steps, "beams": beams}


def decode_text(m: Seq2SeqModel, text: str, beam: int, top_k: int,
                compare_beams: Sequence[int] = ()) -> dict[str, Any]:
    """`text` decoded greedily (`beam` 1) or by beam search, every step traced; and, untraced, with each
    beam size of `compare_beams`, to show where a wider search writes something else or scores higher."""
    src = m.encode_source(text)
    if beam == 1:
        r = greedy_decode(m, src, record=True, top_k=top_k)
    else:
        r = beam_search(m, src, beam, record=True, top_k=top_k)
    alternatives = []
    for b in compare_beams:
        a = r if b == beam else translate(m, text, b)
        alternatives.append({"beam": b, "output": a.text, "tokens": a.tokens, "score": rounded(a.score),
                             "finished": a.finished})
    return {"input": text, **decode_json(m, r), "alternatives": alternatives}


def positional_json(n_positions: int, d_model: int, trained_length: int | None) -> dict[str, Any]:
    """The sinusoidal encoding of `n_positions` positions and how alike they are (PE PE^T)."""
    pe = positional_encoding(n_positions, d_model)  # (N, D)
    return {"d_model": d_model, "n_positions": n_positions, "trained_length": trained_length,
            "encoding": rounded(pe), "similarity": rounded(pe @ pe.T),
            "norm": rounded(float(pe[0].norm()))}  # every row has norm sqrt(d_model / 2)


def compare_json(m: Seq2SeqModel, text: str, target: str | None) -> dict[str, Any]:
    """`text` decoded with teacher forcing and free running against `target` (default: the task's answer)."""
    src = m.encode_source(text)
    if target is None:
        target = m.task.reference(text) if m.task is not None else None
        if target is None:
            raise InputError("the task cannot work out the right output for this input: give a target",
                             code="s2s_no_reference")
    gold = m.encode_target(target)
    if len(gold) > m.max_decode_len:
        raise InputError(f"the target is {len(gold)} tokens long; at most {m.max_decode_len}",
                         code="s2s_target_too_long", tokens=len(gold), limit=m.max_decode_len)
    c = teacher_forced_vs_free_running(m, src, gold)
    steps = [{k: rounded(v) for k, v in vars(s).items()} for s in c.steps]
    return {"input": text, "target": target, **{k: v for k, v in vars(c).items() if k != "steps"}, "steps": steps}
