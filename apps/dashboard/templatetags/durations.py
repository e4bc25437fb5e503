"""``{{ value|hours }}``: a duration held in hours, written in a unit that shows it. A young fleet's
MTBF of 0.06 h read "0.0 h" with one decimal; under an hour it is written in minutes."""

from django import template

register = template.Library()


@register.filter
def hours(value: float | None) -> str:
    if value is None:
        return "–"
    if value >= 1:
        return f"{value:,.1f} h".replace(".0 h", " h")
    minutes = value * 60
    return "< 1 min" if minutes < 1 else f"{minutes:.0f} min"
