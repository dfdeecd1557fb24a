"""Activation patching: every grid cell equals the same patch done with forward hooks on transformers' own model
(GPT-2 and the Llama family), patching nothing gives 0 and patching the last block's output at the last position
gives 1, and bad pairs get a sentence, not a division by zero."""

from __future__ import annotations

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.errors import InputError
from transformer_explainer.models.recorder import Recorder
from transformer_explainer.patching import Cancelled, patched_metrics

CLEAN = "The cat sat on the mat and the dog sat on the"
CORRUPTED = "The cat sat on the rug and the dog sat on the"


def _pair(model):
    """The clean ids and the corrupted ones (one token, a third of the way in, replaced by another), and as answer
    and wrong the tokens whose logit difference the corruption moves most (random weights predict nothing: a
    large span keeps the normalised grid clear of float rounding)."""
    c = model.encode(CLEAN)
    x = list(c)
    x[len(c) // 3] = (c[len(c) // 3] + 7) % model.config.vocab_size
    d = model.last_logits(c) - model.last_logits(x)
    return c, x, int(torch.argmax(d)), int(torch.argmin(d))


def _hf_metric(hf, ids, a, w, hooks) -> float:
    handles = [module.register_forward_pre_hook(fn) if pre else module.register_forward_hook(fn)
               for module, fn, pre in hooks]
    try:
        with torch.no_grad():
            out = hf(torch.tensor([ids])).logits[0, -1].double()
    finally:
        for h in handles:
            h.remove()
    return float(out[a] - out[w])


def _capture(hf, ids, module, pre: bool):
    box = []
    if pre:
        fn = lambda m, args: box.append(args[0].detach().clone())  # noqa: E731
    else:
        fn = lambda m, args, out: box.append((out[0] if isinstance(out, tuple) else out).detach().clone())  # noqa: E731
    _hf_metric(hf, ids, 0, 1, [(module, fn, pre)])
    return box[0]


def _set_pos(pos, value, pre):
    if pre:
        def fn(m, args):
            x = args[0].clone()
            x[0, pos] = value[0, pos]
            return (x, *args[1:])
    else:
        def fn(m, args, out):
            o = (out[0] if isinstance(out, tuple) else out).clone()
            o[0, pos] = value[0, pos]
            return (o, *out[1:]) if isinstance(out, tuple) else o
    return fn


def _check_against_hf(model, hf, blocks, attn_of, mlp_of, o_proj_of, n_head, d_head) -> None:
    c, x, a, w = _pair(model)
    res = model.patch(c, x, a, w, batch_tokens=3 * len(c))  # several batches per layer
    T = len(c)
    for layer, blk in enumerate(blocks):
        for kind, module, pre in (("resid_pre", blk, True), ("attn_out", attn_of(blk), False),
                                  ("mlp_out", mlp_of(blk), False)):
            clean_value = _capture(hf, c, module, pre)
            for pos in (0, T // 2, T - 1):
                ref = _hf_metric(hf, x, a, w, [(module, _set_pos(pos, clean_value, pre), pre)])
                assert float(res.raw[kind][layer, pos]) == pytest.approx(ref, rel=1e-4, abs=1e-4), (kind, layer, pos)
        z_clean = _capture(hf, c, o_proj_of(blk), True)  # (1, T, H*Dh): the heads' z side by side
        for h in range(n_head):
            def fn(m, args, h=h, z_clean=z_clean):
                z = args[0].clone()
                z[0, :, h * d_head:(h + 1) * d_head] = z_clean[0, :, h * d_head:(h + 1) * d_head]
                return (z, *args[1:])
            ref = _hf_metric(hf, x, a, w, [(o_proj_of(blk), fn, True)])
            assert float(res.raw["heads"][layer, h]) == pytest.approx(ref, rel=1e-4, abs=1e-4), (layer, h)
    assert res.clean == pytest.approx(_hf_metric(hf, c, a, w, []), rel=1e-4, abs=1e-4)
    assert res.corrupted == pytest.approx(_hf_metric(hf, x, a, w, []), rel=1e-4, abs=1e-4)
    # resid_pre at layer 0 only differs from the corrupted run where the tokens differ
    same = [p for p in range(T) if c[p] == x[p]]
    assert torch.allclose(res.grids["resid_pre"][0, same], torch.zeros(len(same)), atol=1e-4)


def test_gpt2_grids_equal_transformers_hooks(tiny_model, hf_tiny) -> None:
    cfg = hf_tiny.config
    _check_against_hf(tiny_model, hf_tiny, hf_tiny.transformer.h, lambda b: b.attn, lambda b: b.mlp,
                      lambda b: b.attn.c_proj, cfg.n_head, cfg.n_embd // cfg.n_head)


def test_llama_family_grids_equal_transformers_hooks(llama_family_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = load_model(str(llama_family_dir), allow_download=False)
    hf = AutoModelForCausalLM.from_pretrained(llama_family_dir, attn_implementation="eager").eval()
    cfg = hf.config
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    _check_against_hf(model, hf, hf.model.layers, lambda b: b.self_attn, lambda b: b.mlp,
                      lambda b: b.self_attn.o_proj, cfg.num_attention_heads, d_head)


def test_nothing_gives_0_and_the_last_output_gives_1(tiny_model) -> None:
    c, x, a, w = _pair(tiny_model)
    res = tiny_model.patch(c, x, a, w, what=("resid_pre",))
    L, T = tiny_model.config.n_layer, len(c)
    span = res.clean - res.corrupted
    # patching nothing: the corrupted run's own value put back
    own = tiny_model.trace_ids(x)
    nothing = patched_metrics(tiny_model.net, x, L - 1, "resid_pre", [T - 1], own[f"blocks.{L - 1}.resid_pre"], a, w)
    assert float((nothing[0] - res.corrupted) / span) == pytest.approx(0, abs=1e-5)
    # the last block's output at the last position, from the clean run: the clean metric
    clean_out = tiny_model.trace_ids(c)[f"blocks.{L - 1}.resid_post"]

    def last_output(v: torch.Tensor) -> torch.Tensor:
        v = v.clone()
        v[:, -1] = clean_out[-1]
        return v

    rec = Recorder(patches={f"blocks.{L - 1}.resid_post": last_output}, store=False)
    with torch.inference_mode():
        logits = tiny_model.net(torch.tensor([x]), rec=rec, logits_for="last")[0, -1].double()
    assert float((logits[a] - logits[w] - res.corrupted) / span) == pytest.approx(1, abs=1e-5)


def test_bad_pairs_get_a_sentence(tiny_model) -> None:
    c, x, a, w = _pair(tiny_model)
    with pytest.raises(InputError, match="same number of tokens"):
        tiny_model.patch(CLEAN, CORRUPTED + " again", a, w)
    with pytest.raises(InputError, match="not one token"):
        tiny_model.patch(CLEAN, CORRUPTED, " hippopotamus", w)
    with pytest.raises(InputError, match="same tokens"):
        tiny_model.patch(CLEAN, CLEAN, a, w)
    with pytest.raises(InputError, match="same token"):
        tiny_model.patch(CLEAN, CORRUPTED, a, a)
    with pytest.raises(InputError, match="unknown patching grid"):
        tiny_model.patch(CLEAN, CORRUPTED, a, w, what=("resid_post",))
    calls = []
    with pytest.raises(Cancelled):
        tiny_model.patch(CLEAN, CORRUPTED, a, w, cancelled=lambda: calls.append(1) or len(calls) > 2)


def test_qwen3_and_gemma3_grids_equal_transformers_hooks(new_family_dir) -> None:
    """The new families too; Gemma 3's attn_out and mlp_out are what its sandwich norms put out (what is added)."""
    from transformers import AutoModelForCausalLM

    model = load_model(str(new_family_dir), allow_download=False)
    hf = AutoModelForCausalLM.from_pretrained(new_family_dir, attn_implementation="eager").eval()
    cfg = hf.config
    gemma = cfg.model_type == "gemma3_text"
    _check_against_hf(model, hf, hf.model.layers,
                      (lambda b: b.post_attention_layernorm) if gemma else (lambda b: b.self_attn),
                      (lambda b: b.post_feedforward_layernorm) if gemma else (lambda b: b.mlp),
                      lambda b: b.self_attn.o_proj, cfg.num_attention_heads, cfg.head_dim)


def test_a_patched_run_from_its_block_equals_one_from_the_embedding(new_family_dir) -> None:
    """Starting at the patched block, from the corrupted run's residual stream entering it, gives the metric a
    run from the embedding gives."""
    from transformer_explainer.patching import residuals_entering_blocks

    model = load_model(str(new_family_dir), allow_download=False)
    c, x, a, w = _pair(model)
    clean = model.trace_ids(c)
    entering = residuals_entering_blocks(model.net, x)
    for layer in range(model.config.n_layer):
        for kind, site in (("resid_pre", "resid_pre"), ("heads", "attn.z"), ("mlp_out", "mlp_out")):
            cells = [0, 1, len(c) - 1] if kind != "heads" else [0, model.config.n_head - 1]
            value = clean[f"blocks.{layer}.{site}"]
            whole = patched_metrics(model.net, x, layer, kind, cells, value, a, w)
            started = patched_metrics(model.net, x, layer, kind, cells, value, a, w, entering[layer])
            torch.testing.assert_close(started, whole, atol=1e-5, rtol=1e-5)


def test_mixtures_of_experts_grids_equal_transformers_hooks(moe_family_dir) -> None:
    """Mixtral, Qwen3-MoE, OLMoE: the grids equal patching transformers' modules (mlp_out: its mixture block's
    output), and a patched run started at its block equals one from the embedding (the routing downstream of
    a patch is recomputed: the patched runs batch many rows, each with its own experts)."""
    from transformers import AutoModelForCausalLM

    from transformer_explainer.patching import residuals_entering_blocks

    model = load_model(str(moe_family_dir), allow_download=False)
    hf = AutoModelForCausalLM.from_pretrained(moe_family_dir, attn_implementation="eager").eval()
    cfg = hf.config
    Dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    _check_against_hf(model, hf, hf.model.layers, lambda b: b.self_attn, lambda b: b.mlp,
                      lambda b: b.self_attn.o_proj, cfg.num_attention_heads, Dh)
    c, x, a, w = _pair(model)
    clean = model.trace_ids(c)
    entering = residuals_entering_blocks(model.net, x)
    for layer in range(model.config.n_layer):
        cells = [0, 1, len(c) - 1]
        value = clean[f"blocks.{layer}.mlp_out"]
        whole = patched_metrics(model.net, x, layer, "mlp_out", cells, value, a, w)
        started = patched_metrics(model.net, x, layer, "mlp_out", cells, value, a, w, entering[layer])
        torch.testing.assert_close(started, whole, atol=1e-5, rtol=1e-5)
