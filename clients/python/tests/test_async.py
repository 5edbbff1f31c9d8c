"""AsyncClient against a real ``outpost serve``: the same surface as
Client, with ``async``."""

from __future__ import annotations

import asyncio

import pytest

from outpost import AsyncClient, CancelledError, ConversationError, RefusedError, Result


def run(coro):
    return asyncio.run(coro)


def test_async_turn_and_conversations(shared):
    async def main():
        async with AsyncClient(socket=shared.socket) as c:
            assert (await c.health()).status == "ok"
            t = await c.start("hello #tool")
            items = [item async for item in c.events(t.id)]
            assert [i.seq for i in items] == list(range(1, len(items) + 1))
            assert items[-1].type == "result" and isinstance(items[-1], Result)
            res = await c.result(t.id)
            assert res.text == "echo: hello #tool (turn 1)"
            seen = []
            again = await c.run("again", resume=res.conversation, on_event=lambda ev: seen.append(ev.type))
            assert "(turn 2)" in again.text and "finished" in seen
            structured = await c.run('#json={"ok": true}', schema={"type": "object", "required": ["ok"]})
            assert structured.output == {"ok": True}
            assert res.conversation in [x.id for x in await c.conversations.list()]
            assert (await c.conversations.show(res.conversation)).turns == 2
            assert (await c.conversations.usage(res.conversation)).turns == 2
            archive = await c.conversations.export(res.conversation)
            await c.conversations.delete(res.conversation)
            with pytest.raises(ConversationError):
                await c.conversations.show(res.conversation)
            assert (await c.conversations.import_(archive)).id == res.conversation
    run(main())


def test_async_steer_cancel_and_errors(shared, proxy):
    p = proxy(shared.socket)

    async def main():
        async with AsyncClient(socket=p.path) as c:
            t = await c.start("#slow=30")
            items = []
            async for item in c.events(t.id):
                items.append(item)
                if item.seq % 7 == 0 and item.type != "result":
                    p.cut()
            assert p.cuts >= 3
            assert [i.seq for i in items] == list(range(1, len(items) + 1))
            assert items[-1].error is None

            t = await c.start("#slow=2000")
            async for item in c.events(t.id):
                if item.type == "message":
                    break
            assert (await c.steer(t.id, "wrap up")).accepted
            assert "steered: wrap up" in (await c.result(t.id)).text
            with pytest.raises(RefusedError) as e:
                await c.steer(t.id, "too late")
            assert e.value.status == 409

            t = await c.start("#slow=2000")
            await c.cancel(t.id)
            with pytest.raises(CancelledError) as e:
                await c.result(t.id)
            assert e.value.details["cancelled_by"] == "client"
    run(main())


def test_async_diff_and_race(shared):
    check = 'test -f out.txt && case "$PWD" in *-race-1-*) exit 0;; *) exit 1;; esac'

    async def main():
        async with AsyncClient(socket=shared.socket) as c:
            res = await c.run("#write=out.txt go", workspace="new")
            assert res.checkpoint.turn == 1
            assert "+++ b/out.txt" in await c.diff(res.conversation)
            assert [f.path for f in (await c.diff(res.conversation, format="json")).files] == ["out.txt"]
            seen = []
            r = await c.race("#write=out.txt solve it", count=3, check=check, on_event=seen.append)
            assert r.race.winner == 1 and len(r.results) == 3
            assert {p.contestant for p in seen if p.type == "progress" and p.state == "checked"} == {0, 1, 2}
            items = [i async for i in c.race_events("hi", count=2)]
            assert items[-1].type == "race" and len(items[-1].contestants) == 2
    run(main())
