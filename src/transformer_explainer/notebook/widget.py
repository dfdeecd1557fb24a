"""Show a trace in a notebook: an anywidget (when `anywidget` is installed: `pip install
'transformer-explainer[notebook]'`) or, without it, a plain HTML output. Both render the
self-contained snapshot page in a sandboxed iframe, so the views work offline, with no CDN and no
server."""

from __future__ import annotations

import html as html_lib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ..engine import load_model
from ..errors import InputError, ModelNotFoundError
from ..trace import Trace
from .snapshot import LANGUAGES, Model, snapshot_html

DEFAULT_HEIGHT = 900


def widget_esm() -> Path:
    """The widget's front-end module, shipped in the package."""
    return Path(str(resources.files("transformer_explainer.notebook") / "widget.js"))


class SnapshotView:
    """The snapshot as a notebook output without anywidget: an iframe whose `srcdoc` is the page."""

    def __init__(self, page: str, height: int = DEFAULT_HEIGHT) -> None:
        self.html = page
        self.height = height

    def _repr_html_(self) -> str:
        return (f'<iframe sandbox="allow-scripts" title="Transformer Explainer" srcdoc="{html_lib.escape(self.html)}" '
                f'style="width:100%;height:{int(self.height)}px;border:1px solid #e2e2ea;border-radius:6px"></iframe>')

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.html, encoding="utf-8")
        return path


def _widget_class() -> type | None:
    try:
        import anywidget
        import traitlets
    except ImportError:
        return None

    class TraceWidget(anywidget.AnyWidget):
        _esm = widget_esm()
        html = traitlets.Unicode("").tag(sync=True)
        height = traitlets.Int(DEFAULT_HEIGHT).tag(sync=True)

        def save(self, path: str | Path) -> Path:
            path = Path(path)
            path.write_text(self.html, encoding="utf-8")
            return path

    return TraceWidget


_WIDGET: list[type | None] = []


def widget_class() -> type | None:
    """The anywidget class, or None when anywidget is not installed (built once)."""
    if not _WIDGET:
        _WIDGET.append(_widget_class())
    return _WIDGET[0]


def _model_for(trace: Trace) -> Model:
    """The trace's model, loaded again by its name when it is a built-in or cached one."""
    try:
        model = load_model(trace.model_name, allow_download=False)
    except ModelNotFoundError:
        raise InputError(f"cannot find the model {trace.model_name!r} by name; pass it: show(trace, model)") from None
    if model.config != trace.config:
        raise InputError(f"the model found as {trace.model_name!r} is not the trace's; pass it: show(trace, model)")
    return model


def show(trace_or_text: Trace | str, model: Model | None = None, *, height: int = DEFAULT_HEIGHT,
         widget: bool | None = None, max_mb: float = 4.5, ablations: bool = True,
         languages: Sequence[str] = LANGUAGES) -> Any:
    """The app's views of a trace, in a notebook cell.

    `show(model.trace(text), model)`, `show(trace)` (the model is found again by name when it is a
    built-in or cached one) or `show(text, model)`; `model` a family with code of our own or one that runs through
    transformers' own modules (the views whose values it has). `widget=None` uses anywidget when it is
    installed, else an HTML output; both work offline. Either result has `.save(path)` for the page.
    `languages=("en",)` makes an English-only page, without the CJK font it otherwise carries.
    """
    if isinstance(trace_or_text, str):
        if model is None:
            raise InputError("show(text) needs the model: show(text, model)")
        trace = model.trace(trace_or_text)
    else:
        trace = trace_or_text
        model = model or _model_for(trace)
    page = snapshot_html(model, trace, max_mb=max_mb, ablations=ablations, languages=languages)
    cls = widget_class() if widget in (None, True) else None
    if cls is None:
        if widget:
            raise InputError("the notebook widget needs anywidget: pip install 'transformer-explainer[notebook]'")
        return SnapshotView(page, height)
    return cls(html=page, height=height)
