"""Estimated starts, from running the engine forward in virtual time."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler.model import Policy
from tests.scheduler.builders import HOUR, NOW, Case, check, node, nodes, pending, running, team
from tests.scheduler.test_preemption import morning_grab

CASES = [
    Case(
        "a job past its expected end gives its GPUs back at the next step, not never",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(
            running(10, "a", {"n1": 1}, gpus=8, started=NOW - 2 * HOUR, expected_runtime=HOUR),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 60},
    ),
    Case(
        "a job that fits now starts now",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8),),
        forecasts={1: NOW},
    ),
    Case(
        "a job starts when the running job in its way ends",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(
            running(
                10, "a", {"n1": 1}, gpus=8, preemptible=False, started=NOW - 100, max_runtime=600
            ),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 500},
    ),
    Case(
        "an expected runtime is a better guess than the max runtime",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(
            running(
                10,
                "a",
                {"n1": 1},
                gpus=8,
                preemptible=False,
                started=NOW - 100,
                max_runtime=600,
                expected_runtime=200,
            ),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 100},
    ),
    Case(
        "queued jobs start one after another",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8, max_runtime=50), pending(2, "a", gpus=8)),
        forecasts={1: NOW, 2: NOW + 50},
    ),
    Case(
        "a job behind a job with no known end has no forecast",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(running(10, "a", {"n1": 1}, gpus=8, preemptible=False),),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: None},
    ),
    Case(
        "a reclaiming job starts once its victims' checkpoint grace is over",
        **morning_grab(Policy(preemption_grace_seconds=90), forecasts={1: NOW + 90}),  # type: ignore[arg-type]
    ),
    Case(
        "a whole-node job starts when the first node drains, not when the cluster does",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=16), team("b")),
        running=(
            running(10, "a", {"n1": 1}, gpus=4, preemptible=False, max_runtime=3600 + 300),
            running(11, "a", {"n2": 1}, gpus=8, preemptible=False, max_runtime=3600 + 900),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 300},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forecast(case: Case) -> None:
    check(case)
