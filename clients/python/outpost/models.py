"""The shapes of the outpost serve API, as typed dataclasses.

Each class mirrors one schema of the server's OpenAPI document
(``server/openapi.json``, served at ``/v1/openapi.json``): its fields are
the schema's properties, the required ones without a default. The tests
check every class against the document, so the client cannot drift from
the server. Times are timezone-aware ``datetime`` values; fields the
document leaves open (``input``, ``output``, ``raw``, ``schema``) are
plain JSON values.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Union

__all__ = [
    "Usage", "ErrorInfo", "Tool", "Event", "ChangedFile", "ChangedFiles",
    "Attempt", "Checkpoint", "CheckResult", "Result", "TurnRequest",
    "TurnStatus", "Turn", "SteerRequest", "SteerResponse",
    "ConversationCheckpoint", "Conversation", "ConversationUsage", "Agent",
    "Health", "DiffFile", "Diff", "RaceRequest", "RaceProgress", "RaceEvent",
    "RaceResultLine", "Contestant", "JudgeResult", "RaceLine", "RaceResponse",
    "LimitWindow", "TokenLimit", "FleetReplica", "Fleet", "Orphan", "GCSandbox", "GCRun", "GC",
    "Exchange", "History", "MODELS", "decode", "encode", "stream_item", "race_item",
]

# MODELS maps each OpenAPI schema name to its class.
MODELS: Dict[str, type] = {}

# LOCAL marks a field that is the client's own, not on the wire.
LOCAL = {"local": True}

_model = dataclass(kw_only=True)


def _schema(name: str):
    def register(cls):
        cls = _model(cls)
        cls.__schema__ = name
        MODELS[name] = cls
        return cls
    return register


@_schema("Usage")
class Usage:
    """Token usage; ``complete`` is false when a counter was not reported."""
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    complete: bool


@_schema("MeteredUsage")
class MeteredUsage:
    """Token usage the credential gateway counted from the model API's
    responses (docs/metering.md): Usage's counters, the model calls
    (``requests``) and the reasoning part of ``output_tokens``."""
    requests: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    complete: bool


@_schema("Metered")
class Metered:
    """Metered usage in total and per model (``by_model``)."""
    requests: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    complete: bool
    by_model: Optional[Dict[str, MeteredUsage]] = None


@_schema("Error")
class ErrorInfo:
    """An outpost error as the API carries it (docs/errors.md)."""
    code: str
    message: str
    details: Optional[Dict[str, Any]] = None


@_schema("Tool")
class Tool:
    id: Optional[str] = None
    name: Optional[str] = None
    input: Any = None
    output: Optional[str] = None
    error: Optional[bool] = None


@_schema("Event")
class Event:
    """A normalized event of a turn (docs/events.md); ``seq`` is its
    sequence number in the turn's stream, from 1."""
    type: str
    time: datetime
    agent: Optional[str] = None
    conversation: Optional[str] = None
    session: Optional[str] = None
    text: Optional[str] = None
    delta: Optional[bool] = None
    id: Optional[str] = None
    tool: Optional[Tool] = None
    usage: Optional[Usage] = None
    stop: Optional[str] = None
    kind: Optional[str] = None
    details: Optional[Dict[str, Any]] = None
    raw: Any = None
    seq: int = field(default=0, metadata=LOCAL)


@_model
class ExitStatus:
    """How the agent process ended: ``code`` (-1 when a signal ended it)
    and ``signal``."""
    code: int
    signal: Optional[str] = None


@_model
class ChangedFile:
    path: str
    operation: str


@_model
class ChangedFiles:
    files: List[ChangedFile]
    complete: bool


@_model
class Attempt:
    attempt: int
    usage: Usage
    errors: Optional[List[Dict[str, Any]]] = None


@_schema("Checkpoint")
class Checkpoint:
    """The workspace checkpoint a turn recorded (docs/workspaces.md): the
    commits of the workspace after the turn and of the one it started
    from; ``changed`` counts the files the turn changed."""
    turn: int
    commit: str
    base: str
    files: int
    bytes: int
    changed: int
    stored: int


@_schema("CheckResult")
class CheckResult:
    """How the turn's ``check`` command ended; ``passed``: it exited 0."""
    command: str
    passed: bool
    exit_code: int
    duration_ms: int
    output: Optional[str] = None
    error: Optional[str] = None


