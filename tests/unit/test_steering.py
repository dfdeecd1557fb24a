"""Steering (steering.py): strength 0 is plain generation token for token; a steered forward and a steered,
KV-cached generation equal an independent hook that adds the vector to the block's output (the whole sequence run
again at every step, no cache); the contrast direction equals an independent mean difference; bad input is one
sentence each."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
import torch

from transformer_explainer import load_model
from transformer_explainer.engine import ExplainerModel
from transformer_explainer.errors import InputError
from transformer_explainer.sampling import SamplingParams, most_likely
from transformer_explainer.steering import (
    MAX_CONTRAST_PROMPTS,
    Direction,
    contrast_direction,
    direction_lens,
    steer,
    steered_tokens,
    steering,
    vector_direction,
)
from transformer_explainer.steering_features import choose_direction

from ..helpers.hf_checkpoints import write_checkpoint

PARAMS = [SamplingParams(temperature=0), SamplingParams(temperature=0.9, top_k=40, seed=7),
          SamplingParams(temperature=1.3, top_p=0.9, seed=123)]
PROMPT = "The king said hello to the queen"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> ExplainerModel:
    folder: Path = write_checkpoint("llama", tmp_path_factory.mktemp("steer-llama") / "llama", tokenizer=True)
    model = load_model(str(folder), allow_download=False)
    assert isinstance(model, ExplainerModel)
    return model


@pytest.fixture(params=["gpt2", "llama"])
def model(request: pytest.FixtureRequest, tiny_model, llama) -> ExplainerModel:
    return tiny_model if request.param == "gpt2" else llama


def _random_direction(model, layer: int, seed: int = 0) -> Direction:
    g = torch.Generator().manual_seed(seed)
    return vector_direction(model, torch.randn(model.config.n_embd, generator=g), layer)


@pytest.mark.parametrize("params", PARAMS)
def test_strength_zero_is_plain_generation(model, params: SamplingParams) -> None:
    ids = model.encode(PROMPT)
    plain = list(model.generate_ids(ids, 12, params))
    zero = steered_tokens(model, ids, _random_direction(model, 1), 0.0, 12, params)
    assert [t.id for t in zero] == [t.id for t in plain] and len(plain) > 0
    assert [t.prob for t in zero] == [t.prob for t in plain]
    s = steer(model, PROMPT, _random_direction(model, 0), 0.0, tokens=12, params=params, sweep=False)
    assert [t.id for t in s.steered] == [t.id for t in s.plain] == [t.id for t in plain]
    assert s.changed_at is None


def _hand_hook(model: ExplainerModel, layer: int, vector: torch.Tensor):
    """An independent steering: a forward hook on the whole block that adds `vector` to the residual stream it
    returns (Block.forward returns (resid_post, keys and values))."""

    def hook(_m, _args, out):
        x, present = out
        return x + vector.to(x.dtype), present

    return model.net.blocks[layer].register_forward_hook(hook)


@pytest.mark.parametrize("layer", [0, 1])
def test_a_steered_forward_equals_a_hook_on_the_block(model, layer: int) -> None:
    ids = torch.tensor([model.encode(PROMPT)])
    v = 3.0 * _random_direction(model, layer, seed=layer).vector
    with torch.inference_mode():
        plain = model.net(ids)
        with steering(model, layer, v):
            ours = model.net(ids)
        handle = _hand_hook(model, layer, v)
        try:
            theirs = model.net(ids)
        finally:
            handle.remove()
        after = model.net(ids)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-5)
    assert (ours - plain).abs().max() > 1e-2  # it did steer
    assert torch.equal(after, plain)  # and left the model as it was


def test_steered_cached_generation_equals_a_hook_without_a_cache(model) -> None:
    """Greedy: each token from a full forward over prompt + tokens so far with the hand hook on the block (no KV
    cache), against the model's own loop with its cache and lean decode step under `steering`."""
    ids = model.encode(PROMPT)
    d = _random_direction(model, 1, seed=5)
    strength = 2.5
    ours = [t.id for t in steered_tokens(model, ids, d, strength, 10, SamplingParams(temperature=0))]
    handle = _hand_hook(model, 1, strength * d.vector)
    seq = list(ids)
    eos = set(model.tokenizer.eos_ids())
    try:
        with torch.inference_mode():
            for _ in range(10):  # as generation does: up to an end-of-text token
                seq.append(most_likely(model.net(torch.tensor([seq]))[0, -1]))
                if seq[-1] in eos:
                    break
    finally:
        handle.remove()
    plain = [t.id for t in model.generate_ids(ids, 10, SamplingParams(temperature=0))]
    assert ours == seq[len(ids):]
    assert ours != plain  # the direction is strong enough to change the text


def _block_outputs(model: ExplainerModel, text: str, layer: int) -> torch.Tensor:
    got = []
    handle = model.net.blocks[layer].register_forward_hook(lambda _m, _a, out: got.append(out[0][0].clone()))
    try:
        with torch.inference_mode():
            model.net(torch.tensor([model.encode(text)]))
    finally:
        handle.remove()
    return got[0]  # (T, D)


