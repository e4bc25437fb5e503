"""The Redis the test session runs on, found as ``make demo`` finds its own, and never a skip.

The configured Redis (``REDIS_URL``, through settings) if it answers; else a private ``redis-server``
from PATH on a free loopback port, started for this session and stopped after it; else the session
stops before any test runs, saying how to install Redis. A missing Redis fails the run instead of
thinning it.

This is the one place the tests get Redis from: settings (``REDIS_URL``, the channel layer, the
Celery broker) are pointed at the chosen server, and so is the environment, which pytest-xdist's
workers and the processes tests start inherit. A test that needs the channel layer of its own takes
``redis_channel_layer``: the configured layer under a prefix of the test's own.
"""

import copy
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import IO, Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings as django_settings
from pytest_django.fixtures import Settings

from controlplane.demo import free_loopback_port, redis_answers

START_TIMEOUT_S = 10.0
NO_REDIS = (
    "The tests need Redis (the channel layer behind the live streams, the agent gateway and the browser "
    "tests) and none answers at {url}, the configured REDIS_URL; nor is redis-server on PATH to start a "
    "private one for the session. Start Redis there, point REDIS_URL at one (redis://host:port/db), or "
    "install redis-server: sudo apt-get install redis-server (Debian, Ubuntu), sudo dnf install redis "
    "(Fedora, RHEL), brew install redis (macOS)."
)


class SessionRedis:
    """The session's Redis and, when this process started it, the server process (a pytest plugin)."""

    def __init__(self, url: str, server: subprocess.Popen[bytes] | None = None) -> None:
        self.url = url
        self.server = server

    @classmethod
    def find_or_start(cls, configured_url: str) -> "SessionRedis":
        if redis_answers(configured_url):
            return cls(configured_url)
        executable = shutil.which("redis-server")
        if executable is None:
            raise pytest.UsageError(NO_REDIS.format(url=configured_url))
        port = free_loopback_port()
        with tempfile.TemporaryFile() as output:  # what it says, should it not start; it keeps its own copy
            server = subprocess.Popen(
                [executable, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
            session_redis = cls(f"redis://127.0.0.1:{port}/0", server)
            session_redis._wait_until_it_answers(output)
        return session_redis

    def _wait_until_it_answers(self, output: IO[bytes]) -> None:
        assert self.server is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not redis_answers(self.url):
            if self.server.poll() is not None or time.monotonic() > deadline:
                self.stop()
                output.seek(0)
                said = output.read().decode(errors="replace").strip()
                raise pytest.UsageError(f"redis-server did not answer on {self.url}; it said:\n{said}")
            time.sleep(0.05)

    def point_settings_and_environment_here(self) -> None:
        """Settings were read before any conftest; this server replaces the configured one in them."""
        configured = django_settings.REDIS_URL
        if configured == self.url:
            return
        layers = copy.deepcopy(django_settings.CHANNEL_LAYERS)
        for layer in layers.values():
            layer["CONFIG"]["hosts"] = [{**host, "address": self.url} for host in layer["CONFIG"]["hosts"]]
        django_settings.CHANNEL_LAYERS = layers
        if configured == django_settings.CELERY_BROKER_URL:
            django_settings.CELERY_BROKER_URL = self.url
        django_settings.REDIS_URL = os.environ["REDIS_URL"] = self.url

    # Hooks of the plugin ---------------------------------------------------------------------------

    def pytest_report_header(self) -> str:
        started = f"a private redis-server (pid {self.server.pid}) for this session" if self.server else "configured"
        return f"redis: {self.url} ({started})"

    def pytest_unconfigure(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=START_TIMEOUT_S)


def pytest_configure(config: pytest.Config) -> None:
    session_redis = SessionRedis.find_or_start(django_settings.REDIS_URL)
    session_redis.point_settings_and_environment_here()
    config.pluginmanager.register(session_redis, "session-redis")


@pytest.fixture
def redis_channel_layer(settings: Settings) -> Iterator[BaseChannelLayer]:
    """The configured channel layer on the session's Redis, under a prefix of this test's own; emptied after."""
    layer: dict[str, Any] = copy.deepcopy(settings.CHANNEL_LAYERS["default"])
    layer["CONFIG"]["prefix"] = f"{layer['CONFIG']['prefix']}-{uuid.uuid4().hex[:12]}"
    settings.CHANNEL_LAYERS = {"default": layer}
    channel_layer = get_channel_layer()
    yield channel_layer
    from tests.conftest import shut_down_the_process  # (the conftest loads this plugin)

    shut_down_the_process()  # the parts that send through the layer (the live publisher, on a loop of its own) first
    async_to_sync(channel_layer.flush)()
