"""DeepSeek-V3's mixture of experts (DeepSeekMoE), written to be read.

Each token goes through a shared expert, which every token uses, and through top_k of many small routed experts,
chosen per token by a router. What differs from Mixtral's router (`layers.MoeMLP`):

    s = sigmoid(x W_router)                         # (E,): each expert's affinity, in (0, 1), on its own
    c = s + b                                       # for choosing only: b, e_score_correction_bias, is a per-expert
                                                    # offset that training nudges up for experts used too little
    group score = sum of the 2 highest c in the group   # the E experts fall in n_group groups of E / n_group
    allowed = the experts of the topk_group best groups  # (in DeepSeek-V3: 8 groups, one per node; 4 chosen)
    chosen = the top_k allowed experts by c
    w_i = s_i / sum_{j chosen} s_j * routed_scaling_factor   # weights from s, not c: the bias steers the choice,
                                                             # not how much an expert counts (norm_topk_prob;
                                                             # without it w_i = s_i * routed_scaling_factor)
    out = shared(x) + sum_{i chosen} w_i expert_i(x)

Every expert, shared or routed, is a gated MLP: down(SiLU(gate(x)) * up(x)). The shared one is n_shared_experts
routed experts wide. Sigmoid scores do not compete as a softmax's do, so the renormalisation makes the chosen
weights sum to routed_scaling_factor (2.5 in DeepSeek-V3). Group-limited routing bounds how many groups (devices)
a token's experts are spread over.

Parameter and buffer names are transformers' (`gate.weight` and `gate.e_score_correction_bias`, float32;
`experts.gate_up_proj` (E, 2M, D), each expert's gate rows then its up rows, and `experts.down_proj` (E, D, M);
`shared_experts.gate_proj`, `up_proj`, `down_proj`), so DeepseekV3MoE's weights load key for key. Numerics follow
transformers: the router in float32, the weights in float32, each expert in the input's dtype, its weighted output
rounded to that dtype and added to the others in the order of the experts' ids (in bfloat16, the same bits as
transformers' in this project's CPU tests).

Dims: B batch, T positions, D d_model, E routed experts, Ng groups (n_group), Kg groups chosen (topk_group), K
experts chosen (top_k), M an expert's width. Recorded
(`name_options.DEEPSEEK_MOE_ACTIVATIONS`, under the scope a block gives its MLP, `mlp.`): router_logits,
router_scores, group_scores, chosen_groups, expert_indices, expert_weights, expert_out, routed_out, shared_out, out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import Linear
from .layers import record
from .recorder import Recorder


@dataclass(frozen=True)
class DeepSeekMoEConfig:
    """The shape of one DeepSeekMoE layer (DeepSeek-V3's config fields)."""

    d_model: int  # hidden_size
    n_experts: int  # n_routed_experts (E)
    top_k: int  # num_experts_per_tok (K): routed experts per token
    d_expert: int  # moe_intermediate_size (M): a routed expert's width
    n_shared: int = 1  # n_shared_experts: the shared expert is this many routed experts wide
    n_group: int = 1  # the experts' groups
    topk_group: int = 1  # the groups a token's experts may come from
    norm_topk_prob: bool = True  # the chosen weights divided by their sum
    routed_scaling_factor: float = 1.0  # the routed weights' factor

    def __post_init__(self) -> None:
        E, G = self.n_experts, self.n_group
        if G < 1 or E % G:
            raise ValueError(f"{E} experts cannot be split into {G} groups evenly")
        if E // G < 2:
            raise ValueError(f"a group of {E // G} expert has no two best experts to score it by: DeepSeek's routing "
                             "needs at least 2 experts a group")
        if not 1 <= self.topk_group <= G:
            raise ValueError(f"a token cannot take its experts from {self.topk_group} of {G} groups")
        if not 1 <= self.top_k <= self.topk_group * (E // G):
            raise ValueError(f"{self.top_k} experts cannot be chosen from {self.topk_group} groups of {E // G}")

    @property
    def experts_per_group(self) -> int:
        return self.n_experts // self.n_group

    @classmethod
    def from_hf(cls, config: Any) -> DeepSeekMoEConfig:
        """From a transformers DeepseekV3Config."""
        if config.hidden_act != "silu":
            raise ValueError(f"experts with {config.hidden_act!r} are not written here: DeepSeekMoE's use SiLU")
        return cls(config.hidden_size, config.n_routed_experts, config.num_experts_per_tok,
                   config.moe_intermediate_size, config.n_shared_experts, config.n_group, config.topk_group,
                   bool(config.norm_topk_prob), float(config.routed_scaling_factor))


class Router(nn.Module):
    """The router's weights, in float32 as DeepSeek keeps them: one row per routed expert, and the bias that
    steers the choice (not a trained weight: the training loop adjusts it to balance the experts' load)."""

    def __init__(self, d_model: int, n_experts: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_experts, d_model, dtype=torch.float32))
        self.register_buffer("e_score_correction_bias", self.weight.new_zeros(n_experts))  # float32, beside it

    def forward(self, x: Tensor) -> Tensor:
        """The router's logits (..., E), in float32."""
        return F.linear(x.float(), self.weight.float())


class RoutedExperts(nn.Module):
    """The E routed experts' gated MLPs, their matrices stacked: expert e's gate and up projections are rows
    [0, M) and [M, 2M) of gate_up_proj[e], its down projection down_proj[e]."""

    def __init__(self, d_model: int, n_experts: int, width: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(n_experts, 2 * width, d_model))
        self.down_proj = nn.Parameter(torch.empty(n_experts, d_model, width))

    def forward(self, x: Tensor, expert: int) -> Tensor:
        """Expert `expert`'s output for the tokens x (N, D): down(SiLU(gate(x)) * up(x))."""
        gate, up = F.linear(x, self.gate_up_proj[expert]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.down_proj[expert])


class SharedExpert(nn.Module):
    """The expert every token goes through: a gated MLP, down(SiLU(gate(x)) * up(x))."""

    def __init__(self, d_model: int, width: int) -> None:
        super().__init__()
        self.gate_proj = Linear(d_model, width, bias=False)
        self.up_proj = Linear(d_model, width, bias=False)
        self.down_proj = Linear(width, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DeepSeekMoE(nn.Module):
    """DeepSeek-V3's mixture of experts: x (B, T, D) -> (B, T, D); see the module's docstring for the maths."""

    def __init__(self, config: DeepSeekMoEConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.gate = Router(c.d_model, c.n_experts)
        self.experts = RoutedExperts(c.d_model, c.n_experts, c.d_expert)
        self.shared_experts = SharedExpert(c.d_model, c.d_expert * c.n_shared)

    def route(self, x: Tensor, rec: Recorder | None = None) -> tuple[Tensor, Tensor]:
        """The routed experts each token of x (B, T, D) goes to, (B, T, K), the highest choice score first, and
        their weights (B, T, K), float32."""
        c = self.config
        logits = record(rec, "router_logits", self.gate(x))  # (B, T, E), float32
        scores = record(rec, "router_scores", logits.sigmoid())  # each expert's affinity, on its own
        choice = scores + self.gate.e_score_correction_bias  # the bias counts for choosing only
        grouped = choice.unflatten(-1, (c.n_group, c.experts_per_group))  # (B, T, Ng, E / Ng)
        group_scores = record(rec, "group_scores", grouped.topk(2, dim=-1).values.sum(dim=-1))  # (B, T, Ng)
        groups = record(rec, "chosen_groups", group_scores.topk(c.topk_group, dim=-1).indices)  # (B, T, Kg)
        allowed = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(-1, groups, True)
        allowed = allowed.repeat_interleave(c.experts_per_group, dim=-1)  # (B, T, E): the chosen groups' experts
        chosen = choice.masked_fill(~allowed, float("-inf")).topk(c.top_k, dim=-1).indices
        chosen = record(rec, "expert_indices", chosen)  # (B, T, K)
        weights = scores.gather(-1, chosen)  # from the scores without the bias
        if c.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return chosen, record(rec, "expert_weights", weights * c.routed_scaling_factor)

    def expert_outputs(self, x: Tensor, chosen: Tensor) -> Tensor:
        """Each (token, choice) pair's expert output, (N * K, D), for tokens x (N, D) and their experts `chosen`
        (N * K,): the pairs grouped by expert, one product per expert on the tokens it got."""
        K = self.config.top_k
        order = torch.argsort(chosen, stable=True)
        counts = torch.bincount(chosen, minlength=self.config.n_experts).tolist()
        out = x.new_zeros(chosen.shape[0], x.shape[-1])
        start = 0
        for expert, n in enumerate(counts):
            if n:
                pairs = order[start:start + n]
                out[pairs] = self.experts(x[pairs // K], expert)
                start += n
        return out

    @staticmethod
    def weighted_sum(expert_out: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """sum_k weights[k] * expert_out[k] per token, (B, T, D): as transformers adds them, so that the numbers agree
        in bfloat16 too: each term rounded to the model's dtype and added in it, the experts in the order of their
        ids."""
        terms = (expert_out * weights.unsqueeze(-1)).to(expert_out.dtype)  # (B, T, K, D)
        by_id = chosen.argsort(dim=-1).unsqueeze(-1).expand_as(terms)
        terms = terms.gather(2, by_id)
        total = terms[:, :, 0]
        for k in range(1, terms.shape[2]):
            total = total + terms[:, :, k]
        return total

    def forward(self, x: Tensor, rec: Recorder | None = None) -> Tensor:
        B, T, D = x.shape
        K = self.config.top_k
        chosen, weights = self.route(x, rec)
        expert_out = self.expert_outputs(x.reshape(B * T, D), chosen.reshape(-1)).view(B, T, K, D)
        expert_out = record(rec, "expert_out", expert_out)  # (B, T, K, D): before their weights
        routed = record(rec, "routed_out", self.weighted_sum(expert_out, weights, chosen))
        shared = record(rec, "shared_out", self.shared_experts(x))
        return record(rec, "out", routed + shared)
