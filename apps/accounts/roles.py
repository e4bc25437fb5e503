"""The three roles, ordered: each one can do everything the one below it can."""

from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer (read only)"
    OPERATOR = "operator", "Operator (quarantine, burn-ins, launches)"
    ADMIN = "admin", "Admin (inventory, users, tokens)"


_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


def role_rank(role: str | None) -> int:
    """0 for no role at all (anonymous, inactive), else the role's place in the order."""
    return _RANK.get(Role(role), 0) if role else 0


def lower_role(a: str, b: str) -> str:
    return a if role_rank(a) <= role_rank(b) else b
