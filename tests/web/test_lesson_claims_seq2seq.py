"""Every sentence of the encoder-decoder lesson that depends on the data holds for the numbers beside it, on the
inputs of web/tests/lessons/seq2seq.test.ts (22 sources across the four shipped tasks: their examples, one-token
and repeated sources, leading zeros the models were never trained on). The checks are TypeScript (vitest): they
run the lesson's own code against a real server, here, with the shipped seq2seq checkpoints, and test each claim
against the page's API asked again (web/tests/lessons/claims.seq2seq.ts)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .conftest import LiveServer
from .test_lesson_claims import passed, vitest


@pytest.fixture(scope="module")
def server(tiny_model) -> Iterator[LiveServer]:
    from transformer_explainer.server import create_app

    # the seq2seq routes load the shipped checkpoints themselves; the app needs one decoder model to start
    with LiveServer(create_app({"tiny": tiny_model})) as srv:
        yield srv


def test_every_claim_holds_on_every_task(server) -> None:
    r = vitest("tests/lessons/seq2seq.test.ts", env={"TE_SERVER": server.url})
    assert r.returncode == 0, r.stdout[-12000:] + r.stderr[-4000:]
    assert passed(r) == 1, r.stdout[-4000:]
