"""The agent's configuration file: where the control plane is, who this node is, its credential; and
the credentials file of a simulated fleet.

JSON, written by ``cp-agent enroll`` atomically with mode 0600 (the credential speaks for the
node). Where it is looked for, first match wins: ``--config``; ``$CP_AGENT_CONFIG``; under systemd
with ``LoadCredential=agent.json:...``, ``$CREDENTIALS_DIRECTORY/agent.json`` (systemd hands the
unprivileged service a copy only it can read, so the file itself can stay root's); else
``/etc/cp-agent/agent.json``.
"""

import os
from pathlib import Path
from typing import Annotated, Final
from urllib.parse import urlsplit, urlunsplit

import msgspec

from agents.durable import write_private_file
from agents.protocol import Hostname

DEFAULT_CONFIG_PATH: Final = Path("/etc/cp-agent/agent.json")
DEFAULT_STATE_DIR: Final = Path("/var/lib/cp-agent")
ENROLL_PATH: Final = "/api/v1/agents/enroll"
AGENT_SOCKET_PATH: Final = "/ws/agent"
# Held samples are in memory only (agents.batching): a crash loses up to a send interval of them, and
# the dashboard is that much behind. A minute bounds both.
MAX_SEND_INTERVAL_S: Final = 60.0


class ConfigError(Exception):
    """A configuration file that is missing, unreadable, invalid, or in the way."""


class AgentConfig(msgspec.Struct, kw_only=True):
    server_url: str  # the control plane's HTTP(S) base URL, as given to ``enroll``
    server_ws_url: str  # the agent socket, as the server's enrollment answer named it
    node_id: int
    hostname: Hostname
    credential: Annotated[str, msgspec.Meta(min_length=1)]
    state_dir: str = str(DEFAULT_STATE_DIR)
    interval_s: Annotated[float, msgspec.Meta(ge=0.1, le=3600)] | None = None  # None: the control plane's
    # Telemetry sent at most this often, the samples taken between sends in one frame; 0: each at once.
    send_interval_s: Annotated[float, msgspec.Meta(ge=0, le=MAX_SEND_INTERVAL_S)] = 0.0


class SimulatedNodeCredential(msgspec.Struct):
    hostname: str
    node_id: int
    credential: str


class FleetCredentials(msgspec.Struct):
    """The credentials of a simulated fleet (``cp-agent simulate --credentials-file``), written 0600 like
    an agent's config: by ``simulate`` after it enrolls nodes, or by a control plane that issued them."""

    server_ws_url: str
    nodes: list[SimulatedNodeCredential] = []


def default_config_path() -> Path:
    if explicit := os.environ.get("CP_AGENT_CONFIG"):
        return Path(explicit)
    if credentials := os.environ.get("CREDENTIALS_DIRECTORY"):
        candidate = Path(credentials) / "agent.json"
        if candidate.exists():
            return candidate
    return DEFAULT_CONFIG_PATH


def default_state_dir() -> Path:
    """systemd's StateDirectory= when running as the service, else /var/lib/cp-agent."""
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(state) if state else DEFAULT_STATE_DIR


def load_config(path: Path) -> AgentConfig:
    try:
        return msgspec.json.decode(path.read_bytes(), type=AgentConfig)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} does not exist: enroll this node first (cp-agent enroll)") from exc
    except PermissionError as exc:
        raise ConfigError(f"{path} is not readable by this user (it holds the node's credential)") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path} is not a valid agent configuration: {exc}") from exc


def refuse_to_overwrite(path: Path, *, force: bool) -> None:
    """Checked before enrolling too: a one-time token must not be spent on a config that cannot be written."""
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists (this node is enrolled); pass --force to replace it")


def save_config(config: AgentConfig, path: Path, *, force: bool) -> None:
    refuse_to_overwrite(path, force=force)
    write_private_file(path, msgspec.json.format(msgspec.json.encode(config), indent=2) + b"\n")


def load_fleet_credentials(path: Path) -> FleetCredentials:
    try:
        return msgspec.json.decode(path.read_bytes(), type=FleetCredentials)
    except (OSError, msgspec.DecodeError) as exc:
        raise ConfigError(f"cannot read the fleet credentials {path}: {exc}") from exc


def save_fleet_credentials(fleet: FleetCredentials, path: Path) -> None:
    write_private_file(path, msgspec.json.format(msgspec.json.encode(fleet), indent=2) + b"\n")


def normalized_server_url(url: str) -> str:
    """An http(s) base URL without a trailing slash, or ValueError saying what is wrong with it."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL of the control plane")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def websocket_url(server_url: str) -> str:
    """The agent socket under a control plane's base URL: http → ws, https → wss."""
    parts = urlsplit(server_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + AGENT_SOCKET_PATH, "", ""))
