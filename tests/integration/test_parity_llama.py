"""Our Llama-family model against transformers' LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM
on the same random weights (built locally: grouped-query attention in all three, tied and untied
heads, Qwen2's q/k/v biases, llama3 rope scaling, sharded safetensors): every comparable number.

HF's intermediates come from its `output_hidden_states` / `output_attentions` (eager attention) and
from forward hooks on its modules; its rotation from its own `rotary_emb` and `apply_rotary_pos_emb`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import hf_reference, make_hf_llama_family, random_ids
from transformer_explainer import SamplingParams, load_model
from transformer_explainer.models.kv_cache import KVCache

LENGTHS = (1, 7, 33, 128)  # 128: the recorded attention in two blocks of queries
ATOL = 1e-5


def _hf_intermediates(hf, ids: list[int]) -> tuple[object, dict[str, torch.Tensor]]:
    """HF's outputs plus what its modules computed, under our names (batch dimension dropped)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = hf.config
    H, G = cfg.num_attention_heads, cfg.num_key_value_heads
    Dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    got: dict[str, torch.Tensor] = {}
    hooks = []

    def out_hook(name, heads=None):
        def f(_m, _inp, out):
            t = out[0] if isinstance(out, tuple) else out
            t = t[0]
            got[name] = t.view(t.shape[0], heads, Dh).transpose(0, 1) if heads else t
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
            a.o_proj.register_forward_pre_hook(in_hook(p + "attn.concat")),
            a.register_forward_hook(out_hook(p + "attn_out")),
            layer.post_attention_layernorm.register_forward_hook(out_hook(p + "ln2.out")),
            layer.mlp.gate_proj.register_forward_hook(out_hook(p + "mlp.gate")),
            layer.mlp.up_proj.register_forward_hook(out_hook(p + "mlp.up")),
            layer.mlp.down_proj.register_forward_pre_hook(in_hook(p + "mlp.post")),
            layer.mlp.register_forward_hook(out_hook(p + "mlp_out")),
        ]
    try:
        with torch.no_grad():
            out = hf(torch.tensor([ids]), output_hidden_states=True, output_attentions=True, use_cache=False)
            pos = torch.arange(len(ids))[None]
            cos, sin = hf.model.rotary_emb(out.hidden_states[0], pos)
            for i in range(cfg.num_hidden_layers):
                q, k = got[f"blocks.{i}.attn.q"][None], got[f"blocks.{i}.attn.k"][None]
                rq, rk = apply_rotary_pos_emb(q, k, cos, sin)
                got[f"blocks.{i}.attn.rot_q"], got[f"blocks.{i}.attn.rot_k"] = rq[0], rk[0]
                got[f"blocks.{i}.mlp.act"] = hf.model.layers[i].mlp.act_fn(got[f"blocks.{i}.mlp.gate"])
            inv_freq = hf.model.rotary_emb.inv_freq
            got["rope.angles"] = pos[0, :, None].float() * inv_freq[None, :]
    finally:
        for h in hooks:
            h.remove()
    L = cfg.num_hidden_layers
    for i in range(L):
        got[f"blocks.{i}.resid_pre"] = out.hidden_states[i][0]
        got[f"blocks.{i}.attn.pattern"] = out.attentions[i][0]
    got["ln_final.out"] = out.hidden_states[L][0]  # HF applies the final norm to its last hidden state
    got["logits"] = out.logits[0]
    return out, got


def _max_diffs(model, hf, ids: list[int]) -> dict[str, float]:
    trace = model.trace_ids(ids)
    _, ref = _hf_intermediates(hf, ids)
    diffs = {}
    for name, want in ref.items():
        have = trace[name]
        assert have.shape == want.shape, (name, have.shape, want.shape)
        diffs[name] = (have.float() - want.float()).abs().max().item()
    return diffs


