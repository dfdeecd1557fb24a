"""Numbers the Python side and the web app share: the app's defaults and the API's limits. The code
generator writes them into the web app (web/src/lib/generated/limits.ts), so the two cannot drift."""

from __future__ import annotations

DEFAULT_SEED = 42  # the app's first sampling seed: a first visit sees the same draw every time
APP_TOP_N = 15  # next-token candidates the app asks for and lists
APP_TOP_K = 10  # the app's default top-k cut (a choice, explained in the output view): every drawable token is listed
MIN_TEMPERATURE = 0.01  # above 0 (greedy), the smallest temperature accepted
MAX_TEMPERATURE = 100.0
MAX_TOP_N = 100  # candidates (or lens tokens, or neighbours) one answer may list
ABLATION_TOP = 10  # tokens whose probability change an ablation lists
LENS_TOP = 5  # tokens per layer in the app's logit-lens table
NEIGHBOURS = 10  # nearest tokens the embedding explorer lists
MAX_TOKENS_LIST = 64  # tokens in one analogy or embedding projection
MAX_LENS_POSITIONS = 64  # logit-lens columns per request: each costs n_layer + 1 unembeddings
MAX_TEXT_CHARS = 40_000  # characters of one text: far above 1024 GPT-2 tokens (the token limit is checked too)
MAX_TENSORS_PER_REQUEST = 16  # tensors one /api/tensors or /api/weights request may ask for
STEER_TOKENS = 20  # tokens of a steered continuation unless asked
MAX_STEER_TOKENS = 64  # and at most (the breakdown sweep generates that many again per strength)
MAX_CONTRAST_PROMPTS = 16  # prompts in each set of a contrast direction
MAX_CONTRAST_CHARS = 2_000  # characters of one such prompt (each is traced to read its residual stream)


def shared_constants() -> dict[str, int | float]:
    """The constants above by name, for the code generator."""
    return {k: v for k, v in globals().items() if k.isupper() and isinstance(v, int | float)}
