"""The demo launcher's parts: the settings it fills in, the Redis it picks, the keys it keeps apart."""

import io
import socket
import stat
from pathlib import Path

import pytest

from controlplane import demo

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path("/srv/demo-var")


def never_asked() -> bool:
    raise AssertionError("the local Redis should not be probed")


def test_it_uses_redis_url_when_set_without_probing():
    choice = demo.choose_redis(
        {"REDIS_URL": "redis://cache:6380/4"}, local_redis_answers=never_asked, redis_server="/usr/bin/redis-server"
    )
    assert choice == demo.UseRedis("redis://cache:6380/4", "REDIS_URL from the environment")


def test_it_uses_database_1_of_a_local_redis_leaving_0_to_the_tests():
    choice = demo.choose_redis({}, local_redis_answers=lambda: True, redis_server="/usr/bin/redis-server")
    assert isinstance(choice, demo.UseRedis)
    assert choice.url == "redis://127.0.0.1:6379/1"


def test_it_starts_its_own_redis_when_none_answers():
    choice = demo.choose_redis({}, local_redis_answers=lambda: False, redis_server="/opt/redis/bin/redis-server")
    assert choice == demo.StartRedis("/opt/redis/bin/redis-server")


def test_it_explains_how_to_install_redis_when_there_is_none():
    with pytest.raises(demo.DemoError, match="apt-get install redis-server"):
        demo.choose_redis({}, local_redis_answers=lambda: False, redis_server=None)


def test_it_fills_in_development_safe_settings():
    environment = demo.demo_environment({"PATH": "/usr/bin"}, var_dir=VAR_DIR, redis_url="redis://127.0.0.1:6379/1")
    assert environment["PATH"] == "/usr/bin"
    assert environment["DEBUG"] == "false"
    assert environment["SECURE_SSL_REDIRECT"] == "false"
    assert environment["SECURE_COOKIES"] == "false"
    assert environment["ALLOWED_HOSTS"] == "localhost,127.0.0.1"
    assert environment["SECRET_KEY_FILE"] == str(VAR_DIR / "secret_key")
    assert environment["CONTROLPLANE_VAR_DIR"] == str(VAR_DIR)
    assert environment["REDIS_URL"] == "redis://127.0.0.1:6379/1"


def test_it_keeps_values_from_the_environment():
    given = {
        "DEBUG": "true",
        "SECRET_KEY": "mine",
        "ALLOWED_HOSTS": "demo.lan",
        "REDIS_URL": "redis://cache/2",
    }
    environment = demo.demo_environment(given, var_dir=VAR_DIR, redis_url="redis://cache/2")
    assert {name: environment[name] for name in given} == given
    assert "SECRET_KEY_FILE" not in environment


def test_it_never_uses_an_inherited_database_url():
    inherited = {"DATABASE_URL": "postgres://ops@db.prod/controlplane"}
    environment = demo.demo_environment(inherited, var_dir=VAR_DIR, redis_url="redis://127.0.0.1:6379/1")
    assert "DATABASE_URL" not in environment


def test_it_leaves_the_launchers_own_environment_as_it_is():
    environ = {"PATH": "/usr/bin", "DATABASE_URL": "postgres://ops@db.prod/controlplane"}
    demo.demo_environment(environ, var_dir=VAR_DIR, redis_url="redis://127.0.0.1:6379/1")
    assert environ == {"PATH": "/usr/bin", "DATABASE_URL": "postgres://ops@db.prod/controlplane"}


def test_it_creates_a_private_secret_key_once(tmp_path):
    key_file = tmp_path / "var" / "secret_key"
    demo.ensure_secret_key(key_file)
    first = key_file.read_text()
    demo.ensure_secret_key(key_file)
    assert key_file.read_text() == first
    assert len(first) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


@pytest.mark.parametrize("port", ["http", "0", "70000", "-1"])
def test_it_refuses_a_port_that_is_not_one(port):
    with pytest.raises(demo.DemoError, match="PORT"):
        demo.server_port({"PORT": port})


def test_it_refuses_to_start_on_a_port_in_use():
    with socket.socket() as taken:
        taken.bind((demo.HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(demo.DemoError, match=f"port {port} .* is in use"):
            demo.run({"PORT": str(port)}, io.StringIO())
