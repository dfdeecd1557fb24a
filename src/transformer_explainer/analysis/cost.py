"""What an analysis costs before it runs: the forward passes it makes (from the head count and its
options) times the arithmetic of one pass (from the model's shape and the text's length), so that a
server can refuse, with a cheaper setting to try, what would run for hours.

The estimate counts the multiply-adds of the weight products, the attention scores and the
unembedding (2 floating-point operations each); recording a trace costs more than that, in memory
traffic, but in proportion, so the estimate ranks requests right. Measured on the project's 2-core
build machine, one thread, while other jobs ran: a GPT-2-small-shape trace reached 43, 67 and 93
GFLOP/s at 16, 64 and 256 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DecoderConfig
from ..errors import InputError


def pass_gflop(config: DecoderConfig, n_tokens: int, experts_per_token: int | None = None) -> float:
    """Billions of floating-point operations of one forward pass over `n_tokens` tokens. In a mixture of
    experts a token costs the router (D x E) and its top_k experts' three matrices, not the others';
    `experts_per_token` counts that many experts instead (n_experts: what the pass would cost if every token
    ran every expert, as a dense MLP of all the experts' width would)."""
    if not isinstance(config, DecoderConfig):  # a decoder that runs through transformers: its config's estimate
        return float(config.pass_gflop(n_tokens))
    T, D, L, V, M = n_tokens, config.n_embd, config.n_layer, config.vocab_size, config.d_mlp
    q = config.n_head * config.head_dim  # query (and output) width
    kv = config.n_kv_heads * config.head_dim  # key and value width
    attention = 2 * T * D * (2 * q + 2 * kv) + 2 * 2 * T * T * q
    dense = (2 if config.arch.mlp == "gelu" else 3) * 2 * T * D * M  # gate, up, down / up, down
    with_experts = L - len(config.dense_layers) if config.arch.mlp == "moe" else 0
    experts = 0
    if with_experts:
        assert config.n_experts is not None and config.top_k is not None and config.d_expert is not None
        k = config.top_k if experts_per_token is None else experts_per_token
        experts = 2 * T * D * config.n_experts + k * 3 * 2 * T * D * config.d_expert
    total = L * attention + with_experts * experts + (L - with_experts) * dense
    return (total + 2 * T * D * V) / 1e9


def _heads(config: DecoderConfig) -> int:
    """Every head of the model (a generic model's layers without attention have none)."""
    layers = getattr(config, "attention_layers", None)  # generic.GenericConfig's
    return (config.n_layer if layers is None else len(layers)) * config.n_head


def importance_passes(config: DecoderConfig) -> int:
    """`head_importance`: the clean pass and one pass per head."""
    return 1 + _heads(config)


def prune_passes(config: DecoderConfig, max_heads: int | None, recompute: bool) -> int:
    """`prune_heads`: the clean pass, then with `recompute` one pass per remaining head at each of the
    n steps (n N - n (n - 1) / 2 for N heads), else the importance map and one pass per step."""
    heads = _heads(config)
    n = heads if max_heads is None else max(0, min(max_heads, heads))
    if recompute:
        return 1 + n * heads - n * (n - 1) // 2
    return 1 + importance_passes(config) + n


@dataclass(frozen=True)
class AnalysisCost:
    """An analysis of `passes` forward passes over `n_tokens` tokens."""

    config: DecoderConfig
    n_tokens: int
    passes: int

    @property
    def gflop(self) -> float:
        return self.passes * pass_gflop(self.config, self.n_tokens)

    def longest_text_within(self, max_gflop: float) -> int:
        """The most tokens the same analysis could read within `max_gflop` (0: not even one)."""
        lo, hi = 0, self.n_tokens  # the cost grows with the tokens: bisect
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.passes * pass_gflop(self.config, mid) <= max_gflop:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def check(self, max_gflop: float | None, cheaper: list[str] | None = None) -> None:
        """Refuse (InputError, one sentence) an analysis over `max_gflop`; `cheaper` lists other
        settings of it to suggest, and a shorter text is always suggested when one would fit."""
        if max_gflop is None or self.gflop <= max_gflop:
            return
        options = list(cheaper or [])
        fits = self.longest_text_within(max_gflop)
        if fits >= 2:  # a loss needs two tokens
            options.append(f"a text of at most {fits:,} tokens")
        hint = f": ask for {_either(options)}" if options else ""
        message = (f"this analysis would run {self.passes:,} forward passes of {self.n_tokens:,} tokens "
                   f"(about {self.gflop:,.0f} GFLOP), more than this server computes for one request "
                   f"({max_gflop:,.0f} GFLOP){hint}")
        if fits >= 2:
            raise InputError(message, code="analysis_too_large_text", passes=self.passes, tokens=self.n_tokens,
                             fits=fits)
        raise InputError(message, code="analysis_too_large", passes=self.passes, tokens=self.n_tokens)


def _either(options: list[str]) -> str:
    return options[0] if len(options) == 1 else ", ".join(options[:-1]) + " or " + options[-1]


def check_importance(config: DecoderConfig, n_tokens: int, max_gflop: float | None) -> None:
    AnalysisCost(config, n_tokens, importance_passes(config)).check(max_gflop)


def check_prune(config: DecoderConfig, n_tokens: int, max_heads: int | None, recompute: bool,
                max_gflop: float | None) -> None:
    """Refuse a pruning over budget, suggesting what would fit: no re-scoring, fewer heads, a shorter
    text, or (when none of these alone fits) no re-scoring of a shorter text."""
    cost = AnalysisCost(config, n_tokens, prune_passes(config, max_heads, recompute))
    if max_gflop is None or cost.gflop <= max_gflop:
        return
    per_pass = pass_gflop(config, n_tokens)
    cheaper = []
    if recompute and prune_passes(config, max_heads, False) * per_pass <= max_gflop:
        cheaper.append('"recompute": false')
    heads = _heads(config)
    wanted = heads if max_heads is None else min(max_heads, heads)
    fewer = max((n for n in range(1, wanted) if prune_passes(config, n, recompute) * per_pass <= max_gflop),
                default=None)
    if fewer is not None:
        cheaper.append(f'"max_heads": {fewer}')
    if not cheaper and cost.longest_text_within(max_gflop) < 2 and recompute:
        shorter = AnalysisCost(config, n_tokens, prune_passes(config, max_heads, False)).longest_text_within(max_gflop)
        if shorter >= 2:
            cheaper.append(f'"recompute": false with a text of at most {shorter:,} tokens')
    cost.check(max_gflop, cheaper)
