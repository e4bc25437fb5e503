"""The dashboard's pages: server-rendered, each with the data of its first useful render in the HTML,
and small ES modules (static/dashboard) that keep them live over ``ws/live``.

Every page needs a signed-in user with a role; action buttons are rendered only for the roles
allowed to use them, and the REST API they call checks the role again.
"""

import time
from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.generic import TemplateView

from apps.accounts.roles import Role
from apps.dashboard.streams import stale_after_s


class DashboardPage(LoginRequiredMixin, TemplateView):
    """A page of the dashboard; ``nav`` names its entry in the navigation bar."""

    nav: str = ""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated and not request.user.effective_role:
            raise PermissionDenied("Your account has no role; ask an admin for one.")
        return super().dispatch(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        user = self.request.user
        return super().get_context_data(**kwargs) | {
            # For stale.js: a value older than this is shown as stale, and the server's clock when the
            # page was made, against which the browser measures ages whatever its own clock says.
            "stale_after_s": stale_after_s(),
            "server_time": round(time.time(), 3),
            "nav": self.nav,
            "role": user.effective_role,
            "can_operate": user.has_role(Role.OPERATOR),
            "can_administer": user.has_role(Role.ADMIN),
        }