@pytest.mark.parametrize("T", LENGTHS)
def test_every_intermediate_matches_transformers(llama_family_dir: Path, T: int):
    model = load_model(str(llama_family_dir), allow_download=False)
    hf = hf_reference(llama_family_dir)
    diffs = _max_diffs(model, hf, random_ids(T, model.config.vocab_size, seed=T))
    assert len(diffs) == 3 + 2 * 16, sorted(diffs)  # every name HF lets us compare
    worst = max(diffs, key=diffs.get)
    print(f"{model.config.model_type} T={T}: max abs diff {diffs[worst]:.2e} ({worst}); "
          f"logits {diffs['logits']:.2e}")
    assert diffs[worst] <= ATOL, (worst, diffs[worst])
    # the fast path (fused attention, nothing recorded) gives the same logits
    with torch.no_grad():
        fast = model.net(torch.tensor([random_ids(T, model.config.vocab_size, seed=T)]))[0]
        ref = hf(torch.tensor([random_ids(T, model.config.vocab_size, seed=T)])).logits[0]
    torch.testing.assert_close(fast, ref, atol=ATOL, rtol=0)


def test_family_features_are_what_the_fixtures_claim(llama_family_dir: Path):
    """The fixtures exercise what they are meant to: GQA everywhere, tied vs untied, biases, scaling."""
    model = load_model(str(llama_family_dir), allow_download=False)
    c = model.config
    assert c.n_kv_heads < c.n_head
    tied = model.net.unembed.weight.data_ptr() == model.net.embed.weight.data_ptr()
    assert tied == c.tie_word_embeddings
    assert (model.net.blocks[0].attn.q_proj.bias is not None) == (c.model_type == "qwen2")
    assert (c.rope_scaling is not None) == (c.model_type == "llama")
    if c.model_type == "llama":
        assert (llama_family_dir / "model.safetensors.index.json").is_file()
        assert not (llama_family_dir / "model.safetensors").exists()


def test_text_encoding_follows_the_checkpoint(llama_family_dir: Path):
    """BOS is prepended where tokenizer_config.json asks for it (the llama fixture), nowhere else."""
    model = load_model(str(llama_family_dir), allow_download=False)
    trace = model.trace("Data visualization empowers users to")
    wants_bos = (llama_family_dir / "tokenizer_config.json").is_file()
    assert (trace.token_ids[0] == 1) == wants_bos
    assert (trace.tokens[0] == "<s>") == wants_bos
    assert "".join(trace.tokens[1 if wants_bos else 0:]) == "Data visualization empowers users to"
    assert model.tokenizer.eos_ids() == (0,)


