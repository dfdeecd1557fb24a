"""POST /api/steer: the engine's answer through the server, an analysis in its client's share, and bad input as one
sentence each (never a 500)."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from transformer_explainer.limits import MAX_CONTRAST_CHARS, MAX_STEER_TOKENS  # noqa: E402
from transformer_explainer.sampling import SamplingParams  # noqa: E402
from transformer_explainer.server import AccessSettings, ServerSettings, create_app  # noqa: E402
from transformer_explainer.server.security import FairShare  # noqa: E402
from transformer_explainer.steering import contrast_direction, steer  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog"
A = ["I love this, it is wonderful", "What a happy day"]
B = ["I hate this, it is awful", "What a sad day"]


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings())) as c:
        yield c


def body(**over) -> dict:
    return {"text": TEXT, "contrast": {"a": A, "b": B}, "layer": 1, "strength": 4.0, "tokens": 8, **over}


def test_the_answer_is_the_engines(client, tiny_model) -> None:
    for sampling in ({"temperature": 0}, {"temperature": 0.9, "top_k": 40, "seed": 5}):
        r = client.post("/api/steer", json=body(sampling=sampling))
        assert r.status_code == 200, r.text
        got = r.json()
        params = SamplingParams(**sampling)
        s = steer(tiny_model, TEXT, contrast_direction(tiny_model, A, B, 1), 4.0, tokens=8, params=params)
        assert [t["id"] for t in got["plain"]] == [t.id for t in s.plain]
        assert [t["id"] for t in got["steered"]] == [t.id for t in s.steered]
        assert [p["strength"] for p in got["sweep"]] == [p.strength for p in s.sweep]
        assert got["breakdown"] == s.breakdown and got["steered_broken"] == s.steered_broken
        assert [t["id"] for t in got["promoted"]] == [t.id for t in s.lens_promoted]
        assert got["direction"]["kind"] == "contrast" and got["direction"]["layer"] == 1
        assert got["sampling"]["seed"] == sampling.get("seed")
    zero = client.post("/api/steer", json=body(strength=0.0, sweep=False)).json()
    assert [t["id"] for t in zero["steered"]] == [t["id"] for t in zero["plain"]] and zero["changed_at"] is None
    assert zero["sweep"] == [] and zero["breakdown"] is None


BAD = {
    "layer out of range": (body(layer=99), "layer 99 is outside"),
    "empty contrast set": (body(contrast={"a": [], "b": B}), "set A is empty"),
    "both directions": (body(feature={"layer": 0, "id": 3}), "exactly one direction"),
    "no direction": ({"text": TEXT, "strength": 1.0}, "exactly one direction"),
    "contrast without a layer": (body(layer=None), "needs the layer"),
    "no autoencoder for the feature": ({"text": TEXT, "feature": {"layer": 0, "id": 3}, "strength": 1.0},
                                       "no autoencoder"),
    "identical sets": (body(contrast={"a": ["same"], "b": ["same"]}), "zero"),
    "over-long text": (body(text="word " * 400), "tokens long"),
    "too many tokens": (body(tokens=MAX_STEER_TOKENS + 1), None),
    "no tokens": (body(tokens=0), None),
    "over-long contrast prompt": (body(contrast={"a": ["x" * (MAX_CONTRAST_CHARS + 1)], "b": B}), None),
    "too many contrast prompts": (body(contrast={"a": ["a"] * 17, "b": B}), None),
    "huge strength": (body(strength=1e300), None),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_sentence(client, case: str) -> None:
    payload, words = BAD[case]
    r = client.post("/api/steer", json=payload)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail and "Traceback" not in detail
    if words is not None:
        assert words in detail, detail


@pytest.mark.parametrize("strength", ["NaN", "Infinity", "-Infinity"])
def test_a_strength_that_is_not_finite_is_refused(client, strength: str) -> None:
    raw = json.dumps(body()).replace('"strength": 4.0', f'"strength": {strength}')
    r = client.post("/api/steer", content=raw, headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert "\n" not in r.json()["detail"]


def test_a_steering_takes_the_clients_share_of_analyses() -> None:
    class Held:
        def __init__(self) -> None:
            self.reached: list[str] = []
            self.release = asyncio.Event()

        async def __call__(self, scope, receive, send) -> None:
            if scope["method"] == "POST":
                self.reached.append(scope["path"])
                await self.release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    async def scenario() -> None:
        app = Held()
        share = FairShare(app, AccessSettings(client_calls=2, client_analyses=1))
        transport = httpx.ASGITransport(share, client=("10.0.0.1", 1))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000", timeout=10) as c:
            first = asyncio.create_task(c.post("/api/steer"))
            while not app.reached:
                await asyncio.sleep(0.01)
            r = await asyncio.wait_for(c.post("/api/steer"), 10)
            assert r.status_code == 429 and r.json()["code"] == "too_many_analyses"
            assert "steering" in r.json()["detail"]
            app.release.set()
            assert (await first).status_code == 200

    asyncio.run(scenario())
