"""The app's API on a DeepSeek-V3 model that runs through transformers: the capabilities name each layer's mechanism
(latent attention) and its cache table (by hand from the checkpoint's shapes: latent, rotary key, heads), and the
latents the lens derives are answered by name and position, equal to the Python API's. A model without latent
attention has no table. The grouped-query comparison's heads follow one rule (`comparison_kv_heads`)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("transformers")
from fastapi.testclient import TestClient  # noqa: E402

from tests.helpers.hf_checkpoints import write_checkpoint  # noqa: E402
from transformer_explainer.bridge.latent_lens import comparison_kv_heads  # noqa: E402
from transformer_explainer.encoding import decode_array  # noqa: E402
from transformer_explainer.engine import load_model  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog"


def _client(model, tmp_path) -> TestClient:
    static = tmp_path / "static"
    static.mkdir(exist_ok=True)
    (static / "index.html").write_text("<!doctype html><title>app</title>")
    return TestClient(create_app({"g": model}, ServerSettings(static_dir=static)))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = write_checkpoint("deepseek_v3", tmp_path_factory.mktemp("deepseek_v3"), tokenizer=True)
    model = load_model(str(folder), allow_download=False, dtype="float32")
    with _client(model, tmp_path_factory.mktemp("app")) as c:
        yield model, c


def test_capabilities_give_the_latent_cache(served):
    _m, c = served
    caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
    assert caps["mechanisms"] == ["latent_attention"] * 4
    lat = caps["kv_latent"]
    # the checkpoint: 4 heads, a latent of 16, a rotary key of 8, keys of 16 + 8 and values of 16; float32
    assert (lat["kv_lora_rank"], lat["qk_rope_head_dim"], lat["qk_nope_head_dim"], lat["v_head_dim"]) == (16, 8, 16, 16)
    assert lat["layers"] == [0, 1, 2, 3] and lat["n_heads"] == 4 and lat["gqa_heads"] == 2 and lat["dtype"] == "float32"
    assert lat["mla_per_token"] == (16 + 8) * 4  # the latent and the shared rotary key
    assert lat["mha_per_token"] == 4 * (16 + 8 + 16) * 4  # every head's key and value
    assert lat["gqa_per_token"] == 2 * (16 + 8 + 16) * 4
    assert lat["tokens"] == [1024, 32768, 1048576]
    for kind in ("mla", "mha", "gqa"):
        assert lat[f"{kind}_bytes"] == [4 * lat[f"{kind}_per_token"] * n for n in lat["tokens"]], kind


def test_the_latent_is_answered_by_name_and_position(served):
    m, c = served
    tr = m.trace(TEXT)
    pos = tr.n_tokens - 1
    r = c.post("/api/tensors", json={"text": TEXT, "tensors": [
        {"name": f"blocks.2.attn.{s}", "position": pos, "dtype": "float32"}
        for s in ("kv_latent", "k_rope", "q_latent")]})
    assert r.status_code == 200, r.text
    for t, s in zip(r.json()["tensors"], ("kv_latent", "k_rope", "q_latent"), strict=True):
        got = decode_array(t["data"], t["shape"], t["dtype"])
        np.testing.assert_allclose(got, tr[f"blocks.2.attn.{s}"][pos].numpy(), atol=1e-6)


def test_a_model_without_latent_attention_has_no_table(tmp_path):
    folder = write_checkpoint("olmo3", tmp_path / "olmo3", tokenizer=True)  # runs through transformers too
    with _client(load_model(str(folder), allow_download=False), tmp_path) as c:
        caps = c.get("/api/models").json()["models"][0]["config"]["capabilities"]
    assert caps["kv_latent"] is None


@pytest.mark.parametrize(("heads", "kv"), [(1, 1), (2, 1), (4, 2), (6, 3), (12, 6), (16, 8), (128, 8), (40, 8),
                                           (24, 8), (20, 5)])
def test_the_grouped_query_comparison(heads: int, kv: int) -> None:
    assert comparison_kv_heads(heads) == kv and heads % kv == 0
