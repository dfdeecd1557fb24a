"""Steering's refusals carry a code and the params its sentence needs (errors.ERROR_CODES), so the web app says them
in the learner's language (`error.<code>` in web/src/locales/); the server's sentence gives no CLI advice (a page
cannot pass --sae), while the CLI keeps its own ("load one with --sae")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_explainer import cli  # noqa: E402
from transformer_explainer.errors import ERROR_CODES  # noqa: E402
from transformer_explainer.limits import MAX_CONTRAST_CHARS, MAX_CONTRAST_PROMPTS  # noqa: E402
from transformer_explainer.server import ServerSettings, create_app  # noqa: E402
from transformer_explainer.steering import contrast_direction  # noqa: E402

from .test_error_codes import answer  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog"
A = ["I love this, it is wonderful", "What a happy day"]
B = ["I hate this, it is awful", "What a sad day"]
LOCALES = Path(__file__).resolve().parents[2] / "web" / "src" / "locales"


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings())) as c:
        yield c


def body(**over) -> dict:
    return {"text": TEXT, "contrast": {"a": A, "b": B}, "layer": 1, "strength": 4.0, "tokens": 4, "sweep": False,
            **over}


CASES = {
    "empty set A": (body(contrast={"a": [], "b": B}), "steer_set_empty", {"set": "A"}),
    "empty set B": (body(contrast={"a": A, "b": []}), "steer_set_empty", {"set": "B"}),
    "identical sets": (body(contrast={"a": ["same"], "b": ["same"]}), "steer_sets_alike", {"layer": 1}),
    "both directions": (body(feature={"layer": 1, "id": 3}), "steer_one_direction", {}),
    "no direction": ({"text": TEXT, "strength": 1.0}, "steer_one_direction", {}),
    "contrast without a layer": (body(layer=None), "steer_layer_missing", {}),
    "a feature of a model without autoencoders": ({"text": TEXT, "feature": {"layer": 1, "id": 3}, "strength": 1.0},
                                                  "steer_no_saes", {"model": "MODEL"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_steering_refusals_carry_their_codes(client, tiny_model, case: str) -> None:
    payload, code, params = CASES[case]
    params = {k: tiny_model.name if v == "MODEL" else v for k, v in params.items()}  # the model's own name
    r = client.post("/api/steer", json=payload)
    assert answer(r, r.status_code, code) == params
    assert 400 <= r.status_code < 500
    assert "--sae" not in r.json()["detail"]  # no CLI advice on a page


def test_the_engines_own_checks_carry_codes(tiny_model) -> None:
    """What the schema stops first at the server (too many prompts, an over-long prompt) still has its code where
    the engine is called directly (Python, CLI), with the set and the prompt it is about."""
    from transformer_explainer.errors import InputError

    with pytest.raises(InputError) as e:
        contrast_direction(tiny_model, A, ["x"] * (MAX_CONTRAST_PROMPTS + 1), 1)
    assert (e.value.code, e.value.params) == ("steer_set_too_many",
                                              {"set": "B", "count": MAX_CONTRAST_PROMPTS + 1,
                                               "limit": MAX_CONTRAST_PROMPTS})
    with pytest.raises(InputError) as e:
        contrast_direction(tiny_model, ["ok", "y" * (MAX_CONTRAST_CHARS + 1)], B, 1)
    assert (e.value.code, e.value.params) == ("steer_prompt_too_long",
                                              {"set": "A", "prompt": 2, "chars": MAX_CONTRAST_CHARS + 1,
                                               "limit": MAX_CONTRAST_CHARS})
    with pytest.raises(InputError) as e:  # a prompt's own refusal keeps its code, said of its set and number
        contrast_direction(tiny_model, A, ["fine", ""], 1)
    assert e.value.code == "text_empty" and "contrast set B, prompt 2" in str(e.value)


def test_the_cli_keeps_its_advice(tiny_gpt2_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = cli.main(["steer", TEXT, "--feature", "1:3", "--strength", "1", "--model", str(tiny_gpt2_dir),
                     "--offline"])
    err = capsys.readouterr().err
    assert code == 2 and "load one with --sae" in err and "no autoencoder" in err, err


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_catalogue_words_the_steering_codes(lang: str) -> None:
    catalogue = json.loads((LOCALES / f"{lang}.json").read_text(encoding="utf-8"))
    steering = [c for c in ERROR_CODES if c.startswith("steer_")]
    assert len(steering) == 9
    for c in steering:
        sentence = catalogue[f"error.{c}"]
        for p in ERROR_CODES[c].params:
            assert "{" + p + "}" in sentence, (c, p)
        assert "--sae" not in sentence and "--" not in sentence
