"""Signing in, on the dashboard's /login/ and the admin's /admin/login/: throttled by account and by
client address (apps/accounts/throttle.py), and audited.

- A locked-out account or address is refused before its password is checked: the form says for how
  long, with status 429 and ``Retry-After``; the audit log counts such refusals (``auth.login_locked_out``,
  one row per address and window, as for every anonymous request: apps/accounts/audit.py).
- Each failed sign-in is counted against the username tried and the address, and audited on a row
  of its own (``auth.login_failed``, with the username tried; the throttle bounds how many an address
  can write); the failure that locks a key says so.
- A successful one clears its account's count and is audited as ``auth.login``.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from apps.accounts.audit import address_key, client_address, describe
from apps.accounts.throttle import (
    Lockout,
    Policy,
    clear,
    first_lockout,
    record_failures,
    signin_account_policy,
    signin_address_policy,
)


class ThrottledSignIn:
    """Mixed into Django's sign-in forms (before them). ``refused`` is the lockout that refused this
    attempt unchecked, if one did."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]
    refused: Lockout | None = None

    def _checks(self) -> list[tuple[Policy, str | None]]:
        address = address_key(client_address(self.request)) if self.request else None
        return [(signin_account_policy(), self.cleaned_data.get("username")), (signin_address_policy(), address)]

    def clean(self) -> dict[str, Any]:
        now = timezone.now()
        self.refused = first_lockout(self._checks(), now)
        if self.refused:
            describe(self.request, "auth.login_locked_out", scope=self.refused.policy.scope)
            raise ValidationError(self.refused.message(now), code="locked_out")
        cleaned = super().clean()  # type: ignore[misc]  (the form's: it authenticates)
        clear(signin_account_policy(), cleaned.get("username"))
        describe(self.request, "auth.login", username=cleaned.get("username"))
        return cleaned

    def get_invalid_login_error(self) -> ValidationError:
        now = timezone.now()
        locked = record_failures(self._checks(), now)
        describe(self.request, "auth.login_failed", own_row=True, username=self.cleaned_data.get("username"))
        error: ValidationError = super().get_invalid_login_error()  # type: ignore[misc]
        if locked:
            return ValidationError([*error.messages, locked.message(now)], code="invalid_login")
        return error


class SignInForm(ThrottledSignIn, AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "That username and password do not match an active account.",
    }


class AdminSignInForm(ThrottledSignIn, AdminAuthenticationForm):
    pass


def refuse_when_locked_out(response: HttpResponse) -> HttpResponse:
    """A sign-in page refused by a lockout answers 429 with Retry-After."""
    form = (getattr(response, "context_data", None) or {}).get("form")
    refused = getattr(form, "refused", None)
    if isinstance(response, TemplateResponse) and refused:
        response.status_code = 429
        response["Retry-After"] = str(refused.retry_after_s(timezone.now()))
    return response


class SignInView(LoginView):
    form_class = SignInForm
    redirect_authenticated_user = True

    def form_invalid(self, form: SignInForm) -> HttpResponse:
        return refuse_when_locked_out(super().form_invalid(form))


class AdminSite(admin.AdminSite):
    """The admin site (controlplane/admin_site.py installs it), with the throttled sign-in."""

    login_form = AdminSignInForm

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return refuse_when_locked_out(super().login(request, extra_context))