@_schema("Result")
class Result:
    """The result line: the last item of a turn's stream. ``output`` is
    the validated answer of a turn started with a ``schema``."""
    type: str
    conversation: str
    agent: str
    usage: Usage
    started_at: datetime
    completed_at: datetime
    duration_ms: int
    exit_code: int
    error: Optional[ErrorInfo]
    parent: Optional[str] = None
    session: Optional[str] = None
    model: Optional[str] = None
    sandbox: Optional[str] = None
    text: Optional[str] = None
    thread_usage: Optional[Usage] = None
    exit: Optional[ExitStatus] = None
    steered: Optional[int] = None
    metered: Optional[Metered] = None
    output: Any = None
    protocol: Optional[Dict[str, Any]] = None
    changed_files: Optional[ChangedFiles] = None
    attempts: Optional[List[Attempt]] = None
    secrets: Optional[str] = None
    egress: Optional[str] = None
    isolation: Optional[str] = None
    checkpoint: Optional[Checkpoint] = None
    workdir: Optional[str] = None
    check: Optional[CheckResult] = None
    seq: int = field(default=0, metadata=LOCAL)


@_schema("TurnRequest")
class TurnRequest:
    """What ``POST /v1/turns`` takes; ``Client.start`` builds it from its
    keyword arguments."""
    prompt: str
    agent: Optional[str] = None
    model: Optional[str] = None
    sandbox: Optional[str] = None
    settings: Optional[Dict[str, str]] = None
    resume: Optional[str] = None
    fork: Optional[str] = None
    env: Optional[Dict[str, str]] = None
    options: Optional[Dict[str, str]] = None
    timeout_ms: Optional[int] = None
    inactivity_ms: Optional[int] = None
    raw: Optional[bool] = None
    schema: Any = None
    repairs: Optional[int] = None
    protocol: Optional[str] = None
    secrets: Optional[str] = None
    egress: Optional[str] = None
    egress_allow: Optional[List[str]] = None
    workspace: Optional[str] = None
    checkpoint: Optional[str] = None
    checkpoint_include: Optional[List[str]] = None
    check: Optional[str] = None
    check_timeout_ms: Optional[int] = None
    max_tokens: Optional[int] = None
    budget: Optional[int] = None


@_schema("TurnStatus")
class TurnStatus:
    """A turn: its id, state (queued, running, finished) and, once
    finished, its result."""
    id: str
    state: str
    agent: str
    sandbox: str
    events: int
    created: datetime
    started: Optional[datetime] = None
    finished: Optional[datetime] = None
    replica: Optional[str] = None
    model: Optional[str] = None
    usage: Optional[Usage] = None
    prompt: Optional[str] = None
    result: Optional[Result] = None


Turn = TurnStatus


@_schema("LimitWindow")
class LimitWindow:
    """One window of a token limit: its tokens used this UTC hour or day,
    what is left, and when it resets."""
    limit: int
    used: int
    left: int
    resets: datetime


@_schema("TokenLimit")
class TokenLimit:
    """A token name's limit (``--token-limit``) and its current windows."""
    token: str
    hour: Optional[LimitWindow] = None
    day: Optional[LimitWindow] = None


@_schema("FleetReplica")
class FleetReplica:
    """A replica of the fleet: its last heartbeat (None: it left, or never
    beat), its age, whether it is lost, its unfinished turns."""
    id: str
    age_ms: int
    lost: bool
    turns: int
    self: bool
    heartbeat: Optional[datetime] = None


@_schema("Fleet")
class Fleet:
    """The replicas sharing the server's turn store (``fleet`` False: the
    server is alone)."""
    fleet: bool
    replicas: List[FleetReplica]
    replica: Optional[str] = None
    heartbeat_ms: Optional[int] = None


@_schema("Orphan")
class Orphan:
    """One thing garbage collection found: removed, or (a dry run) not."""
    kind: str
    name: str
    removed: bool
    owner: Optional[str] = None
    state: Optional[str] = None
    created: Optional[datetime] = None
    error: Optional[str] = None


@_schema("GCSandbox")
class GCSandbox:
    """What a collection found on one served sandbox kind, or its error."""
    sandbox: str
    orphans: List[Orphan]
    kept: int
    where: Optional[str] = None
    error: Optional[str] = None


@_schema("GCRun")
class GCRun:
    """One garbage collection (``outpost gc``) over every served kind."""
    time: datetime
    dry_run: bool
    sandboxes: List[GCSandbox]


