"""Signing in on /login/ and /admin/login/ is throttled by account and by client address: a locked-out
caller is told so and for how long (429, Retry-After) before any password is checked; every failed
sign-in is audited with the username tried. The policy itself (apps/accounts/throttle.py) is tested
with a clock the test moves."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts import throttle
from apps.accounts.audit import address_key
from apps.accounts.models import AuditLogEntry, FailureCounter, User
from apps.accounts.tasks import forget_stale_throttles
from tests.celery_routing import queue_of

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery-9"
SIGN_IN_PAGES = ["/login/", "/admin/login/"]


@pytest.fixture(autouse=True)
def fast_sign_in_settings(settings):
    # The admin's page names static files, and the manifest storage needs collectstatic, which tests do not run.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    # Each sign-in checks a password (even for an unknown username): a fast hash keeps the many here quick.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def ada(db) -> User:
    return User.objects.create_user("ada", password=PASSWORD, role="admin", is_staff=True, is_superuser=True)


def sign_in(path: str, username: str, password: str, address: str = "192.0.2.10") -> tuple[Client, object]:
    client = Client(REMOTE_ADDR=address)
    return client, client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail(path: str, username: str, times: int, address: str = "192.0.2.10") -> None:
    for _ in range(times):
        _, response = sign_in(path, username, "wrong-password", address)
        assert response.status_code == 200  # the form again, with its error


# Through the pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SIGN_IN_PAGES)
def test_the_right_password_still_works_below_the_limit(ada, path):
    fail(path, "ada", 4)

    client, response = sign_in(path, "ada", PASSWORD)

    assert response.status_code == 302
    assert signed_in(client)


@pytest.mark.parametrize("path", SIGN_IN_PAGES)
def test_five_failures_lock_the_account_and_the_page_says_for_how_long(ada, path):
    fail(path, "ada", 5)

    client, response = sign_in(path, "ada", PASSWORD, address="198.51.100.7")  # from anywhere

    assert response.status_code == 429
    assert 14 * 60 < int(response["Retry-After"]) <= 15 * 60
    assert "Too many failed sign-ins for this account: it is locked for 15 minutes." in response.content.decode()
    assert not signed_in(client)


def test_the_failure_that_locks_the_account_says_so(ada):
    fail("/login/", "ada", 4)

    _, response = sign_in("/login/", "ada", "wrong-again")

    page = response.content.decode()
    assert "That username and password do not match an active account." in page
    assert "it is locked for 15 minutes" in page


@pytest.mark.parametrize("path", SIGN_IN_PAGES)
def test_twenty_failures_from_one_address_lock_every_account_out_from_there(ada, path):
    for n in range(20):
        fail(path, f"guess-{n}", 1, address="203.0.113.5")

    locked_client, locked = sign_in(path, "ada", PASSWORD, address="203.0.113.5")
    elsewhere_client, elsewhere = sign_in(path, "ada", PASSWORD, address="203.0.113.6")

    assert locked.status_code == 429
    assert "Too many failed sign-ins from your address" in locked.content.decode()
    assert not signed_in(locked_client)
    assert elsewhere.status_code == 302
    assert signed_in(elsewhere_client)


def test_an_ipv6_client_cannot_spread_its_failures_over_its_64_block(ada):
    for n in range(20):
        fail("/login/", f"guess-{n}", 1, address=f"2001:db8:7:1::{n + 1:x}")

    _, locked = sign_in("/login/", "ada", PASSWORD, address="2001:db8:7:1:ffff::1")
    _, next_block = sign_in("/login/", "ada", PASSWORD, address="2001:db8:7:2::1")

    assert locked.status_code == 429
    assert next_block.status_code == 302
    assert FailureCounter.objects.get(scope="signin.address").key == "2001:db8:7:1::/64"


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("192.0.2.10", "192.0.2.10"),
        ("2001:db8::1", "2001:db8::/64"),
        ("::ffff:192.0.2.10", "192.0.2.10"),  # an IPv4 client on a dual-stack socket
        (None, None),
    ],
)
def test_an_address_key_is_the_ipv4_address_or_the_ipv6_64(address, key):
    assert address_key(address) == key


def test_the_lockout_ends_on_time_and_counting_starts_afresh(ada):
    fail("/login/", "ada", 5)
    FailureCounter.objects.update(locked_until=timezone.now() - timedelta(seconds=1))  # 15 minutes later

    client, response = sign_in("/login/", "ada", PASSWORD)

    assert response.status_code == 302
    assert signed_in(client)


def test_a_successful_sign_in_clears_its_accounts_count(ada):
    fail("/login/", "ada", 4)
    sign_in("/login/", "ada", PASSWORD)
    fail("/login/", "ada", 4)

    _, response = sign_in("/login/", "ada", PASSWORD)

    assert response.status_code == 302


def test_every_failed_sign_in_is_audited_with_the_username_tried(ada):
    fail("/login/", "ada", 2)
    fail("/admin/login/", "nobody-here", 1)

    entries = AuditLogEntry.objects.filter(action="auth.login_failed").order_by("id")
    assert [(e.actor, e.detail["username"], e.path, e.count) for e in entries] == [
        ("anonymous", "ada", "/login/", 1),
        ("anonymous", "ada", "/login/", 1),
        ("anonymous", "nobody-here", "/admin/login/", 1),
    ]
    assert {e.remote_addr for e in entries} == {"192.0.2.10"}


def test_a_successful_sign_in_is_audited_as_the_user(ada):
    sign_in("/login/", "ada", PASSWORD)

    entry = AuditLogEntry.objects.get()
    assert (entry.actor, entry.action, entry.status_code) == ("ada", "auth.login", 302)


def test_refusals_while_locked_out_share_one_audit_row(ada):
    fail("/login/", "ada", 5)
    for _ in range(30):
        sign_in("/login/", "ada", PASSWORD)

    refused = AuditLogEntry.objects.get(action="auth.login_locked_out")
    assert (refused.actor, refused.status_code, refused.count) == ("anonymous", 429, 30)
    assert refused.detail == {"scope": "signin.account"}
    assert AuditLogEntry.objects.filter(action="auth.login_failed").count() == 5


def test_an_admin_unlocks_an_account_by_deleting_its_counter(ada):
    fail("/login/", "ada", 5)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "unused-password-4"))
    counter = FailureCounter.objects.get(scope="signin.account", key="ada")

    listed = admin.get("/admin/accounts/failurecounter/")
    admin.post(f"/admin/accounts/failurecounter/{counter.pk}/delete/", {"post": "yes"})

    assert "ada" in listed.content.decode()
    assert not FailureCounter.objects.filter(scope="signin.account").exists()
    assert sign_in("/login/", "ada", PASSWORD)[1].status_code == 302


# The policy, with a clock the test moves -----------------------------------------------------------

T0 = timezone.now().replace(microsecond=0)
POLICY = throttle.Policy("test.scope", limit=3, window=timedelta(minutes=10), refusal="locked for {wait}")


def test_failures_within_the_window_lock_the_key_for_the_window_from_the_last_one():
    assert throttle.record_failure(POLICY, "k", T0) is None
    assert throttle.record_failure(POLICY, "k", T0 + timedelta(minutes=4)) is None

    locked = throttle.record_failure(POLICY, "k", T0 + timedelta(minutes=9))

    assert locked.until == T0 + timedelta(minutes=19)
    assert throttle.lockout(POLICY, "k", T0 + timedelta(minutes=18, seconds=59)) == locked
    assert throttle.lockout(POLICY, "k", T0 + timedelta(minutes=19)) is None
    assert locked.message(T0 + timedelta(minutes=9)) == "locked for 10 minutes"
    assert locked.message(T0 + timedelta(minutes=18, seconds=30)) == "locked for 30 seconds"


def test_failures_further_apart_than_the_window_never_lock():
    for n in range(10):
        assert throttle.record_failure(POLICY, "k", T0 + n * timedelta(minutes=6)) is None, n


def test_attempts_while_locked_neither_count_nor_extend_the_lockout():
    for _ in range(3):
        locked = throttle.record_failure(POLICY, "k", T0)
    for minute in range(1, 10):
        assert throttle.record_failure(POLICY, "k", T0 + timedelta(minutes=minute)) == locked

    after = T0 + timedelta(minutes=10)
    assert throttle.lockout(POLICY, "k", after) is None
    assert throttle.record_failure(POLICY, "k", after) is None  # a new window: one failure
    assert FailureCounter.objects.get(scope="test.scope").failures == 1


def test_keys_and_scopes_are_counted_apart():
    for _ in range(3):
        throttle.record_failure(POLICY, "a", T0)
    other_scope = throttle.Policy("test.other", limit=3, window=timedelta(minutes=10), refusal="")

    assert throttle.lockout(POLICY, "a", T0) is not None
    assert throttle.lockout(POLICY, "b", T0) is None
    assert throttle.lockout(other_scope, "a", T0) is None


def test_no_key_is_never_counted_nor_locked():
    assert throttle.record_failure(POLICY, None, T0) is None
    assert throttle.lockout(POLICY, None, T0) is None
    assert not FailureCounter.objects.exists()


def test_stale_counters_are_forgotten_and_live_ones_kept(settings):
    settings.SIGNIN_LOCKOUT = settings.ENROLLMENT_LOCKOUT = timedelta(minutes=10)
    long_ago = timezone.now() - timedelta(hours=1)
    throttle.record_failure(POLICY, "stale", long_ago)
    throttle.record_failure(POLICY, "counting", timezone.now())
    for _ in range(3):
        throttle.record_failure(POLICY, "locked", timezone.now())

    assert forget_stale_throttles() == 1
    assert set(FailureCounter.objects.values_list("key", flat=True)) == {"counting", "locked"}
    assert queue_of(forget_stale_throttles.name) == "maintenance"
