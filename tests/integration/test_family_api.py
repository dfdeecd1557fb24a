"""Every API endpoint, analysis, the notebook snapshot and the CLI on every rotary family (Llama, Qwen2,
Mistral, Qwen3, Gemma 3, and the mixtures of experts Mixtral, Qwen3-MoE, OLMoE: random weights saved by
transformers, `decoder_family_dir`), with the values checked against the engine's own: nothing of the GPT-2
path is assumed."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_explainer import cli, load_model  # noqa: E402
from transformer_explainer.analysis import load_npz  # noqa: E402
from transformer_explainer.analysis.ablation import (  # noqa: E402
    ablate,
    ablation_patches,
    head_importance,
    head_means,
    prune_heads,
)
from transformer_explainer.analysis.embeddings import analogy, nearest_tokens, token_id  # noqa: E402
from transformer_explainer.analysis.lens import lens_logits, logit_lens  # noqa: E402
from transformer_explainer.analysis.roles import reference_traces  # noqa: E402
from transformer_explainer.encoding import (
    decode_array,  # noqa: E402
    triangle_rows,  # noqa: E402
)
from transformer_explainer.names import NAME_TABLES, names_for  # noqa: E402
from transformer_explainer.notebook.snapshot import ACTIVATION_ORDER, page_html, snapshot_data  # noqa: E402
from transformer_explainer.sampling import SamplingParams  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402

TEXT = "the cat sat on the mat and the cat"
WORDS = (" the", " and", " position")  # single tokens of the fixtures' tokenizer (after a space)


@pytest.fixture(scope="module")
def model(decoder_family_dir: Path):
    return load_model(str(decoder_family_dir), allow_download=False)


@pytest.fixture(scope="module")
def client(model):
    with TestClient(create_app({"tiny": model}, ServerSettings())) as c:
        yield c


def post(client, path: str, **body) -> dict:
    r = client.post(path, json={"model": "tiny", **body})
    assert r.status_code == 200, r.text
    return r.json()


def refused(client, path: str, **body) -> str:
    r = client.post(path, json={"model": "tiny", **body})
    assert r.status_code == 422, r.text
    return r.json()["detail"]


def arr(t: dict) -> np.ndarray:
    return decode_array(t["data"], t["shape"], t["dtype"])


def group(model) -> int:
    """Query heads per key/value head."""
    return model.config.n_head // model.config.n_kv_heads


def moe(model) -> bool:
    return model.config.arch.mlp == "moe"


def mlp_weight(model, layer: int = 0) -> str:
    """A name of block `layer`'s MLP weights: the gate projection, every expert's in a block with experts."""
    return f"blocks.{layer}.mlp.experts.W_gate" if model.config.has_experts(layer) else f"blocks.{layer}.mlp.W_gate"


# -- the core API ----------------------------------------------------------------------------------


def test_model_info_and_trace_overview(client, model):
    info = client.get("/api/models/tiny").json()
    assert info["config"]["family"] == model.config.family and info["config"]["n_kv_heads"] == model.config.n_kv_heads
    caps = info["config"]["capabilities"]
    assert caps["norm"] == "rms" and caps["positions"] == "rope" and caps["kv_groups"] == group(model)
    assert caps["qk_norm"] == (model.config.family in ("qwen3", "gemma3", "qwen3_moe", "olmoe"))
    assert caps["qk_norm_scope"] == ("projection" if model.config.family == "olmoe" else "head")
    c = model.config
    assert caps["mlp"] == ("moe" if moe(model) else "gated")
    assert (caps["n_experts"], caps["top_k"], caps["moe_layers"]) == (c.n_experts, c.top_k, c.moe_layers)
    assert info["n_active_params"] == model.net.num_active_params() < info["n_params"] or not moe(model)
    assert caps["sandwich_norm"] == caps["embed_scale"] == (model.config.family == "gemma3")
    assert caps["layer_types"] == [model.config.layer_type(i) for i in range(model.config.n_layer)]
    d = post(client, "/api/trace", text=TEXT, include=[{"name": "rope.angles", "dtype": "float32"}])
    tr = model.trace(TEXT)
    assert d["token_ids"] == tr.token_ids
    np.testing.assert_allclose(arr(d["tensors"][0]), tr["rope.angles"].numpy(), rtol=1e-6)
    norms = arr(d["resid_norms"])
    assert norms.shape == (model.config.n_layer + 1, tr.n_tokens)
    np.testing.assert_allclose(norms[-1], tr[f"blocks.{model.config.n_layer - 1}.resid_post"].norm(dim=-1).numpy(),
                               rtol=2e-3)


def test_every_activation_by_name(client, model):
    """Each name the family answers (globals, every block's stages, the derived ones) comes back
    with the trace's values and the name table's dims."""
    tr = model.trace(TEXT)
    names = tr.names()
    assert "rope.angles" in names and "blocks.1.attn.kv_head" in names and "blocks.0.attn.scores" in names
    for i in range(0, len(names), 16):
        chunk = names[i:i + 16]
        d = post(client, "/api/tensors", text=TEXT, tensors=[{"name": n, "dtype": "float32"} for n in chunk])
        for n, t in zip(chunk, d["tensors"], strict=True):
            assert t["name"] == n
            table = names_for(model.config.family)
            assert t["dims"] == list(table.block_activations.get(n.split(".", 2)[-1], (None,))[0]
                                     if n.startswith("blocks.") else table.global_activations[n][0])
            np.testing.assert_allclose(arr(t), tr[n].float().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    kv = post(client, "/api/tensors", text=TEXT, tensors=[{"name": "blocks.0.attn.kv_head"}])["tensors"][0]
    assert arr(kv).tolist() == [h // group(model) for h in range(model.config.n_head)]


def test_head_slices_of_key_value_tensors(client, model):
    """`head` is a query head: on a tensor with a key/value-head dim it picks the key/value head that
    query head reads, h // (H / G), and says which."""
    tr = model.trace(TEXT)
    H = model.config.n_head
    for h in range(H):
        d = post(client, "/api/tensors", text=TEXT, tensors=[
            {"name": f"blocks.1.{s}", "head": h, "dtype": "float32"}
            for s in ("attn.rot_k", "attn.k", "attn.v", "attn.rot_q", "attn.pattern")])
        rot_k, k, v, rot_q, pattern = d["tensors"]
        g = h // group(model)
        for t, s in ((rot_k, "attn.rot_k"), (k, "attn.k"), (v, "attn.v")):
            assert t["kv_head"] == g and t["head"] == h and t["dims"][0] in ("S", "T")
            np.testing.assert_allclose(arr(t), tr[f"blocks.1.{s}"][g].numpy(), rtol=1e-6)
        for t, s in ((rot_q, "attn.rot_q"), (pattern, "attn.pattern")):
            assert t["kv_head"] is None
            np.testing.assert_allclose(arr(t), tr[f"blocks.1.{s}"][h].numpy(), rtol=1e-6)
        w = post(client, "/api/weights", tensors=[{"name": "blocks.0.attn.W_K", "head": h, "dtype": "float32"},
                                                 {"name": "blocks.0.attn.W_Q", "head": h, "dtype": "float32"}])
        wk, wq = w["tensors"]
        assert wk["kv_head"] == g and wk["dims"] == ["D", "Dh"]
        np.testing.assert_allclose(arr(wk), model.weight("blocks.0.attn.W_K")[g].numpy())
        np.testing.assert_allclose(arr(wq), model.weight("blocks.0.attn.W_Q")[h].numpy())
    # query heads are 0..H-1 whatever the tensor: past them is refused, for keys too
    assert f"0..{H - 1}" in refused(client, "/api/tensors", text=TEXT, tensors=[{"name": "blocks.0.attn.rot_k",
                                                                                "head": H}])
    assert "no head dimension" in refused(client, "/api/tensors", text=TEXT,
                                          tensors=[{"name": "rope.angles", "head": 0}])


def test_every_weight_by_name(client, model):
    names = model.weight_names()
    assert mlp_weight(model) in names and "embed.W_pos" not in names
    assert ("blocks.0.attn.b_Q" in names) == model.config.qkv_bias  # Qwen2 has q/k/v biases, Llama not
    for i in range(0, len(names), 16):
        chunk = names[i:i + 16]
        d = post(client, "/api/weights", tensors=[{"name": n, "dtype": "float32"} for n in chunk])
        for n, t in zip(chunk, d["tensors"], strict=True):
            np.testing.assert_allclose(arr(t), model.weight(n).numpy(), err_msg=n)
    if not model.config.qkv_bias:  # a bias of the family's names this model lacks; Gemma's and Mixtral's have none
        why = "no such weight" if "attn.b_K" in names_for(model.config.family).block_weights else "unknown tensor name"
        assert why in refused(client, "/api/weights", tensors=[{"name": "blocks.0.attn.b_K"}])
    # GPT-2's names are not this family's
    assert "unknown tensor name" in refused(client, "/api/weights", tensors=[{"name": "embed.W_pos"}])
    assert "unknown tensor name" in refused(client, "/api/tensors", text=TEXT, tensors=[{"name": "blocks.0.ln1.mean"}])
    assert "is a weight" in refused(client, "/api/tensors", text=TEXT, tensors=[{"name": mlp_weight(model)}])
    if moe(model):  # one expert's matrix by `row`, without the others
        layer = model.config.moe_layers[0]
        d = post(client, "/api/weights", tensors=[{"name": f"blocks.{layer}.mlp.experts.W_out", "row": 3,
                                                 "dtype": "float32"}])
        t = d["tensors"][0]
        assert t["dims"] == ["M", "D"] and t["row"] == 3
        np.testing.assert_allclose(arr(t), model.weight(f"blocks.{layer}.mlp.experts.W_out")[3].numpy())
        E = model.config.n_experts
        assert f"0..{E - 1}" in refused(client, "/api/weights", tensors=[
            {"name": f"blocks.{layer}.mlp.experts.W_out", "row": E}])


def test_next_token_and_generate(client, model):
    ids = model.encode(TEXT)
    d = post(client, "/api/next_token", text=TEXT, top_n=5, sampling={"temperature": 0})
    logits = model.last_logits(ids)
    assert [c["id"] for c in d["candidates"]] == logits.topk(5).indices.tolist()
    assert d["candidates"][0]["logit"] == pytest.approx(float(logits.max()), abs=1e-4)
    # generation extends the cached trace with one position: equal to tracing the whole sequence
    tok = int(logits.argmax())
    g = post(client, "/api/generate", ids=ids, token_id=tok, include=[
        {"name": f"blocks.1.{s}", "dtype": "float32"} for s in ("attn.rot_k", "attn.k", "attn.pattern", "attn.scores")])
    assert g["token"]["id"] == tok and g["trace"]["token_ids"] == ids + [tok]
    full = model.trace_ids(ids + [tok])
    for t in g["trace"]["tensors"]:
        np.testing.assert_allclose(arr(t), full[t["name"]].numpy(), rtol=1e-4, atol=1e-5, err_msg=t["name"])
    s = post(client, "/api/generate", ids=ids, sampling={"seed": 3})
    assert s["trace"]["token_ids"] == ids + [s["token"]["id"]]


def test_merged_trace_with_recorded_scores(model):
    """A trace that recorded its raw scores (a patch on them) merges with the next position's: the
    prefix's rows gain the new keys' scores, from rotated queries against rotated keys per group."""
    from transformer_explainer.trace import merge_traces

    ids = model.encode(TEXT)
    keep = {"blocks.0.attn.scores": lambda s: s}
    prefix = model.trace_ids(ids[:-2], patches=keep)
    L = model.config.n_layer
    from transformer_explainer.models.kv_cache import KVCache

    cache = KVCache([(prefix[f"blocks.{i}.attn.rot_k"][None], prefix[f"blocks.{i}.attn.v"][None]) for i in range(L)],
                    ids=prefix.token_ids)
    new = model.trace_ids(ids[-2:], cache=cache, patches=keep)
    merged = merge_traces(prefix, new)
    full = model.trace_ids(ids)
    torch.testing.assert_close(merged["blocks.0.attn.scores"], full["blocks.0.attn.scores"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(merged["blocks.1.attn.pattern"], full["blocks.1.attn.pattern"], atol=1e-6, rtol=1e-5)


# -- analyses --------------------------------------------------------------------------------------


def test_logit_lens_ends_at_the_logits(client, model):
    tr = model.trace(TEXT)
    L = model.config.n_layer
    torch.testing.assert_close(lens_logits(model, tr, L), tr["logits"], atol=0, rtol=0)
    # the embeddings' lens is the final norm and unembedding of the embedding alone (Gemma: scaled)
    x = tr["blocks.0.resid_pre"]
    ref = model.net.unembed(model.net.ln_final(x[None]))[0]
    torch.testing.assert_close(lens_logits(model, tr, 0), ref, atol=1e-5, rtol=1e-5)
    d = post(client, "/api/analysis/lens", text=TEXT, positions=[-1], top=3)
    assert len(d["layers"]) == L + 1 and d["layers"][0]["label"] == "embeddings"
    last = d["layers"][-1]["positions"][0]
    assert last["target_rank"] == 1
    assert [c["id"] for c in last["top"]] == tr["logits"][-1].topk(3).indices.tolist()
    lens = logit_lens(model, tr, top=3, positions=[-1])
    assert lens.target_ids == [int(tr["logits"][-1].argmax())]


def test_ablation_of_heads_and_key_value_groups(client, model):
    ids = model.encode(TEXT)
    d = post(client, "/api/analysis/ablate", ids=ids, heads=[[1, 0]], top=5)
    assert d["loss_change"] != 0 and d["kl"] > 0
    res = ablate(model, ids, [(1, 0)])
    assert d["loss_after"] == pytest.approx(res.ablated_loss, rel=1e-6)
    # every query head of key/value group g off = that group's values set to zero
    R = group(model)
    for g in range(model.config.n_kv_heads):
        heads = [(0, h) for h in range(g * R, (g + 1) * R)]
        by_heads = model.trace_ids(ids, patches=ablation_patches(heads))

        def zero_values(v, g=g):  # (B, G, S, Dh)
            v = v.clone()
            v[:, g] = 0.0
            return v

        by_values = model.trace_ids(ids, patches={"blocks.0.attn.v": zero_values})
        torch.testing.assert_close(by_heads["logits"], by_values["logits"], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(by_heads["logits"], model.trace_ids(ids)["logits"])
    # the whole layer off: attention adds nothing (these models have no output bias)
    off = post(client, "/api/analysis/ablate", ids=ids, layers=[0])
    assert off["heads"] == [[0, h] for h in range(model.config.n_head)]
    tr = model.trace_ids(ids, patches=ablation_patches([(0, h) for h in range(model.config.n_head)]))
    assert float(tr["blocks.0.attn_out"].abs().max()) == 0.0
    torch.testing.assert_close(tr["blocks.0.resid_mid"], tr["blocks.0.resid_pre"])
    mean = post(client, "/api/analysis/ablate", ids=ids, heads=[[0, 1]], mode="mean")
    assert mean["mode"] == "mean" and math.isfinite(mean["loss_after"])
    assert head_means(model).shape == (model.config.n_layer, model.config.n_head, model.config.head_dim)


def test_importance_prune_and_head_roles(client, model):
    ids = model.encode(TEXT)
    L, H = model.config.n_layer, model.config.n_head
    imp = post(client, "/api/analysis/importance", ids=ids)
    assert imp["n_head"] == H and np.array(imp["loss_change"]).shape == (L, H)
    assert imp["n_kv_heads"] == model.config.n_kv_heads < H
    ref = head_importance(model, ids)
    np.testing.assert_allclose(imp["loss_change"], ref.loss_change.numpy(), rtol=1e-5, atol=1e-7)
    pr = post(client, "/api/analysis/prune", ids=ids, max_heads=2, recompute=True)
    curve = prune_heads(model, ids, max_heads=2)
    assert [s["head"] for s in pr["steps"]] == [list(h) for h in curve.heads]
    assert pr["steps"][0]["loss"] == pytest.approx(min(ref.loss_change.flatten().tolist()) + ref.clean_loss, rel=1e-5)
    heads = post(client, "/api/analysis/heads", text=TEXT, reference=True)
    assert np.array(heads["text"]["scores"]["previous_token"]).shape == (L, H)
    assert len(heads["reference_role_of"]) == L and heads["n_kv_heads"] == model.config.n_kv_heads
    # the induction probe starts as the model's documents do: with BOS where the tokenizer adds one
    probe = reference_traces(model, texts=[])[0]
    start = model.tokenizer.bos_id if model.tokenizer.bos_id is not None else model.tokenizer.eos_id()
    assert probe.token_ids[0] == start


def test_embedding_explorer(client, model):
    a, b, c = (token_id(model, w) for w in WORDS)  # one token each, even where the tokenizer adds BOS
    assert [model.tokenizer.token_text(i) for i in (a, b, c)] == list(WORDS)
    nb = post(client, "/api/analysis/neighbours", token=WORDS[0], n=4)
    assert nb["token"]["id"] == a
    assert [n["id"] for n in nb["neighbours"]] == [n.id for n in nearest_tokens(model, a, 4)]
    W = model.weight("embed.W_E").float()
    sims = torch.nn.functional.cosine_similarity(W[a][None], W, dim=-1)
    sims[a] = -2
    assert nb["neighbours"][0]["id"] == int(sims.argmax())
    an = post(client, "/api/analysis/analogy", positive=[WORDS[0], WORDS[2]], negative=[WORDS[1]], n=3)
    assert [n["id"] for n in an["neighbours"]] == [n.id for n in analogy(model, [a, c], [b], 3).neighbours]
    pj = post(client, "/api/analysis/project", tokens=list(WORDS))
    assert [p["id"] for p in pj["points"]] == [a, b, c]


# -- the notebook snapshot -------------------------------------------------------------------------


def test_snapshot_orders_name_only_the_familys_activations():
    for family, (first, order) in ACTIVATION_ORDER.items():
        t = names_for(family)
        assert set(first) <= set(t.global_activations), family
        assert set(order) <= set(t.block_activations), family
    assert set(ACTIVATION_ORDER) == set(NAME_TABLES)  # every family, and "generic"


def decoded(stored: dict) -> np.ndarray:
    """A tensor the snapshot stores, in float16 or float32 as its dtype says."""
    dtype = {"float16": "<f2", "float32": "<f4"}[stored["dtype"]]
    values = np.frombuffer(base64.b64decode(stored["data"]), dtype).astype(np.float32)
    if stored.get("triangle"):  # an attention pattern's lower triangle, zeros above
        return triangle_rows(values, stored["shape"])
    return values.reshape(stored["shape"])


def test_snapshot_builds_and_round_trips(model, tmp_path):
    tr = model.trace(TEXT)
    d, info = snapshot_data(model, tr)
    assert not info.omitted
    assert d["models"]["models"][0]["config"]["family"] == model.config.family
    mlp = "blocks.0.mlp.router_probs" if moe(model) else "blocks.0.mlp.gate"
    for n in ("rope.angles", "ln_final.rms", "blocks.1.attn.rot_k", mlp, "blocks.1.attn.pattern"):
        np.testing.assert_allclose(decoded(d["tensors"][n]), tr[n].numpy(), rtol=1e-3, atol=1e-3, err_msg=n)
    assert d["tensors"]["blocks.1.attn.rot_k"]["dims"] == ["G", "S", "Dh"]
    assert "blocks.0.ln1.w" in d["weights"] and "blocks.0.ln1.b" not in d["weights"]  # RMSNorm: no shift
    assert d["weights"]["blocks.0.attn.W_K"]["shape"][0] == model.config.n_kv_heads
    L, H = model.config.n_layer, model.config.n_head
    assert len(d["analysis"]["ablations"]) == L * H
    assert len(d["analysis"]["lens"]["out"]["layers"]) == L + 1
    static = tmp_path / "web"
    (static / "assets").mkdir(parents=True)
    (static / "assets" / "app.js").write_text("console.log(1)")
    (static / "index.html").write_text('<!doctype html><html><head><title>x</title><script type="module" '
                                       'src="./assets/app.js"></script></head><body><div id="app"></div></body></html>')
    page = page_html(d, static)
    m = re.search(r'<script type="application/json" id="te-snapshot">(.*?)</script>', page, re.S)
    assert m and json.loads(m.group(1)) == json.loads(json.dumps(d))


# -- the command line ------------------------------------------------------------------------------


@pytest.fixture
def run(decoder_family_dir: Path, capsys: pytest.CaptureFixture):
    def go(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--model", str(decoder_family_dir), "--offline"])
        out, err = capsys.readouterr()
        return code, out, err

    return go


def test_cli_commands_take_a_llama_model(run, model, tmp_path):
    ids = model.encode(TEXT)
    code, out, err = run("explain", TEXT, "--json")
    assert code == 0 and json.loads(out)["token_ids"] == ids
    L = model.config.n_layer
    assert f"{model.config.model_type}, {L} layers, 4 heads ({model.config.n_kv_heads} key/value)" in err
    code, out, _ = run("generate", TEXT, "-n", "3", "--temperature", "0")
    greedy = [t.id for t in model.generate_ids(ids, 3, SamplingParams(temperature=0))]
    assert code == 0 and out == TEXT + model.tokenizer.decode(greedy) + "\n"
    code, out, _ = run("lens", TEXT, "--json", "--top", "2")
    assert code == 0 and json.loads(out)["layers"][-1]["positions"][0]["target_rank"] == 1
    code, out, _ = run("ablate", TEXT, "--layer", "1", "--head", "3", "--json")
    assert code == 0 and json.loads(out)["heads"] == [[1, 3]]
    code, out, _ = run("importance", TEXT, "--json")
    assert code == 0 and np.array(json.loads(out)["loss_change"]).shape == (L, model.config.n_head)
    code, out, _ = run("prune", TEXT, "--max-heads", "2", "--json")
    assert code == 0 and len(json.loads(out)["steps"]) == 2
    code, out, _ = run("heads", TEXT, "--no-reference")
    assert code == 0 and "entropy" in out
    code, out, _ = run("neighbours", WORDS[0].strip(), "--k", "3", "--json")
    assert code == 0 and json.loads(out)["token"]["token"] == WORDS[0]
    code, out, _ = run("analogy", *(w.strip() for w in WORDS), "--k", "2")
    assert code == 0 and f"{WORDS[0]!r} - {WORDS[1]!r} + {WORDS[2]!r}" in out
    npz = tmp_path / "t.npz"
    code, _, _ = run("export", TEXT, "--out", str(npz))
    assert code == 0
    back = load_npz(npz)
    assert back.config == model.config and back.token_ids == ids
    torch.testing.assert_close(back["blocks.1.attn.rot_k"], model.trace(TEXT)["blocks.1.attn.rot_k"])
    js = tmp_path / "t.json"
    code, _, _ = run("export", TEXT, "--out", str(js), "--names", "blocks.*.attn.rot_k,rope.angles")
    assert code == 0 and json.loads(js.read_text())["tensors"]["rope.angles"]["dims"] == ["T", "R"]


def test_models_lists_each_builtins_architecture(llama_family_dir, tiny_gpt2_dir, monkeypatch, capsys):
    """Built-ins need not be GPT-2: `models` says what each one is, from its config."""
    from transformer_explainer.loading import resolve

    monkeypatch.setattr(resolve, "builtin_models", lambda: {"a-gpt2": tiny_gpt2_dir, "a-llama": llama_family_dir})
    assert cli.main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    arch = json.loads((llama_family_dir / "config.json").read_text())["model_type"]
    assert rows["a-llama"]["family"] == "llama" and rows["a-llama"]["architecture"] == arch
    assert rows["a-gpt2"]["family"] == "gpt2"
    assert cli.main(["models"]) == 0
    table = capsys.readouterr().out
    line = next(x for x in table.splitlines() if x.startswith("a-llama"))
    assert f"{arch}: 2 layers, 4 heads (" in line and "key/value" in line


def test_a_llama_builtin_is_found_loaded_and_served(llama_family_dir, tiny_gpt2_dir, monkeypatch):
    """A built-in folder in Llama format (as explainer-llama will be) goes through the same discovery,
    loading and serving as the GPT-2 one."""
    from transformer_explainer.loading import resolve
    from transformer_explainer.server import registry as reg_mod

    found = {"a-gpt2": tiny_gpt2_dir, "a-llama": llama_family_dir}
    monkeypatch.setattr(resolve, "builtin_models", lambda: found)
    monkeypatch.setattr(reg_mod, "builtin_models", lambda: found)
    m = load_model("a-llama", allow_download=False)
    assert m.source == "builtin" and m.config.family == "llama"
    reg = reg_mod.ModelRegistry("a-gpt2")
    reg.discover()
    assert {"a-gpt2", "a-llama"} <= set(reg.names())
    with TestClient(create_app(reg, ServerSettings())) as c:
        r = c.post("/api/trace", json={"model": "a-llama", "text": TEXT})
        assert r.status_code == 200, r.text
        assert r.json()["config"]["family"] == "llama" and r.json()["token_ids"] == m.encode(TEXT)
        info = c.get("/api/models/a-llama").json()
        assert info["source"] == "builtin" and info["config"]["capabilities"]["norm"] == "rms"
        unused = c.get("/api/models/a-gpt2").json()  # a GET loads nothing: the default is loaded by its first use
        assert not unused["loaded"] and unused["config"] is None
        assert c.post("/api/trace", json={"model": "a-gpt2", "text": TEXT}).status_code == 200
        assert c.get("/api/models/a-gpt2").json()["config"]["family"] == "gpt2"


def test_induction_probe_leaves_out_special_tokens():
    """A small vocabulary's special token (explainer-small's and explainer-llama's end-of-text is
    their last id, 8191) is never drawn into the probe, where it would end the document mid-probe."""
    from transformer_explainer.analysis.reference import repeated_random_tokens

    drawn = [repeated_random_tokens(60, 24, seed=s) for s in range(10)]
    assert any(59 in ids for ids in drawn)  # without the exclusion the last id does come up
    for s in range(10):
        ids = repeated_random_tokens(60, 24, seed=s, bos=59, exclude={59})
        assert ids[0] == 59 and 59 not in ids[1:] and ids[1:25] == ids[25:]


def test_llama_with_every_bias(tmp_path):
    """A Llama with attention_bias and mlp_bias: its output and MLP biases are weights by name too,
    equal to transformers' parameters, and the trace still matches transformers."""
    from transformers import AutoModelForCausalLM

    from tests.conftest import make_hf_llama_family

    folder = make_hf_llama_family(tmp_path / "biased", "llama", attention_bias=True, mlp_bias=True)
    m = load_model(str(folder), allow_download=False)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    layer = hf.model.layers[1]
    expected = {"attn.b_O": layer.self_attn.o_proj.bias, "mlp.b_gate": layer.mlp.gate_proj.bias,
                "mlp.b_in": layer.mlp.up_proj.bias, "mlp.b_out": layer.mlp.down_proj.bias,
                "attn.b_K": layer.self_attn.k_proj.bias.view(m.config.n_kv_heads, -1)}
    assert {f"blocks.1.{s}" for s in expected} <= set(m.weight_names())
    with TestClient(create_app({"tiny": m}, ServerSettings())) as c:
        d = post(c, "/api/weights", tensors=[{"name": f"blocks.1.{s}", "dtype": "float32"} for s in expected])
    for (s, ref), t in zip(expected.items(), d["tensors"], strict=True):
        np.testing.assert_allclose(arr(t), ref.detach().numpy(), err_msg=s)
    ids = m.encode(TEXT)
    with torch.no_grad():
        ref_logits = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(m.trace_ids(ids)["logits"], ref_logits, atol=1e-4, rtol=0)
