"""API tokens for automation: named, scoped to a role, shown once, stored hashed, revocable, with
their last use recorded; and ``manage.py create_api_token`` to issue the first one."""

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, AuditLogEntry, User
from apps.accounts.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def bot(db) -> User:
    """An automation account: no password, signs in with tokens only."""
    user = User(username="ci-bot", role=Role.OPERATOR)
    user.set_unusable_password()
    user.save()
    return user


def bearer(secret: str, **extra: str) -> APIClient:
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}", **extra)


def issue(admin_api: APIClient, **body: object) -> dict:
    response = admin_api.post("/api/v1/tokens", body)
    assert response.status_code == 201, response.content
    return response.json()


def secret_part(token: str) -> str:
    return token.split("_", 2)[2]


# Issuing ------------------------------------------------------------------------------------------


def test_it_shows_the_secret_once_when_issuing(admin_api, bot):
    issued = issue(admin_api, name="nightly-sweep", user=bot.pk, role=Role.OPERATOR)

    assert issued["token"].startswith(f"cpt_{issued['key_prefix'][4:]}")
    assert issued["username"] == "ci-bot"
    assert issued["role"] == Role.OPERATOR
    listed = admin_api.get("/api/v1/tokens").json()["results"]
    detail = admin_api.get(f"/api/v1/tokens/{issued['id']}").json()
    assert all("token" not in body for body in [*listed, detail])
    assert secret_part(issued["token"]) not in str(listed) + str(detail)


def test_it_stores_only_the_sha256_digest_of_the_secret(admin_api, bot):
    issued = issue(admin_api, name="nightly-sweep", user=bot.pk, role=Role.OPERATOR)
    secret = secret_part(issued["token"])

    row = ApiToken.objects.filter(pk=issued["id"]).values().get()

    assert row["secret_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert not [column for column, value in row.items() if secret in str(value)]
    assert not [entry for entry in AuditLogEntry.objects.values() if secret in str(entry)]


def test_it_authenticates_with_the_issued_token(admin_api, bot):
    issued = issue(admin_api, name="nightly-sweep", user=bot.pk, role=Role.OPERATOR)

    response = bearer(issued["token"]).get("/api/v1/me")

    assert response.status_code == 200
    assert response.json()["username"] == "ci-bot"
    assert response.json()["effective_role"] == Role.OPERATOR


def test_it_defaults_to_a_viewer_token_of_the_caller(admin_api):
    issued = issue(admin_api, name="my-laptop")

    assert (issued["username"], issued["role"]) == ("admin-user", Role.VIEWER)


def test_it_refuses_a_scope_above_the_owners_role(admin_api, bot):
    response = admin_api.post("/api/v1/tokens", {"name": "too-strong", "user": bot.pk, "role": Role.ADMIN})

    assert response.status_code == 400
    assert response.json()["role"] == ["A token cannot have more rights than its owner (ci-bot is operator)."]
    assert not ApiToken.objects.filter(name="too-strong").exists()


def test_it_refuses_a_token_for_a_deactivated_user(admin_api, bot):
    bot.is_active = False
    bot.save()

    response = admin_api.post("/api/v1/tokens", {"name": "ghost", "user": bot.pk, "role": Role.VIEWER})

    assert response.status_code == 400
    assert response.json()["role"] == ["ci-bot is deactivated and cannot hold API tokens."]


def test_it_refuses_a_second_token_with_the_same_name_for_one_user(admin_api, bot):
    issue(admin_api, name="nightly-sweep", user=bot.pk)

    response = admin_api.post("/api/v1/tokens", {"name": "nightly-sweep", "user": bot.pk})

    assert response.status_code == 400
    assert response.json()["name"] == ["ci-bot already has a token named 'nightly-sweep'."]


def test_it_refuses_an_expiry_in_the_past(admin_api, bot):
    yesterday = (timezone.now() - timedelta(days=1)).isoformat()

    response = admin_api.post("/api/v1/tokens", {"name": "stale", "user": bot.pk, "expires_at": yesterday})

    assert response.status_code == 400
    assert response.json()["expires_at"] == ["The expiry must be in the future."]


def test_it_audits_issuing_and_revoking_without_the_secret(admin_api, bot):
    issued = issue(admin_api, name="nightly-sweep", user=bot.pk, role=Role.OPERATOR)
    admin_api.post(f"/api/v1/tokens/{issued['id']}/revoke")

    created, revoked = AuditLogEntry.objects.order_by("id").filter(action__startswith="api_token.")
    assert (created.action, created.actor, created.object_id) == ("api_token.create", "admin-user", str(issued["id"]))
    assert created.detail == {"owner": "ci-bot", "role": Role.OPERATOR}
    assert (revoked.action, revoked.status_code) == ("api_token.revoke", 200)


# Refusals -----------------------------------------------------------------------------------------


def test_it_refuses_a_revoked_token_saying_so(admin_api, bot):
    issued = issue(admin_api, name="nightly-sweep", user=bot.pk, role=Role.OPERATOR)
    assert bearer(issued["token"]).get("/api/v1/me").status_code == 200

    revoked = admin_api.post(f"/api/v1/tokens/{issued['id']}/revoke")
    response = bearer(issued["token"]).get("/api/v1/me")

    assert revoked.status_code == 200
    assert revoked.json()["is_usable"] is False
    assert response.status_code == 401
    assert response.json()["detail"].startswith("API token 'nightly-sweep' was revoked at ")
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_it_refuses_an_expired_token_saying_so(bot):
    token, secret = ApiToken.issue(user=bot, name="short-lived", role=Role.VIEWER)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = bearer(secret).get("/api/v1/me")

    assert response.status_code == 401
    assert response.json()["detail"].startswith("API token 'short-lived' expired at ")


def test_it_refuses_the_token_of_a_deactivated_owner(bot):
    _, secret = ApiToken.issue(user=bot, name="nightly-sweep", role=Role.VIEWER)
    User.objects.filter(pk=bot.pk).update(is_active=False)

    response = bearer(secret).get("/api/v1/me")

    assert response.status_code == 401
    assert response.json()["detail"] == "The owner of API token 'nightly-sweep' is deactivated."


def test_it_says_only_unknown_for_a_wrong_secret(bot):
    token, _ = ApiToken.issue(user=bot, name="nightly-sweep", role=Role.VIEWER)
    token.revoke()

    response = bearer(f"cpt_{token.key_id}_not-the-secret").get("/api/v1/me")

    assert response.status_code == 401
    assert response.json()["detail"] == "Unknown API token."  # nothing about the token to a guesser


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Bearer one two",
        "Token",
        "Bearer cpt",
        "Bearer cpt_",
        "Bearer cpt_0123abcd",
        "Bearer cpt_0123abcd_",
        "Bearer cpt__secret",
        "Bearer cpt_NOTHEX00_secret",
        "Bearer cpt_0123abcd0123abcd0123_secret",
        "Bearer cpt_\x00123abcd_secret",
        "Bearer cpt_0123abcd_\x00",
        "Bearer cpt_0123abcd_é-latin-1",
        "Bearer cpt_0123abcd_€-not-latin-1",
        "Bearer xyz_0123abcd_secret",
        "Bearer " + "A" * 10_000,
        "bearer cpt_0123abcd_unknown",
        "Basic YWRtaW46YWRtaW4=",
    ],
    ids=repr,
)
def test_it_answers_a_malformed_authorization_header_with_401(header):
    response = APIClient(HTTP_AUTHORIZATION=header).get("/api/v1/me")

    assert response.status_code == 401
    assert response.json()["detail"]


