"""controlplane/broker.py: on the Celery worker's Redis transport, a channel whose transport lost its client
(the state a worker's consumer leaves after losing Redis with acks_late tasks in flight) fails as a
connection error, which kombu and Celery handle, and the message it held is not lost: Redis gives it
back after the visibility timeout."""

import logging
import time
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from kombu import Connection, Exchange, Queue
from kombu.transport import redis

from controlplane import broker, settings_celery

VISIBILITY_TIMEOUT_S = 1


@pytest.fixture
def queue() -> Queue:
    name = f"broker-test-{uuid.uuid4().hex}"
    return Queue(name, Exchange(name, "direct"), name)


@pytest.fixture
def prefix() -> str:
    return f"broker-test-{uuid.uuid4().hex}:"


def connect(transport: type[redis.Transport], prefix: str) -> Connection:
    options = {"global_keyprefix": prefix, "visibility_timeout": VISIBILITY_TIMEOUT_S}
    return Connection(settings.REDIS_URL, transport=transport, transport_options=options)


@pytest.fixture
def held(queue: Queue, prefix: str) -> Iterator[Connection]:
    """A connection on the repaired transport holding one message taken and not acknowledged."""
    connection = connect(broker.Transport, prefix)
    connection.Producer().publish({"command": 7}, exchange=queue.exchange, routing_key=queue.routing_key,
                                  declare=[queue])  # fmt: skip
    message = connection.default_channel.basic_get(queue.name, no_ack=False)
    assert message is not None
    channel = connection.default_channel
    yield connection
    channel.do_restore = False  # the message is in Redis either way; no second give-back as the process exits
    with connect(redis.Transport, prefix) as cleanup:
        cleanup.default_channel.queue_purge(queue.name)
        cleanup.default_channel.client.delete(f"{prefix}unacked", f"{prefix}unacked_index")


def lose_client(connection: Connection) -> redis.Channel:
    """What the worker's consumer leaves behind once it collected the connection after losing Redis: a
    channel holding a message, its Redis pools let go, on a transport whose client is gone."""
    channel = connection.default_channel
    channel._disconnect_pools()
    channel.connection.client = None
    return channel


def close(connection: Connection, channel: redis.Channel) -> None:
    """As the consumer closes the collected connection (kombu's Connection.close)."""
    connection.maybe_close_channel(channel)


def acknowledge(connection: Connection, channel: redis.Channel) -> None:
    """As an acks_late task that finishes after the connection was lost acknowledges its message."""
    message = next(iter(channel.qos._delivered.values()))
    message.ack_log_error(logging.getLogger(__name__), connection.connection_errors)


@pytest.mark.parametrize("reach_redis", [close, acknowledge])
def test_a_channel_whose_transport_lost_its_client_fails_as_a_connection_error(held, queue, prefix, reach_redis):
    channel = lose_client(held)

    reach_redis(held, channel)  # kombu's own channel raises AttributeError here (the next test)

    time.sleep(VISIBILITY_TIMEOUT_S + 0.5)
    with connect(broker.Transport, prefix) as again:
        again.default_channel.qos.restore_visible()
        back = again.default_channel.basic_get(queue.name, no_ack=True)
    assert back is not None, "the message was lost"
    assert back.decode() == {"command": 7}


@pytest.mark.parametrize("reach_redis", [close, acknowledge])
def test_kombus_own_channel_still_raises_there(held, reach_redis):
    """The reason controlplane/broker.py exists. When this fails, kombu is repaired: remove the module and
    CELERY_BROKER_TRANSPORT."""
    channel = lose_client(held)
    channel.__class__ = redis.Channel

    with pytest.raises(AttributeError, match="hostname"):
        reach_redis(held, channel)


def test_the_repaired_transport_serves_redis_urls_only():
    assert settings_celery.broker_transport("redis://127.0.0.1:6379/0") == "controlplane.broker:Transport"
    assert settings_celery.broker_transport("rediss://redis.internal:6380/0") is None
    assert settings_celery.broker_transport("amqp://guest@rabbit//") is None
    assert settings_celery.broker_transport(settings.CELERY_BROKER_URL) == settings.CELERY_BROKER_TRANSPORT
