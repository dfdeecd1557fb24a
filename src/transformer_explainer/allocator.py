"""Keep freed memory in the process for reuse, so recording a trace does not pay a page fault per page.

A trace keeps every intermediate: about 37 MB per layer of SmolLM2-135M at 512 tokens, 1.1 GB per
pass. glibc's malloc serves large blocks with mmap and gives them back with munmap as soon as they are
freed (above a threshold it adapts up to 32 MB, and it trims the heap's free top). The next trace then
asks the kernel for fresh pages, and every 4 KiB page costs a fault and zeroing on first write:
measured on SmolLM2-135M's shape at 512 tokens, 256,636 minor faults per trace and 1.5x the time of
the same trace with freed memory kept (1 thread, CPU time, `benchmarks/bench_forward.py`'s model).

`keep_freed_memory()` sets the two glibc thresholds (`mallopt`) so blocks up to 32 MB come from the
heap and freed memory stays there: PyTorch's CPU tuning guide makes the same point by recommending
jemalloc or tcmalloc. The cost: the process keeps its peak heap after the peak (its high-water mark is
unchanged). It acts once per process, only on glibc (elsewhere it says why it did nothing), and not
when TE_SYSTEM_MALLOC=1.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform

log = logging.getLogger(__name__)

# from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit): bigger blocks still use mmap
TRIM_THRESHOLD = 2**31 - 1  # give the heap's free top back to the kernel only beyond 2 GiB

_state: str | None = None


def keep_freed_memory() -> str:
    """Make glibc's malloc keep freed memory for reuse (once per process). Returns what was done:
    "kept", or why not ("not glibc", "disabled by TE_SYSTEM_MALLOC", "mallopt refused")."""
    global _state
    if _state is not None:
        return _state
    if os.environ.get("TE_SYSTEM_MALLOC") == "1":
        _state = "disabled by TE_SYSTEM_MALLOC"
    elif platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        _state = "not glibc"
    else:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        _state = "kept" if ok else "mallopt refused"
    log.debug("freed memory: %s", _state)
    return _state
