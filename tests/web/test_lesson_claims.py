"""Every sentence of every lesson step that depends on the data holds for the numbers beside it, on the 20 texts
of web/tests/lessons/texts.ts, on the models each lesson opens for: the two built-ins, a random-weight GPT-2
checkpoint with another context length (64), random-weight Qwen3 and Gemma 3 checkpoints (4 layers; Gemma
with local layers whose window of 5 is shorter than most texts), the built-in mixture of experts explainer-moe,
random-weight Qwen3-MoE and OLMoE checkpoints (tests/conftest.py MOE_FIXTURES: 6 experts, top-3 renormalised,
block 2 a dense MLP; 16 experts, top-4 not renormalised).
The checks are TypeScript (vitest, web/tests/lessons/): they run the lessons' own code against a real server, here,
and test each claim against numbers fetched independently."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import LiveServer

WEB = Path(__file__).resolve().parents[2] / "web"
VITEST = WEB / "node_modules" / ".bin" / "vitest"

# the lessons of each model's page (the encoder-decoder lesson has its own test beside it, on its own tasks)
LESSONS = {"explainer-small": "gpt2,experiments,why", "explainer-llama": "modern,experiments,why",
           "random-gpt2-64": "gpt2,experiments,why", "random-qwen3": "stable,experiments,why",
           "random-gemma3": "stable,experiments,why", "explainer-moe": "moe,experiments,why",
           "random-qwen3-moe": "moe,experiments,why", "random-olmoe": "moe,experiments"}


def vitest(*args: str, env: dict[str, str] | None = None, timeout: int = 1200) -> subprocess.CompletedProcess:
    if not VITEST.is_file():
        message = "web/node_modules is not installed (cd web && npm ci)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return subprocess.run([str(VITEST), "run", *args], cwd=WEB, env={**os.environ, "NO_COLOR": "1", **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def passed(r: subprocess.CompletedProcess) -> int:
    """How many vitest tests passed (0 when they were skipped)."""
    m = re.search(r"Tests\s+(\d+) passed", r.stdout)
    return int(m.group(1)) if m else 0


@pytest.fixture(scope="module", params=list(LESSONS))
def model_server(request, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LiveServer]]:
    from tests.conftest import make_hf_gpt2, make_hf_llama_family
    from transformer_explainer import load_model
    from transformer_explainer.server import create_app

    name = request.param
    if name == "random-gpt2-64":
        folder = make_hf_gpt2(tmp_path_factory.mktemp("gpt2-64"), n_layer=3, n_head=4, n_embd=64, n_positions=64)
        model = load_model(str(folder), allow_download=False)
    elif name in ("random-qwen3", "random-gemma3", "random-qwen3-moe", "random-olmoe"):
        arch = {"random-qwen3": "qwen3", "random-gemma3": "gemma3_text", "random-qwen3-moe": "qwen3_moe",
                "random-olmoe": "olmoe"}[name]
        model = load_model(str(make_hf_llama_family(tmp_path_factory.mktemp(name), arch)), allow_download=False)
    else:
        model = load_model(name, allow_download=False)
    with LiveServer(create_app({name: model})) as srv:
        yield name, srv


def test_catalogues_and_number_format() -> None:
    r = vitest("tests/catalogue.test.ts", timeout=300)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert passed(r) >= 4, r.stdout[-4000:]


def test_every_claim_holds_on_twenty_texts(model_server) -> None:
    name, srv = model_server
    r = vitest("tests/lessons/lessons.test.ts", env={"TE_SERVER": srv.url, "TE_LESSONS": LESSONS[name]})
    assert r.returncode == 0, r.stdout[-12000:] + r.stderr[-4000:]
    assert passed(r) == len(LESSONS[name].split(",")), r.stdout[-4000:]
