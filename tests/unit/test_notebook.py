"""The HTML snapshot and the notebook widget: one self-contained file carrying the trace's own
values, under its size budget, and the widget's front end shipped in the package."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from transformer_explainer import InputError
from transformer_explainer.analysis.answers import heads_json, lens_json, reference_roles
from transformer_explainer.cli import main
from transformer_explainer.encoding import triangle_rows
from transformer_explainer.notebook import SnapshotView, show, snapshot_data, snapshot_html, widget_class
from transformer_explainer.notebook.snapshot import cjk_font_url, page_html
from transformer_explainer.notebook.snapshot_attribution import CANDIDATES, entry_bytes
from transformer_explainer.notebook.widget import widget_esm

TEXT = "The cat sat on the mat, and then the cat slept."


APP_JS = ('import { n } from "./part-x1.js"; const s = "</script><!-- <script>"; document.title = s + n;\n'
          "const later = () => import(`./part-x1.js`);")
PART_JS = 'import "./app.js";\nexport const n = "50% #1?\\t\tok";'


@pytest.fixture(scope="module")
def static(tmp_path_factory) -> Path:
    """A stand-in for the built bundle (the real one is tested in the browser tests)."""
    root = tmp_path_factory.mktemp("web_dist")
    (root / "assets").mkdir()
    # the page's script and a chunk it imports, at once and on first use (web/vite.config.ts)
    (root / "assets" / "app.js").write_text(APP_JS)
    (root / "assets" / "part-x1.js").write_text(PART_JS)
    (root / "assets" / "part-x1.js.gz").write_bytes(b"\x1f\x8b")  # the server's copy: not the page's
    (root / "assets" / "app.css").write_text("body { color: red }")
    (root / "index.html").write_text(
        '<!doctype html><html><head><meta charset="utf-8"><title>x</title>'
        '<script type="module" crossorigin src="./assets/app.js"></script>'
        '<link rel="stylesheet" crossorigin href="./assets/app.css"></head><body><div id="app"></div></body></html>')
    return root


@pytest.fixture(scope="module")
def data(tiny_model):
    return snapshot_data(tiny_model, tiny_model.trace(TEXT))


def f16(stored: dict) -> np.ndarray:
    values = np.frombuffer(base64.b64decode(stored["data"]), "<f2").astype(np.float32)
    if stored.get("triangle"):  # an attention pattern's lower triangle, zeros above
        return triangle_rows(values, stored["shape"])
    return values.reshape(stored["shape"])


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="te-snapshot">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


def test_snapshot_carries_the_traces_values(tiny_model, data):
    d, info = data
    trace = tiny_model.trace(TEXT)
    assert d["format"] == "transformer-explainer-snapshot"
    assert d["trace"]["token_ids"] == trace.token_ids
    assert [t["text"] for t in d["trace"]["tokens"]] == trace.tokens
    assert not info.omitted  # a tiny model fits whole
    for name in ("blocks.1.attn.pattern", "blocks.0.mlp.post", "embed.token", "ln_final.out"):
        np.testing.assert_allclose(f16(d["tensors"][name]), trace[name].numpy(), rtol=1e-3, atol=1e-4)
        assert d["tensors"][name]["dims"]
    np.testing.assert_allclose(f16(d["weights"]["blocks.0.ln1.w"]), tiny_model.weight("blocks.0.ln1.w").numpy(),
                               rtol=1e-3)
    a = d["analysis"]
    assert a["lens"]["out"]["positions"] == list(range(trace.n_tokens))
    got = a["lens"]["out"]["layers"][1]["positions"][4]
    ref = lens_json(tiny_model, trace, [4], 5)["layers"][1]["positions"][0]
    assert [c["id"] for c in got["top"]] == [c["id"] for c in ref["top"]]  # one column alone agrees to rounding
    assert [c["prob"] for c in got["top"]] == pytest.approx([c["prob"] for c in ref["top"]], rel=1e-5)
    assert got["target_rank"] == ref["target_rank"]
    assert a["heads"] == json.loads(json.dumps(heads_json(trace, reference_roles(tiny_model))))
    L, H = tiny_model.config.n_layer, tiny_model.config.n_head
    assert len(a["ablations"]) == L * H and a["importance"]["n_head"] == H
    assert set(a["neighbours"]) == {str(i) for i in trace.token_ids}
    # the app's first request asks for this sampling; the stored distribution must be for it
    assert d["sampling"] == {"temperature": 1.0, "top_k": 10, "top_p": None, "seed": 42}


def by_position(record: dict) -> dict[int, list[dict]]:
    """The attribution entries of a snapshot by position, in their order (the default target first)."""
    out: dict[int, list[dict]] = {}
    for e in record["entries"]:
        out.setdefault(e["position"], []).append(e)
    return out


def same_attribution(entry: dict, a) -> None:
    """A stored entry is `model.attribute`'s answer, to the bit."""
    assert entry["position"] == a.position
    assert entry["target"] == {"id": a.target, "text": a.target_text}
    assert (entry["metric"], entry["rest"], entry["scale"]) == (a.metric, a.rest, a.scale)
    assert entry["values"] == [c.value for c in a.components]


