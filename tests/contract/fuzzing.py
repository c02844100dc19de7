"""A bounded property-based fuzzer: schemathesis cases from a committed OpenAPI spec.

``fuzz(spec, base_url, ...)`` generates up to ``max_examples`` requests per operation and per
mode (positive: what the spec allows; negative: what it forbids), sends each to a real server,
and checks the answer with schemathesis: ``not_a_server_error``, ``status_code_conformance``,
``content_type_conformance`` and ``response_schema_conformance``. Failures are collected, not
raised, so hypothesis does not spend time shrinking them; the caller asserts on the report.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import HypothesisDeprecationWarning, Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

__all__ = ["FuzzReport", "fuzz"]

_SPEC_CHECKS = (status_code_conformance, content_type_conformance, response_schema_conformance)


@dataclass
class FuzzReport:
    """What one fuzzing run did: requests sent, 5xx answers and spec violations."""

    label: str
    cases: int = 0
    server_errors: int = 0
    spec_violations: int = 0
    by_operation: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """One line with the figures the issue asks for."""
        return (
            f"fuzz {self.label}: {self.cases} cases over {len(self.by_operation)} operations, "
            f"{self.server_errors} server errors (5xx), {self.spec_violations} spec violations, "
            f"statuses {dict(sorted(self.statuses.items()))}, {self.seconds:.1f} s"
        )

    def record_failure(self, text: str) -> None:
        """Keep the first failures for the assertion message."""
        if len(self.failures) < 20:  # enough to debug; the counts hold the rest
            self.failures.append(text)


def _describe(case: Any, response: Any) -> str:
    body = response.text[:300] if hasattr(response, "text") else ""
    return (
        f"{case.operation.label} path={case.path_parameters} query={case.query} "
        f"body={str(case.body)[:200]!r} -> {response.status_code} {body}"
    )


def fuzz(
    spec: Mapping[str, Any],
    base_url: str,
    *,
    label: str,
    headers: Mapping[str, str] | None = None,
    max_examples: int = 25,
    modes: Sequence[GenerationMode] = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE),
    path_parameters: Mapping[str, Mapping[str, Any]] | None = None,
    timeout_s: float = 30.0,
) -> FuzzReport:
    """Fuzz every operation of ``spec`` against the server at ``base_url``.

    ``path_parameters`` maps an operationId to fixed path parameters (to reach stored records
    instead of only unknown ids). Each request times out after ``timeout_s``.
    """
    schema = schemathesis.openapi.from_dict(dict(spec))
    report = FuzzReport(label)
    started = time.monotonic()
    with requests.Session() as session:
        target = _Target(base_url, dict(headers or {}), session, timeout_s)
        for result in schema.get_all_operations():
            operation = result.ok()
            operation_id = str(operation.definition.raw.get("operationId", operation.label))
            fixed = dict((path_parameters or {}).get(operation_id, {}))
            for mode in modes:
                strategy = operation.as_strategy(
                    generation_mode=mode, path_parameters=fixed or None, headers=target.headers
                )
                # Nothing to generate (no negative case for an operation without input).
                with contextlib.suppress(Unsatisfiable):
                    _run(strategy, max_examples, target, report)
    report.seconds = time.monotonic() - started
    return report


@dataclass(frozen=True)
class _Target:
    base_url: str
    headers: dict[str, str]
    session: requests.Session
    timeout_s: float


def _run(strategy: Any, max_examples: int, target: _Target, report: FuzzReport) -> None:
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same cases on every run: a failure reproduces
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        response = case.call(
            base_url=target.base_url,
            session=target.session,
            headers=target.headers,
            timeout=target.timeout_s,
        )
        report.cases += 1
        report.by_operation[case.operation.label] += 1
        report.statuses[response.status_code] += 1
        if response.status_code >= 500:
            report.server_errors += 1
            report.record_failure(f"5xx: {_describe(case, response)}")
        try:
            case.validate_response(
                response, checks=[not_a_server_error, *_SPEC_CHECKS], headers=target.headers
            )
        except FailureGroup as exc:  # every check that failed for this case
            if response.status_code < 500:
                report.spec_violations += 1
                report.record_failure(f"spec: {_describe(case, response)}: {exc}"[:1500])

    with warnings.catch_warnings():
        # The server under test runs in a thread of this process and draws from the `random`
        # module (back-off jitter) while hypothesis generates a case; hypothesis would read
        # that as the strategy using `random` and fail the run as flaky.
        warnings.filterwarnings(
            "ignore",
            message="Do not use the `random` module inside strategies",
            category=HypothesisDeprecationWarning,
        )
        run()