def test_trace_names_are_the_familys(llama_family_dir: Path):
    model = load_model(str(llama_family_dir), allow_download=False)
    trace = model.trace_ids(random_ids(5, model.config.vocab_size, seed=1))
    names = trace.names()
    assert "blocks.0.attn.rot_q" in names and "rope.angles" in names and "blocks.1.mlp.gate" in names
    assert "embed.position" not in names and "blocks.0.ln1.mean" not in names
    H, G, Dh = model.config.n_head, model.config.n_kv_heads, model.config.head_dim
    assert trace.shapes()["rope.angles"] == (5, Dh // 2)
    assert trace.shapes()["blocks.0.attn.rot_k"] == (G, 5, Dh)
    assert trace["blocks.0.attn.kv_head"].tolist() == [h // (H // G) for h in range(H)]
    # the derived scores give back the recorded pattern
    pattern = torch.softmax(trace["blocks.1.attn.masked_scores"], -1)
    torch.testing.assert_close(pattern, trace["blocks.1.attn.pattern"], atol=1e-6, rtol=0)
    assert "ln1.rms" in trace.summary() and "blocks.0.embed" not in trace.summary()
    with pytest.raises(KeyError):
        trace["blocks.0.ln1.mean"]
    W_K = model.weight("blocks.0.attn.W_K")
    assert W_K.shape == (G, model.config.n_embd, Dh)
    k = torch.einsum("td,gde->gte", trace["blocks.0.ln1.out"], W_K)
    if model.config.qkv_bias:
        k = k + model.weight("blocks.0.attn.b_K")[:, None, :]
    else:
        with pytest.raises(KeyError, match="no such bias"):
            model.weight("blocks.0.attn.b_K")
    torch.testing.assert_close(k, trace["blocks.0.attn.k"], atol=1e-5, rtol=0)
    assert set(model.net.weight_names()) >= {"blocks.1.mlp.W_gate", "unembed.W_U"}
    for name in model.net.weight_names():
        model.weight(name)


def test_greedy_generation_matches_transformers(llama_family_dir: Path):
    model = load_model(str(llama_family_dir), allow_download=False)
    hf = hf_reference(llama_family_dir)
    ids = model.encode("The king said")
    ours = [t.id for t in model.generate_ids(ids, 24, SamplingParams(temperature=0))]
    with torch.no_grad():
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False, eos_token_id=0, pad_token_id=0)
    theirs = ref[0, len(ids):].tolist()
    assert ours == theirs[: len(ours)]
    assert len(ours) == 24 or ours[-1] == 0


def test_kv_cache_step_trace_equals_full_trace(llama_family_dir: Path):
    model = load_model(str(llama_family_dir), allow_download=False)
    ids = random_ids(12, model.config.vocab_size, seed=4)
    full = model.trace_ids(ids)
    cache = KVCache()
    model.trace_ids(ids[:-3], cache=cache)
    step = model.trace_ids(ids[-3:], cache=cache)
    assert step.start == 9 and step["rope.angles"].shape[0] == 3
    torch.testing.assert_close(step["rope.angles"], full["rope.angles"][-3:], atol=0, rtol=0)
    for name in ("blocks.1.attn.pattern", "blocks.1.attn.masked_scores", "blocks.1.resid_post", "logits"):
        want = full[name][..., -3:, :]
        torch.testing.assert_close(step[name], want, atol=1e-5, rtol=0)
    torch.testing.assert_close(step["blocks.1.attn.rot_k"], full["blocks.1.attn.rot_k"], atol=1e-5, rtol=0)


def test_hub_style_rope_keys_load_the_same(tmp_path: Path):
    """Hub checkpoints write `rope_theta` and `rope_scaling` (transformers 5 writes `rope_parameters`):
    both spellings give the same model."""
    folder = make_hf_llama_family(tmp_path / "new", "llama", max_shard_size=None)
    new = load_model(str(folder), allow_download=False)
    cfg = json.loads((folder / "config.json").read_text())
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    cfg["rope_scaling"] = rope
    (folder / "config.json").write_text(json.dumps(cfg))
    old = load_model(str(folder), allow_download=False)
    assert old.config == new.config and old.config.rope_scaling.factor == 8.0
    ids = random_ids(40, 384, seed=2)
    torch.testing.assert_close(old.trace_ids(ids)["logits"], new.trace_ids(ids)["logits"], atol=0, rtol=0)
    hf = hf_reference(folder)  # transformers reads the old spelling too, and agrees
    with torch.no_grad():
        torch.testing.assert_close(old.net(torch.tensor([ids]))[0], hf(torch.tensor([ids])).logits[0],
                                   atol=ATOL, rtol=0)


def test_unsupported_options_are_refused(tmp_path: Path):
    from transformer_explainer.errors import CheckpointError

    folder = make_hf_llama_family(tmp_path / "m", "qwen2")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                                                               "rope_theta": 1e6}}))
    with pytest.raises(CheckpointError, match="rope type 'yarn' is not supported"):
        load_model(str(folder), allow_download=False)
    (folder / "config.json").write_text(json.dumps({**cfg, "num_key_value_heads": 3}))
    with pytest.raises(CheckpointError, match="multiple of n_kv_head"):
        load_model(str(folder), allow_download=False)
    (folder / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    with pytest.raises(CheckpointError, match="says the embeddings are tied, but"):
        load_model(str(folder), allow_download=False)


# bfloat16 keeps 8 significant bits: one rounding changes a value by up to 2^-8 of itself (half the
# spacing between neighbours, 2^-7 relative). Our bf16 path rounds at the same steps as transformers'
# (RMSNorm and the rotation angles in float32, softmax in float32, everything else in bf16), but
# kernels may sum in another order (a one-row product, a fused attention), and one rounding that falls
# the other way in a hidden value moves the logits by about a rounding of theirs. So: logits within
# four roundings at their scale (4 * 2^-8 * max|logit|, i.e. two bf16 spacings of the largest logit),
# and the same top token at every position.
BF16_ULPS = 4


@pytest.mark.parametrize("T", LENGTHS)
def test_bfloat16_matches_transformers_in_bfloat16(llama_family_dir: Path, T: int):
    model = load_model(str(llama_family_dir), allow_download=False, dtype="bfloat16")
    assert model.dtype == torch.bfloat16 and "bfloat16" in repr(model)
    assert all(p.dtype == torch.bfloat16 for p in model.net.parameters())
    hf = hf_reference(llama_family_dir, torch.bfloat16)
    ids = random_ids(T, model.config.vocab_size, seed=T)
    trace = model.trace_ids(ids)
    assert trace["blocks.0.attn.pattern"].dtype == torch.bfloat16
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    ours = trace["logits"].float()
    tol = BF16_ULPS * 2**-8 * ref.abs().max().item()
    diff = (ours - ref).abs().max().item()
    print(f"{model.config.model_type} bf16 T={T}: max abs logit diff {diff:.3e} (tolerance {tol:.3e})")
    assert diff <= tol
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))
    # the fast path (fused attention, softmax never rounded to bf16) against transformers' fused path
    hf_sdpa = hf_reference(llama_family_dir, torch.bfloat16, attn="sdpa")
    with torch.no_grad():
        fast = model.net(torch.tensor([ids]))[0].float()
        ref_fast = hf_sdpa(torch.tensor([ids])).logits[0].float()
    print(f"  fast path: {(fast - ref_fast).abs().max().item():.3e}")
    assert (fast - ref_fast).abs().max().item() <= tol
    # and bf16 stays close to float32: the cost of halving the memory, for the record
    fp32 = load_model(str(llama_family_dir), allow_download=False).trace_ids(ids)["logits"]
    assert (ours - fp32).abs().max().item() < 0.1


