"""Named choices of runs and commands, and which of their states are final."""

from typing import get_args

from django.db import models

from agents.protocol import CheckName


class RunKind(models.TextChoices):
    """What a run does on its nodes. Burn-in, NCCL sweeps and training launches are kinds still to come;
    ``checks`` runs the steps it is given (each a check of agents/executors) on every node."""

    CHECKS = "checks", "Checks"


class RunState(models.TextChoices):
    PENDING = "pending", "Pending"  # written; its start task is queued
    RUNNING = "running", "Running"  # started: its commands go out as their nodes can take them
    SUCCEEDED = "succeeded", "Succeeded"  # every command succeeded
    FAILED = "failed", "Failed"  # a command failed or expired
    CANCELLED = "cancelled", "Cancelled"  # someone cancelled it


RUN_FINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})


class CommandState(models.TextChoices):
    PENDING = "pending", "Pending"  # waiting for its turn on the node, or for the node to come back
    SENT = "sent", "Sent"  # handed to the gateway (``attempts`` times); the agent has not said it started
    RUNNING = "running", "Running"  # the agent started it
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"  # it ran and failed, could not run, ran out of time, or the agent lost it
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"  # its deadline passed first; ``reason`` says where it was


COMMAND_FINAL = frozenset({CommandState.SUCCEEDED, CommandState.FAILED, CommandState.CANCELLED, CommandState.EXPIRED})
COMMAND_ACTIVE = frozenset({CommandState.SENT, CommandState.RUNNING})  # the agent has it (or is being given it)
COMMAND_OPEN = frozenset({CommandState.PENDING, *COMMAND_ACTIVE})


class CommandOutcome(models.TextChoices):
    """What the agent said became of a command (``agents.protocol.CommandOutcome``)."""

    EXITED = "exited", "Exited"  # with ``exit_code``
    TIMED_OUT = "timed_out", "Ran past its time limit"
    CANCELLED = "cancelled", "Stopped on cancel"
    LOST = "lost", "Lost in an agent restart"
    REFUSED = "refused", "Refused by the agent"


CHECK_CHOICES = [(name, name.replace("_", " ")) for name in get_args(CheckName)]

# A check that only reads the node's counters; any other loads GPUs, links or disks, and a node
# runs one such step at a time, whichever run it belongs to.
NON_INVASIVE_CHECKS = frozenset({"health"})
