from typing import Any

from django import forms
from rest_framework import exceptions, pagination
from rest_framework.request import Request

from apps.core.api.filters import BIGINT_MAX


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    """NetBox-style ``?limit=&offset=`` pages; automation asks for up to 1,000 rows at a time.

    A ``limit`` or ``offset`` that is not a whole number in range is a 400 naming it, where DRF would
    quietly serve the default page (``?limit=abc``) or a shorter one than asked (``?limit=5000``).
    """

    default_limit = 100
    max_limit = 1000

    def whole_number(self, request: Request, name: str, default: int, minimum: int, maximum: int) -> int:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        field = forms.IntegerField(min_value=minimum, max_value=maximum)
        try:
            return field.clean(raw)
        except forms.ValidationError as exc:
            raise exceptions.ValidationError({name: exc.messages}) from exc

    def get_limit(self, request: Request) -> int:
        return self.whole_number(request, self.limit_query_param, self.default_limit, 1, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return self.whole_number(request, self.offset_query_param, 0, 0, BIGINT_MAX)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit, "default": self.default_limit},
            self.offset_query_param: {"minimum": 0, "maximum": BIGINT_MAX, "default": 0},
        }
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
