"""The synchronous client."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, Optional, Union

import httpx

from . import _core
from .models import Event, RaceResponse, Result, TurnStatus

__all__ = ["Client"]


class Client(_core.Api):
    """A client of ``outpost serve``.

    ``Client()`` reaches the server's default Unix socket;
    ``Client(url="http://127.0.0.1:7070", token="opt_...")`` a TCP
    listener; ``Client(socket=path)`` or ``Client(url="unix:" + path)``
    another socket. ``timeout`` bounds each request (seconds);
    ``stream_timeout`` the silence of an event stream (the server pings
    every 15 s); ``max_reconnects`` the attempts of a dropped stream
    without progress. Use it as a context manager, or call ``close``.
    """

    _http_client = httpx.Client
    _http_transport = httpx.HTTPTransport

    def _call(self, call: _core.Call) -> Any:
        try:
            r = self._http.request(call.method, call.path, **call.kwargs())
        except httpx.TransportError as e:
            raise _core.unreachable(self._target, f"{call.method} {call.path}", e) from e
        return call.answer(r)

    def events(self, turn_id: str, last_event_id: Optional[int] = None) -> Iterator[Union[Event, Result]]:
        """The turn's events in order, the ``Result`` last (each with its
        ``seq``), starting after ``last_event_id``. A dropped connection
        is resumed from the last event delivered: none is lost or
        repeated."""
        f = _core.Follow(turn_id, last_event_id, self._max_reconnects)
        err: Optional[Exception] = None
        while True:
            err = None
            try:
                with self._http.stream("GET", f.path, headers=f.headers(), timeout=self._stream_timeout) as r:
                    if r.status_code != 200:
                        r.read()
                    if f.opened(r):
                        for chunk in r.iter_text():
                            yield from f.feed(chunk)
                            if f.done:
                                return
            except httpx.TransportError as e:
                err = e  # reconnect
            time.sleep(f.backoff(self._target, err))

    def result(self, turn_id: str, *, check: bool = True) -> Result:
        """Wait for the turn's result. With ``check`` (the default) a
        failed turn raises its error (``QuotaError``, ``CancelledError``,
        ...) with ``.result`` set."""
        st: TurnStatus = self.turn(turn_id)
        res = st.result
        if res is None:
            for item in self.events(turn_id, last_event_id=st.events):
                res = _core.deliver(item, None)
        return _core.checked(res, check, turn_id)

    def run(self, prompt: str, *, on_event: Optional[Callable[[Event], Any]] = None,
            check: bool = True, check_command: Optional[str] = None, **request: Any) -> Result:
        """Start a turn and wait for its result; ``on_event`` sees each
        event. Takes the keyword arguments of ``start``; ``check`` is
        whether a failed turn raises, so the request's ``check`` (a shell
        command run after the turn) is ``check_command`` here."""
        if check_command is not None:
            request["check"] = check_command
        t = self.start(prompt, **request)
        res = None
        for item in self.events(t.id):
            res = _core.deliver(item, on_event)
        return _core.checked(res, check, t.id)

    def race_events(self, prompt: str, **spec: Any) -> Iterator[_core.RaceItem]:
        """A race's stream (``outpost race``): each contestant's
        ``RaceProgress`` and ``RaceEvent`` items, then each one's
        ``RaceResultLine``, the ``RaceLine`` last (each with its ``seq``).
        Keyword arguments are those of ``RaceRequest``: agents, count,
        model, check, check_timeout_ms, judge, from_ (``ID[@TURN]``),
        max_tokens, budget, timeout_ms, sandbox, settings, secrets,
        egress, egress_allow. The race lives as long as the stream:
        closing it early cancels the race; a dropped connection is a
        ``TransportError`` (there is no reconnection)."""
        return self._race(_core.RaceStream(), prompt, spec)

    def _race(self, s: _core.RaceStream, prompt: str, spec: Dict[str, Any]) -> Iterator[_core.RaceItem]:
        try:
            with self._http.stream("POST", s.path, json=_core.race_body(prompt, spec), headers=s.headers,
                                   timeout=self._stream_timeout) as r:
                if r.status_code != 200:
                    r.read()
                    raise _core.response_error(r)
                for chunk in r.iter_text():
                    yield from s.feed(chunk)
                    if s.race is not None:
                        return
        except httpx.TransportError as e:
            raise _core.unreachable(self._target, "the race's stream", e) from e
        s.response()  # raises: the stream ended without its race line

    def race(self, prompt: str, *, on_event: Optional[Callable[[Any], Any]] = None, **spec: Any) -> RaceResponse:
        """Run a race to its end: returns every contestant's result line
        (``.results``) and the race (``.race.winner``, -1 when none
        passed; ``.race.conversation``, the winner's). ``on_event`` sees
        each progress item and contestant's event (``.contestant``)
        meanwhile. Takes the keyword arguments of ``race_events``."""
        s = _core.RaceStream()
        for item in self._race(s, prompt, spec):
            _core.race_deliver(item, on_event)
        return s.response()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
