"""Messages to the agent consumers of a node, wherever their sockets are, through the channel layer."""

import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from redis.exceptions import RedisError

from apps.core.events import CommandsDispatched
from apps.gateway.models import NodeAgent

logger = logging.getLogger(__name__)

RETRY_PAUSES_S = (0.1, 0.3, 1.0)  # a process reads its channel's backlog at a few thousand messages a second

Send = tuple[str, dict[str, str]]  # (a consumer's channel, its message)


def agent_group(node_id: int) -> str:
    """The channel-layer group of the consumers holding a node's agent socket (one, normally); not the
    live streams' ``node.<id>`` of browsers watching the node (apps/dashboard/messages.py)."""
    return f"gateway.node.{node_id}"


def credential_revoked(node_id: int, credential_id: int) -> None:
    """Close the node's live sockets that use this credential now, rather than at their next check.

    Best effort: if the message is lost, each consumer still finds the revocation within a second
    (see bookkeeping.py), so a broken channel layer must not fail the revoke itself.
    """
    _tell_agent(node_id, {"type": "credential.revoked", "credential_id": credential_id})


def _tell_agent(node_id: int, message: dict[str, object]) -> None:
    try:
        async_to_sync(get_channel_layer().group_send)(agent_group(node_id), message)
    except (OSError, RedisError):
        logger.warning("Could not tell node %s's agent consumers %s", node_id, message, exc_info=True)


def deliver_commands(event: CommandsDispatched) -> None:
    """Carry committed commands and cancels (apps/jobs) to their nodes' sockets, all in one trip.

    Each frame goes to the channel of the consumer holding its node's socket (``NodeAgent.channel_name``,
    recorded at the Hello), not to the node's group: a group lives in Redis, and a Redis restarted empty
    forgets it while the socket stays up, so commands sent to the group would reach nobody until the
    agent happened to reconnect; a channel is only a key that the consumer reads, which a send creates
    again. A node with no socket is skipped.

    The consumers of one server process share one Redis key (channels_redis's process channel): the
    frames for all of them go in one round trip (the layer's ``send_many``), and their process hands
    them to its consumers all at once (controlplane/channel_layers.py). The key refuses frames past its
    capacity (what ``send`` raises ``ChannelFull`` for) until the process has read what is in it: such
    a frame is sent again after ``RETRY_PAUSES_S``. One still refused after them is logged; nothing is
    lost, the command's row says it is unanswered and apps/jobs sends it again (``resend``), or after the
    agent's next Hello. A channel layer that fails otherwise raises, and the event bus logs and counts it."""
    node_ids = {node_id for node_id, _ in event.frames}
    channels = dict(
        NodeAgent.objects.filter(node_id__in=node_ids).exclude(channel_name="").values_list("node_id", "channel_name")
    )
    messages = [
        (channels[node_id], {"type": "agent.deliver", "frame": frame.decode()})
        for node_id, frame in event.frames
        if node_id in channels
    ]
    if refused := async_to_sync(_send_all)(messages):
        logger.warning(
            "%d of %d command frames refused by full channels (%s, ...); they are sent again when unanswered",
            len(refused),
            len(messages),
            refused[0][0],
        )


async def _send_all(messages: list[Send]) -> list[Send]:
    """Send every ``(channel, message)``, one round trip a server process (the layer's ``send_many``);
    those refused by a full channel again after each pause. Returns those refused every time."""
    layer = get_channel_layer()
    waiting = messages
    for pause in (*RETRY_PAUSES_S, None):
        waiting = await layer.send_many(waiting)
        if not waiting or pause is None:
            break
        await asyncio.sleep(pause)
    return waiting


def seqs_reset(node_id: int) -> None:
    """Close the node's live sockets: the node's stored seqs were reset, and its agent must hear of it
    from a new Welcome. Best effort, like a revoke's message."""
    _tell_agent(node_id, {"type": "seqs.reset"})
