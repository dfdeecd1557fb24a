"""gpt-oss through transformers' own modules: each query's weight on the sink (`attn.sink_weight`) is the sink's
column of the softmax over the keys and the sink, element by element, the small weights too (not 1 - the row sum
of the pattern, which rounds a weight below 1e-7 to noise, negative at times). The reference: the same softmax in
float64 from the recorded queries and keys, the mask and the module's own sink logits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from transformer_explainer.bridge import load_decoder, record  # noqa: E402

from ..helpers.hf_checkpoints import write_checkpoint  # noqa: E402


@pytest.mark.parametrize("leave_out", [(), ("attn.masked_scores", "attn.z")])
def test_sink_weight_is_the_softmax_column_even_when_small(tmp_path: Path, leave_out: tuple[str, ...]) -> None:
    model = load_decoder(write_checkpoint("gpt_oss", tmp_path))
    ids = torch.randint(3, 300, (12,), generator=torch.Generator().manual_seed(0))
    rec = record(model, ids, leave_out=leave_out)
    v = rec.values
    layers = [i for i in range(len(rec.layers)) if f"blocks.{i}.attn.sink" in v]
    assert layers == [0, 1, 2, 3]
    smallest = 1.0
    for i in layers:
        attn = model.model.layers[i].self_attn
        q, k = v[f"blocks.{i}.attn.q"].double(), v[f"blocks.{i}.attn.k"].double()
        scale, _ = rec.scales[i]
        k = k.repeat_interleave(q.shape[0] // k.shape[0], 0)
        scores = q @ k.transpose(-1, -2) * scale + v[f"blocks.{i}.attn.mask"].double().clamp_min(-1e300)
        sink = attn.sinks.detach().double()[:, None, None].expand(-1, q.shape[1], 1)
        want = torch.softmax(torch.cat([scores, sink], -1), -1)[..., -1]  # (H, T)
        got = v[f"blocks.{i}.attn.sink_weight"].double()
        assert (got >= 0).all(), i
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-30)  # relative to each weight, however small
        smallest = min(smallest, float(want.min()))
    assert smallest < 1e-7  # the checkpoint has weights that 1 - the row sum would lose
