"""The asynchronous client: ``Client``'s surface with ``async``."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Dict, Optional, Union

import httpx

from . import _core
from .models import Event, RaceResponse, Result, TurnStatus

__all__ = ["AsyncClient"]


class AsyncClient(_core.Api):
    """``Client`` with ``async``: ``await client.start(...)``,
    ``async for ev in client.events(id)``, ``await client.result(id)``,
    ``await client.conversations.list()``; ``async with`` closes it."""

    _http_client = httpx.AsyncClient
    _http_transport = httpx.AsyncHTTPTransport

    async def _call(self, call: _core.Call) -> Any:
        try:
            r = await self._http.request(call.method, call.path, **call.kwargs())
        except httpx.TransportError as e:
            raise _core.unreachable(self._target, f"{call.method} {call.path}", e) from e
        return call.answer(r)

    async def events(self, turn_id: str, last_event_id: Optional[int] = None) -> AsyncIterator[Union[Event, Result]]:
        """See ``Client.events``."""
        f = _core.Follow(turn_id, last_event_id, self._max_reconnects)
        err: Optional[Exception] = None
        while True:
            err = None
            try:
                async with self._http.stream("GET", f.path, headers=f.headers(), timeout=self._stream_timeout) as r:
                    if r.status_code != 200:
                        await r.aread()
                    if f.opened(r):
                        async for chunk in r.aiter_text():
                            for item in f.feed(chunk):
                                yield item
                            if f.done:
                                return
            except httpx.TransportError as e:
                err = e  # reconnect
            await asyncio.sleep(f.backoff(self._target, err))

    async def result(self, turn_id: str, *, check: bool = True) -> Result:
        """See ``Client.result``."""
        st: TurnStatus = await self.turn(turn_id)
        res = st.result
        if res is None:
            async for item in self.events(turn_id, last_event_id=st.events):
                res = _core.deliver(item, None)
        return _core.checked(res, check, turn_id)

    async def run(self, prompt: str, *, on_event: Optional[Callable[[Event], Any]] = None,
                  check: bool = True, check_command: Optional[str] = None, **request: Any) -> Result:
        """See ``Client.run``."""
        if check_command is not None:
            request["check"] = check_command
        t = await self.start(prompt, **request)
        res = None
        async for item in self.events(t.id):
            res = _core.deliver(item, on_event)
        return _core.checked(res, check, t.id)

    def race_events(self, prompt: str, **spec: Any) -> AsyncIterator[_core.RaceItem]:
        """See ``Client.race_events``."""
        return self._race(_core.RaceStream(), prompt, spec)

    async def _race(self, s: _core.RaceStream, prompt: str, spec: Dict[str, Any]) -> AsyncIterator[_core.RaceItem]:
        try:
            async with self._http.stream("POST", s.path, json=_core.race_body(prompt, spec), headers=s.headers,
                                         timeout=self._stream_timeout) as r:
                if r.status_code != 200:
                    await r.aread()
                    raise _core.response_error(r)
                async for chunk in r.aiter_text():
                    for item in s.feed(chunk):
                        yield item
                    if s.race is not None:
                        return
        except httpx.TransportError as e:
            raise _core.unreachable(self._target, "the race's stream", e) from e
        s.response()  # raises: the stream ended without its race line

    async def race(self, prompt: str, *, on_event: Optional[Callable[[Any], Any]] = None, **spec: Any) -> RaceResponse:
        """See ``Client.race``."""
        s = _core.RaceStream()
        async for item in self._race(s, prompt, spec):
            _core.race_deliver(item, on_event)
        return s.response()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
