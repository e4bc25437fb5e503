"""Named choices for the price book."""

from django.db import models


class PriceKind(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    RESERVED = "reserved", "Reserved"
    OWNED = "owned", "Owned (amortised)"
