"""Qwen3 and Gemma 3 against transformers 5's Qwen3ForCausalLM and Gemma3ForCausalLM on the same random
weights (built locally, `new_family_dir`: 4 layers, grouped-query attention, untied heads; Qwen3 with a
head width of its own; Gemma 3 with local layers whose window is shorter than the text, two rotary
bases, scores scaled by 1/sqrt(query_pre_attn_scalar), sharded safetensors): every comparable number.

HF's intermediates come from its `output_hidden_states` / `output_attentions` (eager attention) and from
forward hooks on its modules; its rotation from its own `rotary_emb` and `apply_rotary_pos_emb`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import hf_reference, make_hf_llama_family, random_ids
from transformer_explainer import SamplingParams, load_model
from transformer_explainer.errors import CheckpointError
from transformer_explainer.models.kv_cache import KVCache
from transformer_explainer.trace import truncate_trace

LENGTHS = (1, 7, 33, 128)  # 128: the recorded attention in two blocks of queries
ATOL = 1e-5


def _hf_intermediates(hf, ids: list[int]) -> dict[str, torch.Tensor]:
    """What transformers' modules computed, under our names (batch dimension dropped)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = hf.config
    gemma = cfg.model_type == "gemma3_text"
    H, G, Dh = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    got: dict[str, torch.Tensor] = {}
    hooks = []

    def out_hook(name, heads=None, head_major=False):
        def f(_m, _inp, out):
            t = (out[0] if isinstance(out, tuple) else out)[0]
            if heads and head_major:  # already (heads, T, Dh)
                got[name] = t
            elif heads and t.dim() == 3:  # (T, heads, Dh)
                got[name] = t.transpose(0, 1)
            elif heads:  # (T, heads * Dh)
                got[name] = t.view(t.shape[0], heads, Dh).transpose(0, 1)
            else:
                got[name] = t
        return f

    def in_hook(name):
        def f(_m, inp):
            got[name] = inp[0][0]
        return f

    for i, layer in enumerate(hf.model.layers):
        p = f"blocks.{i}."
        a = layer.self_attn
        hooks += [
            layer.input_layernorm.register_forward_hook(out_hook(p + "ln1.out")),
            a.q_proj.register_forward_hook(out_hook(p + "attn.q", H)),
            a.k_proj.register_forward_hook(out_hook(p + "attn.k", G)),
            a.v_proj.register_forward_hook(out_hook(p + "attn.v", G)),
            # QK-norm: Qwen3 norms (B, T, heads, Dh), Gemma 3 (B, heads, T, Dh)
            a.q_norm.register_forward_hook(out_hook(p + "attn.q_norm.out", H, head_major=gemma)),
            a.k_norm.register_forward_hook(out_hook(p + "attn.k_norm.out", G, head_major=gemma)),
            a.o_proj.register_forward_pre_hook(in_hook(p + "attn.concat")),
            layer.mlp.gate_proj.register_forward_hook(out_hook(p + "mlp.gate")),
            layer.mlp.up_proj.register_forward_hook(out_hook(p + "mlp.up")),
            layer.mlp.down_proj.register_forward_pre_hook(in_hook(p + "mlp.post")),
        ]
        if gemma:  # sandwich norms: attention's and the MLP's outputs are normed before they are added
            hooks += [
                a.register_forward_hook(out_hook(p + "attn.out")),
                layer.post_attention_layernorm.register_forward_hook(out_hook(p + "ln1_post.out")),
                layer.post_attention_layernorm.register_forward_hook(out_hook(p + "attn_out")),
                layer.pre_feedforward_layernorm.register_forward_hook(out_hook(p + "ln2.out")),
                layer.mlp.register_forward_hook(out_hook(p + "mlp.out")),
                layer.post_feedforward_layernorm.register_forward_hook(out_hook(p + "ln2_post.out")),
                layer.post_feedforward_layernorm.register_forward_hook(out_hook(p + "mlp_out")),
            ]
        else:
            hooks += [
                a.register_forward_hook(out_hook(p + "attn_out")),
                layer.post_attention_layernorm.register_forward_hook(out_hook(p + "ln2.out")),
                layer.mlp.register_forward_hook(out_hook(p + "mlp_out")),
            ]
    L = cfg.num_hidden_layers
    try:
        with torch.no_grad():
            out = hf(torch.tensor([ids]), output_hidden_states=True, output_attentions=True, use_cache=False)
            pos = torch.arange(len(ids))[None]
            h0 = out.hidden_states[0]
            rot = hf.model.rotary_emb
            for i in range(L):
                kind = cfg.layer_types[i]
                cos, sin = rot(h0, pos, kind) if gemma else rot(h0, pos)
                q, k = got[f"blocks.{i}.attn.q_norm.out"][None], got[f"blocks.{i}.attn.k_norm.out"][None]
                rq, rk = apply_rotary_pos_emb(q, k, cos, sin)
                got[f"blocks.{i}.attn.rot_q"], got[f"blocks.{i}.attn.rot_k"] = rq[0], rk[0]
                got[f"blocks.{i}.mlp.act"] = hf.model.layers[i].mlp.act_fn(got[f"blocks.{i}.mlp.gate"])
            if gemma:
                got["rope.angles"] = pos[0, :, None].float() * rot.full_attention_inv_freq[None, :]
                got["rope.local_angles"] = pos[0, :, None].float() * rot.sliding_attention_inv_freq[None, :]
                got["embed.scaled"] = h0[0]
            else:
                got["rope.angles"] = pos[0, :, None].float() * rot.inv_freq[None, :]
    finally:
        for h in hooks:
            h.remove()
    for i in range(L):
        got[f"blocks.{i}.resid_pre"] = out.hidden_states[i][0]
        got[f"blocks.{i}.attn.pattern"] = out.attentions[i][0]
    got["ln_final.out"] = out.hidden_states[L][0]  # HF applies the final norm to its last hidden state
    got["logits"] = out.logits[0]
    return got