def test_dtype_flag_of_the_cli_and_the_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from transformer_explainer.cli import main
    from transformer_explainer.server.run import ServeConfig, build_registry

    folder = make_hf_llama_family(tmp_path / "m", "mistral")
    assert main(["explain", "The king said", "--model", str(folder), "--offline", "--dtype", "bfloat16",
                 "--json"]) == 0
    captured = capsys.readouterr()
    assert "mistral, 2 layers" in captured.err and "bfloat16 weights" in captured.err
    assert json.loads(captured.out)["tokens"][0] == "Th"
    reg = build_registry(ServeConfig(models=[str(folder)], dtype="bfloat16", discover=False))
    assert reg.get(reg.default).dtype == torch.bfloat16


def test_patched_scores_flow_into_the_pattern(llama_family_dir: Path):
    """An experiment that edits the raw scores (here: all zero) sees its edit in the pattern: uniform
    over the visible keys."""
    model = load_model(str(llama_family_dir), allow_download=False)
    ids = random_ids(6, model.config.vocab_size, seed=5)
    trace = model.trace_ids(ids, patches={"blocks.0.attn.scores": torch.zeros_like})
    pattern = trace["blocks.0.attn.pattern"]
    want = torch.tril(torch.ones(6, 6)) / torch.arange(1, 7)[:, None]
    torch.testing.assert_close(pattern, want.expand_as(pattern), atol=1e-6, rtol=0)
    assert (trace["blocks.0.attn.scores"] == 0).all()


def test_extending_a_trace_with_its_kv_cache_equals_tracing_it_whole(llama_family_dir: Path):
    """The server's generation step: the prefix's rotated keys and values are the cache, and only the
    new position is computed; every value equals the whole sequence's trace."""
    model = load_model(str(llama_family_dir), allow_download=False)
    ids = model.encode("the cat sat on the mat and then")
    full = model.trace_ids(ids)
    extended = model.extend_trace(model.trace_ids(ids[:-1]), ids[-1:])
    assert extended.token_ids == full.token_ids
    for name in full.names():
        torch.testing.assert_close(extended[name], full[name], atol=1e-5, rtol=1e-4, msg=name)
    # a text edited after its first tokens: the trace cut to them (rotation angles included), continued
    from transformer_explainer.trace import truncate_trace

    continued = model.extend_trace(truncate_trace(full, 3), ids[3:])
    for name in full.names():
        torch.testing.assert_close(continued[name], full[name], atol=1e-5, rtol=1e-4, msg=name)
