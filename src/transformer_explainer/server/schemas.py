"""The API's bodies live in the domain (`transformer_explainer.schemas`); this name stays for imports."""

from ..schemas import *  # noqa: F403
from ..schemas import MAX_IDS, MAX_TENSORS_PER_REQUEST, MAX_TEXT_CHARS, MAX_TOP_N  # noqa: F401
