from typing import Any

from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "teams"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from teams.models import ApiToken

        # Web processes keep valid tokens with their users (teams.token_cache); any change to
        # either makes what they keep stale.
        for model in (ApiToken, get_user_model()):
            post_save.connect(_saved, sender=model, dispatch_uid=f"token-cache-{model.__name__}")
            post_delete.connect(
                _deleted, sender=model, dispatch_uid=f"token-cache-del-{model.__name__}"
            )


def _saved(sender: Any, created: bool = False, update_fields: Any = None, **_: Any) -> None:
    # A new row was in no cache; a sign-in only stamps last_login, which tokens do not read.
    if created or (update_fields is not None and set(update_fields) == {"last_login"}):
        return
    from teams import token_cache

    token_cache.identity_changed()


def _deleted(sender: Any, **_: Any) -> None:
    from teams import token_cache

    token_cache.identity_changed()
