"""What the features of a text add to its trace (issue 35's goal: the Features view of a 128-token text adds at most
20 % to the trace's time), on explainer-small with its middle shipped autoencoder.

    .venv/bin/python benchmarks/features.py [--tokens 128] [--reps 20] [--threads N] [--hook blocks.3.hook_resid_post]

The view asks for a text's features after the text is traced (the app's trace is cached on the server, and the
features route reads it there), so the added time is: the activation read from the trace, encoded by the
autoencoder, and the answer built (`features_out`, as the API and the CLI's --json send it). The trace is
`model.trace` of the text (the plain forward pass that records; the server's trace answer costs more, so the ratio
against it would be smaller). The two are timed interleaved, round by round, after a warm-up that loads the
autoencoder once (as a server or a notebook does), and the medians are printed with their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from transformer_explainer import load_model
from transformer_explainer.features.encode import text_features
from transformer_explainer.features.sae import builtin_saes
from transformer_explainer.features.schemas import features_out

TEXT = ("The history of the city began when a small group of farmers settled near the river, where the water was "
        "clean and the soil was rich. Over the years, the village grew into a town, and the town grew into a city "
        "with markets, schools and a library that kept the records of every family. ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="explainer-small")
    ap.add_argument("--hook", default=None, help="default: the model's middle shipped autoencoder")
    ap.add_argument("--sae", type=Path, default=None, help="an autoencoder folder instead of the shipped one")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model, allow_download=False)
    if args.sae is None and not builtin_saes(model):
        raise SystemExit(f"{args.model} ships no autoencoder yet: give one with --sae")
    ids = model.tokenizer.encode(TEXT * 8)[: args.tokens]
    if len(ids) != args.tokens:
        raise SystemExit(f"the text gives {len(ids)} tokens, fewer than {args.tokens}")

    def trace():
        return model.trace_ids(ids)

    def features(t):
        fs = text_features(model, t, args.hook, args.sae)
        return fs, features_out(model.name, fs, 10)

    fs, _ = features(trace())  # warm-up: the autoencoder is read once and kept
    t_trace, t_feat = [], []
    with torch.inference_mode():
        for _ in range(args.reps):
            t0 = time.perf_counter()
            tr = trace()
            t1 = time.perf_counter()
            features(tr)
            t2 = time.perf_counter()
            t_trace.append(t1 - t0)
            t_feat.append(t2 - t1)
    a, b = statistics.median(t_trace), statistics.median(t_feat)
    print(f"{model.name}, {args.tokens} tokens, {torch.get_num_threads()} threads; autoencoder {fs.hook} "
          f"({fs.d_sae} features, k {fs.k}, {fs.source})")
    print(f"python: model.trace_ids median {a * 1e3:.2f} ms, features of that trace (encode + answer) "
          f"{b * 1e3:.2f} ms over {args.reps} rounds: features / trace = {b / a:.3f} (goal: at most 0.20)")
    if args.sae is None:  # the server offers the shipped autoencoders only
        a, b = api_rounds(model, ids, args.hook, args.reps)
        print(f"api:    POST /api/trace median {a * 1e3:.2f} ms, POST /api/features of the traced text {b * 1e3:.2f} "
              f"ms: features / trace = {b / a:.3f}")
    print(f"explained variance over the text {fs.explained_variance:.3f}")


def api_rounds(model, ids: list[int], hook: str | None, reps: int) -> tuple[float, float]:
    """The app's two requests, in process: the text traced (a new text each round: a token changed at the end, so
    nothing is cached), then its features (from the trace the server keeps, as the Features view asks)."""
    from fastapi.testclient import TestClient

    from transformer_explainer.server import ServerSettings, create_app

    t_trace, t_feat = [], []
    with TestClient(create_app({"m": model}, ServerSettings())) as c:
        for r in range(reps + 1):
            one = [*ids[:-1], (ids[-1] + r + 1) % model.config.vocab_size]
            t0 = time.perf_counter()
            assert c.post("/api/trace", json={"ids": one}).status_code == 200
            t1 = time.perf_counter()
            got = c.post("/api/features", json={"ids": one, **({"hook": hook} if hook else {})})
            t2 = time.perf_counter()
            assert got.status_code == 200, got.text
            if r:  # the first round warms the server up
                t_trace.append(t1 - t0)
                t_feat.append(t2 - t1)
    return statistics.median(t_trace), statistics.median(t_feat)


if __name__ == "__main__":
    main()
