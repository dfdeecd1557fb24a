"""The features answer as POST /api/features sends it (features/schemas.features_answer, written by pydantic's
serialiser without building the pydantic objects, JSON or the binary form the app asks for): the same answer,
number for number, as `features_out` (the CLI's --json and the snapshot), valid as `FeaturesOut`, and the binary form
decodes (encoding.unpack_binary) to the JSON answer itself."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file

from transformer_explainer import load_model
from transformer_explainer.encoding import unpack_binary
from transformer_explainer.features.encode import text_features
from transformer_explainer.features.schemas import FeaturesOut, features_answer, features_out
from transformer_explainer.media import BINARY_MEDIA_TYPE
from transformer_explainer.server import create_app

from .test_features_encode import HOOK, TEXT, write_sae

# long enough that positions differ in how many features are active (k 8 of 256 features, ReLU'd)
LONG = " ".join([TEXT] * 4)


@pytest.fixture(scope="module")
def shipping(tiny_gpt2_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("answer") / "tiny-answer"
    shutil.copytree(tiny_gpt2_dir, folder)
    sae = write_sae(folder / "saes" / HOOK, HOOK, seed=3)
    m = load_model(str(folder), allow_download=False)
    m.source = "builtin"
    # the encoder's bias lowered so that about 6 pre-activations of 256 are positive on average: some positions have
    # fewer than k active, some k (the answer says each position's count)
    w = load_file(str(sae / "sae_weights.safetensors"))
    x = m.trace(LONG)["blocks.1.resid_post"].float()
    pre = (x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]
    w["b_enc"] = w["b_enc"] - pre.flatten().quantile(1 - 6 / 256)
    save_file(w, str(sae / "sae_weights.safetensors"))
    return m


@pytest.fixture(scope="module")
def client(shipping):
    with TestClient(create_app({"tiny": shipping})) as c:
        yield c


@pytest.mark.parametrize("top", [1, 3, 8])
def test_the_plain_answer_is_the_validated_one(shipping, top: int) -> None:
    fs = text_features(shipping, LONG, HOOK)
    plain = features_answer("tiny", fs, top)
    assert FeaturesOut.model_validate(plain).model_dump() == features_out("tiny", fs, top).model_dump() == plain
    for p, t in zip(plain["positions"], range(fs.n_tokens), strict=True):
        assert [(f["id"], f["activation"]) for f in p["features"]] == \
            [(f.id, f.activation) for f in fs.at(t, top)]
        assert p["active"] == int(fs.counts[t]) and p["norm"] == float(fs.x[t].norm())


def test_api_json_and_binary_answers_are_the_python_answer(client, shipping) -> None:
    body = {"model": "tiny", "text": LONG, "hook": HOOK, "top": 5}
    js = client.post("/api/features", json=body)
    binary = client.post("/api/features", json=body, headers={"accept": f"{BINARY_MEDIA_TYPE}, application/json"})
    assert js.status_code == 200 and binary.status_code == 200, (js.text, binary.text)
    assert js.headers["content-type"].startswith("application/json")
    assert binary.headers["content-type"].startswith(BINARY_MEDIA_TYPE)
    assert len(binary.content) % 8 == 0  # the blobs (none here) would start at a multiple of 8
    assert {part.split(";")[0].strip() for part in binary.headers["server-timing"].split(",")} == \
        {"model", "encode", "serialise"}
    want = features_out("tiny", text_features(shipping, shipping.trace(LONG), HOOK), 5).model_dump(mode="json")
    got_json, got_binary = js.json(), unpack_binary(binary.content)
    assert got_json == got_binary == want
    assert FeaturesOut.model_validate(got_binary).model_dump(mode="json") == want
    # the positions really differ in how many features are active (the answer lists up to `top` of them)
    assert len({p["active"] for p in want["positions"]}) > 1
    assert any(p["active"] > 5 for p in want["positions"]) and all(len(p["features"]) <= 5 for p in want["positions"])
    assert torch.tensor([p["relative_error"] for p in want["positions"]]).isfinite().all()
