"""The snapshot as the CLI and the Python API write it: one function for both (the CJK font included), what the
size budget keeps first on a long text and which `max_mb` would keep the rest, and values stored at the precision
the views show them with."""

from __future__ import annotations

import base64
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transformer_explainer.cli import main
from transformer_explainer.notebook import save_snapshot, snapshot_data
from transformer_explainer.web_bundle import package_static_dir

TEXT = "The cat sat on the mat, and then the cat slept."
FONT_URL = "data:font/woff2;base64,"


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="te-snapshot">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


def decoded(stored: dict) -> np.ndarray:
    dtype = {"float16": "<f2", "float32": "<f4"}[stored["dtype"]]
    return np.frombuffer(base64.b64decode(stored["data"]), dtype).astype(np.float32).reshape(stored["shape"])


@pytest.fixture(scope="module")
def bundle() -> Path:
    root = package_static_dir()
    if not (root / "index.html").is_file() or not (root / "fonts" / "noto-sans-sc-subset.woff2").is_file():
        pytest.skip("the web UI is not built (cd web && npm ci && npm run build)")
    return root


def test_the_cli_writes_the_page_the_python_api_writes(tiny_gpt2_dir, tiny_model, bundle, tmp_path, capsys):
    """`transformer-explainer snapshot` carries the CJK font (its 中文 needs no system font), as save_snapshot's
    page does: the same data but for the timings."""
    cli, api = tmp_path / "cli.html", tmp_path / "api.html"
    assert main(["snapshot", TEXT, "--out", str(cli), "--model", str(tiny_gpt2_dir), "--offline",
                 "--no-ablations"]) == 0
    assert "wrote" in capsys.readouterr().err
    save_snapshot(tiny_model, TEXT, api, ablations=False)
    a, b = embedded(cli.read_text()), embedded(api.read_text())
    font = (bundle / "fonts" / "noto-sans-sc-subset.woff2").read_bytes()
    assert a["cjk_font"] is not None and a["cjk_font"].startswith(FONT_URL)
    assert base64.b64decode(a["cjk_font"].removeprefix(FONT_URL)) == font
    for d in (a, b):
        d["trace"].pop("timings_ms", None)
    assert a == b


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """The shape of the built-in small model (6 layers, 8 heads, d_model 256), random weights."""
    from tests.conftest import make_hf_gpt2
    from transformer_explainer import load_model

    folder = make_hf_gpt2(tmp_path_factory.mktemp("small"), n_layer=6, n_head=8, n_embd=256, n_positions=256)
    return load_model(str(folder), allow_download=False)


def test_a_long_text_keeps_attention_patterns_first_and_says_what_keeps_the_rest(small_model, caplog):
    """256 tokens at the default budget: the attention pattern (a text's square: 6 x 8 x 256 x 256 values) does
    not fit whole; it is kept for the first blocks that fit, with what the attention view derives the scores from,
    rather than left out; the warning names the `max_mb` that keeps everything, which then does."""
    trace = small_model.trace(" ".join(["word"] * 256))
    assert trace.n_tokens == 256
    with caplog.at_level(logging.WARNING, logger="transformer_explainer.notebook.snapshot"):
        d, info = snapshot_data(small_model, trace, ablations=False)
    # block 0's attention view: its pattern, and the queries and keys its scores are derived from
    assert {"blocks.0.attn.pattern", "blocks.0.attn.q", "blocks.0.attn.k"} <= set(d["tensors"])
    assert "blocks.*.attn.pattern" not in info.kept and re.fullmatch(r"blocks\.0(-\d)?\.attn\.pattern", info.kept[
        [k.endswith(".attn.pattern") for k in info.kept].index(True)]), info.kept
    assert "embed.token" in info.kept and "embed.position" in info.kept  # the small views' tensors came before it
    assert info.keep_mb is not None and info.keep_mb > 4.5 and d["keep_mb"] == info.keep_mb
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"max_mb={info.keep_mb:g}" in said and f"--max-mb {info.keep_mb:g}" in said
    assert all(o in said for o in info.omitted)
    full, all_in = snapshot_data(small_model, trace, ablations=False, max_mb=info.keep_mb)
    assert not all_in.omitted and all_in.keep_mb is None and full["keep_mb"] is None
    assert all_in.nbytes <= info.keep_mb * 1e6


