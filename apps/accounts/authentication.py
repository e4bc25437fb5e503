from django.http import HttpRequest
from rest_framework import authentication, exceptions

from apps.accounts.audit import client_address
from apps.accounts.models import ApiToken, User

KEYWORDS = ("bearer", "token")


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer cpt_<key id>_<secret>``. A bad token is refused outright rather
    than treated as anonymous, so a script with a revoked token fails loudly."""

    def authenticate(self, request: HttpRequest) -> tuple[User, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in KEYWORDS:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        token = ApiToken.authenticate(header[1])
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked API token.")
        token.record_use(client_address(request))
        return token.user, token

    def authenticate_header(self, request: HttpRequest) -> str:
        return 'Bearer realm="api"'
