"""The demo launcher's parts: the settings it fills in, the Redis it picks, the keys it keeps apart."""

import asyncio
import io
import runpy
import socket
import stat
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery
from django.conf import settings
from kombu import Queue

from controlplane import demo
from controlplane.channel_layers import RedisChannelLayer

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path("/srv/demo-var")
AGENT_WS_URL = "ws://127.0.0.1:8123/ws/agent"


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
    environment = demo.demo_environment(
        {"PATH": "/usr/bin"}, var_dir=VAR_DIR, redis_url="redis://127.0.0.1:6379/1", agent_ws_url=AGENT_WS_URL
    )
    assert environment["PATH"] == "/usr/bin"
    assert environment["DEBUG"] == "false"
    assert environment["SECURE_SSL_REDIRECT"] == "false"
    assert environment["SECURE_COOKIES"] == "false"
    assert environment["ALLOWED_HOSTS"] == "localhost,127.0.0.1"
    assert environment["SECRET_KEY_FILE"] == str(VAR_DIR / "secret_key")
    assert environment["CONTROLPLANE_VAR_DIR"] == str(VAR_DIR)
    assert environment["REDIS_URL"] == "redis://127.0.0.1:6379/1"
    assert environment["BURNIN_ON_ENROLLMENT"] == "quick"  # the fleet burns in as it first comes online


def test_it_keeps_values_from_the_environment():
    given = {
        "DEBUG": "true",
        "SECRET_KEY": "mine",
        "ALLOWED_HOSTS": "demo.lan",
        "REDIS_URL": "redis://cache/2",
        "CHANNEL_LAYER_PREFIX": "mine",
        "CELERY_KEY_PREFIX": "mine:",
    }
    environment = demo.demo_environment(given, var_dir=VAR_DIR, redis_url="redis://cache/2", agent_ws_url=AGENT_WS_URL)
    assert {name: environment[name] for name in given} == given
    assert "SECRET_KEY_FILE" not in environment


def test_it_never_uses_an_inherited_database_url_or_agent_socket():
    inherited = {"DATABASE_URL": "postgres://ops@db.prod/controlplane", "AGENT_WS_URL": "wss://cp.prod/ws/agent"}
    environment = demo.demo_environment(
        inherited, var_dir=VAR_DIR, redis_url="redis://127.0.0.1:6379/1", agent_ws_url=AGENT_WS_URL
    )
    assert "DATABASE_URL" not in environment
    assert environment["AGENT_WS_URL"] == AGENT_WS_URL  # agents it enrolls connect to its own gateway


def test_it_leaves_the_launchers_own_environment_as_it_is():
    environ = {"PATH": "/usr/bin", "DATABASE_URL": "postgres://ops@db.prod/controlplane"}
    demo.demo_environment(environ, var_dir=VAR_DIR, redis_url="redis://127.0.0.1:6379/1", agent_ws_url=AGENT_WS_URL)
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


# --- Two demos on one Redis ---------------------------------------------------------------------


def settings_of(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """controlplane/settings.py as a process with ``environment`` would load it."""
    with monkeypatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        patch.setenv("SECRET_KEY", "tests-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz")
        return runpy.run_path(str(BASE_DIR / "controlplane" / "settings.py"))


@pytest.fixture
def two_demos(tmp_path, monkeypatch) -> Iterator[list[dict[str, Any]]]:
    """The settings of two demos on this machine (two var directories) sharing the tests' Redis."""
    environments = []
    for name in ("first", "second"):
        var_dir = tmp_path / name / "var"
        demo.ensure_secret_key(var_dir / "secret_key")
        environments.append(
            demo.demo_environment({}, var_dir=var_dir, redis_url=settings.REDIS_URL, agent_ws_url=AGENT_WS_URL)
        )
    yield [settings_of(environment, monkeypatch) for environment in environments]
    client = redis.Redis.from_url(settings.REDIS_URL)
    for environment in environments:
        for prefix in (environment["CHANNEL_LAYER_PREFIX"], environment["CELERY_KEY_PREFIX"]):
            for key in client.scan_iter(f"{prefix}*"):
                client.delete(key)


def test_it_gives_one_var_directory_one_prefix_wherever_it_is_named_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert demo.redis_key_prefix(Path("var")) == demo.redis_key_prefix(tmp_path / "var")
    assert demo.redis_key_prefix(tmp_path / "var") != demo.redis_key_prefix(tmp_path / "other" / "var")


def celery_app_of(demo_settings: dict[str, Any]) -> Celery:
    """A Celery app configured from a demo's settings as controlplane/celery.py configures the demo's."""
    app = Celery("controlplane", set_as_current=False)
    celery_settings = {name: value for name, value in demo_settings.items() if name.startswith("CELERY_")}
    app.config_from_object(SimpleNamespace(**celery_settings), namespace="CELERY")
    return app


def test_two_demos_celery_queues_are_apart(two_demos):
    """A task one demo's beat sends never reaches the other demo's worker, nor the other way round."""
    queue_name = f"default-{uuid.uuid4().hex}"
    with ExitStack() as stack:
        brokers = [stack.enter_context(celery_app_of(each).connection_for_write()) for each in two_demos]
        queues = [Queue(queue_name).bind(broker.default_channel) for broker in brokers]
        for broker, queue, sender in zip(brokers, queues, ("first", "second"), strict=True):
            queue.declare()
            broker.Producer().publish({"task": f"{sender} demo's"}, routing_key=queue_name)

        # Each publish was in Redis before it returned. Were the queues one, the second demo's worker
        # would take the first demo's task (the older one) first.
        second, first = (queues[1].get(no_ack=True), queues[0].get(no_ack=True))
        assert (first.payload, second.payload) == ({"task": "first demo's"}, {"task": "second demo's"})
        assert [queue.get(no_ack=True) for queue in queues] == [None, None]


def test_two_demos_channel_layers_are_apart(two_demos):
    """A fleet update one demo publishes never reaches the other demo's browsers."""
    layers = [RedisChannelLayer(**each["CHANNEL_LAYERS"]["default"]["CONFIG"]) for each in two_demos]

    async def exchange() -> list[dict[str, Any]]:
        browsers = [await layer.new_channel() for layer in layers]
        for layer, browser in zip(layers, browsers, strict=True):
            await layer.group_add("fleet", browser)
        for layer, sender in zip(layers, ("first", "second"), strict=True):
            await layer.group_send("fleet", {"type": "fleet.delta", "from": sender})
        # A channel's messages come out in the order they were sent: a leak would come first.
        received = [await layer.receive(browser) for layer, browser in zip(layers, browsers, strict=True)]
        for layer in layers:
            await layer.flush()
        return received

    received = asyncio.run(exchange())
    assert received == [{"type": "fleet.delta", "from": "first"}, {"type": "fleet.delta", "from": "second"}]
