"""Users through the API: admins create people (with a validated password) and automation accounts
(without one), change roles and deactivate; ``/api/v1/me`` tells any caller the role it acts with."""

import pytest
from rest_framework.test import APIClient

from apps.accounts.models import ApiToken, AuditLogEntry, User
from apps.accounts.roles import Role

pytestmark = pytest.mark.django_db

STRONG_PASSWORD = "correct-horse-battery-staple-42"


def test_it_creates_a_user_with_a_role_and_a_password(admin_api):
    response = admin_api.post(
        "/api/v1/users",
        {"username": "alice", "email": "alice@example.com", "role": Role.OPERATOR, "password": STRONG_PASSWORD},
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["username"], body["role"], body["effective_role"]) == ("alice", Role.OPERATOR, Role.OPERATOR)
    assert "password" not in body
    alice = User.objects.get(username="alice")
    assert alice.check_password(STRONG_PASSWORD)


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("short1", "This password is too short. It must contain at least 8 characters."),
        ("password123", "This password is too common."),
        ("12345678901", "This password is entirely numeric."),
        ("alice.operator", "The password is too similar to the username."),
    ],
)
def test_it_refuses_a_weak_password_and_creates_nothing(admin_api, password, message):
    response = admin_api.post(
        "/api/v1/users", {"username": "alice.operator", "role": Role.OPERATOR, "password": password}
    )

    assert response.status_code == 400
    assert message in response.json()["password"]
    assert not User.objects.filter(username="alice.operator").exists()


def test_it_creates_an_automation_account_without_a_password(admin_api):
    response = admin_api.post("/api/v1/users", {"username": "ci-bot", "role": Role.OPERATOR})

    assert response.status_code == 201, response.content
    bot = User.objects.get(username="ci-bot")
    assert not bot.has_usable_password()
    issued = admin_api.post("/api/v1/tokens", {"name": "nightly", "user": bot.pk, "role": Role.OPERATOR})
    assert issued.status_code == 201
    me = APIClient(HTTP_AUTHORIZATION=f"Bearer {issued.json()['token']}").get("/api/v1/me").json()
    assert (me["username"], me["effective_role"]) == ("ci-bot", Role.OPERATOR)


def test_it_never_writes_a_password_hash_to_the_audit_log(admin_api):
    created = admin_api.post("/api/v1/users", {"username": "alice", "password": STRONG_PASSWORD}).json()
    admin_api.patch(f"/api/v1/users/{created['id']}", {"password": STRONG_PASSWORD + "-rotated"})

    alice = User.objects.get(username="alice")
    create, update = AuditLogEntry.objects.order_by("id")
    assert create.detail["fields"]["password"] == "(redacted)"
    assert update.detail["changes"] == {"password": ["(redacted)", "(redacted)"]}
    assert not [entry for entry in AuditLogEntry.objects.values() if alice.password in str(entry)]
    assert alice.check_password(STRONG_PASSWORD + "-rotated")


def test_it_validates_a_new_password_on_update(admin_api, user_with_role):
    viewer = user_with_role(Role.VIEWER)

    response = admin_api.patch(f"/api/v1/users/{viewer.pk}", {"password": "viewer-user"})

    assert response.status_code == 400
    assert "The password is too similar to the username." in response.json()["password"]


def test_it_ignores_an_attempt_to_grant_superuser(admin_api):
    response = admin_api.post("/api/v1/users", {"username": "mallory", "role": Role.VIEWER, "is_superuser": True})

    assert response.status_code == 201
    assert response.json()["effective_role"] == Role.VIEWER
    assert not User.objects.get(username="mallory").is_superuser


def test_it_refuses_a_duplicate_username(admin_api, user_with_role):
    user_with_role(Role.VIEWER)

    response = admin_api.post("/api/v1/users", {"username": "viewer-user"})

    assert response.status_code == 400
    assert response.json()["username"] == ["A user with that username already exists."]


def test_it_deactivates_rather_than_deletes(admin_api, user_with_role):
    viewer = user_with_role(Role.VIEWER)
    _, secret = ApiToken.issue(user=viewer, name="dashboards", role=Role.VIEWER)

    deleted = admin_api.delete(f"/api/v1/users/{viewer.pk}")
    deactivated = admin_api.patch(f"/api/v1/users/{viewer.pk}", {"is_active": False})

    assert deleted.status_code == 405
    assert deactivated.status_code == 200
    assert deactivated.json()["effective_role"] is None
    assert APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/me").status_code == 401


def test_it_changes_a_role_and_tokens_follow(admin_api, user_with_role):
    operator = user_with_role(Role.OPERATOR)
    _, secret = ApiToken.issue(user=operator, name="sweeps", role=Role.OPERATOR)

    response = admin_api.patch(f"/api/v1/users/{operator.pk}", {"role": Role.VIEWER})

    assert response.json()["effective_role"] == Role.VIEWER
    assert APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/me").json()["effective_role"] == Role.VIEWER


# /api/v1/me -----------------------------------------------------------------------------------------


def test_it_tells_a_session_user_their_role(user_with_role):
    client = APIClient()
    client.force_login(user_with_role(Role.OPERATOR))

    body = client.get("/api/v1/me").json()

    assert (body["username"], body["role"], body["effective_role"]) == ("operator-user", Role.OPERATOR, Role.OPERATOR)


def test_it_tells_a_token_caller_the_tokens_scope(user_with_role):
    _, secret = ApiToken.issue(user=user_with_role(Role.ADMIN), name="grafana", role=Role.VIEWER)

    body = APIClient(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/me").json()

    assert (body["username"], body["role"], body["effective_role"]) == ("admin-user", Role.ADMIN, Role.VIEWER)


def test_it_tells_a_superuser_they_act_as_admin(db):
    client = APIClient()
    client.force_login(User.objects.create(username="root", role=Role.VIEWER, is_superuser=True))

    assert client.get("/api/v1/me").json()["effective_role"] == Role.ADMIN


def test_it_refuses_me_without_credentials(db):
    response = APIClient().get("/api/v1/me")

    assert response.status_code == 401