@_schema("GC")
class GC:
    """What a collection would remove now, and the last one run."""
    pending: GCRun
    last: Optional[GCRun] = None


@_schema("Exchange")
class Exchange:
    """A prompt of a conversation and the agent's answer."""
    prompt: str
    answer: str


@_schema("History")
class History:
    """A conversation's prompts and answers, oldest first; ``source`` is
    "history" (its stored files), "turns" (the server's retained turns)
    or "none"."""
    conversation: str
    agent: str
    source: str
    exchanges: List[Exchange]


@_schema("SteerRequest")
class SteerRequest:
    text: str


@_schema("SteerResponse")
class SteerResponse:
    accepted: bool


@_schema("ConversationCheckpoint")
class ConversationCheckpoint:
    """One turn's checkpoint in a conversation's metadata."""
    turn: int
    commit: str
    base: str
    revision: int
    files: int
    bytes: int
    changed: int
    created: datetime
    memory: Optional[str] = None
    native: Optional[str] = None
    conversation: Optional[str] = None


@_schema("Conversation")
class Conversation:
    id: str
    agent: str
    native: str
    workdir: str
    sandbox: str
    created: datetime
    updated: datetime
    turns: int
    usage: Usage
    files: Optional[List[str]]
    parent: Optional[str] = None
    model: Optional[str] = None
    metered: Optional[Metered] = None
    budget: Optional[int] = None
    checkpoints: Optional[List[ConversationCheckpoint]] = None
    owner: Optional[str] = None


@_schema("ConversationUsage")
class ConversationUsage:
    conversation: str
    agent: str
    turns: int
    usage: Usage
    metered: Optional[Metered] = None
    budget: Optional[int] = None
    budget_left: Optional[int] = None


@_schema("Agent")
class Agent:
    """An agent preset: ``version`` is its CLI's pinned version;
    ``installed`` says that a turn needs no download for the CLI on the
    server's host; ``source`` is ``built-in`` (or ``file``, a preset file,
    which only ``outpost agents`` lists)."""
    name: str
    version: str
    source: str
    installed: bool
    resumable: bool
    forkable: bool
    live_input: bool
    keyless: str
    file: Optional[str] = None
    bootstrap: Optional[str] = None
    kind: Optional[str] = None
    package: Optional[str] = None
    program: Optional[str] = None
    error: Optional[str] = None


@_schema("Sandbox")
class Sandbox:
    """A sandbox provider the server serves (``GET /v1/agents``'s
    ``sandboxes``, the default first): ``isolation`` is the mode its
    leases get here (``none``, ``namespaces``, ``container``, ``pod``),
    ``egress`` whether egress gateway is ``enforced``; ``note`` says why
    leases run less isolated than asked, ``error`` why it did not open."""
    sandbox: str
    isolation: str
    egress: str
    note: Optional[str] = None
    error: Optional[str] = None


@_schema("Health")
class Health:
    status: str
    running: int
    queued: int
    version: Optional[str] = None


@_schema("DiffFile")
class DiffFile:
    """One file of a diff: ``action`` is added, modified or deleted;
    ``added`` and ``deleted`` count lines."""
    path: str
    action: str
    added: int
    deleted: int
    binary: Optional[bool] = None


@_schema("Diff")
class Diff:
    """A diff of checkpoints (``Client.diff(..., format="json")``): the
    commits compared and each file's change."""
    from_: str = field(metadata={"name": "from"})
    to: str
    files: List[DiffFile]
    added: int
    deleted: int


@_schema("RaceRequest")
class RaceRequest:
    """What ``POST /v1/races`` takes; ``Client.race`` builds it from its
    keyword arguments."""
    prompt: str
    agents: Optional[List[str]] = None
    count: Optional[int] = None
    model: Optional[str] = None
    check: Optional[str] = None
    check_timeout_ms: Optional[int] = None
    judge: Optional[str] = None
    from_: Optional[str] = field(default=None, metadata={"name": "from"})
    max_tokens: Optional[int] = None
    budget: Optional[int] = None
    timeout_ms: Optional[int] = None
    options: Optional[Dict[str, str]] = None
    agent_options: Optional[Dict[str, Dict[str, str]]] = None
    env: Optional[Dict[str, str]] = None
    sandbox: Optional[str] = None
    settings: Optional[Dict[str, str]] = None
    secrets: Optional[str] = None
    egress: Optional[str] = None
    egress_allow: Optional[List[str]] = None


