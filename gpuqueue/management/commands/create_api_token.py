from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from teams.services import create_token


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (last line); it is shown only once."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        _, secret = create_token(user, name=name, actor=None)
        self.stdout.write(secret)
