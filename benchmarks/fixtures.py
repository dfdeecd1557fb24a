"""The benchmarks' shared model: GPT-2 small's shape with random weights, saved in HF format by
transformers (the tests' own fixture builder), reused when the folder already holds it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gpt2_small_shape(folder: Path) -> Path:
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(ROOT))
    from tests.conftest import make_hf_gpt2

    print(f"creating a random GPT-2-small-shape model in {folder} ...", file=sys.stderr)
    return make_hf_gpt2(folder, n_layer=12, n_head=12, n_embd=768, n_positions=1024)
