"""Errors a person can act on. Each message says what went wrong and what to do; none needs a traceback.

Every error also carries a `code` from `ERROR_CODES` and the `params` its sentence needs. The server's
JSON error answer (`schemas.ErrorOut`) sends the English message as `detail` (for curl users and the
CLI) beside the code and params; the web app shows its own sentence for the code, `error.<code>` in the
learner's language (web/src/locales/), filled in with the params. `ERROR_CODES` is the contract between
the two: codegen exports it (web/src/lib/generated/errors.ts), and tests check that each code raised
names the params declared here and that every catalogue has a sentence for it using only those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ParamValue = str | int | float


@dataclass(frozen=True)
class ErrorCodeInfo:
    params: tuple[str, ...]  # the names of the values an answer with this code carries
    meaning: str  # when the server answers it (for the docs and the generated TypeScript)


def _code(meaning: str, *params: str) -> ErrorCodeInfo:
    return ErrorCodeInfo(params, meaning)


# The stable list of codes: a code, once published, keeps its meaning and params (add new ones instead).
# Every catalogue sentence may also use {detail}, the English message.
ERROR_CODES: dict[str, ErrorCodeInfo] = {
    # generic: the class of the error, when no more specific code applies (the UI shows the detail)
    "error": _code("an error without a more specific code"),
    "input_invalid": _code("the input or a parameter cannot be used; the detail says why"),
    "model_not_found": _code("a model, task or item named in the request does not exist here"),
    "forbidden": _code("the server refuses this request from this client; the detail says why"),
    "model_unusable": _code("the model's files could not be loaded; `reason` says why", "reason"),
    "internal": _code("a bug: the server logged the details", "kind"),
    # the request itself
    "request_invalid": _code("the request does not match the API's schema; the detail says where"),
    "body_unreadable": _code("the request body is not JSON the server can read"),
    "body_too_large": _code("the request body is over the server's limit of `limit` bytes", "limit"),
    "not_found": _code("no API endpoint or file at `path`", "path"),
    "field_missing": _code("the request lacks the field `field`", "field"),
    "field_unknown": _code("the request has a field `field` the API does not know", "field"),
    "field_type": _code("the field `field` has the wrong type of value", "field"),
    "field_too_long": _code("the field `field` is longer than `limit` (characters or items)", "field", "limit"),
    "field_too_short": _code("the field `field` is shorter than `limit` (characters or items)", "field", "limit"),
    "number_too_small": _code("the number `field` must be at least `limit`", "field", "limit"),
    "number_not_above": _code("the number `field` must be more than `limit`", "field", "limit"),
    "number_too_large": _code("the number `field` must be at most `limit`", "field", "limit"),
    "number_not_below": _code("the number `field` must be less than `limit`", "field", "limit"),
    "number_not_finite": _code("the number `field` must be finite", "field"),
    # the text and its tokens
    "text_empty": _code("the text is empty (or, for an encoder-decoder task, only spaces)"),
    "text_no_tokens": _code("the tokenizer made no tokens of the text"),
    "text_not_unicode": _code("the text contains a lone surrogate (it is not valid Unicode)"),
    "text_control_char": _code("the text contains the control character `char` (U+XXXX) at `index`",
                               "char", "index"),
    "ids_empty": _code("the list of token ids is empty"),
    "text_too_long": _code("the input has `tokens` tokens and at most `limit` fit (the model reads `context`, a "
                           "server may allow fewer): shorten it, or ask for truncation to keep the last `limit`",
                           "tokens", "limit", "context"),
    "prompt_too_long": _code("a text of a request that does not truncate (a patched pair, texts to tokenize) has "
                             "`tokens` tokens and at most `limit` fit: shorten it", "tokens", "limit"),
    "context_full": _code("the text already fills the `limit` tokens that fit: nothing more can be generated",
                          "limit"),
    "token_id_out_of_range": _code("the token id `id` is outside the vocabulary, whose ids are 0..`max`",
                                   "id", "max"),
    "generate_count": _code("the number of tokens to generate must be a whole number >= 0", "value"),
    # sampling
    "temperature_invalid": _code("the temperature must be a finite number >= 0 (0: greedy)", "value"),
    "temperature_too_low": _code("a temperature other than 0 must be at least `min`", "value", "min"),
    "top_k_invalid": _code("top-k must be a whole number >= 1 (or omitted)", "value"),
    "top_k_too_large": _code("top-k is larger than the vocabulary of `vocab` tokens", "value", "vocab"),
    "top_p_invalid": _code("top-p must be in (0, 1] (or omitted)", "value"),
    "seed_invalid": _code("the seed must be a whole number in [0, 2^63)", "value"),
    # models and the server's state
    "model_unknown": _code("this server has no model `model`; it offers `offered` (comma-separated)",
                           "model", "offered"),
    "model_loading": _code("the server is still loading its model"),
    "server_starting": _code("the server is starting and cannot answer yet"),
    "model_load_failed": _code("the server could not load its model (`reason`) and stops", "reason"),
    "busy": _code("the server's queue is full (`ahead` requests before this one): try again shortly", "ahead"),
    "timed_out": _code("the request took longer than the server's limit of `seconds` s", "seconds"),
    "shutting_down": _code("the server is shutting down"),
    "rate_limited": _code("this address sent more than `rate` requests a second: wait `wait` s", "rate", "wait"),
    "too_many_calls": _code("this address has `active` model calls running or waiting, over its share of `share`",
                            "active", "share"),
    "too_many_analyses": _code("this address has `active` analyses (head importance, pruning, patching, steering) "
                               "running or waiting, its share is `share`", "active", "share"),
    "too_many_switches": _code("this address is loading the model `model` already: one model switch at a time",
                               "model"),
    "host_refused": _code("the server answers only to other host names"),
    "origin_refused": _code("a request from another site that the server refuses"),
    "token_required": _code("the server needs its access token"),
    # downloads (the download panel)
    "downloads_off": _code("this server does not download models (it is reachable from other machines)"),
    "download_busy": _code("`model` is downloading; one download at a time", "model"),
    "download_not_offered": _code("`model` is not a model this server downloads; it offers `offered`",
                                  "model", "offered"),
    "download_not_found": _code("there is no download `id`", "id"),
    "download_offline": _code("the Hugging Face hub cannot be reached"),
    "download_interrupted": _code("the connection broke; `done` of `total` bytes are kept for the next attempt",
                                  "done", "total"),
    "download_no_repo": _code("the hub has no public repo `repo`", "repo"),
    "download_no_files": _code("the hub repo `repo` has no config.json and weights to download", "repo"),
    "download_damaged": _code("the file `file` arrived damaged and was deleted: try again", "file"),
    "download_failed": _code("the download failed for another reason: `reason`", "reason"),
    # the encoder-decoder page
    "s2s_unknown_task": _code("there is no task `task`; the tasks are `tasks` (comma-separated)", "task", "tasks"),
    "s2s_out_of_vocabulary": _code("the `what` (input, target or example) holds `level`s (char or word) outside "
                                   "the task's vocabulary: `pieces`", "what", "level", "pieces"),
    "s2s_text_too_long": _code("the input has `tokens` tokens; the task's model reads at most `limit`",
                               "tokens", "limit"),
    "s2s_target_empty": _code("the target is empty"),
    "s2s_target_too_long": _code("the target has `tokens` tokens; at most `limit`", "tokens", "limit"),
    "s2s_no_reference": _code("the task cannot work out the right output for this input: give a target"),
    "s2s_beam_size": _code("the beam size must be between 1 and `max`", "value", "max"),
    "s2s_example_unsolvable": _code("the task cannot work out the answer to the example `example`", "example"),
    "s2s_example_too_long": _code("the example has `tokens` tokens; the task allows `limit`", "tokens", "limit"),
    "s2s_steps": _code("a training run's steps must be between 1 and `max`", "value", "max"),
    "training_busy": _code("a training run (`run`) is already going on this server", "run"),
    "induction_limit": _code("a live induction run's `name` must be from `lo` to `hi`; got `value`",
                             "name", "lo", "hi", "value"),
    "induction_width": _code("the width `width` is not a multiple of the heads `heads`", "width", "heads"),
    "induction_not_owner": _code("another client started the live run `run`: only it may steer or stop it", "run"),
    "induction_state": _code("the live run `run` is `status`: that cannot be done to it now", "run", "status"),
    "live_training_off": _code("this server does not train live (a shared server replays the recorded run; "
                               "`serve --live-training` turns it on)"),
    # analyses (the experiments)
    "not_one_token": _code("`token` is not one token but `count`: choose a word that is one token",
                           "token", "count"),
    "token_empty": _code("an empty string is not a token"),
    "analogy_empty": _code("an analogy needs at least one token to add"),
    "projection_too_few": _code("a projection needs at least two tokens"),
    "loss_needs_two_tokens": _code("a loss needs a text of at least two tokens (one to read, one to predict)"),
    "layer_out_of_range": _code("layer `layer` is outside 0..`max`", "layer", "max"),
    "head_out_of_range": _code("head `head` is outside 0..`max`", "head", "max"),
    "position_out_of_range": _code("position `position` is outside the `tokens` traced tokens", "position",
                                   "tokens"),
    "count_too_small": _code("the count `field` must be at least 1", "field", "value"),
    "analysis_too_large": _code("the analysis would run `passes` forward passes of `tokens` tokens, more than the "
                                "server computes for one request", "passes", "tokens"),
    "analysis_too_large_text": _code("as analysis_too_large, and a text of at most `fits` tokens would fit",
                                     "passes", "tokens", "fits"),
    # steering (a direction added to the residual stream; the web app's sentences give no CLI advice)
    "steer_one_direction": _code("a steering needs exactly one direction: a feature, or a contrast with a layer"),
    "steer_layer_missing": _code("a contrast direction needs the layer to read it at and add it to"),
    "steer_set_empty": _code("contrast set `set` (A or B) has no prompt", "set"),
    "steer_set_too_many": _code("contrast set `set` has `count` prompts; at most `limit` are read",
                                "set", "count", "limit"),
    "steer_prompt_too_long": _code("prompt `prompt` of contrast set `set` has `chars` characters; at most `limit`",
                                   "set", "prompt", "chars", "limit"),
    "steer_sets_alike": _code("the two contrast sets have the same mean after block `layer`: their difference is "
                              "zero and adds nothing", "layer"),
    "steer_no_saes": _code("the model `model` ships no autoencoder at a block's output (hook_resid_post), so no "
                           "feature steers it: use a contrast", "model"),
    "steer_no_sae_at": _code("the model `model` ships no autoencoder at `hook`; features steer at `hooks` "
                             "(comma-separated)", "model", "hook", "hooks"),
    "steer_feature_out_of_range": _code("feature `id` is outside 0..`max` (the autoencoder at `hook`)",
                                        "id", "max", "hook"),
}


class ExplainerError(Exception):
    """Base class: the CLI and the server print these as one line, never as a stack trace.

    `code` (a key of ERROR_CODES; the class's own when not given) and `params` are what the web app
    shows the error with, in the learner's language."""

    code = "error"

    def __init__(self, message: str = "", *, code: str | None = None, **params: ParamValue) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.params: dict[str, ParamValue] = params


class ModelNotFoundError(ExplainerError):
    """A model spec names nothing that can be loaded here."""

    code = "model_not_found"


class CheckpointError(ExplainerError):
    """A checkpoint folder or file is incomplete, corrupt, or does not match its config."""

    code = "model_unusable"

    def __init__(self, message: str = "", *, code: str | None = None, **params: ParamValue) -> None:
        super().__init__(message, code=code, **params)
        self.params.setdefault("reason", message)  # the code's one param: what is wrong with the files


class InputError(ExplainerError, ValueError):
    """The user's text or parameters cannot be used as given."""

    code = "input_invalid"


def coded(exc: BaseException) -> tuple[str, dict[str, ParamValue]] | None:
    """The code and params `exc` carries (an ExplainerError, or another error that sets both, such as the
    server's Busy), or None."""
    code = getattr(exc, "code", None)
    if not isinstance(code, str) or code not in ERROR_CODES:
        return None
    params = getattr(exc, "params", None)
    return code, dict(params) if isinstance(params, Mapping) else {}


def error_answer(detail: str, code: str, params: Mapping[str, ParamValue] | None = None,
                 **extra: Any) -> dict[str, Any]:
    """The JSON body of an error answer (schemas.ErrorOut): the English `detail`, the code, its params,
    and any `extra` fields (e.g. the field-level `errors` of an invalid request)."""
    return {"detail": detail, "code": code, "params": dict(params or {}), **extra}
