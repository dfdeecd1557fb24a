"""Text from Python reaches the tokenizer without the server's schema in between: a string Python holds but
Unicode does not (a lone surrogate) is refused in one sentence by every face that tokenizes, where the
tokenizers library raised a bare TypeError ("TextInputSequence must be str")."""

from __future__ import annotations

import pytest

from transformer_explainer.errors import InputError
from transformer_explainer.steering import contrast_direction

BAD = "the cat \ud800 sat"


def test_a_lone_surrogate_is_one_sentence_in_trace_and_generate(tiny_model):
    for call in (lambda: tiny_model.trace(BAD), lambda: tiny_model.generate(BAD, 2),
                 lambda: tiny_model.encode(BAD)):
        with pytest.raises(InputError, match="not valid Unicode") as e:
            call()
        assert e.value.code == "text_not_unicode"


def test_a_lone_surrogate_in_a_contrast_prompt_is_one_sentence(tiny_model):
    with pytest.raises(InputError, match="contrast set A, prompt 2: the text is not valid Unicode"):
        contrast_direction(tiny_model, ["fine", BAD], ["also fine"], 0)
