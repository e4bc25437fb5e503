"""Messages to the agent consumers of a node, wherever their sockets are, through the channel layer."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


def agent_group(node_id: int) -> str:
    """The channel-layer group of the consumers holding a node's agent socket (one, normally); not the
    live streams' ``node.<id>`` of browsers watching the node (apps/dashboard/messages.py)."""
    return f"gateway.node.{node_id}"


def credential_revoked(node_id: int, credential_id: int) -> None:
    """Close the node's live sockets that use this credential now, rather than at their next check.

    Best effort: if the message is lost, each consumer still finds the revocation within a second
    (see bookkeeping.py), so a broken channel layer must not fail the revoke itself.
    """
    try:
        async_to_sync(get_channel_layer().group_send)(
            agent_group(node_id), {"type": "credential.revoked", "credential_id": credential_id}
        )
    except (OSError, RedisError):
        logger.warning("Could not notify the gateway of revoked credential %s", credential_id, exc_info=True)
