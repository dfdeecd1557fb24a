"""The memory engineering of traces, a wing of its own: what a traced pass keeps and where (`plan.Memory`), the
values a trace reads, kept or computed again on access (`values.TraceValues`, by the recipes of `recipes.py`), the
cache of blocks run again (`block_cache.py`), the summaries a pass keeps for the overview (`summaries.py`), and the
server's store of traces with its measured continuation costs (`store.TraceStore`, `costs.py`). A trace
(`trace.Trace`) is a record that reads through it; the server only asks `TraceStore`."""

from .block_cache import BlockCache
from .plan import EAGER, Memory
from .values import TraceValues

__all__ = ["EAGER", "BlockCache", "Memory", "TraceValues"]
