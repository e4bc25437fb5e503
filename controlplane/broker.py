"""Celery's Redis transport, with one repair: a worker that loses Redis reconnects instead of exiting.

On a lost broker connection the worker's consumer *collects* the connection (its transport drops its
client) and then closes it. Anything that still reaches Redis through a channel of that transport, the
close giving back task messages taken and not yet acknowledged (every ``acks_late`` task in flight,
all of apps/jobs) or a task that finishes and acknowledges its message, builds a new Redis pool from
the transport's client, which is ``None`` by then. kombu raises ``AttributeError`` (no ``hostname`` on
``None``) where it and Celery handle connection errors, the consumer calls it unrecoverable, and the
worker exits with status 1 (seen under tests/jobs/test_faults.py, celery and kombu 5.7.0).

Here such a channel raises the connection error it is: the close goes on, the acknowledgement is logged
as failed, and the consumer reconnects. The messages are not lost: Redis gives each back to its queue
once its visibility timeout passes (settings_celery.py), a task done twice is idempotent, and the jobs
sweep sends what a command still needs before that, because the intent is a row, not the message.
"""

from typing import Any

from kombu.transport import redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise RedisConnectionError("this channel's connection to the broker was closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(redis.Transport):
    Channel = Channel
