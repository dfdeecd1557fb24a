"""A generic model's trace keeps no more than it must (issue 34's budget): the masked scores and every position's
logits are derived on access, equal to what a whole recording keeps; a text whose trace would not fit the budget is
refused before its pass, in one sentence with the token limit it implies."""

from __future__ import annotations

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.bridge import record
from transformer_explainer.errors import InputError
from transformer_explainer.generic import GenericModel
from transformer_explainer.trace import truncate_trace

from ..helpers.hf_checkpoints import write_checkpoint

TEXT = "The king said, 'Hello!' and then left the room; the queen stayed."
# sliding windows, sinks, a scaled head (logits_scaling), convolution layers, and Gemma 4 (whose forward for the last
# position alone computes less: its logits are kept)
TYPES = ["olmo3", "gpt_oss", "granite", "lfm2", "gemma4_text"]


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return a.shape == b.shape and bool((a - b).abs().max() <= tol * max(1.0, float(b.abs().max())))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GenericModel]:
    root = tmp_path_factory.mktemp("budget")
    out = {}
    for t in TYPES:
        model = load_model(str(write_checkpoint(t, root / t, tokenizer=True)))
        assert isinstance(model, GenericModel)
        out[t] = model
    return out


@pytest.mark.parametrize("model_type", TYPES)
def test_derived_values_equal_a_whole_recording(model_type: str, models: dict[str, GenericModel]) -> None:
    model = models[model_type]
    trace = model.trace(TEXT)
    whole = record(model.hf, trace.token_ids).values  # every value kept, as the recording was before
    kept = trace.memory.kept
    logits_derived = model_type != "gemma4_text"
    assert ("logits" in kept) != logits_derived
    for i in model.config.attention_layers:
        name = f"blocks.{i}.attn.masked_scores"
        assert name not in kept and name in trace
        # the same arithmetic on the same q, k and mask: the same numbers, bit for bit
        assert torch.equal(trace[name], whole[name]), name
        pattern = trace[f"blocks.{i}.attn.pattern"]
        if f"blocks.{i}.attn.sink" not in trace.memory.kept:  # the scores the softmax read
            assert _close(torch.softmax(trace[name], -1), pattern), name
    for name, value in whole.items():  # what the trace keeps or derives is the whole recording's, bit for bit
        if name not in ("logits", "ln_final.out"):
            assert torch.equal(trace[name], value), name
    left_out = {n.split(".", 2)[2] for n in whole if n not in kept and n.startswith("blocks.")}
    assert {"attn.masked_scores", "attn.z"} <= left_out <= {"attn.masked_scores", "attn.z", "resid_mid"}
    assert _close(trace["ln_final.out"], whole["ln_final.out"])
    assert _close(trace.logits, whole["logits"])  # the model's own head on the last layer's output
    assert torch.equal(trace.next_token_logits(), trace.logits[-1])
    first = model.config.attention_layers[0]
    lens = trace.memory.mechanisms.get(first)  # what a lens derives is in the block too (Gemma 4's per-layer write)
    assert len(trace.block(first)) == len([n for n in whole if n.startswith(f"blocks.{first}.")]) + (
        0 if lens is None else len(lens.stages))
    # a cut trace derives its own: those of its first tokens traced alone
    n = trace.n_tokens // 2
    cut, alone = truncate_trace(trace, n), model.trace_ids(trace.token_ids[:n])
    assert _close(cut.logits, alone.logits, 1e-4) and _close(cut.next_token_logits(), alone.next_token_logits(), 1e-4)
    i = model.config.attention_layers[-1]
    assert _close(cut[f"blocks.{i}.attn.masked_scores"], alone[f"blocks.{i}.attn.masked_scores"], 1e-4)
    # it holds less than the whole recording, and as much as trace_bytes says, before any pass
    held = trace.nbytes()
    assert held == model.trace_bytes(trace.n_tokens)
    whole_bytes = sum(v.untyped_storage().nbytes() for v in {v.untyped_storage().data_ptr(): v
                                                           for v in whole.values()}.values())
    assert held < whole_bytes


def test_a_patched_z_is_kept(models: dict[str, GenericModel]) -> None:
    model = models["olmo3"]
    ids = model.encode(TEXT)
    trace = model.trace_ids(ids, patches={"blocks.1.attn.z": lambda z: z * 0.5})
    whole = record(model.hf, ids, patches={"blocks.1.attn.z": lambda z: z * 0.5}).values
    assert "blocks.1.attn.z" in trace.memory.kept and "blocks.0.attn.z" not in trace.memory.kept
    for name in ("blocks.1.attn.z", "blocks.0.attn.z", "blocks.2.attn.z", "blocks.3.resid_post"):
        assert torch.equal(trace[name], whole[name]), name
    assert _close(trace.logits, whole["logits"])


def test_a_trace_over_the_budget_is_refused_before_its_pass(models: dict[str, GenericModel]) -> None:
    model = models["olmo3"]
    ids = model.encode(TEXT)
    n = len(ids)
    assert n > 8
    passes: list[int] = []
    handle = model.hf.get_input_embeddings().register_forward_hook(lambda *_: passes.append(1))
    try:
        model.trace_budget = model.trace_bytes(n - 3)  # 3 tokens too many
        with pytest.raises(InputError) as e:
            model.trace_ids(ids)
        assert passes == []  # refused before the pass
        err = e.value
        assert err.code == "text_too_long" and err.params["tokens"] == n and err.params["limit"] == n - 3
        message = str(err)
        assert message.count(". ") == 0 and "\n" not in message and f"at most {n - 3} tokens fit" in message
        assert model.trace_ids(ids[: n - 3]).nbytes() <= model.trace_budget  # the limit it names fits
        model.trace_budget = model.trace_bytes(n)
        assert model.trace_ids(ids).nbytes() == model.trace_budget
    finally:
        handle.remove()
        model.trace_budget = None


def test_the_default_budget_is_half_the_memory_available(models: dict[str, GenericModel]) -> None:
    from transformer_explainer.loading.budget import available_memory

    model = models["olmo3"]
    have = available_memory()
    assert have is not None
    # a token count whose trace needs more than half the memory: refused (4 times that, whatever the memory does
    # meanwhile), with a limit below it
    hi = 1
    while model.trace_bytes(hi) <= have // 2:
        hi *= 2
    with pytest.raises(InputError, match="tokens fit") as e:
        model._check_trace_fits(4 * hi)
    assert e.value.code == "text_too_long" and e.value.params["limit"] < 4 * hi
