"""Derived money figures that carry their inputs.

The product rule is that every derived number shows its inputs, so a figure is never a bare
Decimal: it comes with the formula written out in the numbers that went into it, those inputs by
name, and the price-book row it came from. A reader can redo the arithmetic from what is shown.
"""

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

# Money figures are quoted to 1/100 of a cent, rounding halves up (as an invoice does). A quoted
# figure is what later arithmetic uses, so a total is exactly the sum of the lines it shows.
MONEY_PLACES = Decimal("0.0001")


def to_money(value: Decimal) -> Decimal:
    return value.quantize(MONEY_PLACES, rounding=ROUND_HALF_UP)


def plain(value: Decimal | int) -> str:
    """A number as a person writes it in a formula: 250000, 4, 1.3 (no exponent, no trailing zeros)."""
    if isinstance(value, int):
        return str(value)
    return format(value.normalize(), "f")


@dataclass(frozen=True)
class CostFigure:
    """A money figure with what it was computed from.

    ``formula`` is the arithmetic in the actual numbers (``(250000 / 4 + 20000) / 8766 / 8``);
    ``inputs`` names each number (decimals exact, counts as integers); ``source`` says which
    price-book rows were used.
    """

    value: Decimal
    unit: str
    formula: str
    inputs: dict[str, Decimal | int | str]
    source: str