def test_contrast_direction_is_the_difference_of_the_means(model) -> None:
    a = ["I love this, it is wonderful", "What a happy day", "great"]
    b = ["I hate this, it is awful", "What a sad day"]
    d = contrast_direction(model, a, b, 1)
    mean = lambda texts: torch.stack([_block_outputs(model, t, 1).mean(0) for t in texts]).mean(0)  # noqa: E731
    assert torch.allclose(d.vector, mean(a) - mean(b), atol=1e-5)
    assert d.kind == "contrast" and d.layer == 1


def test_the_lens_of_a_direction_reads_the_unembedding(tiny_model) -> None:
    """GPT-2's final LayerNorm of a direction, less its shift, through W_U: the promoted tokens are the largest of
    that, the suppressed the smallest, each with its logit change."""
    net = tiny_model.net
    v = _random_direction(tiny_model, 0, seed=3).vector
    up, down = direction_lens(tiny_model, v, top=5)
    ln = net.ln_final
    centred = (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + ln.eps)
    change = (centred * ln.weight.detach()) @ net.unembed.weight.detach().T
    assert [t.id for t in up] == torch.topk(change, 5).indices.tolist()
    assert [t.id for t in down] == torch.topk(-change, 5).indices.tolist()
    assert up[0].logit == pytest.approx(float(change.max()), rel=1e-4)


def test_the_sweep_finds_where_the_text_breaks_down(tiny_model) -> None:
    d = _random_direction(tiny_model, 1, seed=2)
    s = steer(tiny_model, PROMPT, d, 1.0, tokens=8)
    assert [p.strength for p in s.sweep] == sorted(p.strength for p in s.sweep) and len(s.sweep) >= 5
    assert s.bound == pytest.approx(s.plain_log_prob + 0.5 * (-math.log(tiny_model.config.vocab_size)
                                                              - s.plain_log_prob))
    assert s.plain_distinct == len({t.id for t in s.plain}) / len(s.plain) and s.distinct_bound == s.plain_distinct / 2
    for p in s.sweep:
        assert p.distinct == len({t.id for t in p.tokens}) / len(p.tokens)
        assert p.broken == (p.mean_log_prob < s.bound or p.distinct < s.distinct_bound)
    b = s.breakdown
    assert b is None or b == next(p.strength for p in s.sweep if p.broken)
    assert "plain" in repr(s) and "steered" in repr(s)
    # the mean log-probability is the unsteered model's, teacher-forced
    ids = s.prompt_ids + [t.id for t in s.steered]
    with torch.inference_mode():
        logp = torch.log_softmax(tiny_model.net(torch.tensor([ids]))[0], -1)
    n = len(s.prompt_ids)
    want = sum(float(logp[n - 1 + i, t.id]) for i, t in enumerate(s.steered)) / len(s.steered)
    assert s.steered_log_prob == pytest.approx(want, abs=1e-5)


def test_another_thread_is_not_steered(tiny_model) -> None:
    ids = tiny_model.encode(PROMPT)
    greedy = SamplingParams(temperature=0)
    plain = [t.id for t in tiny_model.generate_ids(ids, 10, greedy)]
    d = _random_direction(tiny_model, 1, seed=5)
    other: list[int] = []
    with steering(tiny_model, 1, 50.0 * d.vector):
        thread = threading.Thread(target=lambda: other.extend(t.id for t in tiny_model.generate_ids(ids, 10, greedy)))
        thread.start()
        thread.join()
        steered = [t.id for t in tiny_model.generate_ids(ids, 10, greedy)]
    assert other == plain and steered != plain


def test_a_text_that_repeats_one_token_is_broken_though_likely() -> None:
    """",,,,,,,," can stay likely under the unsteered model (each comma after commas); its share of distinct tokens
    (1 of 8) below half the plain text's says it broke down."""
    from transformer_explainer.steering import broken, distinct_share

    assert distinct_share([5] * 8) == 1 / 8 and distinct_share([1, 2, 3, 1]) == 3 / 4 and distinct_share([]) == 1.0
    assert broken(-2.0, 1 / 8, -5.0, 0.5 * 3 / 4) and not broken(-2.0, 3 / 4, -5.0, 0.5 * 3 / 4)
    assert broken(-6.0, 3 / 4, -5.0, 0.5 * 3 / 4)


# -- bad input: one sentence each ---------------------------------------------------------------------------------


