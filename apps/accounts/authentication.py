from django.http import HttpRequest
from rest_framework import authentication, exceptions

from apps.accounts.audit import client_address
from apps.accounts.models import ApiToken, TokenRefused, User

KEYWORDS = ("bearer", "token")
MALFORMED_HEADER = "Authorization header must be 'Bearer <token>'."


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer cpt_<key id>_<secret>``. A bad token is refused outright rather
    than treated as anonymous, so a script with a revoked token fails loudly, and says why."""

    def authenticate(self, request: HttpRequest) -> tuple[User, ApiToken] | None:
        try:
            header = authentication.get_authorization_header(request).decode("latin-1").split()
        except UnicodeError as exc:  # a str header with characters outside latin-1
            raise exceptions.AuthenticationFailed(MALFORMED_HEADER) from exc
        if not header or header[0].lower() not in KEYWORDS:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(MALFORMED_HEADER)
        try:
            token = ApiToken.authenticate(header[1])
        except TokenRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        token.record_use(client_address(request))
        return token.user, token

    def authenticate_header(self, request: HttpRequest) -> str:
        return 'Bearer realm="api"'
