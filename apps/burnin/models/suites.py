"""Suites: the named lists of steps a burn-in runs on every node (quick, standard, extended ship; admins
define their own in the admin site or the API)."""

from typing import Any

from django.core.validators import RegexValidator
from django.db import models

from apps.jobs.models import Step


class Suite(models.Model):
    name = models.SlugField(max_length=64, unique=True, validators=[RegexValidator(r"^[a-z0-9][a-z0-9_-]*$")])
    title = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    steps = models.JSONField(
        help_text="What every node runs, in order: [{check, params, time_limit_s}], as a run's steps. A suite "
        "that starts and ends with health hands the first snapshot to the last as its baseline."
    )
    builtin = models.BooleanField(default=False, editable=False, help_text="Shipped with the control plane.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def run_steps(self) -> list[Step]:
        return [step_of(step) for step in self.steps]


def step_of(step: dict[str, Any]) -> Step:
    return Step(
        check=step["check"],
        params=dict(step.get("params") or {}),
        time_limit_s=int(step.get("time_limit_s", 600)),
        env=dict(step.get("env") or {}),
    )
