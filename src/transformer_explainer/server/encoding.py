"""The tensor encodings live in the domain (`transformer_explainer.encoding`); this name stays for imports."""

from ..encoding import *  # noqa: F403
