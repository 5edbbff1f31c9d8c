"""What the sync and async clients share: where the server is, the
requests of every route, the decoding of answers and errors, and the
event stream's parsing and reconnection bookkeeping. No I/O here."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union
from urllib.parse import quote, urlencode

import httpx

from . import models
from .errors import OutpostError, TransportError, error_from
from .models import (Agent, Conversation, ConversationUsage, Diff, Event,
                     Health, RaceEvent, RaceLine, RaceProgress, RaceRequest,
                     RaceResponse, RaceResultLine, Result, Sandbox,
                     SteerResponse, TurnRequest, TurnStatus)

# The host name of requests over the Unix socket (any name would do).
SOCKET_BASE = "http://outpost"


def default_socket() -> str:
    """The socket ``outpost serve`` listens on by default:
    $XDG_RUNTIME_DIR/outpost/serve.sock, else
    $TMPDIR/outpost-UID/serve.sock (TMPDIR defaulting to /tmp)."""
    d = os.environ.get("XDG_RUNTIME_DIR")
    if d:
        return os.path.join(d, "outpost", "serve.sock")
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, f"outpost-{os.getuid()}", "serve.sock")


@dataclass
class Target:
    """Where and how to reach the server."""
    base_url: str
    socket: Optional[str]
    headers: Dict[str, str]


def target(url: Optional[str], token: Optional[str], socket: Optional[str]) -> Target:
    """target resolves the constructor's arguments: a URL (``http://...``
    or ``unix:/path``), else a socket path, else the default socket."""
    if url and socket:
        raise ValueError("outpost: give url or socket, not both")
    if url and url.startswith("unix:"):
        socket, url = url[len("unix:"):], None
    if not url and not socket:
        socket = default_socket()
    headers = {"Accept": "application/json", "User-Agent": "outpost-client-python"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return Target(base_url=url.rstrip("/") if url else SOCKET_BASE, socket=socket, headers=headers)


def unreachable(t: Target, what: str, e: Exception) -> TransportError:
    """unreachable is the TransportError of a server that could not be
    reached: it names where the client looked and how to start the
    server, with the transport's own error."""
    if t.socket:
        where = f"the socket {t.socket}"
        if not os.path.exists(t.socket):
            why = (f"no outpost server listens on {where}: it does not exist; start one with "
                   f"`outpost serve` (or pass socket= or url= where yours listens)")
        else:
            why = f"no outpost server answers on {where}; is `outpost serve` running?"
    else:
        why = f"no outpost server answers at {t.base_url}; is `outpost serve --listen` running there?"
    return TransportError(f"outpost: {what}: {why} ({e!r})")


def path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") if i > 0 else p for i, p in enumerate(parts))


def turn_path(turn_id: str, *rest: str) -> str:
    return path("v1/turns", turn_id, *rest)


def conversation_path(conv: str, *rest: str) -> str:
    return path("v1/conversations", conv, *rest)


def retry_after(r: httpx.Response) -> Optional[float]:
    v = r.headers.get("retry-after")
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def response_error(r: httpx.Response) -> OutpostError:
    """response_error is the exception of an HTTP error response; its
    body must have been read."""
    try:
        body = r.json().get("error")
    except (ValueError, AttributeError):
        body = None
    return error_from(body, status=r.status_code, retry_after=retry_after(r))


@dataclass(frozen=True)
class Call:
    """One request and how to read its answer: ``decode`` turns the JSON
    body into the value returned (None: the raw bytes; ``NO_BODY``:
    nothing), ``ok`` adds statuses that are answers, not errors."""
    method: str
    path: str
    json: Any = None
    content: Optional[bytes] = None
    headers: Optional[Dict[str, str]] = None
    decode: Optional[Callable[[Any], Any]] = None
    ok: Tuple[int, ...] = ()

    def kwargs(self) -> Dict[str, Any]:
        kw: Dict[str, Any] = {"headers": self.headers}
        if self.json is not None:
            kw["json"] = self.json
        if self.content is not None:
            kw["content"] = self.content
        return kw

    def answer(self, r: httpx.Response) -> Any:
        if r.status_code >= 400 and r.status_code not in self.ok:
            raise response_error(r)
        if self.decode is NO_BODY:
            return None
        if self.decode is TEXT:
            return r.text
        if self.decode is None:
            return r.content
        return self.decode(r.json())


def NO_BODY(_: Any) -> None:  # noqa: N802 - a marker
    return None


