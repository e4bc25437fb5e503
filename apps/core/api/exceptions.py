"""One error shape for the whole API, and no 500 for a database refusal the client caused."""

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from apps.core import integrity

logger = logging.getLogger(__name__)


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"


def body_too_large() -> PayloadTooLarge:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return PayloadTooLarge(f"The request body is larger than {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE).")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = exceptions.ValidationError(detail)
    elif isinstance(exc, IntegrityError):
        # A unique or foreign-key constraint the serializer could not see in advance (a race
        # between two writers): the transaction is rolled back, so nothing was half-written. The
        # client is told which fields, where the database says; the database's own words (tables,
        # constraint names, the refused values) go to the log only.
        view = context.get("view")
        logger.warning("%s: the database refused a change: %s", type(view).__name__ if view else "API", exc)
        exc = Conflict(integrity.explain(exc).message())
    elif isinstance(exc, RequestDataTooBig):
        exc = body_too_large()
    return drf_exception_handler(exc, context)
