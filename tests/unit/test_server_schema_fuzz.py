"""Schema-driven fuzzing of the HTTP API (schemathesis): requests generated from the OpenAPI schema
the server itself serves (GET /api/openapi.json), for every operation, both valid ones and
deliberately invalid ones. The answer is never a 5xx, an invalid request is refused with a 4xx, and
every answer conforms to the schema: status code, content type, headers and body as declared
(schemathesis' own checks).

Cases run per operation go to test-artifacts/schemathesis_cases.json.

Without schemathesis installed the module is skipped on a developer's machine, but fails where the
`CI` environment variable is set: in CI this fuzzing must run, not pass silently."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

try:
    import schemathesis
except ModuleNotFoundError:
    if os.environ.get("CI"):
        pytest.fail("schemathesis is not installed, and CI must run the schema fuzzing: install the test extras "
                    "(pip install -e '.[test]')", pytrace=False)
    pytest.skip("schemathesis is not installed (pip install -e '.[test]'); with CI set this fails instead",
                allow_module_level=True)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from transformer_explainer.server import ServerSettings, create_app  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
MAX_EXAMPLES = 40  # per operation and mode: the whole module stays well under 2 min on 2 busy cores
# starting a training run (and following its event stream) is real work for minutes, not a request to fuzz
SKIP = {("POST", "/api/seq2seq/train"), ("GET", "/api/seq2seq/train/{run_id}/events"),
        ("POST", "/api/induction/train"), ("GET", "/api/induction/train/{run_id}/events")}


@pytest.fixture(scope="module")
def api_schema(tiny_model):
    app = create_app({"tiny": tiny_model}, ServerSettings(request_timeout_s=120))
    return schemathesis.openapi.from_asgi("/api/openapi.json", app)


def fuzz(op, mode: GenerationMode, cases: Counter[str]) -> None:
    label = f"{op.method.upper()} {op.path}"

    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def check(case) -> None:
        cases[label] += 1
        # schema-valid is not always acceptable: a tensor name, a head, a token id or a model name
        # can be well-formed and still not exist in this model; those get a 4xx with a message
        response = case.call_and_validate(excluded_checks=[positive_data_acceptance])
        assert response.status_code < 500, (label, response.status_code, response.text[:300])
        if response.status_code >= 400:
            detail = response.json()["detail"]
            assert isinstance(detail, str) and detail, (label, response.text[:300])

    try:
        check()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise  # an operation with no parameters has no invalid request to make; that is all this allows


def test_every_operation_conforms_and_never_5xx(api_schema):
    cases: Counter[str] = Counter()
    operations = [r.ok() for r in api_schema.get_all_operations()]
    assert len(operations) >= 10
    for op in operations:
        if (op.method.upper(), op.path) not in SKIP:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzz(op, mode, cases)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "schemathesis_cases.json").write_text(json.dumps(
        {"total": sum(cases.values()), "operations": len(cases), "failed": 0,
         "per_operation": dict(sorted(cases.items()))}, indent=2) + "\n")
    assert sum(cases.values()) >= 10 * len(cases)
