"""Exchanging a one-time enrollment token for a node credential.

The token is consumed by a conditional update inside the transaction that creates the node and
the credential, so two agents racing with one token cannot both win, and a failure anywhere
leaves the token unused. Every refusal looks the same to the caller (a guessed, expired, used or
misdirected token cannot be told apart); the reason goes to the audit log. The new credential begins a
new epoch of the node's seqs (apps/gateway/seqs.py).
"""

from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.gateway.choices import EnrollmentTokenState
from apps.gateway.models import EnrollmentToken, NodeAgent, NodeCredential
from apps.gateway.seqs import reset_seqs
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node


class EnrollmentRefused(Exception):
    """Why an enrollment was refused, for the audit log; the caller gets a generic answer."""

    def __init__(self, reason: str, token: EnrollmentToken | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.token = token


@dataclass
class Enrollment:
    node: Node
    credential: NodeCredential
    secret: str
    token: EnrollmentToken
    created_node: bool
    revoked_credentials: list[str] = field(default_factory=list)
    previous_seqs: dict[str, int] = field(default_factory=dict)  # a new credential starts the seqs anew


def enroll(presented_token: str, hostname: str, *, agent: dict[str, Any]) -> Enrollment:
    """Consume the token and return a new credential for the node it allows, or raise EnrollmentRefused.

    ``agent`` holds NodeAgent fields the agent reported (version, simulated, host facts).
    """
    token = EnrollmentToken.find(presented_token)
    if token is None:
        raise EnrollmentRefused("no token matches")
    if token.state != EnrollmentTokenState.USABLE:
        raise EnrollmentRefused(f"token {token.state}", token)
    if token.hostname and token.hostname != hostname:
        raise EnrollmentRefused(f"token is for {token.hostname}, not {hostname}", token)
    try:
        with transaction.atomic():
            return _enroll(token, hostname, agent)
    except IntegrityError as exc:  # another enrollment created this hostname a moment ago
        raise EnrollmentRefused(f"conflict creating {hostname}: {exc}".splitlines()[0], token) from exc


def _enroll(token: EnrollmentToken, hostname: str, agent: dict[str, Any]) -> Enrollment:
    now = timezone.now()
    if not EnrollmentToken.objects.usable(now).filter(pk=token.pk).update(used_at=now):
        raise EnrollmentRefused("token used or revoked by a concurrent request", token)
    node = Node.objects.select_for_update().filter(hostname=hostname).first()
    created = node is None
    if node is None:
        if token.cluster_id is None:
            raise EnrollmentRefused(f"no node named {hostname} and the token names no cluster to create it in", token)
        node = Node.objects.create_new(
            Node(hostname=hostname, cluster=token.cluster, node_type=token.node_type, lifecycle=Lifecycle.NEW),
            actor=f"agent:{hostname}",
            reason=f"enrolled with token {token.key_id}",
            at=now,
        )
    elif not token.hostname:
        raise EnrollmentRefused(f"{hostname} exists and a token for any new node cannot take it over", token)
    elif node.lifecycle == Lifecycle.RETIRED:
        raise EnrollmentRefused(f"{hostname} is retired", token)
    # One agent per node: a re-enrolled node's earlier credentials stop working.
    earlier = list(node.credentials.filter(revoked_at__isnull=True).values_list("key_id", flat=True))
    node.credentials.filter(revoked_at__isnull=True).update(revoked_at=now)
    credential, secret = NodeCredential.issue(node, enrollment_token=token)
    EnrollmentToken.objects.filter(pk=token.pk).update(used_by_node=node)
    token.used_at, token.used_by_node = now, node
    NodeAgent.objects.update_or_create(node=node, defaults=agent)
    return Enrollment(node, credential, secret, token, created, earlier, reset_seqs(node))
