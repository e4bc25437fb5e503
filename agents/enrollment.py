"""Exchanging an enrollment token for a node credential (``POST /api/v1/agents/enroll``).

Plain ``urllib``: the agent installs on GPU nodes with the fewest dependencies possible. Every
failure becomes an ``EnrollmentFailed`` that carries the HTTP status (when there was one) and the
server's own words, so the operator sees "HTTP 410: this enrollment token has expired", not a
traceback.
"""

import json
import urllib.error
import urllib.request
from typing import Final

import msgspec

from agents import __version__
from agents.config import ENROLL_PATH

TIMEOUT_S: Final = 15.0


class Enrollment(msgspec.Struct):
    node_id: int
    hostname: str
    credential: str
    server_ws_url: str


class EnrollmentFailed(Exception):
    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """The server said no (a bad, used, expired or revoked token; a bad hostname), as opposed to
        the server being unreachable or broken: retrying the same request will not help."""
        return self.status is not None and 400 <= self.status < 500


def enroll(server_url: str, token: str, hostname: str, *, simulated: bool = False) -> Enrollment:
    body = json.dumps(
        {"token": token, "hostname": hostname, "agent_version": __version__, "simulated": simulated}
    ).encode()
    request = urllib.request.Request(
        server_url + ENROLL_PATH,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"cp-agent/{__version__}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        raise EnrollmentFailed(f"HTTP {exc.code} {exc.reason}: {_server_message(exc.read())}", status=exc.code) from exc
    except urllib.error.URLError as exc:
        raise EnrollmentFailed(f"cannot reach {server_url}: {exc.reason}") from exc
    except (OSError, TimeoutError) as exc:
        raise EnrollmentFailed(f"cannot reach {server_url}: {exc}") from exc
    try:
        return msgspec.json.decode(payload, type=Enrollment)
    except msgspec.DecodeError as exc:
        raise EnrollmentFailed(f"the server's answer is not an enrollment ({exc}): {payload[:200]!r}") from exc


def _server_message(body: bytes) -> str:
    """The API's error shape ({"detail": ...} or {"field": ["message", ...]}) as one line."""
    try:
        error = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()[:300] or "(no message)"
    if isinstance(error, dict):
        if "detail" in error and len(error) == 1:
            return str(error["detail"])
        return "; ".join(
            f"{field}: {' '.join(map(str, messages)) if isinstance(messages, list) else messages}"
            for field, messages in error.items()
        )
    return str(error)
