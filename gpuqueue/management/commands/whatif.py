"""`manage.py whatif --days 7 --quota team-b=h100:16:48:1`: how waiting times would move."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import F
from django.utils import timezone

from gpuqueue.cycle.snapshot import load_teams
from gpuqueue.models import Job, Node
from gpuqueue.services.cluster.inventory import node_capacity_by_flavor
from gpuqueue.services.forecasts.whatif import (
    QuotaSpecError,
    apply_changes,
    cluster_of,
    compare,
    parse_quota_change,
    replay_both,
    to_sim_jobs,
)


class Command(BaseCommand):
    help = (
        "Replay the submissions of the last days with changed quotas and print how each team's "
        "mean waiting time would change. Nothing is written."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--days", type=float, default=7.0, help="how far back to replay")
        parser.add_argument(
            "--quota",
            action="append",
            default=[],
            metavar="TEAM=FLAVOR:GUARANTEE:LIMIT:WEIGHT",
            help="a changed quota; repeat for several",
        )

    def handle(self, *args: Any, days: float, quota: list[str], **options: Any) -> None:
        from gpuqueue.models import Flavor

        if days <= 0:
            raise CommandError("--days must be positive")
        try:
            changes = [parse_quota_change(spec) for spec in quota]
        except QuotaSpecError as exc:
            raise CommandError(str(exc)) from exc
        flavor_names = set(Flavor.objects.values_list("name", flat=True))
        for change in changes:
            if change.flavor not in flavor_names:
                raise CommandError(
                    f"no flavor {change.flavor!r}; flavors: {', '.join(sorted(flavor_names))}"
                )
        now = timezone.now()
        since = now - timedelta(days=days)
        teams = load_teams()  # quotas only; the jobs come from the history below
        try:
            changed = apply_changes(teams, changes)
        except QuotaSpecError as exc:
            raise CommandError(str(exc)) from exc
        flavors = list(Flavor.objects.all())
        cluster = cluster_of(
            (
                n.name,
                node_capacity_by_flavor(
                    n.capacity, n.labels, flavors, taints=n.taints, devices=n.devices
                ),
            )
            for n in Node.objects.filter(ready=True)
        )
        rows = Job.objects.filter(submitted_at__gte=since).values(
            "id",
            "user_id",
            "submitted_at",
            "started_at",
            "finished_at",
            "workers",
            "gpus_per_worker",
            "priority",
            "preemptible",
            "expected_runtime_seconds",
            "max_runtime_seconds",
            team_slug=F("team__slug"),
            flavor_name=F("flavor__name"),
        )
        jobs = to_sim_jobs(rows, since, now)
        if not jobs:
            self.stdout.write(f"No submissions in the last {days:g} days: nothing to replay.")
            return
        if not cluster.nodes:
            raise CommandError("no ready nodes are known; the cluster sync has not run yet")
        before, after = replay_both(jobs, cluster, teams, changed)
        self.stdout.write(
            f"Replayed {len(jobs)} jobs from the last {days:g} days on {cluster.capacity()} GPUs "
            f"({len(cluster.nodes)} nodes)."
        )
        self.stdout.write(
            f"{'team':16} {'jobs':>6} {'wait now':>10} {'wait after':>11} {'change':>8}"
        )
        for delta in compare(before, after):
            self.stdout.write(
                f"{delta.team:16} {delta.jobs:6d} {delta.wait_before_s / 60:9.1f}m "
                f"{delta.wait_after_s / 60:10.1f}m {delta.change:>8}"
            )
