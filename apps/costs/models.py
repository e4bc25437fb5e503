"""The price book: what a GPU-hour costs per node type, and what energy costs per cluster.

Every price is valid over a half-open period ``[valid_from, valid_to)``: from the morning of
``valid_from`` up to, but not including, ``valid_to`` (open-ended when ``valid_to`` is empty). A
price that replaces another therefore starts on the day the old one ends (old ``valid_to`` = new
``valid_from``), with no gap and no day counted twice. Two prices for the same node type (or
cluster) may not overlap, so at most one is in force on any date.
"""

from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import ClassVar, Self

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models, transaction
from django.db.models import F, Q
from django.utils.text import capfirst

from apps.costs.choices import PriceKind
from apps.costs.figures import CostFigure, plain, to_money
from apps.inventory.models import Cluster, NodeType

# 365.25 days × 24 h: the mean calendar year, so leap years even out over a machine's life.
HOURS_PER_YEAR = 8766

currency_code = RegexValidator(r"^[A-Z]{3}$", "An ISO 4217 currency code in capitals, e.g. USD or EUR.")


def validate_positive(value: Decimal) -> None:
    if value <= 0:
        raise ValidationError("Must be greater than zero.", code="not_positive")


def validate_pue(value: Decimal) -> None:
    if value < 1:
        raise ValidationError("A PUE cannot be below 1.0 (facility power ÷ IT power).", code="pue_below_one")


def kind_specific_amount(
    max_digits: int, decimal_places: int, help_text: str, validator: Callable[[Decimal], None] = validate_positive
) -> models.DecimalField:
    """An amount only some kinds of price use: empty for the others (GpuPrice.price_errors says which)."""
    return models.DecimalField(
        max_digits=max_digits,
        decimal_places=decimal_places,
        null=True,
        blank=True,
        validators=[validator],
        help_text=help_text,
    )


class PricePeriodQuerySet(models.QuerySet):
    def in_force(self, at: date) -> Self:
        """Prices valid on ``at``: started on or before it and not yet ended (``valid_to`` is exclusive)."""
        return self.filter(Q(valid_from__lte=at), Q(valid_to__isnull=True) | Q(valid_to__gt=at))

    def effective(self, scope: models.Model, at: date) -> "PricePeriod | None":
        """The one price for this node type (or cluster) in force on ``at``, or None."""
        return self.in_force(at).filter(**{self.model.scope_field: scope}).order_by("-valid_from").first()


class PricePeriod(models.Model):
    """A price valid over ``[valid_from, valid_to)`` for one scope (a node type, a cluster).

    No two rows for the same scope may overlap. ``clean()`` says so with a clear message; ``save()``
    checks again under a row lock on the scope, so two writers racing cannot both slip through
    (PostgreSQL serialises them on the lock, SQLite has a single writer anyway).
    """

    scope_field: ClassVar[str]
    PERIOD_FIELDS = ("currency", "valid_from", "valid_to", "notes")

    currency = models.CharField(max_length=3, default="USD", validators=[currency_code], help_text="ISO 4217 code.")
    valid_from = models.DateField(help_text="First day the price applies.")
    valid_to = models.DateField(
        null=True,
        blank=True,
        help_text="First day it no longer applies (exclusive): the next price's valid_from. Empty: open-ended.",
    )
    notes = models.TextField(blank=True, help_text="Contract, quote or invoice the figures come from.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        constraints = [
            models.CheckConstraint(
                condition=Q(valid_to__gt=F("valid_from")), name="%(app_label)s_%(class)s_valid_to_after_valid_from"
            )
        ]

    def save(self, *args: object, **kwargs: object) -> None:
        with transaction.atomic():
            # Lock the node type (or cluster) row: a concurrent writer's overlap check waits for this commit.
            scope_model = self._meta.get_field(self.scope_field).related_model
            list(scope_model.objects.select_for_update(no_key=True).filter(pk=self.scope_id).values_list("pk"))
            self.refuse_overlap()
            super().save(*args, **kwargs)  # type: ignore[arg-type]

    @property
    def scope(self) -> models.Model:
        return getattr(self, self.scope_field)

    @property
    def scope_id(self) -> int | None:
        return getattr(self, f"{self.scope_field}_id")

    @property
    def period(self) -> str:
        if self.valid_to is None:
            return f"valid from {self.valid_from}, open-ended"
        return f"valid from {self.valid_from} until {self.valid_to}"

    def clean(self) -> None:
        super().clean()
        errors = self.price_errors()
        if self.valid_from and self.valid_to and self.valid_to <= self.valid_from:
            errors["valid_to"] = "Must be after valid_from: it is the first day the price no longer applies."
        if errors:
            raise ValidationError(errors)
        self.refuse_overlap()

    def price_errors(self) -> dict[str, str]:
        """Field errors of the price itself, beyond what each field checks alone; keyed by field."""
        return {}

    def overlapping(self) -> models.QuerySet[Self]:
        """Other prices for the same scope whose period shares at least one day with this one's."""
        others = type(self).objects.filter(**{f"{self.scope_field}_id": self.scope_id}).exclude(pk=self.pk)
        if self.valid_to is not None:
            others = others.filter(valid_from__lt=self.valid_to)
        return others.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=self.valid_from))

    def refuse_overlap(self) -> None:
        if self.scope_id is None or self.valid_from is None:
            return
        clash = self.overlapping().order_by("valid_from").first()
        if clash is None:
            return
        scope = self.scope_field.replace("_", " ")
        if clash.valid_from < self.valid_from:
            field, fix = "valid_from", f"end that one first by setting its valid_to to {self.valid_from}"
        else:
            field, fix = "valid_to", f"end this one by {clash.valid_from}, the day that one starts"
        raise ValidationError(
            {
                field: (
                    f"Overlaps {clash.describe()}. Only one price per {scope} can be in force on a day: {fix} "
                    "(valid_to is exclusive, the first day a price no longer applies), or choose other dates."
                )
            }
        )

    def describe(self) -> str:
        """Which row this is, for the ``source`` of a figure and for error messages."""
        return f"{capfirst(self._meta.verbose_name)} #{self.pk} for {self.scope} ({self.period})"


