"""Head roles and attention statistics on hybrid decoders that run through transformers' own modules (issue 34):
Qwen3.5 (Gated DeltaNet in layers 0 and 2) and LFM2 (short convolutions in layers 0 and 2) attend in layers 1 and 3
only. The layers that attend are scored from their patterns, checked against a plain loop of the test's own over
the recorded pattern; the others have no pattern and no heads to judge: NaN rows, None in JSON, never a refusal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from fastapi.testclient import TestClient  # noqa: E402

from transformer_explainer import load_model  # noqa: E402
from transformer_explainer.analysis import ROLES, attention_stats, head_roles, reference_head_roles  # noqa: E402
from transformer_explainer.generic import GenericModel  # noqa: E402
from transformer_explainer.server import create_app  # noqa: E402
from transformer_explainer.trace import Trace  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402

TEXT = "The cat sat on the mat, and then the cat sat on the rug."
HYBRIDS = ["qwen3_5_text", "lfm2"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hybrids")
    return {t: write_checkpoint(t, root / t, tokenizer=True) for t in HYBRIDS}


def _model(folders: dict[str, Path], model_type: str) -> GenericModel:
    model = load_model(str(folders[model_type]), allow_download=False)
    assert isinstance(model, GenericModel)
    c = model.config
    assert list(c.attention_layers) == [1, 3] and c.n_layer == 4  # two layers that mix tokens another way
    return model


def _loop_roles(trace: Trace, layer: int) -> dict[str, list[float]]:
    """One attention layer's role scores, the slow obvious way: per query, the pattern's mass on the role's keys,
    averaged over the queries that have such keys (ids as rarity: the rarest is the highest id)."""
    ids = trace.token_ids
    p = trace[f"blocks.{layer}.attn.pattern"].double()  # (H, T, T)
    out = {}
    for role in ROLES:
        total, n = torch.zeros(p.shape[0], dtype=torch.float64), 0
        for q in range(len(ids)):
            if role == "previous_token":
                keys = [q - 1] if q >= 1 else []
            elif role == "first_token":
                keys = [0] if q >= 1 else []
            elif role == "duplicate_token":
                keys = [s for s in range(q) if ids[s] == ids[q]]
            elif role == "induction":
                keys = [s for s in range(1, q) if ids[s - 1] == ids[q]]
            else:
                cands = list(range(1, q))
                keys = [s for s in cands if ids[s] == max(ids[c] for c in cands)] if len(cands) >= 2 else []
            if keys:
                n += 1
                total += p[:, q, keys].sum(-1)
        out[role] = (total / n).tolist()
    return out


def _loop_stats(trace: Trace, layer: int) -> tuple[list[float], list[float], list[float]]:
    """Entropy, entropy / log(visible keys) and mean query - key distance, averaged over queries 1.. ."""
    p = trace[f"blocks.{layer}.attn.pattern"].double()
    H, T = p.shape[0], p.shape[1]
    ent, norm, dist = [0.0] * H, [0.0] * H, [0.0] * H
    for h in range(H):
        for q in range(1, T):
            row = p[h, q, : q + 1].tolist()
            e = -sum(x * math.log(x) for x in row if x > 0)
            ent[h] += e / (T - 1)
            norm[h] += e / math.log(q + 1) / (T - 1)
            dist[h] += sum(x * (q - k) for k, x in enumerate(row)) / (T - 1)
    return ent, norm, dist


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_the_attention_layers_are_scored_and_the_others_are_nan(folders: dict[str, Path], model_type: str) -> None:
    model = _model(folders, model_type)
    trace = model.trace(TEXT)
    c = model.config
    roles, stats = head_roles(trace), attention_stats(trace)
    for layer in range(c.n_layer):
        if layer in c.attention_layers:
            expected = _loop_roles(trace, layer)
            for role in ROLES:
                assert roles.scores[role][layer].tolist() == pytest.approx(expected[role], abs=1e-6), (layer, role)
            ent, norm, dist = _loop_stats(trace, layer)
            assert stats.entropy[layer].tolist() == pytest.approx(ent, rel=1e-5)
            assert stats.normalized_entropy[layer].tolist() == pytest.approx(norm, rel=1e-5)
            assert stats.mean_distance[layer].tolist() == pytest.approx(dist, rel=1e-5)
        else:
            for role in ROLES:
                assert roles.scores[role][layer].isnan().all(), (layer, role)
            for m in (stats.entropy, stats.normalized_entropy, stats.mean_distance):
                assert m[layer].isnan().all()
            assert [roles.role_of(layer, h) for h in range(c.n_head)] == [None] * c.n_head
    assert stats.queries == trace.n_tokens - 1
    # JSON: the rows of the layers without attention are None, the others numbers; strict JSON (no NaN) holds them
    d, s = roles.to_dict(), stats.to_dict()
    json.dumps([d, s], allow_nan=False)
    for rows in [*d["scores"].values(), s["entropy"], s["normalized_entropy"], s["mean_distance"]]:
        assert [i for i, row in enumerate(rows) if row == [None] * c.n_head] == [0, 2]
        assert all(v is not None for i in (1, 3) for v in rows[i])
    # the reference set scores the same layers, over its texts and the repeated-tokens probe
    ref = reference_head_roles(model, ["Alice met Bob. Then Alice thanked Bob."], probe_length=8)
    assert all(ref.counts[r] > 0 for r in ROLES)
    for role in ROLES:
        s_ = ref.scores[role]
        assert s_[[0, 2]].isnan().all() and not s_[[1, 3]].isnan().any(), role
        assert ((s_[[1, 3]] >= 0) & (s_[[1, 3]] <= 1 + 1e-6)).all(), role


def test_the_heads_route_answers_for_a_hybrid(folders: dict[str, Path]) -> None:
    """/api/analysis/heads refused such a model in one sentence; it now answers, with None rows where a layer has no
    attention, the text's scores those of head_roles and the reference set's those of reference_head_roles."""
    model = _model(folders, "qwen3_5_text")
    c = model.config
    none_row = [None] * c.n_head
    with TestClient(create_app({"m": model})) as client:
        r = client.post("/api/analysis/heads", json={"model": "m", "text": TEXT})
    assert r.status_code == 200, r.text
    body = r.json()
    trace = model.trace(TEXT)
    expected = head_roles(trace).to_dict()
    ref = reference_head_roles(model).to_dict()
    for role in ROLES:
        for got, want in ((body["text"]["scores"][role], expected["scores"][role]),
                          (body["reference"]["scores"][role], ref["scores"][role])):
            assert got[0] == got[2] == none_row, role
            for layer in (1, 3):
                assert got[layer] == pytest.approx(want[layer], abs=1e-6), role
    assert body["reference"]["counts"] == ref["counts"]
    assert body["text_role_of"][0] == body["reference_role_of"][2] == none_row
    stats = attention_stats(trace)
    for key in ("entropy", "normalized_entropy", "mean_distance"):
        assert body["stats"][key][0] == body["stats"][key][2] == none_row
        assert body["stats"][key][3] == pytest.approx(getattr(stats, key)[3].tolist(), rel=1e-5)
