from django.apps import AppConfig

from gpuqueue.core import caches


class TeamsConfig(AppConfig):
    name = "teams"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model

        from teams.models import ApiToken, Membership, Team

        # Kept between requests (gpuqueue.core.caches): tokens with their users
        # (teams.token_cache) and the teams a user may submit to (gpuqueue.services.jobs.submit).
        caches.derives_from(ApiToken, get_user_model(), Team, Membership)
