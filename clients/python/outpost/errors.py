"""Errors as exceptions, one class per code of the Go library
(docs/errors.md).

Every error outpost reports has a code; the API's own refusals add
``details["reason"]`` (docs/serve.md). An HTTP error raises the class of
its code with ``status`` set; a turn that failed raises it from
``Client.result`` and ``Client.run`` with ``result`` set (the result line,
so its conversation is at hand). A ``process`` error whose model service
was unreachable (``details["unavailable"]``) is an ``UnavailableError``.
"""

from __future__ import annotations

import builtins
from typing import Any, Dict, Optional

__all__ = [
    "OutpostError", "ConfigurationError", "RefusedError", "SandboxError",
    "BootstrapError", "ConversationError", "ProcessError", "UnavailableError",
    "QuotaError", "OutputError", "BudgetError", "TimeoutError", "CancelledError",
    "TransportError", "error_from",
]


class OutpostError(Exception):
    """An outpost error: ``code``, ``message``, ``details``; ``status``
    is the HTTP status when the API refused a request, ``reason`` its
    ``details["reason"]``, ``retry_after`` its Retry-After in seconds."""

    code: Optional[str] = None

    def __init__(self, message: str, *, code: Optional[str] = None,
                 details: Optional[Dict[str, Any]] = None,
                 status: Optional[int] = None,
                 retry_after: Optional[float] = None,
                 result: Any = None):
        super().__init__(f"{code}: {message}" if code else message)
        if code is not None:
            self.code = code
        self.message = message
        self.details: Dict[str, Any] = dict(details or {})
        self.status = status
        self.retry_after = retry_after
        self.result = result

    @property
    def reason(self) -> Optional[str]:
        r = self.details.get("reason")
        return r if isinstance(r, str) else None


class ConfigurationError(OutpostError):
    """The request or the environment is wrong (400, 404 of a turn)."""
    code = "configuration"


class RefusedError(OutpostError):
    """Refused: no or a wrong token (401), another user (403), a conflict
    (409), busy (429), draining (503)."""
    code = "refused"


class SandboxError(OutpostError):
    code = "sandbox"


class BootstrapError(OutpostError):
    code = "bootstrap"


class ConversationError(OutpostError):
    """The conversation could not be found, restored or captured."""
    code = "conversation"


class ProcessError(OutpostError):
    """The agent process failed."""
    code = "process"


class UnavailableError(ProcessError):
    """The agent failed because its model service was unreachable or
    overloaded (``details["unavailable"]``): worth retrying later."""


class QuotaError(OutpostError):
    """The agent reported a terminal usage or rate limit;
    ``details["resets_at"]`` holds the reset time when it said it."""
    code = "quota"

    @property
    def resets_at(self) -> Optional[str]:
        return self.details.get("resets_at")


class OutputError(OutpostError):
    """The answer did not match the turn's schema or protocol."""
    code = "output"


class BudgetError(OutpostError):
    """A token budget of outpost's was spent, or has less left than the
    next model call needs (``details["budget"]``: turn, conversation or
    token; ``limit``, ``spent``, ``left`` and ``estimate`` in tokens)."""
    code = "budget"


class TimeoutError(OutpostError, builtins.TimeoutError):
    """The turn's deadline passed."""
    code = "timeout"


class CancelledError(OutpostError):
    """The turn was cancelled (``details["cancelled_by"]``: client,
    shutdown)."""
    code = "cancelled"


class TransportError(OutpostError):
    """The server could not be reached, or an event stream dropped too
    many times without progress. Not one of outpost's codes."""


_BY_CODE = {c.code: c for c in (
    ConfigurationError, RefusedError, SandboxError, BootstrapError,
    ConversationError, ProcessError, QuotaError, OutputError, BudgetError,
    TimeoutError, CancelledError)}


def error_from(body: Any, *, status: Optional[int] = None,
               retry_after: Optional[float] = None,
               result: Any = None) -> OutpostError:
    """error_from is the exception of an error object
    ``{"code", "message", "details"}``."""
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        return OutpostError(f"HTTP {status}", status=status, retry_after=retry_after, result=result)
    code = body["code"]
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    cls = _BY_CODE.get(code, OutpostError)
    if cls is ProcessError and details.get("unavailable") is True:
        cls = UnavailableError
    return cls(str(body.get("message", "")), code=code, details=details,
               status=status, retry_after=retry_after, result=result)