def _max_diffs(model, hf, ids: list[int]) -> dict[str, float]:
    trace = model.trace_ids(ids)
    ref = _hf_intermediates(hf, ids)
    diffs = {}
    for name, want in ref.items():
        have = trace[name]
        assert have.shape == want.shape, (name, have.shape, want.shape)
        # float32 rounds relative to a value's size: a difference at the scale of the value where it exceeds 1
        # (Gemma's residual stream, its embeddings times sqrt(d_model), reaches tens)
        scale = max(1.0, want.float().abs().max().item())
        diffs[name] = (have.float() - want.float()).abs().max().item() / scale
    return diffs


@pytest.mark.parametrize("T", LENGTHS)
def test_every_intermediate_matches_transformers(new_family_dir: Path, T: int):
    model = load_model(str(new_family_dir), allow_download=False)
    hf = hf_reference(new_family_dir)
    ids = random_ids(T, model.config.vocab_size, seed=T)
    diffs = _max_diffs(model, hf, ids)
    L = model.config.n_layer
    gemma = model.config.family == "gemma3"
    # every stage HF lets us compare: per block 18 (Gemma 3: 22, its sandwich norms'), and 3 (5) others
    assert len(diffs) == (5 + 22 * L if gemma else 3 + 18 * L), sorted(diffs)
    worst = max(diffs, key=diffs.get)
    by_stage: dict[str, float] = {}
    for name, d in diffs.items():
        stage = name.split(".", 2)[-1] if name.startswith("blocks.") else name
        by_stage[stage] = max(by_stage.get(stage, 0.0), d)
    print(f"{model.config.model_type} T={T}: max diff {diffs[worst]:.2e} ({worst}, at the value's scale); "
          + ", ".join(f"{k} {v:.1e}" for k, v in by_stage.items()))
    assert diffs[worst] <= ATOL, (worst, diffs[worst])
    # the fast path (fused attention, nothing recorded) gives the same logits
    with torch.no_grad():
        fast = model.net(torch.tensor([ids]))[0]
        ref = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(fast, ref, atol=ATOL, rtol=0)