def test_it_refuses_a_malformed_header_on_a_write_without_touching_anything(db):
    response = APIClient(HTTP_AUTHORIZATION="Bearer cpt_\x00").post("/api/v1/clusters", {"name": "x"})

    assert response.status_code == 401
    assert response.json()["detail"] == "Malformed API token: expected cpt_<id>_<secret>."


# Last use -----------------------------------------------------------------------------------------


def test_it_records_the_last_use_at_most_once_per_resolution(bot, settings):
    token, secret = ApiToken.issue(user=bot, name="nightly-sweep", role=Role.VIEWER)
    assert (token.last_used_at, token.last_used_ip) == (None, None)

    bearer(secret, REMOTE_ADDR="10.0.0.1").get("/api/v1/me")
    token.refresh_from_db()
    first_use = token.last_used_at
    assert first_use is not None
    assert token.last_used_ip == "10.0.0.1"

    bearer(secret, REMOTE_ADDR="10.0.0.2").get("/api/v1/me")
    token.refresh_from_db()
    assert (token.last_used_at, token.last_used_ip) == (first_use, "10.0.0.1")

    a_resolution_ago = first_use - timedelta(seconds=settings.API_TOKEN_LAST_USED_RESOLUTION_S)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=a_resolution_ago)
    bearer(secret, REMOTE_ADDR="10.0.0.2").get("/api/v1/me")
    token.refresh_from_db()
    assert token.last_used_at > first_use
    assert token.last_used_ip == "10.0.0.2"


def test_it_writes_nothing_for_a_use_within_the_resolution(bot, django_assert_num_queries):
    _, secret = ApiToken.issue(user=bot, name="nightly-sweep", role=Role.VIEWER)
    client = bearer(secret)
    client.get("/api/v1/me")

    with django_assert_num_queries(1):  # the token with its owner; no UPDATE
        client.get("/api/v1/me")