def TEXT(_: Any) -> None:  # noqa: N802 - a marker: the body as text
    return None


DIFF_FORMATS = ("patch", "stat", "json")


def diff_call(ref: str, to: Optional[str], format: str) -> Call:
    """diff_call is the request of a diff: ``ref`` is ``ID[@TURN]``."""
    if format not in DIFF_FORMATS:
        raise ValueError(f"outpost: diff format {format!r}: want one of {DIFF_FORMATS}")
    conv, turn = ref, None
    if "@" in ref:
        conv, turn = ref.rsplit("@", 1)
    params = {"format": format}
    if turn is not None:
        params["turn"] = turn
    if to:
        params["to"] = to
    p = conversation_path(conv, "diff") + "?" + urlencode(params)
    if format == "json":
        return Call("GET", p, decode=_of(Diff))
    return Call("GET", p, headers={"Accept": "text/x-diff" if format == "patch" else "text/plain"}, decode=TEXT)


RaceItem = Union[RaceProgress, RaceEvent, RaceResultLine, RaceLine]


def race_body(prompt: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    """race_body is the JSON of a race request; ``from_`` is the API's
    ``from``."""
    return models.encode(RaceRequest(prompt=prompt, **spec))


class RaceStream:
    """The parsing of one race's event stream into items, and what a
    finished race answers."""

    path = "/v1/races"
    headers = {"Accept": "text/event-stream"}

    def __init__(self) -> None:
        self.sse = SSE()
        self.results: List[RaceResultLine] = []
        self.race: Optional[RaceLine] = None

    def feed(self, chunk: str) -> List[RaceItem]:
        items = []
        for seq, data in self.sse.feed(chunk):
            if self.race is not None:
                break
            item = models.race_item(seq, data)
            if isinstance(item, RaceResultLine):
                self.results.append(item)
            elif isinstance(item, RaceLine):
                self.race = item
            items.append(item)
        return items

    def response(self) -> RaceResponse:
        if self.race is None:
            raise TransportError("outpost: the race's stream ended without its race line")
        return RaceResponse(results=self.results, race=self.race)


def race_deliver(item: RaceItem, on_event: Optional[Callable[[Any], Any]]) -> None:
    """race_deliver hands progress and contestants' events to on_event."""
    if on_event is not None and isinstance(item, (RaceProgress, RaceEvent)):
        on_event(item)


def _of(cls: type) -> Callable[[Any], Any]:
    return lambda data: models.decode(cls, data)


def deliver(item: Union[Event, Result], on_event: Optional[Callable[[Event], Any]]) -> Optional[Result]:
    """deliver hands an event to on_event and returns None; a result it
    returns (it comes last, so a loop's last value is the result)."""
    if isinstance(item, Result):
        return item
    if on_event is not None:
        on_event(item)
    return None


def checked(result: Optional[Result], check: bool, turn_id: str) -> Result:
    """checked returns the result, or raises its error when check is set."""
    if result is None:
        raise TransportError(f"outpost: the stream of {turn_id} ended without a result")
    if check and result.error is not None:
        raise error_from(models.encode(result.error), result=result)
    return result


class Api:
    """The routes. Each method returns what the client's ``_call`` returns
    for it: the value (Client) or an awaitable of it (AsyncClient)."""

    conversations: "Conversations"

    # The httpx client and transport classes of the subclass.
    _http_client: Any = None
    _http_transport: Any = None

    def __init__(self, url: Optional[str] = None, *, token: Optional[str] = None,
                 socket: Optional[str] = None, timeout: float = 30.0,
                 stream_timeout: float = 60.0, max_reconnects: int = 10,
                 transport: Any = None):
        t = target(url, token, socket)
        self._target = t
        if transport is None and t.socket:
            transport = self._http_transport(uds=t.socket)
        self._http = self._http_client(base_url=t.base_url, headers=t.headers, timeout=timeout,
                                       transport=transport)
        self._stream_timeout = httpx.Timeout(timeout, read=stream_timeout)
        self._max_reconnects = max_reconnects
        self.conversations = Conversations(self)

    def _call(self, call: Call) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def start(self, prompt: str, **request: Any) -> TurnStatus:
        """Start a turn; returns at once with its ``id`` and state. Keyword
        arguments are those of ``TurnRequest``: agent, sandbox, model,
        schema, resume, fork, settings, env, options, timeout_ms,
        inactivity_ms, raw, repairs, protocol, secrets, egress,
        egress_allow, workspace ("new"), checkpoint ("on", "off"),
        checkpoint_include, check (a shell command run after the turn),
        check_timeout_ms."""
        body = models.encode(TurnRequest(prompt=prompt, **request))
        return self._call(Call("POST", "/v1/turns", json=body, decode=_of(TurnStatus)))

    def turn(self, turn_id: str) -> TurnStatus:
        """A turn's state, and its result once finished."""
        return self._call(Call("GET", turn_path(turn_id), decode=_of(TurnStatus)))

    def turns(self, *, state: Optional[str] = None, limit: Optional[int] = None) -> list:
        """This replica's turns the caller sees (an operator: all), newest
        first: queued, running (with its replica, model and tokens so far)
        and finished ones still retained; ``state`` keeps one state."""
        q = urlencode({k: v for k, v in (("state", state), ("limit", limit)) if v is not None})
        return self._call(Call("GET", "/v1/turns" + ("?" + q if q else ""),
                               decode=lambda d: [models.decode(TurnStatus, t) for t in d["turns"]]))

    def limits(self) -> list:
        """The caller's token limit (``--token-limit``) with this hour's
        and day's use, as ``TokenLimit`` values; an operator gets every
        token's."""
        return self._call(Call("GET", "/v1/limits",
                               decode=lambda d: [models.decode(models.TokenLimit, x) for x in d["limits"]]))

    def fleet(self) -> "models.Fleet":
        """The fleet's replicas and their heartbeats (an operator's: a
        client token gets RefusedError, status 403)."""
        return self._call(Call("GET", "/v1/fleet", decode=_of(models.Fleet)))

    def gc(self) -> "models.GC":
        """What garbage collection (``outpost gc``) would remove now, and
        its last run (an operator's)."""
        return self._call(Call("GET", "/v1/gc", decode=_of(models.GC)))

    def run_gc(self) -> "models.GCRun":
        """Run garbage collection on every served sandbox kind, never
        ``--all`` (an operator's)."""
        return self._call(Call("POST", "/v1/gc", decode=_of(models.GCRun)))

    def steer(self, turn_id: str, text: str) -> SteerResponse:
        """Send a message to a running turn (RefusedError, status 409, once
        it is finished)."""
        return self._call(Call("POST", turn_path(turn_id, "messages"), json={"text": text},
                               decode=_of(SteerResponse)))

    def cancel(self, turn_id: str) -> TurnStatus:
        """Cancel a turn: its result gets code cancelled."""
        return self._call(Call("POST", turn_path(turn_id, "cancel"), decode=_of(TurnStatus)))

    def diff(self, ref: str, *, to: Optional[str] = None, format: str = "patch") -> Union[str, Diff]:
        """What a turn changed in its workspace (``outpost diff``): ``ref``
        is a conversation id (or unique prefix), with ``@TURN`` for a turn
        other than the last. With ``to`` (another ``ID[@TURN]``), ref's
        workspace against to's. ``format`` "patch" (a unified diff, the
        default) and "stat" return the text, "json" a ``Diff``."""
        return self._call(diff_call(ref, to, format))

    def agents(self) -> list:
        """The agent presets."""
        return self._call(Call("GET", "/v1/agents",
                               decode=lambda d: [models.decode(Agent, a) for a in d["agents"]]))

    def sandboxes(self) -> list:
        """The sandboxes the server serves, the default first, with the
        isolation their leases get (``GET /v1/agents``' ``sandboxes``)."""
        return self._call(Call("GET", "/v1/agents",
                               decode=lambda d: [models.decode(Sandbox, s) for s in d.get("sandboxes") or []]))

    def health(self) -> Health:
        """Liveness; ``status`` is "draining" while the server shuts down."""
        return self._call(Call("GET", "/healthz", decode=_of(Health), ok=(503,)))


class Conversations:
    """``client.conversations``: stored conversations. Ids may be a unique
    prefix or the agent's native id."""

    def __init__(self, api: Api):
        self._api = api

    def list(self) -> list:
        """Stored conversations, newest first."""
        return self._api._call(Call("GET", "/v1/conversations",
                                    decode=lambda d: [models.decode(Conversation, c) for c in d["conversations"]]))

    def show(self, conv: str) -> Conversation:
        """One conversation's metadata."""
        return self._api._call(Call("GET", conversation_path(conv), decode=_of(Conversation)))

    def usage(self, conv: str) -> ConversationUsage:
        """Its token usage over the turns outpost ran."""
        return self._api._call(Call("GET", conversation_path(conv, "usage"), decode=_of(ConversationUsage)))

    def history(self, conv: str) -> "models.History":
        """Its prompts and answers, oldest first: read from its stored
        files by its preset (``source`` "history"), else from the turns of
        it the server still holds ("turns")."""
        return self._api._call(Call("GET", conversation_path(conv, "history"), decode=_of(models.History)))

    def delete(self, conv: str) -> None:
        """Delete it (RefusedError, status 409, while a turn continues it)."""
        return self._api._call(Call("DELETE", conversation_path(conv), decode=NO_BODY))

    def export(self, conv: str) -> bytes:
        """Its portable archive (what ``outpost conversations export``
        writes): bytes to keep or to import elsewhere."""
        return self._api._call(Call("GET", conversation_path(conv, "export"),
                                    headers={"Accept": "application/gzip"}))

    def import_(self, archive: bytes) -> Conversation:
        """Store an exported archive; returns the imported conversation."""
        return self._api._call(Call("POST", "/v1/conversations/import", content=bytes(archive),
                                    headers={"Content-Type": "application/gzip"},
                                    decode=_of(Conversation)))


class SSE:
    """Parses a text/event-stream line by line into (id, data) messages."""

    def __init__(self) -> None:
        self.id: Optional[int] = None
        self.data: list = []
        self.buf = ""

    def feed(self, chunk: str) -> List[Tuple[int, Dict[str, Any]]]:
        """feed takes a decoded chunk of the body; it returns the messages
        it completes."""
        self.buf += chunk
        *done, self.buf = self.buf.split("\n")
        return [m for m in map(self._line, done) if m is not None]

    def _line(self, line: str) -> Optional[Tuple[int, Dict[str, Any]]]:
        line = line.rstrip("\r")
        if line == "":
            data, self.data = self.data, []
            if not data or self.id is None:
                return None
            return self.id, json.loads("\n".join(data))
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "id" and value.isdigit():
            self.id = int(value)
        elif name == "data":
            self.data.append(value)
        return None


class Follow:
    """The bookkeeping of following one turn's events across connections:
    the last sequence number delivered (sent as Last-Event-ID on every
    reconnection, so nothing is lost), the items to skip (none is
    delivered twice), and the attempts without progress."""

    def __init__(self, turn_id: str, last_event_id: Optional[int], max_reconnects: int):
        self.path = turn_path(turn_id, "events")
        self.turn_id = turn_id
        self.last = int(last_event_id or 0)
        self.max = max_reconnects
        self.failures = 0
        self.done = False
        self.sse = SSE()

    def headers(self) -> Dict[str, str]:
        h = {"Accept": "text/event-stream"}
        if self.last > 0:
            h["Last-Event-ID"] = str(self.last)
        return h

    def take(self, msg: Optional[Tuple[int, Dict[str, Any]]]) -> Union[Event, Result, None]:
        """take is the item to deliver for a parsed message, or None."""
        if msg is None or msg[0] <= self.last:
            return None
        seq, data = msg
        self.last, self.failures = seq, 0
        item = models.stream_item(seq, data)
        self.done = isinstance(item, Result)
        return item

    def opened(self, r: httpx.Response) -> bool:
        """opened starts a connection's parsing: true when the server
        streams; false for a refusal worth retrying (503: draining, a
        restart may follow); any other refusal (its body read) raises."""
        self.sse = SSE()
        if r.status_code == 200:
            return True
        if r.status_code != 503:
            raise response_error(r)
        return False

    def feed(self, chunk: str) -> List[Union[Event, Result]]:
        """feed is the items to deliver of a chunk of the stream."""
        items = []
        for msg in self.sse.feed(chunk):
            item = None if self.done else self.take(msg)
            if item is not None:
                items.append(item)
        return items

    def backoff(self, t: Optional[Target] = None, err: Optional[Exception] = None) -> float:
        """backoff is the delay before the next connection; it raises
        TransportError after max_reconnects attempts without progress
        (naming where the server was looked for, when the last attempt
        failed to reach it: err, a transport error, on t)."""
        self.failures += 1
        if self.failures > self.max:
            what = f"the event stream of {self.turn_id} dropped {self.failures} times without progress"
            if t is not None and err is not None:
                raise unreachable(t, what, err) from err
            raise TransportError(f"outpost: {what}")
        return min(0.1 * 2 ** (self.failures - 1), 2.0)
