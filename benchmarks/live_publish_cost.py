"""What live telemetry costs the ingesting process at the 1,000-node scale, by who is watching.

Each second the live publisher (apps/dashboard/live.py) sends one ``telemetry.fleet`` message and one
``telemetry.node`` message per changed node. With channels_redis a send to a group nobody is in still
costs two Redis round trips, so this measures, against a real Redis:

- ``empty_group_send_cpu_ms``: CPU of one ``group_send`` to an empty group (1,000 sends, 32 at a time);
- ``publisher_cpu_ms_per_s``: CPU per second of the publisher noting and publishing 1,000 nodes every
  second, when every node group is sent (``all``: what it did before the watch registry), when no
  browser watches a node (``none``), and when browsers watch 10 nodes (``ten``).

    python benchmarks/live_publish_cost.py [--redis redis://127.0.0.1:6379/7] [--seconds 4]

Runs in under 30 s. The last line printed is JSON.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NODES = 1_000


async def empty_group_send_cpu_ms(layer: object, rounds: int = 5) -> float:
    message = {"type": "telemetry.node", "node": 0, "ts": 0.0, "gpus": []}
    in_flight = asyncio.Semaphore(32)

    async def send(group: str) -> None:
        async with in_flight:
            await layer.group_send(group, message)

    per_send = []
    for _ in range(rounds):
        started = time.process_time()
        await asyncio.gather(*(send(f"empty.{n}") for n in range(NODES)))
        per_send.append((time.process_time() - started) * 1000 / NODES)
    return round(statistics.median(per_send), 3)


async def publisher_cpu_ms_per_s(batch: object, watched: set[int] | None, seconds: int) -> float:
    """CPU of the whole process (the publisher sends from a thread of its own) per second."""
    from apps.dashboard.live import LivePublisher

    async def watched_nodes(layer: object) -> set[int] | None:
        return watched

    publisher = LivePublisher(watched_nodes=watched_nodes)
    started = time.process_time()
    for _ in range(seconds):
        publisher.telemetry_stored(batch)
        await asyncio.sleep(1.0)
    used = time.process_time() - started
    await publisher.shutdown()
    return round(used * 1000 / seconds, 1)


async def main(seconds: int) -> dict[str, object]:
    from channels.layers import get_channel_layer

    from agents.protocol import GpuSample, NodeSample, Telemetry
    from apps.core.events import NodeTelemetry, TelemetryStored
    from apps.dashboard import watchers

    layer = get_channel_layer()
    sample = NodeSample(ts=time.time(), gpus=[GpuSample(index=i, util_gpu=90.0, power_w=650.0) for i in range(8)])
    batch = TelemetryStored(tuple(NodeTelemetry(n, Telemetry(seq=1, samples=[sample])) for n in range(NODES)))
    try:
        result: dict[str, object] = {"nodes": NODES, "empty_group_send_cpu_ms": await empty_group_send_cpu_ms(layer)}
        await watchers.watch("specific.bench!1", list(range(10)))
        ten = await watchers.watched_nodes()
        result["publisher_cpu_ms_per_s"] = {
            "all": await publisher_cpu_ms_per_s(batch, None, seconds),
            "none": await publisher_cpu_ms_per_s(batch, set(), seconds),
            "ten": await publisher_cpu_ms_per_s(batch, ten, seconds),
        }
        return result
    finally:
        await layer.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7")
    parser.add_argument("--seconds", type=int, default=4)
    args = parser.parse_args()
    os.environ["REDIS_URL"] = args.redis
    os.environ["CHANNEL_LAYER_PREFIX"] = f"bench-live-{uuid.uuid4().hex[:8]}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("DEBUG", "true")

    import django

    django.setup()
    figures = asyncio.run(main(args.seconds))
    print(json.dumps(figures))