def test_the_fixtures_have_what_they_claim(new_family_dir: Path):
    model = load_model(str(new_family_dir), allow_download=False)
    c, caps = model.config, model.config.arch
    assert c.n_layer >= 4 and c.n_kv_heads < c.n_head and not c.tie_word_embeddings
    assert c.head_dim * c.n_head != c.n_embd  # a head width of its own
    assert caps.qk_norm
    if c.family == "gemma3":
        assert caps.sandwich_norm and caps.norm_offset and caps.embed_scale
        assert c.layer_types is not None and {*c.layer_types} == {"sliding_attention", "full_attention"}
        assert c.sliding_window is not None and c.sliding_window < 7  # shorter than every text but the first
        assert c.rope_local_theta != c.rope_theta and c.query_pre_attn_scalar != c.head_dim
        assert (new_family_dir / "model.safetensors.index.json").is_file()
    else:
        assert c.family == "qwen3" and not caps.sandwich_norm and c.layer_types is None


def test_local_layers_see_only_their_window(new_family_dir: Path):
    """In a local layer a query sees itself and the window - 1 keys before it: the pattern is 0 elsewhere,
    and the masked scores are -inf there; a global layer sees every earlier key."""
    model = load_model(str(new_family_dir), allow_download=False)
    c = model.config
    T = 20
    trace = model.trace_ids(random_ids(T, c.vocab_size, seed=3))
    q = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    for layer in range(c.n_layer):
        window = c.window(layer)
        visible = (k <= q) & ((k > q - window) if window is not None else True)
        pattern = trace[f"blocks.{layer}.attn.pattern"]
        masked = trace[f"blocks.{layer}.attn.masked_scores"]
        assert (pattern[:, ~visible] == 0).all() and (pattern[:, visible] > 0).all()
        assert torch.isinf(masked[:, ~visible]).all() and torch.isfinite(masked[:, visible]).all()
        torch.testing.assert_close(pattern.sum(-1), torch.ones(c.n_head, T))
        torch.testing.assert_close(torch.softmax(masked, -1), pattern, atol=1e-6, rtol=0)
    if c.family == "gemma3":
        assert c.window(0) == c.sliding_window and c.window(1) is None


def test_greedy_generation_matches_transformers(new_family_dir: Path):
    model = load_model(str(new_family_dir), allow_download=False)
    hf = hf_reference(new_family_dir, attn="sdpa")
    ids = model.encode("The king said")
    ours = [t.id for t in model.generate_ids(ids, 24, SamplingParams(temperature=0))]
    with torch.no_grad():
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=0, pad_token_id=0)
    theirs = ref[0, len(ids):].tolist()
    assert len(ours) >= 8  # the window (5) is passed: the cache holds keys the local layers no longer see
    assert ours == theirs[: len(ours)]
    assert len(ours) == 24 or ours[-1] == 0


def test_kv_cache_steps_and_extended_traces_equal_the_full_trace(new_family_dir: Path):
    model = load_model(str(new_family_dir), allow_download=False)
    ids = random_ids(12, model.config.vocab_size, seed=4)
    full = model.trace_ids(ids)
    cache = KVCache()
    model.trace_ids(ids[:-3], cache=cache)
    step = model.trace_ids(ids[-3:], cache=cache)
    assert step.start == 9
    for name in ("blocks.0.attn.pattern", "blocks.0.attn.masked_scores", "blocks.1.attn.pattern", "logits",
                 "blocks.3.resid_post", "blocks.2.attn.q_norm.out"):
        torch.testing.assert_close(step[name], full[name][..., -3:, :], atol=1e-5, rtol=0, msg=name)
    extended = model.extend_trace(model.trace_ids(ids[:-1]), ids[-1:])
    continued = model.extend_trace(truncate_trace(full, 3), ids[3:])
    for name in full.names():
        torch.testing.assert_close(extended[name], full[name], atol=1e-5, rtol=1e-4, msg=name)
        torch.testing.assert_close(continued[name], full[name], atol=1e-5, rtol=1e-4, msg=name)


