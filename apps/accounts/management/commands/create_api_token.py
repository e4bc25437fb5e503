"""Issue an API token from the shell, for automation bootstrap (the first token has no API to ask).

    manage.py create_api_token --user ci-bot --name nightly-sweep --role operator --expires-days 90

The token is printed once, alone on stdout, so a script can capture it; it is never stored in clear.
"""

from datetime import timedelta
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from apps.accounts.audit import record
from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role

COMMAND_ACTOR = "system:create_api_token"


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


def validation_message(exc: ValidationError) -> str:
    return "; ".join(
        " ".join(errors) if field == NON_FIELD_ERRORS else f"{field}: {' '.join(errors)}"
        for field, errors in exc.message_dict.items()
    )


class Command(BaseCommand):
    help = "Create an API token for a user and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="Username of the token's owner.")
        parser.add_argument("--name", required=True, help="What the token is for, unique per user (e.g. 'ci').")
        parser.add_argument(
            "--role",
            choices=Role.values,
            default=Role.VIEWER,
            help="The token's scope; at most the owner's role (default: viewer).",
        )
        parser.add_argument(
            "--expires-days", type=positive_int, default=None, help="Days until the token expires (default: never)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            owner = User.objects.get(username=options["user"])
        except User.DoesNotExist as exc:
            raise CommandError(f"No user named {options['user']!r}.") from exc
        days = options["expires_days"]
        expires_at = timezone.now() + timedelta(days=days) if days else None
        try:
            with transaction.atomic():
                token, secret = ApiToken.issue(
                    user=owner, name=options["name"], role=options["role"], expires_at=expires_at
                )
                record(
                    "api_token.create",
                    actor=COMMAND_ACTOR,
                    obj=token,
                    owner=owner.username,
                    role=token.role,
                    expires_at=expires_at.isoformat() if expires_at else None,
                )
        except ValidationError as exc:
            raise CommandError(validation_message(exc)) from None  # the message says it all
        self.stdout.write(secret)
        expiry = f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "never expires"
        self.stderr.write(f"Token {token.name!r} for {owner.username} ({token.role}, {expiry}). It is shown only now.")
