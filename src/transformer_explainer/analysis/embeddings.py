"""Embedding explorer: nearest tokens by cosine similarity, vector arithmetic on token embeddings
(king - man + woman), and a 2-D PCA projection of chosen tokens.

The explorer reads the token embedding W_E, the input side. GPT-2 (and Llama-family models with tied
embeddings) unembed with the same rows; models with their own unembedding (many Qwen2 and Mistral
checkpoints) read and write with different vectors, and the explorer shows the reading ones.
Note that " king" (with its leading space, as it appears mid-sentence) and "king" are different tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..engine import ExplainerModel, TokenLike
from ..errors import InputError


def token_id(model: ExplainerModel, token: TokenLike) -> int:
    """The id of a single token: an id, a text that encodes to one token, or a raw vocabulary entry
    such as 'Ġking' or '<|endoftext|>' (`ExplainerModel.token_id`)."""
    return model.token_id(token)


def embedding_matrix(model: ExplainerModel) -> Tensor:
    return model.weight("embed.W_E")  # (V, D)


@dataclass(frozen=True)
class Neighbour:
    id: int
    token: str
    similarity: float  # cosine, in [-1, 1]


def _nearest(model: ExplainerModel, vector: Tensor, n: int, exclude: Iterable[int] = ()) -> list[Neighbour]:
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}", code="count_too_small", field="n", value=n)
    sims = F.cosine_similarity(vector.float().unsqueeze(0), embedding_matrix(model).float(), dim=-1)  # (V,)
    ex = list(exclude)
    if ex:
        sims = sims.clone()
        sims[ex] = float("-inf")
    vals, ids = sims.topk(min(n, sims.shape[0] - len(ex)))
    return [Neighbour(i, model.tokenizer.token_text(i), float(v)) for i, v in zip(ids.tolist(), vals, strict=True)]


def nearest_tokens(model: ExplainerModel, token: TokenLike | Tensor, n: int = 10, *,
                   include_self: bool = False) -> list[Neighbour]:
    """The n tokens whose embeddings are closest (cosine) to a token's, or to any (D,) vector."""
    if isinstance(token, Tensor):
        return _nearest(model, token, n)
    tid = token_id(model, token)
    return _nearest(model, embedding_matrix(model)[tid], n, () if include_self else (tid,))


@dataclass(frozen=True)
class Analogy:
    positive: list[int]
    negative: list[int]
    vector: Tensor  # (D,) sum of positive embeddings minus sum of negative ones
    neighbours: list[Neighbour]  # nearest tokens to `vector`, inputs excluded unless asked

    def to_dict(self, token_text: Callable[[int], str]) -> dict[str, Any]:
        return {
            "positive": [{"token": token_text(i), "id": i} for i in self.positive],
            "negative": [{"token": token_text(i), "id": i} for i in self.negative],
            "neighbours": [{"token": nb.token, "id": nb.id, "similarity": nb.similarity} for nb in self.neighbours],
        }


def analogy(model: ExplainerModel, positive: Sequence[TokenLike], negative: Sequence[TokenLike] = (), n: int = 10,
            *, exclude_inputs: bool = True) -> Analogy:
    """Vector arithmetic: `analogy(m, ["king", "woman"], ["man"])` is E[king] - E[man] + E[woman] and
    its nearest tokens. The inputs are left out of the answer by default, as word2vec does: the
    result vector usually stays closest to "king" itself."""
    if not positive:
        raise InputError("an analogy needs at least one token to add", code="analogy_empty")
    pos = [token_id(model, t) for t in positive]
    neg = [token_id(model, t) for t in negative]
    W = embedding_matrix(model).float()
    vector = W[pos].sum(0) - (W[neg].sum(0) if neg else 0.0)
    neighbours = _nearest(model, vector, n, set(pos + neg) if exclude_inputs else ())
    return Analogy(pos, neg, vector, neighbours)


@dataclass(frozen=True)
class Projection:
    ids: list[int]
    tokens: list[str]
    coords: Tensor  # (N, 2) positions on the first two principal components
    explained_variance: Tensor  # (2,) share of the tokens' variance each component explains

    def to_dict(self) -> dict[str, Any]:
        return {"points": [{"token": t, "id": i, "x": float(x), "y": float(y)}
                           for t, i, (x, y) in zip(self.tokens, self.ids, self.coords.tolist(), strict=True)],
                "explained_variance": self.explained_variance.tolist()}


def project_2d(model: ExplainerModel, tokens: Sequence[TokenLike]) -> Projection:
    """PCA of the chosen tokens' embeddings onto their own first two principal components (exact SVD,
    so the picture is the same on every run; each axis's sign is fixed by its largest loading)."""
    ids = [token_id(model, t) for t in tokens]
    if len(ids) < 2:
        raise InputError("a projection needs at least two tokens", code="projection_too_few")
    X = embedding_matrix(model)[ids].to("cpu", torch.float64)  # the chosen rows: a small exact SVD on the CPU
    Xc = X - X.mean(0)
    U, S, Vh = torch.linalg.svd(Xc, full_matrices=False)
    k = min(2, S.shape[0])
    signs = torch.sign(Vh[:k].gather(1, Vh[:k].abs().argmax(1, keepdim=True))).squeeze(1)
    signs[signs == 0] = 1
    coords = torch.zeros(len(ids), 2, dtype=torch.float64, device="cpu")
    coords[:, :k] = U[:, :k] * S[:k] * signs
    var = S.square()
    explained = torch.zeros(2, dtype=torch.float64, device="cpu")
    if var.sum() > 0:
        explained[:k] = var[:k] / var.sum()
    return Projection(ids, [model.tokenizer.token_text(i) for i in ids], coords.float(), explained.float())
