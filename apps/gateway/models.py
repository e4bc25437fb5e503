"""Enrollment tokens, per-node credentials, what each node's agent last reported, the changes
discovery found, and counts of what the gateway refused.

Secrets are made and checked by ``apps.core.secrets``, like API tokens: 256 random bits, shown once, stored as a SHA-256
digest, and found by a short key id kept in clear (``cpe_<key id>_<secret>`` for an enrollment
token, ``cpn_<key id>_<secret>`` for a node credential).
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.core.secrets import hash_secret, new_secret, secret_matches, split_presented
from apps.gateway.choices import ChangeKind, CounterCode, EnrollmentTokenState
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Cluster, Node, NodeType

ENROLLMENT_TOKEN_PREFIX: Final = "cpe"
CREDENTIAL_PREFIX: Final = "cpn"


def _revoke(row: "EnrollmentToken | NodeCredential", **still: object) -> bool:
    """Set ``revoked_at`` if the row is not revoked yet (and still matches ``still``); one caller wins a race."""
    now = timezone.now()
    if not type(row).objects.filter(pk=row.pk, revoked_at__isnull=True, **still).update(revoked_at=now):
        return False
    row.revoked_at = now
    return True


class EnrollmentTokenQuerySet(models.QuerySet["EnrollmentToken"]):
    def usable(self, now: datetime | None = None) -> "EnrollmentTokenQuerySet":
        return self.filter(used_at__isnull=True, revoked_at__isnull=True, expires_at__gt=now or timezone.now())


class EnrollmentToken(models.Model):
    """A one-time, expiring secret an admin hands to whoever installs the agent on a node.

    With a hostname it enrolls that node (binding to the existing node, or creating it in the given
    cluster and node type); without one it enrolls any *new* node, created in the given cluster and
    node type. It never lets an agent take over an existing node it was not issued for.
    """

    key_id = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    hostname = models.CharField(
        max_length=253,
        blank=True,
        validators=Node._meta.get_field("hostname").validators,
        help_text="The node this token enrolls; blank for any new node.",
    )
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="+", help_text="Where a new node goes."
    )
    node_type = models.ForeignKey(
        NodeType, null=True, blank=True, on_delete=models.PROTECT, related_name="+", help_text="A new node's type."
    )
    note = models.CharField(max_length=200, blank=True, help_text="What it is for, e.g. a ticket number.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True, editable=False)
    used_by_node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = EnrollmentTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{ENROLLMENT_TOKEN_PREFIX}_{self.key_id}… for {self.hostname or 'any new node'}"

    def clean(self) -> None:
        if (self.cluster_id is None) != (self.node_type_id is None):
            raise ValidationError({"node_type": "Give the cluster and the node type together, or neither."})
        existing = Node.objects.filter(hostname=self.hostname).first() if self.hostname else None
        if existing is None and self.cluster_id is None:
            whom = f"No node is named {self.hostname}" if self.hostname else "A token for any new node"
            raise ValidationError({"cluster": f"{whom}: give the cluster and node type to create it in."})
        if existing is not None and self.cluster_id is not None and existing.cluster_id != self.cluster_id:
            raise ValidationError(
                {"cluster": f"{existing.hostname} already exists in cluster {existing.cluster}; leave cluster empty."}
            )
        if existing is not None and existing.lifecycle == Lifecycle.RETIRED:
            raise ValidationError({"hostname": f"{existing.hostname} is retired and cannot enroll again."})
        if self.expires_at is not None and self.expires_at <= timezone.now():
            raise ValidationError({"expires_at": "The expiry must be in the future."})

    @classmethod
    def issue(cls, **fields: object) -> tuple["EnrollmentToken", str]:
        """Create a token and return it with its clear-text value, which is never stored."""
        key_id, secret, presented = new_secret(ENROLLMENT_TOKEN_PREFIX)
        token = cls(key_id=key_id, secret_hash=hash_secret(secret), **fields)
        if token.expires_at is None:
            token.expires_at = timezone.now() + settings.AGENT_ENROLLMENT_TOKEN_TTL
        token.full_clean()
        token.save()
        return token, presented

    @classmethod
    def find(cls, presented: str) -> "EnrollmentToken | None":
        """The token a presented secret belongs to, used or not (the caller decides), or None."""
        parts = split_presented(presented, ENROLLMENT_TOKEN_PREFIX)
        if parts is None:
            return None
        key_id, secret = parts
        token = cls.objects.select_related("cluster", "node_type").filter(key_id=key_id).first()
        return token if secret_matches(token.secret_hash if token else None, secret) else None

    @property
    def state(self) -> EnrollmentTokenState:
        if self.used_at is not None:
            return EnrollmentTokenState.USED
        if self.revoked_at is not None:
            return EnrollmentTokenState.REVOKED
        return EnrollmentTokenState.EXPIRED if self.expires_at <= timezone.now() else EnrollmentTokenState.USABLE

    def revoke(self) -> bool:
        """Revoke an unused token; False if it was used or revoked already (nothing changes then)."""
        return _revoke(self, used_at__isnull=True)


class NodeCredentialQuerySet(models.QuerySet["NodeCredential"]):
    def usable(self) -> "NodeCredentialQuerySet":
        return self.filter(revoked_at__isnull=True).exclude(node__lifecycle=Lifecycle.RETIRED)

    def unusable_among(self, ids: Iterable[int]) -> frozenset[int]:
        """Which of these credentials no longer authenticate (revoked, deleted, or the node retired)."""
        ids = set(ids)
        if not ids:
            return frozenset()
        return frozenset(ids - set(self.usable().filter(pk__in=ids).values_list("pk", flat=True)))


class NodeCredential(models.Model):
    """The secret a node's agent authenticates with. It speaks for its node only.

    A node may have had several over time (re-enrollment revokes the earlier ones); only usable ones
    authenticate, and a revoke closes a live connection too.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="credentials")
    key_id = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    enrollment_token = models.ForeignKey(
        EnrollmentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_seen_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="Last connection.")
    last_ip = models.GenericIPAddressField(null=True, blank=True, editable=False)

    objects = NodeCredentialQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{CREDENTIAL_PREFIX}_{self.key_id}… ({self.node})"

    @classmethod
    def issue(cls, node: Node, *, enrollment_token: EnrollmentToken | None = None) -> tuple["NodeCredential", str]:
        key_id, secret, presented = new_secret(CREDENTIAL_PREFIX)
        credential = cls.objects.create(
            node=node, key_id=key_id, secret_hash=hash_secret(secret), enrollment_token=enrollment_token
        )
        return credential, presented

    @classmethod
    def authenticate(cls, presented: str) -> "NodeCredential | None":
        return cls.authenticate_many([presented])[0]

    @classmethod
    def authenticate_many(cls, presented: Sequence[str]) -> list["NodeCredential | None"]:
        """The usable credential (with its node) each presented secret belongs to, or None; one query for all."""
        parts = [split_presented(secret, CREDENTIAL_PREFIX) for secret in presented]
        key_ids = {part[0] for part in parts if part is not None}
        found = (
            {
                credential.key_id: credential
                for credential in cls.objects.usable().select_related("node").filter(key_id__in=key_ids)
            }
            if key_ids
            else {}
        )
        matched: list[NodeCredential | None] = []
        for part in parts:
            credential = found.get(part[0]) if part is not None else None
            digest = credential.secret_hash if credential is not None else None
            matched.append(credential if part is not None and secret_matches(digest, part[1]) else None)
        return matched

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and self.node.lifecycle != Lifecycle.RETIRED

    def revoke(self) -> bool:
        """Revoke the credential; False if it was revoked already."""
        return _revoke(self)

    @classmethod
    def record_connections(cls, connected: Sequence[tuple["NodeCredential", str | None]]) -> None:
        """Note when and from where each of these credentials connected, in one transaction."""
        now = timezone.now()
        by_address: defaultdict[str | None, list[int]] = defaultdict(list)
        for credential, ip in connected:
            credential.last_seen_at, credential.last_ip = now, ip
            by_address[ip].append(credential.pk)
        # One UPDATE per address, in one transaction: a fleet behind one NAT (or the simulator) is one
        # statement, and each statement stays cheap to build (bulk_update's CASE for 500 rows was not).
        with transaction.atomic():
            for ip, ids in by_address.items():
                cls.objects.filter(pk__in=ids).update(last_seen_at=now, last_ip=ip)


