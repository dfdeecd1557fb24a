"""Request and response bodies of the "Why this token" API (/api/attribution): direct logit attribution of
a traced text, activation patching of a clean/corrupted prompt pair, and the tokens of a few texts (so a page
can tell whether two prompts line up before it asks for a patching). Plain pydantic, like the analyses'
(`analysis/schemas.py`); the web app's types are generated from these. The kinds are those of `attribution.py`
and `patching.py` (a unit test keeps them equal; they are spelt out here so that this module needs no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from ..schemas import MAX_IDS, MAX_TEXT_CHARS, ErrorOut, InputIn, ModelName, Strict, check_text
from .schemas import Matrix, TokenArg

if TYPE_CHECKING:
    from ..attribution import Attribution
    from ..patching import Patching

# what writes the residual stream (attribution.Kind; "mixer": a layer's token mixer whole, where a model that runs
# through transformers does not split it by head)
ComponentKind = Literal["embed", "pos_embed", "head", "attn_bias", "mlp", "expert", "mixer"]
# the activations a patching grid replaces, with TransformerLens's names (patching.Kind)
PatchKind = Literal["resid_pre", "attn_out", "mlp_out", "heads"]
PATCH_KINDS: tuple[PatchKind, ...] = ("resid_pre", "attn_out", "mlp_out", "heads")
MAX_TOKENIZED_TEXTS = 4

Prompt = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]


# -- requests --------------------------------------------------------------------------------------


class AttributeIn(InputIn):
    """The logit of `target` at `position` (default: the last; `target` defaults to the token that came next
    there, or the top prediction at the last), minus that of `versus` when given."""

    target: TokenArg | None = None
    versus: TokenArg | None = None
    position: Annotated[int, Field(ge=-MAX_IDS, lt=MAX_IDS)] | None = None


class PatchIn(Strict):
    """A clean and a corrupted prompt of the same number of tokens, the answer token and the wrong one, and
    the grids to compute (each activation patched from the clean run into the corrupted one)."""

    model: ModelName = None
    clean: Prompt
    corrupted: Prompt
    answer: TokenArg
    wrong: TokenArg
    what: Annotated[list[PatchKind], Field(min_length=1, max_length=len(PATCH_KINDS))] = list(PATCH_KINDS)

    @field_validator("clean", "corrupted")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        return check_text(v)

    @field_validator("what")
    @classmethod
    def _once_each(cls, v: list[PatchKind]) -> list[PatchKind]:
        return list(dict.fromkeys(v))  # a grid asked for twice is computed once


class TokensIn(Strict):
    model: ModelName = None
    texts: Annotated[list[Prompt], Field(min_length=1, max_length=MAX_TOKENIZED_TEXTS)]

    @field_validator("texts")
    @classmethod
    def _texts_ok(cls, v: list[str]) -> list[str]:
        return [check_text(t) for t in v]


# -- responses -------------------------------------------------------------------------------------


class TokenIdText(BaseModel):
    id: int
    text: str


class ComponentOut(BaseModel):
    """One part of the model that writes the residual stream, and its share of the metric. `layer` is null for
    the embeddings, `head` for everything but a head, `expert` for everything but an expert (a mixture of
    experts' block has one part per expert chosen at the position: its weight times its output)."""

    kind: ComponentKind
    layer: int | None
    head: int | None
    expert: int | None = None
    value: float


class AttributeOut(BaseModel):
    """`metric` (the logit of `target` at `position`, minus that of `versus`) equals the sum of the components'
    values plus `rest` (what no component wrote: the final norm's shift along the unembedding direction)."""

    model: str
    token_ids: list[int]
    tokens: list[str]
    position: int
    target: TokenIdText
    versus: TokenIdText | None
    metric: float
    rest: float
    scale: float  # the final norm's scale at `position`, from the forward pass (frozen)
    components: list[ComponentOut]
    heads: Matrix  # (layers, heads): the heads' values again, as a map
    # (layers, experts) in a mixture of experts: the experts' values as a map, 0 where an expert was not chosen at
    # the position and in blocks without experts; null for a dense model
    experts: Matrix | None = None


class PatchOut(BaseModel):
    """`grids[kind]`: the normalised metric, 0 = the corrupted run, 1 = the clean one, `[layer][position]` for
    resid_pre / attn_out / mlp_out and `[layer][head]` for heads; `raw[kind]`: the patched runs' logit
    differences (answer - wrong) themselves."""

    model: str
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    clean_ids: list[int]
    corrupted_ids: list[int]
    answer: TokenIdText
    wrong: TokenIdText
    clean: float  # the logit difference of the clean run
    corrupted: float  # and of the corrupted run
    runs: int  # patched runs made
    grids: dict[str, Matrix]
    raw: dict[str, Matrix]


class PatchProgress(BaseModel):
    done: int  # patched runs finished
    total: int


class PatchStreamError(ErrorOut):
    """An error answer (ErrorOut) inside the stream, with the status the answer would have had."""

    status: int


class PatchLine(BaseModel):
    """One line of the streamed answer (`Accept: application/x-ndjson`): progress lines after each batch of
    patched runs, then the result, or an error that arose after the stream began."""

    progress: PatchProgress | None = None
    result: PatchOut | None = None
    error: PatchStreamError | None = None


class TokenizedText(BaseModel):
    ids: list[int]
    tokens: list[str]


class TokensOut(BaseModel):
    model: str
    bos_id: int | None  # the token the model puts before every text, if any (Llama's <s>)
    texts: list[TokenizedText]


# -- the answers, shared by the API and the CLI's --json ------------------------------------------------------


def attribute_out(model: str, a: Attribution, token_ids: list[int]) -> AttributeOut:
    return AttributeOut.model_validate({"model": model, "token_ids": token_ids, **a.to_dict()})


def patch_out(model: str, p: Patching, clean_ids: list[int], corrupted_ids: list[int], runs: int) -> PatchOut:
    return PatchOut.model_validate({"model": model, **p.to_dict(), "clean_ids": clean_ids,
                                    "corrupted_ids": corrupted_ids, "runs": runs})


REQUESTS = [AttributeIn, PatchIn, TokensIn]
RESPONSES = [AttributeOut, PatchOut, PatchLine, TokensOut]
