"""schemathesis over the OpenAPI schema: generated requests (a bounded number per operation,
from its examples, coverage and fuzzing phases) as a site admin and as a team member must never
answer 5xx, and every answer must match the schema (status codes, content types, bodies). Rate
limits are lifted for the run; `-s` prints how many cases each phase sent."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

# A bound that keeps the module near a minute on a shared 2-core machine: 42 operations,
# the site admin (who may call all of them) gets more examples than the member.
ADMIN_EXAMPLES = 6
MEMBER_EXAMPLES = 2


CASES: Counter[str] = Counter()


@pytest.fixture(autouse=True, scope="module")
def _count_cases() -> Iterator[None]:
    yield
    print(f"\nschemathesis cases by phase: {dict(CASES)}, {sum(CASES.values())} in all")


@pytest.fixture(autouse=True)
def _no_rate_limits(settings: Any) -> None:
    settings.GPUQUEUE_API_RATE = ""
    settings.GPUQUEUE_API_ANON_RATE = ""


@pytest.fixture(autouse=True)
def _keep_the_test_connection(db: Any, nodes: Any) -> Any:
    """As Django's test client does: a request must not close the test's connection (and
    with it the transaction every example runs in)."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _load_schema() -> Any:
    # Loaded at collection: the schema view needs neither the database nor a user. (A lazy
    # schemathesis.pytest.from_fixture loader fails on pytest 9: it reads Function._nodeid.)
    from gpuqueue.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


schema = _load_schema()


def bounded(examples: int) -> Any:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@schema.parametrize()
@bounded(ADMIN_EXAMPLES)
def test_as_a_site_admin(case: Any, tokens: dict[str, str], submit: Any) -> None:
    CASES[case.meta.phase.name.value] += 1
    case.call_and_validate(headers={"Authorization": f"Bearer {tokens['root']}"}, checks=CHECKS)


@schema.parametrize()
@bounded(MEMBER_EXAMPLES)
def test_as_a_team_member(case: Any, tokens: dict[str, str], submit: Any) -> None:
    CASES[case.meta.phase.name.value] += 1
    case.call_and_validate(headers={"Authorization": f"Bearer {tokens['alice']}"}, checks=CHECKS)