class GpuPrice(PricePeriod):
    """What one GPU-hour of a node type costs.

    Cloud capacity (``on_demand``, ``reserved``) is priced directly per GPU-hour. Owned hardware is
    amortised in a straight line over its life, plus its yearly operating cost (support contracts,
    space, staff; not energy, which ``EnergyPrice`` prices from measured power)::

        per GPU-hour = (purchase_price_per_node / life_years + yearly_operating_cost_per_node)
                       / 8766 h per year / gpus_per_node

    8766 is 365.25 × 24, the mean calendar year. A node costs its full price even with a GPU out,
    so the divisor is the node type's ``gpus_per_node``, not the GPUs that happen to work.
    """

    scope_field = "node_type"
    OWNED_FIELDS = ("purchase_price_per_node", "life_years", "yearly_operating_cost_per_node")

    node_type = models.ForeignKey(NodeType, on_delete=models.PROTECT, related_name="gpu_prices")
    kind = models.CharField(max_length=16, choices=PriceKind.choices)
    hourly_price_per_gpu = kind_specific_amount(10, 4, "On-demand and reserved only: the price of one GPU-hour.")
    purchase_price_per_node = kind_specific_amount(14, 2, "Owned only: what one node cost to buy and install.")
    life_years = kind_specific_amount(4, 2, "Owned only: years over which the purchase is amortised (straight line).")
    yearly_operating_cost_per_node = kind_specific_amount(
        14,
        2,
        "Owned only: support, space and staff per node per year, energy excluded (priced per cluster).",
        validator=MinValueValidator(Decimal(0)),
    )

    objects = PricePeriodQuerySet.as_manager()

    class Meta:
        verbose_name = "GPU price"
        ordering = ["node_type__name", "-valid_from"]
        indexes = [models.Index(fields=["node_type", "valid_from"])]
        constraints = [
            *PricePeriod.Meta.constraints,
            models.CheckConstraint(
                condition=(
                    Q(
                        kind=PriceKind.OWNED,
                        hourly_price_per_gpu__isnull=True,
                        purchase_price_per_node__isnull=False,
                        life_years__isnull=False,
                        yearly_operating_cost_per_node__isnull=False,
                    )
                    | Q(
                        kind__in=[PriceKind.ON_DEMAND, PriceKind.RESERVED],
                        hourly_price_per_gpu__isnull=False,
                        purchase_price_per_node__isnull=True,
                        life_years__isnull=True,
                        yearly_operating_cost_per_node__isnull=True,
                    )
                ),
                name="costs_gpuprice_fields_match_kind",
            ),
            # A NULL passes a CHECK, so these bind only the fields the kind uses.
            models.CheckConstraint(condition=Q(hourly_price_per_gpu__gt=0), name="costs_gpuprice_hourly_positive"),
            models.CheckConstraint(condition=Q(purchase_price_per_node__gt=0), name="costs_gpuprice_purchase_positive"),
            models.CheckConstraint(condition=Q(life_years__gt=0), name="costs_gpuprice_life_positive"),
            models.CheckConstraint(
                condition=Q(yearly_operating_cost_per_node__gte=0), name="costs_gpuprice_opex_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_type} {self.kind} from {self.valid_from}"

    def describe(self) -> str:
        return f"GPU price #{self.pk} for {self.node_type} ({PriceKind(self.kind).label.lower()}, {self.period})"

    def price_errors(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        if self.kind == PriceKind.OWNED:
            for name in self.OWNED_FIELDS:
                if getattr(self, name) is None:
                    errors[name] = "Required for owned hardware."
            if self.hourly_price_per_gpu is not None:
                errors["hourly_price_per_gpu"] = (
                    "Owned hardware has no hourly price of its own: it is amortised from purchase_price_per_node, "
                    "life_years and yearly_operating_cost_per_node. Leave it empty."
                )
        elif self.kind in PriceKind.values:
            label = PriceKind(self.kind).label.lower()
            if self.hourly_price_per_gpu is None:
                errors["hourly_price_per_gpu"] = f"Required for {label} prices."
            for name in self.OWNED_FIELDS:
                if getattr(self, name) is not None:
                    errors[name] = f"Only for owned hardware; leave it empty for {label} prices."
        return errors

    def hourly_cost_per_gpu(self) -> CostFigure:
        """What one GPU-hour costs under this price, with the arithmetic shown."""
        unit = f"{self.currency}/GPU-hour"
        if self.kind != PriceKind.OWNED:
            price = self.hourly_price_per_gpu
            return CostFigure(
                value=to_money(price),
                unit=unit,
                formula=f"{plain(price)} ({PriceKind(self.kind).label.lower()} price per GPU-hour)",
                inputs={"hourly_price_per_gpu": price},
                source=self.describe(),
            )
        purchase, life, opex = self.purchase_price_per_node, self.life_years, self.yearly_operating_cost_per_node
        gpus = self.node_type.gpus_per_node
        return CostFigure(
            value=to_money((purchase / life + opex) / HOURS_PER_YEAR / gpus),
            unit=unit,
            formula=f"({plain(purchase)} / {plain(life)} + {plain(opex)}) / {HOURS_PER_YEAR} / {gpus}",
            inputs={
                "purchase_price_per_node": purchase,
                "life_years": life,
                "yearly_operating_cost_per_node": opex,
                "hours_per_year": HOURS_PER_YEAR,
                "gpus_per_node": gpus,
            },
            source=self.describe(),
        )


class EnergyPrice(PricePeriod):
    """What energy costs at a cluster's site, and how much the facility adds on top of the IT load.

    PUE (power usage effectiveness) is facility power ÷ IT power: 1.3 means every kW a node draws
    costs 1.3 kW at the meter once cooling and power distribution are counted. So::

        cost per hour = price_per_kwh × pue × IT load in kW
    """

    scope_field = "cluster"

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="energy_prices")
    price_per_kwh = models.DecimalField(max_digits=10, decimal_places=5, validators=[validate_positive])
    pue = models.DecimalField(
        "PUE",
        max_digits=4,
        decimal_places=3,
        validators=[validate_pue],
        help_text="Power usage effectiveness, facility power ÷ IT power (e.g. 1.3).",
    )

    objects = PricePeriodQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "-valid_from"]
        indexes = [models.Index(fields=["cluster", "valid_from"])]
        constraints = [
            *PricePeriod.Meta.constraints,
            models.CheckConstraint(condition=Q(price_per_kwh__gt=0), name="costs_energyprice_price_positive"),
            models.CheckConstraint(condition=Q(pue__gte=1), name="costs_energyprice_pue_at_least_one"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} energy from {self.valid_from}"

    def cost_per_hour(self, watts: Decimal | int) -> CostFigure:
        """What an IT load of ``watts`` costs per hour at this price, facility overhead included."""
        if watts < 0:
            raise ValueError(f"An IT load cannot be negative (got {watts} W).")
        kw = Decimal(watts) / 1000
        return CostFigure(
            value=to_money(self.price_per_kwh * self.pue * kw),
            unit=f"{self.currency}/hour",
            formula=f"{plain(self.price_per_kwh)} × {plain(self.pue)} × {plain(kw)}",
            inputs={"price_per_kwh": self.price_per_kwh, "pue": self.pue, "watts": watts, "kw": kw},
            source=self.describe(),
        )

    def cost_per_kw_hour(self) -> CostFigure:
        """The price of an hour of 1 kW of IT load: the figure to compare sites by."""
        return self.cost_per_hour(1000)
