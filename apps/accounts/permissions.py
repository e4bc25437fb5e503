from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from apps.accounts.models import ApiToken
from apps.accounts.roles import Role, role_rank


def request_role(request: Request) -> str | None:
    """The role a request acts with: a token's scope (capped by its owner's role), else the user's."""
    if isinstance(request.auth, ApiToken):
        return request.auth.effective_role
    user = request.user
    return user.effective_role if user and user.is_authenticated else None


class RolePermission(BasePermission):
    """Reads need a viewer, writes an admin, unless the view says otherwise.

    A view may set ``read_role`` and ``write_role``, and ``action_roles`` maps a viewset action
    (e.g. ``quarantine``) to the role it needs.
    """

    message = "Your role does not allow this action."

    def required_role(self, request: Request, view: Any) -> str:
        action = getattr(view, "action", None)
        action_roles: dict[str, str] = getattr(view, "action_roles", {})
        if action in action_roles:
            return action_roles[action]
        if request.method in SAFE_METHODS:
            return getattr(view, "read_role", Role.VIEWER)
        return getattr(view, "write_role", Role.ADMIN)

    def has_permission(self, request: Request, view: Any) -> bool:
        role = request_role(request)
        if role is None:
            return False
        required = self.required_role(request, view)
        if role_rank(role) < role_rank(required):
            self.message = f"This action needs the {required} role; you have {role}."
            return False
        return True