@pytest.mark.parametrize(
    ("forwarded", "recorded"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("198.51.100.1, 203.0.113.7", "203.0.113.7"),  # the left entry is the client's claim
        ("not-an-address", "127.0.0.1"),
        ("", "127.0.0.1"),
    ],
)
def test_it_takes_the_address_the_trusted_proxy_appended(bot, settings, forwarded, recorded):
    settings.TRUST_X_FORWARDED_FOR = True
    token, secret = ApiToken.issue(user=bot, name="behind-proxy", role=Role.VIEWER)

    response = bearer(secret, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=forwarded).post(
        "/api/v1/clusters", {"name": "x"}
    )

    token.refresh_from_db()
    assert response.status_code == 403
    assert token.last_used_ip == recorded
    assert AuditLogEntry.objects.get().remote_addr == recorded


def test_it_ignores_forwarded_for_unless_told_to_trust_it(bot):
    token, secret = ApiToken.issue(user=bot, name="direct", role=Role.VIEWER)

    bearer(secret, REMOTE_ADDR="192.0.2.10", HTTP_X_FORWARDED_FOR="203.0.113.7").get("/api/v1/me")

    token.refresh_from_db()
    assert token.last_used_ip == "192.0.2.10"


# Listing ------------------------------------------------------------------------------------------


def test_it_lists_the_tokens_that_still_work(admin_api, bot):
    ApiToken.issue(user=bot, name="live", role=Role.VIEWER)
    revoked, _ = ApiToken.issue(user=bot, name="revoked", role=Role.VIEWER)
    revoked.revoke()
    expired, _ = ApiToken.issue(user=bot, name="expired", role=Role.VIEWER)
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(minutes=1))

    usable = admin_api.get(f"/api/v1/tokens?user={bot.pk}&usable=true").json()["results"]
    unusable = admin_api.get(f"/api/v1/tokens?user={bot.pk}&usable=false").json()["results"]

    assert [t["name"] for t in usable] == ["live"]
    assert sorted(t["name"] for t in unusable) == ["expired", "revoked"]


def test_it_keeps_a_token_with_its_owner_in_the_admin(admin_site, bot):
    token, _ = ApiToken.issue(user=bot, name="nightly-sweep", role=Role.VIEWER)

    page = admin_site.get(f"/admin/accounts/apitoken/{token.pk}/change/")

    assert page.status_code == 200
    assert b'name="user"' not in page.content  # shown, not editable
    assert b'name="role"' in page.content
    assert admin_site.get("/admin/accounts/apitoken/add/").status_code == 403


# manage.py create_api_token -----------------------------------------------------------------------


def create_api_token(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_prints_a_working_token_once_from_the_command_line(bot):
    out, err = create_api_token("--user", "ci-bot", "--name", "bootstrap", "--role", "operator")

    secret = out.strip()
    assert out == f"{secret}\n"  # alone on stdout, for `TOKEN=$(manage.py create_api_token ...)`
    assert "shown only now" in err
    assert secret not in err
    response = bearer(secret).get("/api/v1/me")
    assert response.json()["effective_role"] == Role.OPERATOR
    token = ApiToken.objects.get(name="bootstrap")
    assert (token.user, token.role, token.expires_at) == (bot, Role.OPERATOR, None)


def test_it_audits_the_command_line_token(bot):
    create_api_token("--user", "ci-bot", "--name", "bootstrap", "--role", "viewer", "--expires-days", "30")

    entry = AuditLogEntry.objects.get()
    token = ApiToken.objects.get(name="bootstrap")
    assert (entry.action, entry.actor) == ("api_token.create", "system:create_api_token")
    assert (entry.object_type, entry.object_id) == ("accounts.apitoken", str(token.pk))
    assert entry.detail == {"owner": "ci-bot", "role": "viewer", "expires_at": token.expires_at.isoformat()}
    assert timedelta(days=30) - timedelta(minutes=1) < token.expires_at - timezone.now() <= timedelta(days=30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "nobody", "--name", "x"], "No user named 'nobody'."),
        (
            ["--user", "ci-bot", "--name", "x", "--role", "admin"],
            "role: A token cannot have more rights than its owner (ci-bot is operator).",
        ),
        (["--user", "ci-bot", "--name", "taken"], "Api token with this User and Name already exists."),
        (["--user", "ci-bot", "--name", "x", "--role", "root"], "invalid choice: 'root'"),
        (["--user", "ci-bot", "--name", "x", "--expires-days", "0"], "invalid positive_int value: '0'"),
    ],
    ids=["unknown user", "scope above owner", "duplicate name", "unknown role", "zero days"],
)
def test_it_refuses_a_bad_command_line_token_clearly(bot, args, message):
    ApiToken.issue(user=bot, name="taken", role=Role.VIEWER)

    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        create_api_token(*args)

    assert ApiToken.objects.count() == 1
    assert not AuditLogEntry.objects.exists()
