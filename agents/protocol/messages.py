"""What each side sends, and its decoder: every frame on the socket is one of these."""

from agents.protocol.codec import Decoder
from agents.protocol.commands import Cancel, Command, CommandResult, CommandStarted, CommandUpdate
from agents.protocol.events import Events
from agents.protocol.inventory import Inventory
from agents.protocol.session import Ack, Error, Heartbeat, Hello, Welcome
from agents.protocol.telemetry import Telemetry

AgentMessage = Hello | Inventory | Telemetry | Events | Heartbeat | CommandStarted | CommandUpdate | CommandResult
ServerMessage = Welcome | Ack | Error | Command | Cancel

_agent_decoder = Decoder(AgentMessage)
_server_decoder = Decoder(ServerMessage)


def decode_agent_message(frame: bytes | str) -> AgentMessage:
    """Server side: a frame from an agent, or ProtocolError with a code and a clear message."""
    return _agent_decoder.decode(frame)  # type: ignore[return-value]


def decode_server_message(frame: bytes | str) -> ServerMessage:
    """Agent side: a frame from the server."""
    return _server_decoder.decode(frame)  # type: ignore[return-value]