class NodeAgent(models.Model):
    """What a node's agent last said about itself and its connection."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, primary_key=True, related_name="agent")
    agent_version = models.CharField(max_length=128, blank=True)
    protocol = models.PositiveSmallIntegerField(null=True, blank=True)
    simulated = models.BooleanField(default=False, help_text="A fleet-simulator node, not real hardware.")
    host = models.JSONField(default=dict, blank=True, help_text="Host facts: driver, CUDA, kernel, OS, CPU, memory.")
    inventory = models.JSONField(
        null=True, blank=True, editable=False, help_text="The last inventory applied, to diff the next one against."
    )
    inventory_at = models.DateTimeField(null=True, blank=True, editable=False)
    connected_at = models.DateTimeField(null=True, blank=True, editable=False)
    disconnected_at = models.DateTimeField(null=True, blank=True, editable=False)
    remote_addr = models.GenericIPAddressField(null=True, blank=True, editable=False)
    channel_name = models.CharField(
        max_length=200,
        blank=True,
        editable=False,
        help_text="The channel-layer channel of the consumer holding the agent's socket; empty when none.",
    )
    buffered_samples = models.PositiveBigIntegerField(
        default=0, editable=False, help_text="Samples the agent held, not yet acknowledged, when it last said."
    )
    dropped_samples = models.PositiveBigIntegerField(
        default=0, editable=False, help_text="Samples the agent lost from a full buffer, ever, when it last said."
    )
    buffer_reported_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["node__hostname"]

    def __str__(self) -> str:
        return f"agent on {self.node}"

    @property
    def connected(self) -> bool:
        return self.connected_at is not None and (
            self.disconnected_at is None or self.disconnected_at < self.connected_at
        )


class DiscoveryChange(models.Model):
    """Something discovery found different from what the inventory held: a GPU swapped, an HCA gone."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="discovery_changes")
    at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=16, choices=ChangeKind.choices)
    subject = models.CharField(max_length=64, help_text="What changed: 'gpu3', 'mlx5_0/1' or 'host'.")
    detail = models.JSONField(default=dict, blank=True, help_text="Before and after, e.g. old and new GPU UUID.")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["node", "-at"]), models.Index(fields=["kind", "-at"])]

    def __str__(self) -> str:
        return f"{self.node} {self.kind} {self.subject}"


