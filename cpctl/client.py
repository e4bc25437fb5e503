"""The REST API over HTTP with the standard library: where it is and which token to send (flags, then
the environment, then a config file), JSON in and out, and errors a person can read."""

import json
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpctl import __version__

PAGE = 1000  # the API's largest page
TIMEOUT_S = 30.0


class ConfigError(Exception):
    """The URL or the token is missing or unusable; the message says where it was looked for."""


class ApiError(Exception):
    """The API answered with an error, or could not be reached; the message says which."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Config:
    url: str  # the server's origin, e.g. http://127.0.0.1:8000
    token: str

    @classmethod
    def resolve(cls, url: str | None, token: str | None, env: Mapping[str, str]) -> "Config":
        """Each of URL and token from its flag, else ``CPCTL_URL`` / ``CPCTL_TOKEN``, else the config file
        (``CPCTL_CONFIG``, default ``$XDG_CONFIG_HOME/cpctl/config.toml``: ``url = ...``, ``token = ...``)."""
        path = config_path(env)
        from_file = read_config(path) if (url is None or token is None) and path.exists() else {}
        url = url or env.get("CPCTL_URL") or from_file.get("url")
        token = token or env.get("CPCTL_TOKEN") or from_file.get("token")
        where = f"--{{0}}, CPCTL_{{1}} or {path}"
        if not url:
            raise ConfigError(f'No server URL: give it with {where.format("url", "URL")} (url = "http://...").')
        if not token:
            raise ConfigError(f'No API token: give it with {where.format("token", "TOKEN")} (token = "cpt_...").')
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"The server URL {url!r} is not an http:// or https:// address.")
        return cls(url=url.rstrip("/").removesuffix("/api/v1"), token=token.strip())


def config_path(env: Mapping[str, str]) -> Path:
    if env.get("CPCTL_CONFIG"):
        return Path(env["CPCTL_CONFIG"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "cpctl" / "config.toml"


def read_config(path: Path) -> dict[str, str]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"Cannot read the config file {path}: {exc}") from exc
    unknown = sorted(set(data) - {"url", "token"})
    if unknown:
        raise ConfigError(f"The config file {path} has unknown keys: {', '.join(unknown)} (it takes url and token).")
    wrong = sorted(key for key, value in data.items() if not isinstance(value, str))
    if wrong:
        raise ConfigError(f"In the config file {path}, {', '.join(wrong)} must be a quoted string.")
    return data


def describe_error(body: Any) -> str:
    """The API's error body in one line: ``{"detail": ...}`` or ``{"field": ["message", ...], ...}``."""
    if isinstance(body, dict):
        if set(body) == {"detail"}:
            return str(body["detail"])
        return "; ".join(f"{field}: {describe_error(value)}" for field, value in body.items())
    if isinstance(body, list):
        return " ".join(describe_error(item) for item in body)
    return str(body)


class Client:
    def __init__(self, config: Config, *, timeout: float = TIMEOUT_S) -> None:
        self.config = config
        self.timeout = timeout

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        url = f"{self.config.url}/api/v1/{path.lstrip('/')}"
        if params:
            url += "?" + urllib.parse.urlencode([(k, v) for k, v in params.items() if v is not None], doseq=True)
        data = None if body is None else json.dumps(body).encode()
        headers = {
            "Authorization": f"Bearer {self.config.token}",
            "Accept": "application/json",
            "User-Agent": f"cpctl/{__version__}",
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(f"{method} {path}: {exc.code} {self._error_text(exc)}", status=exc.code) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(f"Cannot reach the API at {self.config.url}: {reason}") from exc
        try:
            return json.loads(payload) if payload else None
        except ValueError as exc:
            raise ApiError(f"{method} {path}: the answer is not JSON; is {self.config.url} the control plane?") from exc

    @staticmethod
    def _error_text(exc: urllib.error.HTTPError) -> str:
        raw = exc.read()
        try:
            return describe_error(json.loads(raw))
        except ValueError:
            return exc.reason or raw[:200].decode(errors="replace")

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)

    def every(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every row of a list endpoint, a page of 1,000 at a time."""
        offset = 0
        while True:
            page = self.get(path, **params, limit=PAGE, offset=offset)
            yield from page["results"]
            offset += len(page["results"])
            if not page.get("next") or not page["results"]:
                return
