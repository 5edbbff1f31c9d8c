"""The asynchronous client: ``Client``'s surface with ``async``."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Optional, Union

import httpx

from . import _core
from .errors import TransportError
from .models import Event, Result, TurnStatus

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
            raise TransportError(f"outpost: {call.method} {call.path}: {e!r}") from e
        return call.answer(r)

    async def events(self, turn_id: str, last_event_id: Optional[int] = None) -> AsyncIterator[Union[Event, Result]]:
        """See ``Client.events``."""
        f = _core.Follow(turn_id, last_event_id, self._max_reconnects)
        while True:
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
            except httpx.TransportError:
                pass
            await asyncio.sleep(f.backoff())

    async def result(self, turn_id: str, *, check: bool = True) -> Result:
        """See ``Client.result``."""
        st: TurnStatus = await self.turn(turn_id)
        res = st.result
        if res is None:
            async for item in self.events(turn_id, last_event_id=st.events):
                res = _core.deliver(item, None)
        return _core.checked(res, check, turn_id)

    async def run(self, prompt: str, *, on_event: Optional[Callable[[Event], Any]] = None,
                  check: bool = True, **request: Any) -> Result:
        """See ``Client.run``."""
        t = await self.start(prompt, **request)
        res = None
        async for item in self.events(t.id):
            res = _core.deliver(item, on_event)
        return _core.checked(res, check, t.id)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
