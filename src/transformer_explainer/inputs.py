"""A request's input as token ids: a text is tokenized, given ids are checked against the vocabulary,
and both are held within the model's context and the server's limit per request; an over-long input
is refused with a message that offers truncation, or cut to its last tokens when that was asked for."""

from __future__ import annotations

from dataclasses import dataclass

from .engine import ExplainerModel
from .errors import InputError
from .schemas import InputIn


@dataclass
class Resolved:
    """The token ids of a request and whether they were cut to fit the context."""

    ids: list[int]
    truncated: bool


def token_limit(model: ExplainerModel, max_tokens: int | None) -> int:
    """Tokens one request may hold: the model's context, or less where the server says so."""
    return model.context_length if max_tokens is None else min(max_tokens, model.context_length)


def resolve_input(model: ExplainerModel, inp: InputIn, max_tokens: int | None = None) -> Resolved:
    """The token ids of `inp`, within the model's context and `max_tokens`."""
    ctx = model.context_length
    if inp.text is not None:
        try:
            ids, truncated = model.encode(inp.text), False
        except InputError:
            if not inp.truncate:
                raise
            ids, truncated = model.encode(inp.text, truncate=True), True
    else:
        ids, truncated = list(inp.ids or []), False
        model.check_vocabulary(ids)
        if len(ids) > ctx:
            if not inp.truncate:
                raise InputError(f"{len(ids)} tokens exceed the context of {model.name} ({ctx}); shorten the input "
                                 f"or ask for truncation", code="text_too_long", tokens=len(ids), limit=ctx,
                                 context=ctx)
            ids, truncated = ids[-ctx:], True
    limit = token_limit(model, max_tokens)
    if len(ids) > limit:
        if not inp.truncate:
            raise InputError(f"{len(ids)} tokens exceed this server's limit of {limit} tokens per request "
                             f"(the model's context is {ctx}); shorten the input or ask for truncation",
                             code="text_too_long", tokens=len(ids), limit=limit, context=ctx)
        ids, truncated = ids[-limit:], True
    return Resolved(ids, truncated)


def check_room_to_generate(model: ExplainerModel, n_tokens: int, max_tokens: int | None) -> None:
    """Refuse to generate after a text that already fills the context (or the server's limit)."""
    limit = token_limit(model, max_tokens)
    if n_tokens >= limit:
        what = f"the context of {model.name}" if limit == model.context_length else "this server's limit per request"
        raise InputError(f"the text already fills {what} ({limit} tokens): nothing more can be generated",
                         code="context_full", limit=limit)
