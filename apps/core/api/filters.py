"""Query filters that refuse what they cannot read, instead of guessing.

django-filter reads a number through a decimal field (``?cluster=1.5`` filtered as cluster 1, a
twenty-digit id reached the database and came back a 500), ignores a boolean it cannot read
(``?open=maybe`` filtered nothing) and answers a wrong choice without saying which are right. The
base class here fixes all three for every filter set of the API, those declared in ``apps/*/filtersets.py``
and those DRF builds from a view's ``filterset_fields``: a value that is not a whole number in the
range of a database integer, not a boolean, or not one of the choices is a 400 naming the parameter.
"""

from typing import Any

import django_filters
from django import forms
from django.db import models
from django_filters.rest_framework import DjangoFilterBackend

# The range of the databases' integer columns (BIGINT on PostgreSQL, INTEGER on SQLite). Narrower
# columns compare with a value outside their own range as "no match", which Django does by itself.
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1


class IntegerFilter(django_filters.NumberFilter):
    """A whole number (``1.5`` is refused, not read as 1) that a database integer can hold."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", BIGINT_MIN)
        kwargs.setdefault("max_value", BIGINT_MAX)
        super().__init__(*args, **kwargs)


class StrictBooleanField(forms.Field):
    """``true``/``false`` (or ``1``/``0``, any case); anything else is an error, not "no filter"."""

    VALUES = {"true": True, "1": True, "false": False, "0": False}
    default_error_messages = {"invalid": "Must be true or false."}

    def to_python(self, value: Any) -> bool | None:
        if value in self.empty_values:
            return None
        if isinstance(value, bool):
            return value
        try:
            return self.VALUES[str(value).strip().lower()]
        except KeyError:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None


class BooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


# Every integer column django-filter gives a decimal filter (subclasses are found through their MRO).
INTEGER_FIELDS = (
    models.AutoField,
    models.IntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveSmallIntegerField,
)


def invalid_choice_message(choices: Any) -> str:
    """The form fields' ``invalid_choice`` message, listing the values a client may send."""
    values = ", ".join(str(value).replace("%", "%%") for value, _ in choices)
    return f"%(value)s is not a valid choice; valid choices are: {values}."


class FilterSet(django_filters.FilterSet):
    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        **{field: {"filter_class": IntegerFilter} for field in INTEGER_FIELDS},
        models.BooleanField: {"filter_class": BooleanFilter},
    }

    @classmethod
    def get_filters(cls) -> dict[str, django_filters.Filter]:
        """The class's filters (its metaclass asks, once), each choice filter with an error that lists
        the choices: set here, before any filter builds its form field, which it then keeps."""
        filters = super().get_filters()
        for filter_ in filters.values():
            choices, rows = filter_.extra.get("choices"), filter_.extra.get("queryset")
            if choices is not None:
                message = invalid_choice_message(choices() if callable(choices) else choices)
            elif isinstance(rows, models.QuerySet):  # a foreign key: the rows are not listed, only named
                message = f"%(value)s is not the id of any {rows.model._meta.verbose_name}."
            else:
                continue
            filter_.extra["error_messages"] = {"invalid_choice": message, **filter_.extra.get("error_messages", {})}
        return filters


class FilterBackend(DjangoFilterBackend):
    """DRF's django-filter backend, building a view's ``filterset_fields`` on the strict FilterSet."""

    filterset_base = FilterSet