@_schema("RaceProgress")
class RaceProgress:
    """A contestant's step: ``state`` started, finished or checked
    (``passed`` then says how its check went)."""
    type: str
    contestant: int
    agent: str
    state: str
    conversation: Optional[str] = None
    code: Optional[str] = None
    passed: Optional[bool] = None
    seq: int = field(default=0, metadata=LOCAL)


@_schema("RaceEvent")
class RaceEvent(Event):
    """An event of a contestant's turn; ``contestant`` is its index."""
    contestant: int


@_schema("RaceResultLine")
class RaceResultLine(Result):
    """A contestant's result line; ``contestant`` is its index."""
    contestant: int


@_schema("Contestant")
class Contestant:
    """One contestant's outcome in the race line."""
    index: int
    agent: str
    workdir: str
    passed: bool
    tokens: int
    duration_ms: int
    files: int
    added: int
    deleted: int
    model: Optional[str] = None
    conversation: Optional[str] = None
    metered: Optional[Usage] = None
    code: Optional[str] = None


@_schema("JudgeResult")
class JudgeResult:
    winner: int
    conversation: Optional[str] = None
    reason: Optional[str] = None
    error: Optional[str] = None


@_schema("RaceLine")
class RaceLine:
    """A race's outcome: ``winner`` is the winning contestant's index, -1
    when none passed; ``conversation`` the winner's."""
    type: str
    winner: int
    start: str
    contestants: List[Contestant]
    tokens: int
    duration_ms: int
    conversation: Optional[str] = None
    judge: Optional[JudgeResult] = None
    seq: int = field(default=0, metadata=LOCAL)


@_schema("RaceResponse")
class RaceResponse:
    """A finished race: every contestant's result line, and the race."""
    results: List[RaceResultLine]
    race: RaceLine


# Go writes up to nine fractional digits; datetime takes six.
_FRACTION = re.compile(r"(\.\d{6})\d+")


def _parse_time(s: str) -> datetime:
    s = _FRACTION.sub(r"\1", s)
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    return datetime.fromisoformat(s)


def _hints(cls: type) -> Dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[__name__]))


def _convert(tp: Any, v: Any) -> Any:
    if v is None:
        return None
    origin = typing.get_origin(tp)
    if origin is Union:
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(inner[0], v) if len(inner) == 1 else v
    if origin in (list, List):
        (item,) = typing.get_args(tp)
        return [_convert(item, x) for x in v]
    if origin in (dict, Dict) and isinstance(v, dict):
        _, item = typing.get_args(tp)
        return {k: _convert(item, x) for k, x in v.items()}
    if tp is datetime:
        return _parse_time(v)
    if dataclasses.is_dataclass(tp):
        return decode(tp, v)
    return v


def wire_name(f: dataclasses.Field) -> str:
    """wire_name is a field's JSON name: its own, or ``metadata["name"]``
    for a name Python keeps (``from``)."""
    return f.metadata.get("name", f.name)


def decode(cls: type, data: Dict[str, Any]):
    """decode builds a model from its JSON object; fields a newer server
    adds are ignored."""
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        name = wire_name(f)
        if name in data and not f.metadata.get("local"):
            kwargs[f.name] = _convert(hints[f.name], data[name])
    return cls(**kwargs)


def _plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        return encode(v)
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def encode(obj: Any) -> Dict[str, Any]:
    """encode is a model's JSON object, without unset optional fields."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.metadata.get("local") or (v is None and f.default is None):
            continue
        out[wire_name(f)] = _plain(v)
    return out


def stream_item(seq: int, data: Dict[str, Any]) -> Union[Event, Result]:
    """stream_item decodes one item of a turn's stream: the result line
    (type "result") or an event."""
    item = decode(Result if data.get("type") == "result" else Event, data)
    item.seq = seq
    return item


def race_item(seq: int, data: Dict[str, Any]) -> Union[RaceProgress, RaceEvent, RaceResultLine, RaceLine]:
    """race_item decodes one item of a race's stream by its type:
    progress, a contestant's event, a contestant's result line, or the
    race line (last)."""
    cls = {"progress": RaceProgress, "result": RaceResultLine, "race": RaceLine}.get(data.get("type"), RaceEvent)
    item = decode(cls, data)
    item.seq = seq
    return item
