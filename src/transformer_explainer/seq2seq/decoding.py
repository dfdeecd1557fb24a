"""Decoding: greedy and beam search from the start token to the end token or a length limit, each
step traced on request; and teacher-forced vs free-running decoding of the same example.

The decoder has no cache here: every step reruns it over the whole growing input, which is what the
explainer shows (the masked self-attention of step t covers t + 1 positions). Because of the causal
mask, the rows of a step's trace for earlier positions equal those of earlier steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..errors import InputError
from ..models.recorder import Recorder
from .config import MAX_BEAM
from .engine import Seq2SeqModel
from .model import EncoderDecoder, pad_mask, subsequent_mask
from .trace import Seq2SeqTrace
from .vocab import BOS, EOS, PAD


@dataclass(frozen=True)
class TopToken:
    id: int
    token: str
    prob: float


@dataclass
class DecodeStep:
    step: int  # 0 for the first output token
    input_ids: list[int]  # the decoder input at this step: start token + the tokens chosen so far
    input_tokens: list[str]
    token_id: int  # the token chosen at this step
    token: str
    prob: float  # its probability under the model
    log_prob: float
    top: list[TopToken]  # the most probable next tokens
    trace: Seq2SeqTrace | None = None  # the pass that made this step, when recorded


@dataclass(frozen=True)
class Hypothesis:
    ids: tuple[int, ...]  # tokens after the start token; ends with the end token if finished
    score: float  # sum of the tokens' log-probabilities
    finished: bool


@dataclass
class BeamStep:
    step: int
    alive: list[Hypothesis]  # hypotheses still growing after this step, best first
    finished: list[Hypothesis]  # hypotheses that have produced the end token so far, best first


@dataclass
class DecodeResult:
    src_ids: list[int]
    src_tokens: list[str]
    output_ids: list[int]  # without start and end tokens
    tokens: list[str]
    text: str
    finished: bool  # False when the length limit stopped decoding before the end token
    score: float  # log-probability of the output, end token included
    steps: list[DecodeStep]
    beam_size: int = 1
    beam_steps: list[BeamStep] = field(default_factory=list)  # the search, for beam_size > 1


NEVER_OUTPUT = (PAD, BOS)  # never a training label, so never chosen, whatever a random model says


def choosable(log_probs: Tensor) -> Tensor:
    """`log_probs` (..., V) with the tokens that are never an output set to -inf."""
    return log_probs.index_fill(-1, torch.tensor(NEVER_OUTPUT, device=log_probs.device), float("-inf"))


def _top(model: Seq2SeqModel, log_probs: Tensor, k: int) -> list[TopToken]:
    """The k most probable output tokens (padding and start token left out), unrenormalised."""
    probs = choosable(log_probs).exp()
    values, ids = probs.topk(min(k, probs.numel()))
    return [TopToken(int(i), model.tgt_vocab.tokens[int(i)], float(p)) for p, i in zip(values, ids, strict=True)]


def _run(model: Seq2SeqModel, src_ids: list[int], choose: Callable[[int, Tensor], int], max_len: int,
         record: bool, top_k: int) -> list[DecodeStep]:
    """Grow the decoder input one token at a time; `choose(step, log_probs)` picks each token."""
    rec_enc = Recorder() if record else None
    with torch.inference_mode():
        memory, src_mask = model.encode(src_ids, rec_enc)
        enc_values = {} if rec_enc is None else {k: v[0] for k, v in rec_enc.values.items()}
        ys = [BOS]
        steps: list[DecodeStep] = []
        for t in range(max_len):
            rec = Recorder() if record else None
            lp = model.next_log_probs(memory, src_mask, torch.tensor([ys]), rec)[0]  # (V,)
            tok = choose(t, lp)
            trace = None
            if rec is not None:
                trace = model.make_trace(src_ids, ys, enc_values | {k: v[0] for k, v in rec.values.items()})
            steps.append(DecodeStep(t, list(ys), model.tgt_vocab.token_texts(ys), tok, model.tgt_vocab.tokens[tok],
                                    float(lp[tok].exp()), float(lp[tok]), _top(model, lp, top_k), trace))
            ys.append(tok)
            if tok == EOS:
                break
    return steps


def _result(model: Seq2SeqModel, src_ids: list[int], steps: list[DecodeStep], beam: int = 1,
            beam_steps: list[BeamStep] | None = None) -> DecodeResult:
    ids = [s.token_id for s in steps]
    finished = bool(ids) and ids[-1] == EOS
    out = ids[:-1] if finished else ids
    score = sum(s.log_prob for s in steps)
    return DecodeResult(list(src_ids), model.src_vocab.token_texts(src_ids), out, model.tgt_vocab.token_texts(out),
                        model.tgt_vocab.decode(out), finished, score, steps, beam, beam_steps or [])


def greedy_decode(model: Seq2SeqModel, src_ids: list[int], max_len: int | None = None, *, record: bool = False,
                  top_k: int = 5) -> DecodeResult:
    """At each step take the most probable next token."""
    steps = _run(model, src_ids, lambda _t, lp: int(choosable(lp).argmax()), max_len or model.max_decode_len,
                 record, top_k)
    return _result(model, src_ids, steps)


def follow(model: Seq2SeqModel, src_ids: list[int], output_ids: list[int], *, record: bool = False,
           top_k: int = 5) -> list[DecodeStep]:
    """The steps that produce `output_ids` (end token appended if missing), each one fed the
    previous ones: how the model scores and attends along a given output."""
    forced = list(output_ids) if output_ids and output_ids[-1] == EOS else [*output_ids, EOS]
    return _run(model, src_ids, lambda t, _lp: forced[t], len(forced), record, top_k)


def beam_search(model: Seq2SeqModel, src_ids: list[int], beam_size: int, max_len: int | None = None, *,
                record: bool = False, top_k: int = 5) -> DecodeResult:
    """Keep the `beam_size` most probable prefixes (sum of log-probabilities) at every step; stop
    when no growing prefix can beat the best finished one, or at the length limit. The steps of the
    result follow the winning hypothesis (traced if `record`); `beam_steps` show the search."""
    if not 1 <= beam_size <= MAX_BEAM:
        raise InputError(f"the beam size must be between 1 and {MAX_BEAM}, got {beam_size}", code="s2s_beam_size",
                         value=beam_size, max=MAX_BEAM)
    max_len = max_len or model.max_decode_len
    alive = [Hypothesis((), 0.0, False)]
    finished: list[Hypothesis] = []
    beam_steps: list[BeamStep] = []
    with torch.inference_mode():
        memory, src_mask = model.encode(src_ids)
        for t in range(max_len):
            ys = torch.tensor([[BOS, *h.ids] for h in alive])  # (k, t + 1)
            lp = model.next_log_probs(memory.expand(len(alive), -1, -1), src_mask, ys)  # (k, V)
            total = torch.tensor([h.score for h in alive]).unsqueeze(1) + choosable(lp)
            scores, flat = total.flatten().topk(min(2 * beam_size, total.numel()))  # enough to refill the beam
            grown: list[Hypothesis] = []
            for rank, (s, f) in enumerate(zip(scores.tolist(), flat.tolist(), strict=True)):
                h, tok = alive[f // lp.size(1)], f % lp.size(1)
                if s == float("-inf"):
                    break  # only impossible tokens are left
                if tok == EOS:
                    if rank < beam_size:  # an ending counts only if it ranks within the beam
                        finished.append(Hypothesis((*h.ids, tok), s, True))
                elif len(grown) < beam_size:
                    grown.append(Hypothesis((*h.ids, tok), s, False))
            finished = sorted(finished, key=lambda h: -h.score)[:beam_size]
            alive = grown
            beam_steps.append(BeamStep(t, list(alive), list(finished)))
            # Scores only fall as hypotheses grow, so a finished one ahead of every alive one has won.
            if not alive or (finished and finished[0].score >= alive[0].score):
                break
    best = finished[0] if finished else alive[0]
    ids = list(best.ids)
    steps = _run(model, src_ids, lambda t, _lp: ids[t], len(ids), record, top_k)
    return _result(model, src_ids, steps, beam_size, beam_steps)


@torch.inference_mode()
def greedy_decode_batch(net: EncoderDecoder, src: Tensor, max_len: int) -> list[list[int]]:
    """Greedy outputs (without specials) for a padded batch of sources (B, S): the fast path, for
    measuring accuracy."""
    src_mask = pad_mask(src, PAD)
    memory = net.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), BOS, dtype=torch.long)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        out = net.decode(memory, src_mask, ys, subsequent_mask(ys.size(1)))
        nxt = choosable(net.generator(out[:, -1])).argmax(-1)
        nxt = nxt.masked_fill(done, PAD)
        ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)
        done |= nxt == EOS
        if bool(done.all()):
            break
    outputs = []
    for row in ys[:, 1:].tolist():
        outputs.append(row[: row.index(EOS)] if EOS in row else [i for i in row if i != PAD])
    return outputs


# -- exposure bias ---------------------------------------------------------------------------------


@dataclass
class ComparisonStep:
    step: int
    gold: str | None  # the reference token at this step (the end token after the last one)
    teacher_input: list[str]  # the reference prefix, as in training
    teacher_token: str  # most probable token after the reference prefix
    teacher_prob: float
    teacher_gold_prob: float | None  # probability of the reference token after the reference prefix
    free_input: list[str] | None  # the model's own previous tokens (None once it has stopped)
    free_token: str | None
    free_prob: float | None
    free_gold_prob: float | None  # probability of the reference token after the model's own prefix
    inputs_differ: bool  # the free-running input has already left the reference


@dataclass
class Comparison:
    src_tokens: list[str]
    gold_tokens: list[str]
    teacher_tokens: list[str]  # per-position predictions from one parallel pass over the reference
    free_tokens: list[str]  # free-running greedy output
    free_text: str
    free_correct: bool
    teacher_correct_steps: int  # positions where the teacher-forced prediction is the reference token
    first_divergence: int | None  # first step where the free-running token leaves the reference
    steps: list[ComparisonStep]


def teacher_forced_vs_free_running(model: Seq2SeqModel, src_ids: list[int], gold_ids: list[int]) -> Comparison:
    """The same example decoded two ways. Teacher forcing (training): one parallel pass whose
    decoder input is the reference shifted right, so every step sees the right prefix.
    Free running (inference): each step sees the model's own earlier tokens, so one mistake changes
    every later input: exposure bias."""
    vocab = model.tgt_vocab
    gold = [*gold_ids, EOS]
    tgt_in = [BOS, *gold_ids]
    with torch.inference_mode():
        src = torch.tensor([src_ids])
        tgt = torch.tensor([tgt_in])
        out = model.net(src, tgt, pad_mask(src, PAD), subsequent_mask(len(tgt_in)))
        tf_lp = model.net.generator(out)[0]  # (T, V): all positions at once
        memory, src_mask = model.encode(src_ids)
    free = greedy_decode(model, src_ids, max(model.max_decode_len, len(gold)))
    steps: list[ComparisonStep] = []
    first_divergence = None
    for t in range(max(len(gold), len(free.steps))):
        g = gold[t] if t < len(gold) else None
        tf = tf_lp[t] if t < len(gold) else None
        fs = free.steps[t] if t < len(free.steps) else None
        if fs is not None and first_divergence is None and fs.token_id != g:
            first_divergence = t
        free_gold = None
        if fs is not None and g is not None:
            with torch.inference_mode():
                lp = model.next_log_probs(memory, src_mask, torch.tensor([fs.input_ids]))[0]
            free_gold = float(lp[g].exp())
        steps.append(ComparisonStep(
            step=t,
            gold=vocab.tokens[g] if g is not None else None,
            teacher_input=vocab.token_texts(tgt_in[: t + 1]) if tf is not None else [],
            teacher_token=vocab.tokens[int(tf.argmax())] if tf is not None else "",
            teacher_prob=float(tf.exp().max()) if tf is not None else 0.0,
            teacher_gold_prob=float(tf[g].exp()) if tf is not None and g is not None else None,
            free_input=fs.input_tokens if fs else None,
            free_token=fs.token if fs else None,
            free_prob=fs.prob if fs else None,
            free_gold_prob=free_gold,
            inputs_differ=fs is not None and fs.input_ids != tgt_in[: t + 1],
        ))
    teacher_ids = [int(i) for i in tf_lp.argmax(-1)]
    return Comparison(
        src_tokens=model.src_vocab.token_texts(src_ids),
        gold_tokens=vocab.token_texts(gold_ids),
        teacher_tokens=vocab.token_texts(teacher_ids),
        free_tokens=free.tokens,
        free_text=free.text,
        free_correct=free.output_ids == list(gold_ids) and free.finished,
        teacher_correct_steps=sum(int(a == b) for a, b in zip(teacher_ids, gold, strict=True)),
        first_divergence=first_divergence,
        steps=steps,
    )


def translate(model: Seq2SeqModel, text: str, beam: int = 1, *, record: bool = False) -> DecodeResult:
    """Decode `text` greedily (beam 1) or with beam search."""
    src = model.encode_source(text)
    if beam == 1:
        return greedy_decode(model, src, record=record)
    return beam_search(model, src, beam, record=record)
