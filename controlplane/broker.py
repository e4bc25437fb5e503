"""Celery's Redis transport, with one repair: a worker that loses Redis reconnects instead of exiting.

On a lost broker connection the worker's consumer first *collects* the connection (closes its channels
and drops the transport's client) and then closes it again. When the first close of the consumer's
channel failed half way, with Redis gone and task messages taken but not yet acknowledged (every
``acks_late`` task in flight, all of apps/jobs), the second close tries to give those messages back
through a transport that has no client any more. kombu then raises ``AttributeError`` (no ``hostname``
on ``None``) where a connection error was expected, the consumer treats it as unrecoverable, and the
worker exits with status 1 (seen under tests/jobs/test_faults.py on celery and kombu 5.7.0).

Such a channel can reach Redis no more: this one closes without giving them back. They are not lost: Redis gives a
message back to the queue once its visibility timeout passes (settings_celery.py), and the jobs
sweep sends what a command still needs before that, because the intent is a row, not the message.
"""

from kombu.transport import redis


class Channel(redis.Channel):
    def close(self) -> None:
        if self.connection is not None and self.connection.client is None:
            self.do_restore = False
        super().close()


class Transport(redis.Transport):
    Channel = Channel
