"""The text fitting of benchmarks/web_latency.py against the real server on a tiny GPT-2 (a context of 128
tokens): a text fitted to the whole context, and every edit of its last word, stay within it (issue 40: the
fitting loop overshot the context and read the error answer as a trace, `--tokens 1024` crashed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from transformer_explainer.server import ServerSettings, create_app  # noqa: E402

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
    # benchmarks/ is not a package: the script imports its sibling `fixtures` as a top-level module
    sys.path.insert(0, str(_BENCH))
    try:
        spec = importlib.util.spec_from_file_location("web_latency", _BENCH / "web_latency.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(_BENCH))


wl = _load()


@pytest.fixture(scope="module")
def client(tiny_model):
    with TestClient(create_app({"tiny": tiny_model}, ServerSettings())) as c:
        yield c


def test_token_count_says_the_length_and_the_limit_over_the_context(client, tiny_model):
    text = wl.TEXTS[0]
    assert wl.token_count(client, text) == (len(tiny_model.tokenizer.encode(text)), None)
    long = " ".join(wl.TEXTS * 4)
    tokens, limit = wl.token_count(client, long)
    assert tokens == len(tiny_model.tokenizer.encode(long)) > 128
    assert limit == 128


@pytest.mark.parametrize("n", [32, 128])
def test_fitted_texts_and_their_edits_fit_the_context(client, tiny_model, n):
    context = tiny_model.context_length
    assert context == 128
    for start in wl.TEXTS:
        text = wl.fit_tokens(client, start, n)
        size = len(tiny_model.tokenizer.encode(text))
        beginning = text.rsplit(" ", 1)[0]
        edits = [len(tiny_model.tokenizer.encode(beginning + " " + w)) for w in wl.NOVEL]
        assert max(edits) <= context
        if n < context:
            assert size == n  # as asked where the edits leave room
        else:
            assert n - 3 <= size < n  # the longest edit would not fit a text of the whole context: a little shorter