class GatewayCounter(models.Model):
    """How often the gateway refused something from a node (or, without a node, a connection), by code."""

    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    code = models.CharField(max_length=32, choices=CounterCode.choices)
    count = models.PositiveBigIntegerField(default=0)
    first_at = models.DateTimeField(default=timezone.now)
    last_at = models.DateTimeField(default=timezone.now)
    last_message = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["node", "code"]
        constraints = [
            models.UniqueConstraint(fields=["node", "code"], name="gateway_counter_unique_per_node"),
            models.UniqueConstraint(
                fields=["code"], condition=Q(node__isnull=True), name="gateway_counter_unique_without_node"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node or 'unauthenticated'} {self.code}: {self.count}"

    @classmethod
    def add(cls, increments: Mapping[tuple[int | None, str], tuple[int, str]], now: datetime) -> None:
        """Add ``{(node id, code): (how many, last message)}`` to the counters, creating the missing ones."""
        for (node_id, code), (count, message) in increments.items():
            fields = {"last_at": now, "last_message": message[:500]}
            if cls.objects.filter(node_id=node_id, code=code).update(count=F("count") + count, **fields):
                continue
            try:
                with transaction.atomic():
                    cls.objects.create(node_id=node_id, code=code, count=count, first_at=now, **fields)
            except IntegrityError:  # another process created it a moment ago
                cls.objects.filter(node_id=node_id, code=code).update(count=F("count") + count, **fields)
