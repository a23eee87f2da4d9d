from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from gpuqueue.demo.accounts import DEMO_USERS, ROOT
from gpuqueue.demo.data import seed_demo


class Command(BaseCommand):
    help = "Create the demo teams, users, flavors and quotas (once)."

    def handle(self, *args: Any, **options: Any) -> None:
        created = seed_demo()
        self.stdout.write("demo data created" if created else "demo data already present")
        for username, password, team, role in DEMO_USERS:
            self.stdout.write(f"  {username:6} / {password:16} {role} of {team}")
        self.stdout.write(f"  {ROOT[0]:6} / {ROOT[1]:16} site admin")