def test_the_cli_warns_what_it_left_out_and_which_option_keeps_it(tiny_gpt2_dir, bundle, tmp_path):
    """The command as a user runs it (its own logging set up): stderr names what was left out and --max-mb."""
    out = tmp_path / "small.html"
    code = ("import sys; from transformer_explainer.cli import main; sys.exit(main(sys.argv[1:]))")
    run = subprocess.run([sys.executable, "-c", code, "snapshot", TEXT, "--out", str(out), "--model",
                          str(tiny_gpt2_dir), "--offline", "--no-ablations", "--max-mb", "1.3"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    d = embedded(out.read_text())
    assert d["omitted"] and d["keep_mb"] > 1.3
    assert f"--max-mb {d['keep_mb']:g}" in run.stderr and all(o in run.stderr for o in d["omitted"]), run.stderr


def test_values_the_views_show_with_4_decimals_are_stored_as_the_trace_has_them(tiny_model):
    """The per-position statistics (LayerNorm's mean and variance here; the router's probabilities in a mixture)
    are stored in float32, value for value: a float16 copy changes the 4th decimal the views show."""
    trace = tiny_model.trace(TEXT)
    d, _ = snapshot_data(tiny_model, trace, ablations=False)
    for name in ("blocks.0.ln1.mean", "blocks.1.ln2.var", "ln_final.var"):
        s = d["tensors"][name]
        assert s["dtype"] == "float32"
        assert np.array_equal(decoded(s), trace[name].float().numpy()), name
    assert d["tensors"]["blocks.0.attn.pattern"]["dtype"] == "float16"  # the large ones stay float16


def test_router_probabilities_are_stored_as_the_trace_has_them():
    from transformer_explainer import load_model

    model = load_model("explainer-moe", allow_download=False)
    trace = model.trace("The cat sat on the mat.")
    d, _ = snapshot_data(model, trace, ablations=False, max_mb=20)
    for layer in range(model.config.n_layer):
        name = f"blocks.{layer}.mlp.router_probs"
        if name not in trace.names():
            continue
        s = d["tensors"][name]
        assert s["dtype"] == "float32"
        want = trace[name].float().numpy()
        assert np.array_equal(decoded(s), want)
        # what float16 held: off in the 4th decimal somewhere (0.5032 -> 0.5029), which float32 is not
        assert np.abs(want.astype(np.float16).astype(np.float32) - want).max() > 5e-5


def test_a_snapshot_leaves_out_the_pages_that_need_the_server_and_counts_what_it_inlines(tmp_path: Path) -> None:
    """The encoder-decoder page and Watch it learn need the server (the header offers neither in a snapshot): their
    chunks are not inlined, nor counted in the budget; every other script is."""
    from transformer_explainer.notebook.snapshot import SERVER_ONLY_CHUNKS, _import_map

    root = package_static_dir()
    scripts = sorted(p.name for p in (root / "assets").glob("*.js"))
    server_only = [n for n in scripts if n.startswith(SERVER_ONLY_CHUNKS)]
    assert {n.split("-")[0] for n in server_only} == {"Seq2SeqPage", "LearnPage"}
    inlined = {k.removeprefix("te-snapshot:") for k in _import_map(root)}
    assert inlined == set(scripts) - set(server_only)


def test_the_features_of_a_snapshot_are_the_float32_values_written_short() -> None:
    """Each activation is written as the shortest decimal of its float32 (3.4702172, not 3.470217227935791): the
    same float32, in fewer of the page's bytes."""
    from transformer_explainer.notebook.snapshot import _shortest_float32

    rng = np.random.default_rng(0)
    values = [float(np.float32(v)) for v in rng.normal(0, 5, 200)] + [0.0, -0.0, 1e-30, 65504.0]
    node = {"positions": [{"features": [{"id": i, "activation": v} for i, v in enumerate(values)]}], "n": 3}
    short = _shortest_float32(node)
    got = [f["activation"] for f in short["positions"][0]["features"]]
    assert np.array_equal(np.float32(got), np.float32(values))
    assert short["n"] == 3 and [f["id"] for f in short["positions"][0]["features"]] == list(range(len(values)))
    assert len(json.dumps(short)) < 0.9 * len(json.dumps(node))
    assert _shortest_float32(float("nan")) != _shortest_float32(float("nan"))  # NaN stays NaN
