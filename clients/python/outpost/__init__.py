"""outpost: a client of the ``outpost serve`` HTTP API (docs/serve.md).

    from outpost import Client
    with Client() as client:
        result = client.run("fix the failing test", agent="claude", sandbox="docker")
        print(result.text, result.usage.output_tokens)
"""

from ._core import default_socket
from .aio import AsyncClient
from .client import Client
from .errors import (BootstrapError, CancelledError, ConfigurationError,
                     ConversationError, OutpostError, OutputError,
                     ProcessError, QuotaError, BudgetError, RefusedError, SandboxError,
                     TimeoutError, TransportError, UnavailableError)
from .models import (Agent, Checkpoint, CheckResult, Contestant, Conversation,
                     ConversationUsage, Diff, DiffFile, ErrorInfo, Event,
                     Health, RaceEvent, RaceLine, RaceProgress, RaceRequest,
                     RaceResponse, RaceResultLine, Result, Sandbox, SteerResponse,
                     Tool, Turn, TurnRequest, TurnStatus, Usage)

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "default_socket",
    "OutpostError", "ConfigurationError", "RefusedError", "SandboxError",
    "BootstrapError", "ConversationError", "ProcessError", "UnavailableError",
    "QuotaError", "OutputError", "BudgetError", "TimeoutError", "CancelledError", "TransportError",
    "Agent", "Conversation", "ConversationUsage", "ErrorInfo", "Event", "Health",
    "Result", "Sandbox", "SteerResponse", "Tool", "Turn", "TurnRequest", "TurnStatus", "Usage",
    "Checkpoint", "CheckResult", "Diff", "DiffFile", "RaceRequest", "RaceProgress",
    "RaceEvent", "RaceResultLine", "RaceLine", "RaceResponse", "Contestant",
]