def test_qk_norm_fixes_each_heads_query_size(new_family_dir: Path):
    """After QK-norm every head's query and key, at every position, has root mean square 1 before its
    scale: |q_norm.normalized| = sqrt(head_dim), whatever the size of the projected query."""
    model = load_model(str(new_family_dir), allow_download=False)
    trace = model.trace_ids(random_ids(9, model.config.vocab_size, seed=6))
    Dh = model.config.head_dim
    for name in ("attn.q_norm.normalized", "attn.k_norm.normalized"):
        norms = trace[f"blocks.1.{name}"].norm(dim=-1)
        torch.testing.assert_close(norms, torch.full_like(norms, Dh**0.5), atol=1e-3, rtol=1e-4)
    q, rms = trace["blocks.1.attn.q"], trace["blocks.1.attn.q_norm.rms"]
    want = (q.square().mean(-1) + model.config.layer_norm_epsilon).sqrt()
    torch.testing.assert_close(rms, want, atol=1e-6, rtol=1e-5)


# bfloat16: as in test_parity_llama.py, the logits within four roundings at their scale and the same top token where
# the reference's is clear
BF16_ULPS = 4


@pytest.mark.parametrize("T", LENGTHS)
def test_bfloat16_matches_transformers_in_bfloat16(new_family_dir: Path, T: int):
    model = load_model(str(new_family_dir), allow_download=False, dtype="bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in model.net.parameters())
    hf = hf_reference(new_family_dir, torch.bfloat16)
    ids = random_ids(T, model.config.vocab_size, seed=T)
    trace = model.trace_ids(ids)
    assert trace["blocks.0.attn.pattern"].dtype == torch.bfloat16
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    ours = trace["logits"].float()
    tol = BF16_ULPS * 2**-8 * ref.abs().max().item()
    diff = (ours - ref).abs().max().item()
    hf_sdpa = hf_reference(new_family_dir, torch.bfloat16, attn="sdpa")
    with torch.no_grad():
        fast = model.net(torch.tensor([ids]))[0].float()
        ref_fast = hf_sdpa(torch.tensor([ids])).logits[0].float()
    fast_diff = (fast - ref_fast).abs().max().item()
    print(f"{model.config.model_type} bf16 T={T}: max abs logit diff {diff:.3e}, fast path {fast_diff:.3e} "
          f"(tolerance {tol:.3e})")
    assert diff <= tol and fast_diff <= tol
    # the same top token wherever the reference's two best are further apart than two tolerances (a near tie may
    # round either way)
    top2 = ref.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * tol
    assert torch.equal(ours.argmax(-1)[clear], ref.argmax(-1)[clear])


def test_bad_configs_are_refused_with_a_sentence(tmp_path: Path):
    folder = make_hf_llama_family(tmp_path / "g", "gemma3_text")
    cfg = json.loads((folder / "config.json").read_text())

    def refused(**changes) -> str:
        (folder / "config.json").write_text(json.dumps({**cfg, **changes}))
        with pytest.raises(CheckpointError) as e:
            load_model(str(folder), allow_download=False)
        msg = str(e.value)
        assert "\n" not in msg and "Traceback" not in msg
        return msg

    assert "layer_types lists 3 layers, but num_hidden_layers is 4" in refused(layer_types=cfg["layer_types"][:3])
    assert "layer_types must be a list of" in refused(layer_types=["local"] * 4)
    assert "attn_logit_softcapping is not supported" in refused(attn_logit_softcapping=50.0)
    assert "sliding_window must be a whole number" in refused(sliding_window="5")
    assert "query_pre_attn_scalar must be a finite number above 0" in refused(query_pre_attn_scalar=0)
    assert "hidden_activation 'silu' is not supported" in refused(hidden_activation="silu")
    msg = refused(model_type="gemma3")
    assert "supported: gpt2, llama, qwen2, mistral, qwen3, gemma3_text" in msg and "gemma-3-270m" in msg
    msg = refused(model_type="bert")
    assert msg.endswith("(GPT-2, Llama, Qwen3, Gemma 3, Mixtral, Qwen3-MoE, OLMoE)"), msg