def check_attribution_record(model, trace, record: dict) -> None:
    """Every position's default attribution (the next token; the top prediction at the last), the last position's
    likeliest tokens, the parts in the API's order; the page's rules (the map is the head parts in float32, "A
    rather than B" the difference of two entries) give the API's answers."""
    import torch

    T = trace.n_tokens
    top = model.attribute(trace)
    assert record["parts"] == [[c.kind, c.layer, c.head] for c in top.components]
    assert record["candidates"] == CANDIDATES
    at = by_position(record)
    assert sorted(at) == list(range(T)) and record["left_out"] == []
    for p in range(T - 1):
        assert len(at[p]) == 1 and at[p][0]["target"]["id"] == trace.token_ids[p + 1]
        same_attribution(at[p][0], model.attribute(trace, position=p))
    last = at[T - 1]
    assert [e["target"]["id"] for e in last] == torch.topk(trace.next_token_logits(), CANDIDATES).indices.tolist()
    same_attribution(last[0], top)
    for e in last[1:]:
        same_attribution(e, model.attribute(trace, e["target"]["id"], position=T - 1))
    heads = [i for i, (kind, _, _) in enumerate(record["parts"]) if kind == "head"]
    np.testing.assert_array_equal(np.float32([last[0]["values"][i] for i in heads]), top.heads.numpy().ravel())
    a, b = last[1], last[2]
    ref = model.attribute(trace, a["target"]["id"], b["target"]["id"], position=T - 1)
    assert a["metric"] - b["metric"] == ref.metric  # the same two float32 logits, subtracted in float64
    assert a["rest"] - b["rest"] == pytest.approx(ref.rest, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(np.subtract(a["values"], b["values"]), [c.value for c in ref.components],
                               rtol=1e-9, atol=1e-12)


def test_snapshot_carries_the_attribution_at_every_position(tiny_model, data):
    d, info = data
    check_attribution_record(tiny_model, tiny_model.trace(TEXT), d["attribution"])
    assert not [o for o in info.omitted if o.startswith("attribution")]
    assert json.loads(json.dumps(d["attribution"])) == d["attribution"]  # the JSON holds the float64 values as they are


def test_budget_leaves_out_the_earliest_attributions_first(tiny_model):
    """The attributions at earlier positions go into what the budget has left after the tensors, from the last
    position backwards; the file says which positions it left out. The last position is always carried."""
    trace = tiny_model.trace(TEXT)
    T = trace.n_tokens
    full, info = snapshot_data(tiny_model, trace, ablations=False)
    at = by_position(full["attribution"])
    cut = sum(entry_bytes(at[p][0]) for p in range(3))  # room for every position but 0, 1 and 2
    # plus half an entry: the page's timings (timings_ms) differ by a few characters from one call to the next
    slack = min(entry_bytes(at[p][0]) for p in range(3)) // 2
    d, short = snapshot_data(tiny_model, trace, ablations=False, max_mb=(info.nbytes - cut + slack) / 1e6)
    assert d["attribution"]["left_out"] == [0, 1, 2]
    assert short.omitted == info.omitted + ["attribution at positions 0-2"] and d["omitted"] == short.omitted
    assert short.kept == info.kept  # the tensors were there first
    assert d["attribution"]["entries"] == [e for e in full["attribution"]["entries"] if e["position"] > 2]
    assert short.nbytes <= info.nbytes - cut + slack  # within the budget, as the snapshot counts it

    d, tiny = snapshot_data(tiny_model, trace, ablations=False, max_mb=0.01)
    assert d["attribution"]["left_out"] == list(range(T - 1)) and f"attribution at positions 0-{T - 2}" in tiny.omitted
    assert [e["position"] for e in d["attribution"]["entries"]] == [T - 1] * CANDIDATES


def test_budget_leaves_out_the_largest_tensors_first(tiny_model):
    trace = tiny_model.trace(TEXT)
    full, _ = snapshot_data(tiny_model, trace, ablations=False)
    mlp_post = sum(len(json.dumps(v)) for n, v in full["tensors"].items() if n.endswith("mlp.post"))
    for n in [n for n in full["weights"] if ".attn.W_" in n]:
        del full["weights"][n]
    budget = len(json.dumps(full)) - mlp_post // 2  # room for everything but half of the last group
    d, info = snapshot_data(tiny_model, trace, max_mb=budget / 1e6, ablations=False)
    assert info.omitted[0] == "blocks.*.mlp.post"
    assert "blocks.*.attn.pattern" in info.kept and "blocks.*.mlp.pre" in info.kept
    assert len(json.dumps(d)) < budget
    assert d["omitted"] == info.omitted
    assert not any(n.endswith("mlp.post") for n in d["tensors"])


def test_page_is_one_file_with_everything_inlined(tiny_model, static, data):
    page = page_html(data[0], static)
    assert 'src="' not in page and 'href="./' not in page  # nothing to fetch
    assert "<style>body { color: red }</style>" in page
    # the page's script comes by its name in the import map, which gives each script as a data: URL, with the
    # others it imports named so too (a data: URL has no folder to resolve "./part-x1.js" against)
    assert re.search(r'<script type="module">(.*?)</script>', page, re.S).group(1) == 'import "te-snapshot:app.js";'
    imports = re.search(r'<script type="importmap">(.*?)</script>', page, re.S).group(1)
    assert "<" not in imports  # the scripts' own "</script" and "<!--" cannot close or confuse the element
    scripts = {name: unquote(url.removeprefix("data:text/javascript;charset=utf-8,"))
               for name, url in json.loads(imports)["imports"].items()}
    assert scripts == {"te-snapshot:app.js": APP_JS.replace("./part-x1.js", "te-snapshot:part-x1.js"),
                       "te-snapshot:part-x1.js": PART_JS.replace("./app.js", "te-snapshot:app.js")}
    # a data: URL's body loses tabs and newlines and ends at "#" or "?" unless they are escaped
    assert not re.search(r"[\t\n\r#?]", imports)
    assert embedded(page)["trace"]["token_ids"] == tiny_model.encode(TEXT)
    assert "snapshot-banner" in page


def test_text_with_markup_stays_data(tiny_model, static):
    text = "</script><script>alert(1)</script> & <b>"
    page = snapshot_html(tiny_model, text, static_dir=static, ablations=False)
    assert "<script>alert(1)" not in page
    assert embedded(page)["trace"]["text"] == text


def test_size_for_32_tokens_of_a_small_model(small_model, static):
    text = " ".join(["word"] * 32)
    trace = small_model.trace(text)
    assert trace.n_tokens == 32
    d, info = snapshot_data(small_model, trace, ablations=False)
    size = len(page_html(d, static).encode())
    assert size < 5e6, size
    assert not [g for g in info.omitted if not g.startswith("blocks.*.attn.W")]  # every activation fits


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """The shape of the built-in small model (6 layers, 8 heads, d_model 256), random weights."""
    from tests.conftest import make_hf_gpt2
    from transformer_explainer import load_model

    folder = make_hf_gpt2(tmp_path_factory.mktemp("small"), n_layer=6, n_head=8, n_embd=256, n_positions=256)
    return load_model(str(folder), allow_download=False)


def test_show_returns_a_widget_or_html(tiny_model, monkeypatch, static):
    monkeypatch.setattr("transformer_explainer.notebook.snapshot._bundle_dir", lambda: static)
    trace = tiny_model.trace(TEXT)
    view = show(trace, tiny_model, widget=False, ablations=False)
    assert isinstance(view, SnapshotView)
    out = view._repr_html_()
    assert out.startswith('<iframe sandbox="allow-scripts"')
    assert embedded(html.unescape(re.search(r'srcdoc="(.*?)"', out, re.S).group(1)))["trace"]["text"] == TEXT
    cls = widget_class()
    if cls is None:
        pytest.skip("anywidget is not installed")
    w = show(TEXT, tiny_model, ablations=False)
    assert isinstance(w, cls) and embedded(w.html)["trace"]["token_ids"] == trace.token_ids
    check_attribution_record(tiny_model, trace, embedded(w.html)["attribution"])  # what its "Why this token" shows


def test_show_needs_a_model_for_a_text(tiny_model):
    with pytest.raises(InputError, match="needs the model"):
        show(TEXT)
    other = tiny_model.trace(TEXT)
    other.model_name = "no-such-model"
    with pytest.raises(InputError, match="pass it"):
        show(other)


def test_widget_front_end_ships_in_the_package():
    js = widget_esm().read_text()
    assert "export default" in js and "srcdoc" in js
    assert "http" not in js  # it loads nothing


def test_cli_snapshot(tiny_gpt2_dir, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["snapshot", TEXT, "--out", str(out), "--model", str(tiny_gpt2_dir), "--offline",
                 "--no-ablations"]) == 0
    page = out.read_text()
    assert embedded(page)["analysis"]["importance"] is None
    assert "wrote" in capsys.readouterr().err
    assert main(["snapshot", TEXT, "--out", str(tmp_path / "x.txt"), "--model", str(tiny_gpt2_dir)]) != 0


def test_show_a_trace_without_a_widget(tiny_model, monkeypatch, static):
    monkeypatch.setattr("transformer_explainer.notebook.snapshot._bundle_dir", lambda: static)
    trace = tiny_model.trace(TEXT)
    view = show(trace, tiny_model, widget=False, ablations=False)
    assert isinstance(view, SnapshotView)
    assert embedded(html.unescape(re.search(r'srcdoc="(.*?)"', view._repr_html_(), re.S).group(1)))["trace"][
        "token_ids"] == trace.token_ids


FONTS = Path(__file__).resolve().parents[2] / "web" / "public" / "fonts"  # what vite copies into web_dist/fonts
FONT_URL = "data:font/woff2;base64,"


@pytest.fixture(scope="module")
def static_fonts(static, tmp_path_factory) -> Path:
    """The stand-in bundle with the real CJK font subset and its record."""
    root = tmp_path_factory.mktemp("web_dist_fonts")
    for p in static.rglob("*"):
        if p.is_file():
            (root / p.relative_to(static)).parent.mkdir(parents=True, exist_ok=True)
            (root / p.relative_to(static)).write_bytes(p.read_bytes())
    (root / "fonts").mkdir()
    for name in ("noto-sans-sc-subset.woff2", "noto-sans-sc-subset.json"):
        (root / "fonts" / name).write_bytes((FONTS / name).read_bytes())
    return root


def test_the_page_carries_the_cjk_font_where_it_can_show_chinese(tiny_model, static_fonts):
    """The font is inlined (a data: URL: nothing to fetch from file:// or a notebook's iframe) where the page
    offers 中文 (the default) or its text holds CJK characters; an English-only page of English text is
    smaller by the font's base64 and shows no Chinese."""
    font = (static_fonts / "fonts" / "noto-sans-sc-subset.woff2").read_bytes()
    trace = tiny_model.trace(TEXT)
    both = snapshot_html(tiny_model, trace, static_dir=static_fonts, ablations=False)
    en = snapshot_html(tiny_model, trace, static_dir=static_fonts, ablations=False, languages=("en",))
    d = embedded(both)
    assert both.count(FONT_URL) == 1 and d["cjk_font"].startswith(FONT_URL)
    assert base64.b64decode(d["cjk_font"].removeprefix(FONT_URL)) == font
    assert d["languages"] == ["en", "zh"] and "单一文本的离线快照" in both
    assert FONT_URL not in en and embedded(en)["cjk_font"] is None and embedded(en)["languages"] == ["en"]
    assert not re.search(r"[\u4e00-\u9fff]", re.search(r'<div class="te-snapshot-banner".*?</div>', en).group(0))
    assert len(both.encode()) - len(en.encode()) >= len(font) * 4 // 3
    # the rule itself: a page offering 中文, or holding a character of the subset's range (its tokens show it)
    assert cjk_font_url("The cat", ["zh"], static_fonts) == d["cjk_font"]
    assert cjk_font_url("人工智能正在改变世界", ["en"], static_fonts) == d["cjk_font"]
    assert cjk_font_url("Ünïcödé — “quotes” 🙂", ["en"], static_fonts) is None
    with pytest.raises(InputError, match="languages must be some of en, zh"):
        snapshot_html(tiny_model, trace, static_dir=static_fonts, ablations=False, languages=("fr",))


def test_the_font_counts_in_the_size_budget(tiny_model):
    trace = tiny_model.trace(TEXT)
    url = FONT_URL + base64.b64encode((FONTS / "noto-sans-sc-subset.woff2").read_bytes()).decode()
    without, _ = snapshot_data(tiny_model, trace, ablations=False, languages=("en",))
    budget = len(json.dumps(without)) / 1e6 + 0.01  # everything fits without the font, not with it
    _, plain = snapshot_data(tiny_model, trace, ablations=False, languages=("en",), max_mb=budget)
    _, with_font = snapshot_data(tiny_model, trace, ablations=False, cjk_font=url, max_mb=budget)
    assert not plain.omitted and with_font.omitted


def test_each_blocks_output_is_stored_once_as_the_next_blocks_input(tiny_model, data):
    d, _ = data
    trace = tiny_model.trace(TEXT)
    L = tiny_model.config.n_layer
    assert d["aliases"] == {f"blocks.{i}.resid_post": f"blocks.{i + 1}.resid_pre" for i in range(L - 1)}
    for name, same in d["aliases"].items():
        assert name not in d["tensors"] and same in d["tensors"]
        np.testing.assert_array_equal(trace[name].numpy(), trace[same].numpy())
    assert f"blocks.{L - 1}.resid_post" in d["tensors"]
    # derived stages are not stored: the page derives them by names.DERIVATIONS
    assert not [n for n in d["tensors"] if n.endswith(("scaled_scores", "masked_scores", "attn.concat", "embed.sum"))]


def test_widget_of_a_llama_family_model(tmp_path, monkeypatch, static_fonts):
    """`show` for a Qwen2 checkpoint (4 query heads on 2 key/value heads): the widget's page holds the
    keys and values per key/value head (dims G, ...) and the font; the views are walked in
    tests/web/test_snapshot.py::test_widget_shows_every_view_of_a_llama_family_model."""
    from tests.conftest import make_hf_llama_family
    from transformer_explainer import load_model

    monkeypatch.setattr("transformer_explainer.notebook.snapshot._bundle_dir", lambda: static_fonts)
    model = load_model(str(make_hf_llama_family(tmp_path / "qwen2", "qwen2")), allow_download=False)
    trace = model.trace(TEXT)
    cls = widget_class()
    if cls is None:
        pytest.skip("anywidget is not installed")
    w = show(trace, model, ablations=False)
    assert isinstance(w, cls)
    d = embedded(w.html)
    assert d["trace"]["config"]["family"] == "llama" and d["trace"]["config"]["n_kv_heads"] == 2
    k = d["tensors"]["blocks.0.attn.k"]
    assert k["dims"] == ["G", "T", "Dh"] and k["shape"][0] == 2
    np.testing.assert_allclose(f16(k), trace["blocks.0.attn.k"].numpy(), rtol=1e-3, atol=1e-3)
    assert d["cjk_font"].startswith(FONT_URL)
    assert FONT_URL not in show(trace, model, ablations=False, languages=("en",)).html
    check_attribution_record(model, trace, d["attribution"])  # RMSNorm's attribution: no centring, no shift
