"""Traces in notebooks and as files: `show(trace, model)` renders the app's views in a Jupyter cell
(anywidget when installed, else plain HTML), and `save_snapshot(model, text, "page.html")` writes one
self-contained HTML page that opens offline from file://."""

from .snapshot import save_snapshot, snapshot_data, snapshot_html
from .widget import SnapshotView, show, widget_class

__all__ = ["SnapshotView", "save_snapshot", "show", "snapshot_data", "snapshot_html", "widget_class"]
