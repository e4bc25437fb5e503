"""Named choices of burn-ins: where each node of a burn-in stands, and what became of it."""

from django.db import models


class NodeState(models.TextChoices):
    TESTING = "testing", "Testing"  # its steps are under way: the node is in burn-in, nothing else goes on it
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"


class Outcome(models.TextChoices):
    """What the burn-in did to the node's lifecycle once it was judged."""

    IN_SERVICE = "in_service", "Moved into service"
    QUARANTINED = "quarantined", "Quarantined"
    WITHHELD = "withheld", "Quarantine withheld: the cluster's breaker is open"
    KEPT = "kept", "Left in burn-in"  # passed, and the burn-in was started with into_service false
    LEFT = "left", "Left as it was"  # someone moved the node while it was tested; its state stands


class Trigger(models.TextChoices):
    REQUEST = "request", "Started by a person or a script"
    ENROLLMENT = "enrollment", "First enrollment"


class BreakerChange(models.TextChoices):
    OPENED = "opened", "Opened"
    CLOSED = "closed", "Closed"


class Bound(models.TextChoices):
    AT_LEAST = "at_least", "at least"
    AT_MOST = "at_most", "at most"
