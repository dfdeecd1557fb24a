"""The settings an induction run (training/induction.py) accepts: name -> (lowest, highest). A module of its own,
without torch, read by the run's checks and by its command line's parser."""

from __future__ import annotations

LIMITS: dict[str, tuple[float, float]] = {
    "layers": (1, 4), "steps": (1, 20000), "width": (16, 256), "heads": (1, 8), "lr": (1e-5, 1e-1),
    "batch": (1, 256), "record_every": (1, 5000), "checkpoint_every": (1, 20000),
}
