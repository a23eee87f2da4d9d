"""Quotas (docs/architecture.md, scenario 9), memberships, tokens, nodes, the audit trail,
metrics, throttling."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from rest_framework.test import APIClient

from gpuqueue.core import caches
from gpuqueue.core.states import JobState
from gpuqueue.models import Job, Node, Quota
from teams.models import ApiToken, AuditEntry, Membership


def test_quota_season_raise_b_lower_a_with_the_audit_trail(api: Any) -> None:
    root = api("root")
    qa = Quota.objects.get(team__slug="team-a", flavor__name="h100")
    qb = Quota.objects.get(team__slug="team-b", flavor__name="h100")
    lowered = root.patch(f"/api/v1/quotas/{qa.pk}/", {"guarantee": 4}, format="json")
    raised = root.patch(f"/api/v1/quotas/{qb.pk}/", {"guarantee": 20}, format="json")
    assert (lowered.status_code, raised.status_code) == (200, 200)
    assert raised.json()["oversubscribed"] is False and raised.json()["guarantees_total"] == 24
    entry = AuditEntry.objects.filter(action="quota.update").order_by("at", "id").first()
    assert entry.before["guarantee"] == 8 and entry.after["guarantee"] == 4
    assert entry.actor.username == "root" and entry.team.slug == "team-a"
    audit = api("bob").get("/api/v1/audit/?object_type=quota").json()["results"]
    assert [e["object_repr"] for e in audit] == ["team-a/h100"]  # bob sees his team's part only


def test_a_cut_below_non_preemptible_usage_is_refused_with_the_numbers(
    api: Any, submit: Any
) -> None:
    job = submit(workers=3, gpus_per_worker=2, preemptible=False)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    qa = Quota.objects.get(team__slug="team-a", flavor__name="h100")
    audits = AuditEntry.objects.count()
    response = api("root").patch(f"/api/v1/quotas/{qa.pk}/", {"guarantee": 4}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "below_usage" and "hold 6" in error["message"]
    assert "2 short" in error["fields"]["guarantee"][0]
    qa.refresh_from_db()
    assert qa.guarantee == 8 and AuditEntry.objects.count() == audits
    assert (
        api("root").patch(f"/api/v1/quotas/{qa.pk}/", {"guarantee": 6}, format="json").status_code
        == 200
    )


def test_oversubscription_needs_the_flag_and_is_reported_back(api: Any) -> None:
    root = api("root")
    qa = Quota.objects.get(team__slug="team-a", flavor__name="h100")
    refused = root.patch(f"/api/v1/quotas/{qa.pk}/", {"guarantee": 30}, format="json")
    assert (
        refused.status_code == 400
        and "capacity of 32" in refused.json()["error"]["fields"]["guarantee"][0]
    )
    allowed = root.patch(
        f"/api/v1/quotas/{qa.pk}/", {"guarantee": 30, "oversubscribe": True}, format="json"
    )
    assert allowed.status_code == 200
    assert allowed.json()["oversubscribed"] is True and allowed.json()["capacity"] == 32
    assert AuditEntry.objects.get(action="quota.update").after["oversubscribed"] is True


def test_posting_an_existing_pair_updates_it(api: Any) -> None:
    body = {"team": "team-a", "flavor": "l4", "guarantee": 3, "limit": 6}
    response = api("root").post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 200
    assert Quota.objects.get(team__slug="team-a", flavor__name="l4").guarantee == 3


def test_team_admin_manages_members_with_audit(api: Any, world: Any) -> None:
    bob = api("bob")
    added = bob.post("/api/v1/memberships/", {"team": "team-a", "user": "carol"}, format="json")
    assert added.status_code == 201
    dup = bob.post("/api/v1/memberships/", {"team": "team-a", "user": "carol"}, format="json")
    assert dup.status_code == 409
    promoted = bob.patch(
        f"/api/v1/memberships/{added.json()['id']}/", {"role": "admin"}, format="json"
    )
    assert promoted.json()["role"] == "admin"
    assert bob.delete(f"/api/v1/memberships/{added.json()['id']}/").status_code == 204
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions[-3:] == ["membership.create", "membership.update", "membership.delete"]
    last = AuditEntry.objects.order_by("id").last()
    assert (
        last.before == {"user": "carol", "team": "team-a", "role": "admin"} and last.after is None
    )


def test_the_last_admin_cannot_be_removed(api: Any, world: Any) -> None:
    bob_m = Membership.objects.get(user=world.bob)
    response = api("bob").delete(f"/api/v1/memberships/{bob_m.pk}/")
    assert response.status_code == 409 and response.json()["error"]["code"] == "last_admin"


def test_a_token_is_shown_once_works_and_stops_when_revoked(api: Any, world: Any) -> None:
    created = api("alice").post("/api/v1/tokens/", {"name": "pipeline"}, format="json").json()
    secret = created["token"]
    assert secret.startswith("gq_") and created["prefix"] in secret
    listed = api("alice").get(f"/api/v1/tokens/{created['id']}/").json()
    assert listed["token"] is None
    assert ApiToken.objects.get(pk=created["id"]).token_hash != secret
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/me/").json()["username"] == "alice"
    assert api("alice").delete(f"/api/v1/tokens/{created['id']}/").status_code == 204
    refused = client.get("/api/v1/me/")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "not_authenticated"
    assert "Bearer" in refused.headers["WWW-Authenticate"]
    assert AuditEntry.objects.filter(action="token.revoke", actor=world.alice).count() == 1


def test_root_drains_a_node_and_it_is_audited(api: Any) -> None:
    body = api("root").post("/api/v1/nodes/h100-0/drain/").json()
    assert body["drained"] is True and body["schedulable"] is False
    usage = {u["flavor"]: u for u in api("alice").get("/api/v1/utilization/").json()}
    assert usage["h100"]["capacity"] == 32 and usage["h100"]["schedulable_capacity"] == 24
    assert AuditEntry.objects.get(action="node.drain").object_repr == "h100-0"


def test_a_node_shows_its_cpu_memory_and_pods_and_what_others_request(api: Any) -> None:
    Node.objects.filter(name="h100-1").update(
        allocatable_cpu_millicores=224_000,
        allocatable_memory_bytes=2 << 40,
        allocatable_pods=110,
        external_cpu_millicores=208_000,
        external_memory_bytes=8 << 30,
        external_pods=7,
    )
    body = api("alice").get("/api/v1/nodes/h100-1/").json()
    assert {k: v for k, v in body.items() if "cpu" in k or "memory" in k or "pods" in k} == {
        "allocatable_cpu_millicores": 224_000,
        "allocatable_memory_bytes": 2 << 40,
        "allocatable_pods": 110,
        "external_cpu_millicores": 208_000,
        "external_memory_bytes": 8 << 30,
        "external_pods": 7,
    }
    # A node that says nothing of them limits nothing.
    other = api("alice").get("/api/v1/nodes/h100-2/").json()
    assert other["allocatable_cpu_millicores"] is None and other["external_pods"] == 0


def test_utilization_shows_every_teams_figures_but_no_job_details(
    api: Any, world: Any, submit: Any
) -> None:
    submit(world.carol, team=world.team_b, workers=2, gpus_per_worker=4)
    body = api("alice").get("/api/v1/utilization/").json()
    h100 = next(u for u in body if u["flavor"] == "h100")
    team_b = next(t for t in h100["teams"] if t["team"] == "team-b")
    assert team_b["pending_gpus"] == 8 and team_b["pending_jobs"] == 1
    assert "jobs" not in str(team_b.keys()).replace("pending_jobs", "").replace("running_jobs", "")


def test_utilization_shows_each_teams_fair_share_balance_in_gpu_hours(
    api: Any, world: Any, settings: Any
) -> None:
    from django.utils import timezone

    settings.GPUQUEUE_METRICS_OPEN = True

    from gpuqueue.models import ShareBalance

    ShareBalance.objects.create(
        team=world.team_a, flavor=world.h100, balance=-9000.0, updated_at=timezone.now()
    )
    body = api("carol").get("/api/v1/utilization/").json()
    teams = {t["team"]: t for t in next(u for u in body if u["flavor"] == "h100")["teams"]}
    assert teams["team-a"]["share_balance_gpu_hours"] == -2.5  # 2.5 GPU-hours in debt
    assert teams["team-b"]["share_balance_gpu_hours"] is None  # no cycle kept one yet
    metrics = api(None).get("/metrics").content.decode()
    assert 'gpuqueue_share_balance_gpu_hours{flavor="h100",team="team-a"} -2.5' in metrics
    assert 'gpuqueue_share_balance_gpu_hours{flavor="h100",team="team-b"}' not in metrics


def test_metrics_expose_queue_fair_share_counters_and_latency(
    api: Any, world: Any, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_METRICS_OPEN = True
    from gpuqueue.cycle.run import run_cycle
    from gpuqueue.services.jobs.cancel import cancel_job

    run_cycle()  # stores the fair shares that /metrics shows
    job = submit()
    cancel_job(world.alice, job)
    submit(workers=2, gpus_per_worker=2)
    api("alice").get("/api/v1/jobs/")
    text = api(None).get("/metrics").content.decode()
    assert 'gpuqueue_pending_jobs{flavor="h100",team="team-a"} 1.0' in text
    assert 'gpuqueue_pending_gpus{flavor="h100",team="team-a"} 4.0' in text
    assert 'gpuqueue_jobs_finished_total{flavor="h100",state="CANCELLED",team="team-a"} 1.0' in text
    assert 'gpuqueue_fair_share_gpus{flavor="h100",team="team-a"}' in text
    assert "gpuqueue_admission_cycle_duration_seconds" in text
    assert 'gpuqueue_api_request_duration_seconds_count{method="GET",route="api/v1/jobs/"' in text


def test_the_cycle_task_is_timed_into_the_histogram(world: Any) -> None:
    from gpuqueue.ops import metrics

    class Task:
        name = metrics.CYCLE_TASK

    metrics._cycle_started(task_id="t1", task=Task())
    metrics._cycle_finished(task_id="t1", task=Task(), retval={"ran": True})
    family = metrics.CYCLE_DURATION.collect()
    count = "gpuqueue_admission_cycle_duration_seconds_count"
    assert any(s.name == count and s.value >= 1 for s in family.samples)


@pytest.mark.usefixtures("steady_rate_window")
def test_a_token_over_its_rate_gets_429_with_retry_after(api: Any, settings: Any) -> None:
    settings.GPUQUEUE_API_RATE = "3/min"
    client = api("carol")
    statuses = [client.get("/api/v1/me/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = client.get("/api/v1/me/")
    assert response.json()["error"]["code"] == "throttled"
    assert int(response.headers["Retry-After"]) >= 1
    assert api("alice").get("/api/v1/me/").status_code == 200  # per token, not global


@pytest.mark.usefixtures("steady_rate_window")
def test_a_rate_window_is_one_counter_that_expires(api: Any, settings: Any, tokens: Any) -> None:
    """The window's counter is made with its expiry by the same command that counts (a day's
    window, so that it does not turn during the test)."""
    import time

    from gpuqueue.core import redis as api_redis

    settings.GPUQUEUE_API_RATE = "5/day"
    client = api("carol")
    assert [client.get("/api/v1/me/").status_code for _ in range(2)] == [200, 200]
    prefix = tokens["carol"].removeprefix("gq_").partition("_")[0]
    key = f"gpuqueue:throttle:token:{prefix}:86400:{int(time.time() // 86400)}"
    assert int(api_redis.client().get(key)) == 2
    assert 86000 < api_redis.client().ttl(key) <= 86401


@pytest.mark.usefixtures("steady_rate_window")
def test_the_rate_count_survives_a_redis_that_forgot_its_scripts(api: Any, settings: Any) -> None:
    from gpuqueue.core import redis as api_redis

    settings.GPUQUEUE_API_RATE = "2/day"
    client = api("carol")
    assert client.get("/api/v1/me/").status_code == 200
    api_redis.client().script_flush()  # as after a restart of Redis
    assert [client.get("/api/v1/me/").status_code for _ in range(2)] == [200, 429]


def test_requests_are_let_through_while_redis_is_down(
    api: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuqueue.core import redis as api_redis

    settings.GPUQUEUE_API_RATE = "1/min"

    def unreachable() -> Any:
        raise ConnectionError("redis is down")

    client = api("carol")
    with monkeypatch.context() as m:
        m.setattr(api_redis, "client", unreachable)
        assert [client.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]


def test_while_the_database_is_away_the_api_answers_503_json_with_retry_after(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    from gpuqueue.api import viewsets
    from gpuqueue.models import Job

    def database_gone(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    monkeypatch.setattr(viewsets, "submit_job_after", database_gone)
    body = {"team": "team-a", "flavor": "h100", "image": "ghcr.io/acme/train:1"}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "unavailable"
    assert not Job.objects.exists()


def test_metrics_want_their_token_unless_explicitly_opened(api: Any, settings: Any) -> None:
    settings.GPUQUEUE_METRICS_TOKEN = None
    settings.GPUQUEUE_METRICS_OPEN = False
    assert api(None).get("/metrics").status_code == 401
    assert api("root").get("/metrics").status_code == 401  # an API token is not the scrape token
    settings.GPUQUEUE_METRICS_TOKEN = "scrape-secret"
    assert api(None).get("/metrics").status_code == 401
    assert api(None).get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").status_code == 200
    settings.GPUQUEUE_METRICS_TOKEN = None
    settings.GPUQUEUE_METRICS_OPEN = True
    assert api(None).get("/metrics").status_code == 200


def _client_at(address: str, token: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.mark.usefixtures("steady_rate_window")
def test_invalid_tokens_from_one_address_get_429_past_the_rate(settings: Any, tokens: Any) -> None:
    settings.GPUQUEUE_API_BAD_TOKEN_RATE = "3/min"
    address = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"
    guesses = [f"gq_{secrets.token_hex(4)}_{secrets.token_urlsafe(24)}" for _ in range(5)]
    statuses = [_client_at(address, g).get("/api/v1/me/").status_code for g in guesses[:3]]
    assert statuses == [401, 401, 401]
    refused = _client_at(address, guesses[3]).get("/api/v1/me/")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "throttled"
    # Another address is not held back by this one's failures.
    assert _client_at("192.0.2.77", guesses[4]).get("/api/v1/me/").status_code == 401


@pytest.mark.usefixtures("steady_rate_window")
def test_guessing_at_a_tokens_prefix_is_throttled_and_the_real_token_still_works(
    settings: Any, tokens: Any
) -> None:
    settings.GPUQUEUE_API_BAD_TOKEN_RATE = "2/min"
    real = tokens["carol"]
    prefix = real.removeprefix("gq_").partition("_")[0]
    statuses = []
    for _ in range(3):  # each from its own address: only the prefix is counted against
        wrong = f"gq_{prefix}_{secrets.token_urlsafe(24)}"
        address = f"10.9.{secrets.randbelow(250)}.{secrets.randbelow(250)}"
        statuses.append(_client_at(address, wrong).get("/api/v1/me/").status_code)
    assert statuses == [401, 401, 429]
    caches.forget_everything()  # as a process that has not kept the token yet
    assert _client_at("10.8.0.1", real).get("/api/v1/me/").status_code == 200
