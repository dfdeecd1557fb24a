"""The settings the induction run on text (training/induction_text.py) accepts: name -> (lowest, highest). A module
of its own, without torch, read by the run's checks and by its command line's parser."""

from __future__ import annotations

TEXT_LIMITS: dict[str, tuple[float, float]] = {
    "layers": (1, 4), "width": (16, 512), "heads": (1, 16), "steps": (1, 200000), "lr": (1e-5, 1e-1),
    "batch": (1, 256), "seq_len": (16, 512), "record_every": (1, 20000), "checkpoint_every": (1, 200000),
    "heldout_tokens": (64, 10**7),
}
