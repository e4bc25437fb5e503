"""Typed readers for settings that come from the environment.

Each reader fails loudly with ImproperlyConfigured on a value it cannot use, and each can read a
secret from a file named by ``NAME_FILE`` (Docker and Kubernetes secrets), as Healthchecks and
PostHog do.
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_raw(name: str) -> str | None:
    """The variable's value, or the contents of the file named by ``NAME_FILE``, or None."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    return os.environ.get(name)


def env_str(name: str, default: str) -> str:
    value = env_raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    value = env_raw(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true or false)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]