def _one_sentence(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert msg and "\n" not in msg and "Traceback" not in msg
    return msg


def test_bad_input_is_one_sentence(tiny_model) -> None:
    m = tiny_model
    L, D = m.config.n_layer, m.config.n_embd
    d = _random_direction(m, 0)
    with pytest.raises(InputError) as e:
        choose_direction(m, contrast=(["a"], ["b"]), layer=L)
    assert f"outside 0..{L - 1}" in _one_sentence(e) and e.value.code == "layer_out_of_range"
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(InputError) as e:
            steer(m, PROMPT, d, bad)
        assert "finite" in _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, contrast=([], ["b"]), layer=0)
    assert "set A is empty" in _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, contrast=(["a"], []), layer=0)
    assert "set B is empty" in _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, contrast=(["a"] * (MAX_CONTRAST_PROMPTS + 1), ["b"]), layer=0)
    _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, contrast=(["the same"], ["the same"]), layer=0)
    assert "zero" in _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, vector=torch.ones(D + 1), layer=0)
    assert f"{D} wide" in _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, vector=torch.full((D,), math.nan), layer=0)
    _one_sentence(e)
    with pytest.raises(InputError) as e:
        steer(m, "word " * (m.context_length + 5), d, 1.0)
    assert e.value.code == "text_too_long" and _one_sentence(e)
    with pytest.raises(InputError) as e:
        steer(m, PROMPT, d, 1.0, tokens=0)
    _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, contrast=(["a"], ["b"]))
    assert "layer" in _one_sentence(e)
    with pytest.raises(InputError) as e:
        choose_direction(m, contrast=(["a"], ["b"]), vector=torch.ones(D), layer=0)
    assert "exactly one" in _one_sentence(e)


# -- every family with code of our own, and a model through transformers ----------------------------------------


@pytest.fixture(scope="module", params=["qwen3", "gemma3_text", "mixtral", "qwen3_moe", "olmoe"])
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ExplainerModel:
    from tests.conftest import make_hf_llama_family

    model = load_model(str(make_hf_llama_family(tmp_path_factory.mktemp(f"steer-{request.param}"), request.param)),
                       allow_download=False)
    assert isinstance(model, ExplainerModel)
    return model


def test_every_family_steers_as_a_hook_on_the_block_does(family) -> None:
    """Gemma 3 norms the MLP's write before adding it (the hook is on that norm), the mixtures' MLP is a router and
    experts: steered forward and cached generation equal the hand hook on the block in each."""
    layer = family.config.n_layer - 2
    ids = family.encode(PROMPT)
    d = _random_direction(family, layer, seed=11)
    v = 4.0 * d.vector
    with torch.inference_mode():
        with steering(family, layer, v):
            ours = family.net(torch.tensor([ids]))
        handle = _hand_hook(family, layer, v)
        try:
            theirs = family.net(torch.tensor([ids]))
            seq = list(ids)
            eos = set(family.tokenizer.eos_ids())
            for _ in range(6):  # as generation does: up to an end-of-text token
                seq.append(most_likely(family.net(torch.tensor([seq]))[0, -1]))
                if seq[-1] in eos:
                    break
        finally:
            handle.remove()
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4)
    assert [t.id for t in steered_tokens(family, ids, d, 4.0, 6, SamplingParams(temperature=0))] == seq[len(ids):]
    zero = steered_tokens(family, ids, d, 0.0, 6, SamplingParams(temperature=0.8, seed=1))
    assert [t.id for t in zero] == [t.id for t in family.generate_ids(ids, 6, SamplingParams(temperature=0.8, seed=1))]


def test_a_model_through_transformers_steers_as_our_code_does(llama, tmp_path: Path) -> None:
    """The same Llama checkpoint run by our code and through transformers' modules (a hook on its decoder layer):
    the same steered tokens, greedy and sampled; strength 0 is its plain generation."""
    from transformers import AutoModelForCausalLM

    from transformer_explainer.generic import GenericModel

    folder = write_checkpoint("llama", tmp_path / "llama", tokenizer=True)
    own = load_model(str(folder), allow_download=False)
    generic = GenericModel(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), own.tokenizer, "hf")
    ids = own.encode(PROMPT)
    d = _random_direction(own, 1, seed=4)
    for params in PARAMS[:2]:
        a = steered_tokens(own, ids, d, 3.0, 8, params)
        b = steered_tokens(generic, ids, d, 3.0, 8, params)
        assert [t.id for t in a] == [t.id for t in b]
        assert [t.id for t in steered_tokens(generic, ids, d, 0.0, 8, params)] == \
            [t.id for t in generic.generate_ids(ids, 8, params)]
    assert [t.id for t in a] != [t.id for t in own.generate_ids(ids, 8, PARAMS[1])]
    assert torch.allclose(contrast_direction(own, ["a b c"], ["x y"], 1).vector,
                          contrast_direction(generic, ["a b c"], ["x y"], 1).vector, atol=1e-4)
    a, b = (steer(m, PROMPT, d, 3.0, tokens=6, params=PARAMS[1]) for m in (own, generic))
    assert a.residual_norm == pytest.approx(b.residual_norm, rel=1e-4)
    assert a.plain_log_prob == pytest.approx(b.plain_log_prob, abs=1e-4)
    assert [p.mean_log_prob for p in a.sweep] == pytest.approx([p.mean_log_prob for p in b.sweep], abs=1e-4)
    up_own, _ = direction_lens(own, d.vector)
    up_generic, _ = direction_lens(generic, d.vector)
    assert [t.id for t in up_own] == [t.id for t in up_generic]
