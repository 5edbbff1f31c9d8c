"""The client against a real ``outpost serve`` (echo agent)."""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import outpost
from outpost import (CancelledError, Client, ConfigurationError,
                     ConversationError, Event, OutputError, QuotaError,
                     RefusedError, Result, UnavailableError)

from conftest import missing

PACKAGE = Path(__file__).resolve().parents[1]


@pytest.fixture
def client(shared):
    with Client(socket=shared.socket) as c:
        yield c


def contiguous(items):
    assert [i.seq for i in items] == list(range(1, len(items) + 1))


def test_turn_events_result(client):
    t = client.start("hello #tool")
    assert t.id.startswith("t") and len(t.id) == 25
    items = list(client.events(t.id))
    contiguous(items)
    assert [i.type for i in items] == ["session", "tool_call", "tool_result", "message", "finished", "result"]
    assert all(isinstance(i, Event) for i in items[:-1])
    assert items[1].tool.name == "shell"
    res = items[-1]
    assert isinstance(res, Result)
    assert res.error is None and res.exit_code == 0
    assert res.text == "echo: hello #tool (turn 1)"
    assert res.usage.output_tokens > 0
    assert res.completed_at >= res.started_at
    assert client.result(t.id) == outpost.models.decode(Result, outpost.models.encode(res))
    st = client.turn(t.id)
    assert st.state == "finished" and st.events == len(items)


def test_default_socket(serve, tmp_path, monkeypatch):
    run = tmp_path / "xdg"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    s = serve(default_socket=True)
    assert s.socket == outpost.default_socket() == str(run / "outpost" / "serve.sock")
    with Client() as c:
        assert c.run("hi").text == "echo: hi (turn 1)"
        assert c.health().status == "ok"
        agents = {a.name: a for a in c.agents()}
        # One list everywhere (`outpost agents`, the API, MCP): every
        # preset has its pinned version; echo is outpost's own binary.
        assert all(a.version and a.source == "built-in" for a in agents.values())
        assert agents["echo"].installed and agents["echo"].kind == "self"
        assert agents["claude"].kind == "npm" and agents["claude"].keyless == "yes"
        # The sandboxes served, the default first, with their isolation.
        sbs = c.sandboxes()
        assert sbs and sbs[0].sandbox == "local" and sbs[0].isolation in ("none", "namespaces")


def test_reconnection_mid_turn(shared, proxy):
    """Connections cut in the middle of a turn: the iterator resumes from
    Last-Event-ID, and delivers every event exactly once."""
    p = proxy(shared.socket)
    follows = rb"GET \S*/events"
    with Client(socket=p.path) as c:
        t = c.start("#slow=30")
        items, made = [], []
        for item in c.events(t.id):
            # How many event requests the client had made when this item
            # arrived: an item still buffered when its connection was cut
            # arrives before the next request, and counts for the old one.
            made.append(len(re.findall(follows, p.requests())))
            items.append(item)
            if item.seq % 5 == 0 and item.type != "result":
                p.cut()
        assert p.cuts >= 5
        contiguous(items)
        # Each reconnection asked for the events after the last one
        # delivered before it was made, and each request after the first
        # was a reconnection.
        sent = p.requests()
        requests = len(re.findall(follows, sent))
        asked = [int(n) for n in re.findall(rb"(?i)last-event-id: (\d+)", sent)]
        assert requests >= 5 and len(asked) == requests - 1
        for k, n in enumerate(asked, start=1):
            before = [i.seq for i, m in zip(items, made) if m <= k]
            assert n == before[-1], f"reconnection {k} asked after {n}, delivered {before[-1]}"
        assert items[-1].type == "result" and items[-1].error is None
        again = list(c.events(t.id))
        assert again == items
        assert list(c.events(t.id, last_event_id=len(items) - 2)) == items[-2:]


def test_steer(client):
    t = client.start("#slow=2000")
    steered = False
    for item in client.events(t.id):
        if not steered and item.type == "message":
            assert client.steer(t.id, "wrap up").accepted
            steered = True
    res = client.result(t.id)
    assert "steered: wrap up" in res.text
    with pytest.raises(RefusedError) as e:
        client.steer(t.id, "too late")
    assert e.value.status == 409 and e.value.reason == "conflict"


def test_cancelled_turn(client):
    t = client.start("#slow=2000")
    next(iter(client.events(t.id)))  # it runs
    st = client.cancel(t.id)
    assert st.id == t.id
    with pytest.raises(CancelledError) as e:
        client.result(t.id)
    assert e.value.code == "cancelled"
    assert e.value.details["cancelled_by"] == "client"
    assert e.value.result.conversation
    res = client.result(t.id, check=False)
    assert res.error.code == "cancelled"
    assert client.cancel(t.id).state == "finished"


def test_conversations(client):
    first = client.run("remember me")
    conv = first.conversation
    seen = []
    second = client.run("again", resume=conv[:12], on_event=lambda ev: seen.append(ev.type))
    assert second.conversation == conv and "(turn 2)" in second.text
    assert "finished" in seen
    forked = client.run("elsewhere", fork=conv)
    assert forked.conversation != conv and forked.parent == conv and "(turn 3)" in forked.text
    assert conv in [c.id for c in client.conversations.list()]
    got = client.conversations.show(conv[:12])
    assert got.id == conv and got.turns == 2 and got.agent == "echo"
    u = client.conversations.usage(conv)
    assert u.turns == 2 and u.usage.output_tokens > 0
    h = client.conversations.history(conv)
    assert h.source == "history" and [x.prompt for x in h.exchanges] == ["remember me", "again"]
    assert h.exchanges[1].answer == second.text
    done = client.turns(state="finished", limit=1000)
    t2 = next(t for t in done if t.result and t.result.text == second.text)
    assert t2.prompt == "again" and t2.usage.output_tokens > 0 and all(t.state == "finished" for t in done)
    assert len(client.turns(limit=1)) == 1
    # The socket's owner is the operator: the fleet (none here) and gc.
    assert client.fleet() == outpost.models.Fleet(fleet=False, replicas=[])
    gc = client.gc()
    assert gc.pending.dry_run and "local" in [x.sandbox for x in gc.pending.sandboxes] and gc.last is None

    archive = client.conversations.export(conv)
    assert archive[:2] == b"\x1f\x8b"  # gzip
    client.conversations.delete(conv)
    with pytest.raises(ConversationError) as e:
        client.conversations.show(conv)
    assert e.value.status == 404 and e.value.reason == "not_found"
    imported = client.conversations.import_(archive)
    assert imported.id == conv and imported.turns == 2
    third = client.run("back", resume=conv)
    assert "(turn 3)" in third.text
    with pytest.raises(RefusedError) as e:
        client.conversations.import_(archive)
    assert e.value.status == 409
    with pytest.raises(ConversationError) as e:
        client.conversations.import_(b"not an archive")
    assert (e.value.status, e.value.reason) == (400, "bad_request")


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
          "required": ["ok", "n"], "additionalProperties": False}


def test_structured_answer(client):
    res = client.run('answer #json={"ok": true, "n": 7}', schema=SCHEMA)
    assert res.output == {"ok": True, "n": 7}
    with pytest.raises(OutputError) as e:
        client.run("answer #badjson", schema=SCHEMA, repairs=0)
    assert e.value.code == "output" and e.value.result.output is None


def test_turn_failures_raise_their_codes(client):
    with pytest.raises(QuotaError) as e:
        client.run("#quota")
    assert e.value.resets_at
    with pytest.raises(UnavailableError) as e:
        client.run("#outage")
    assert e.value.code == "process" and e.value.details["unavailable"] is True
    assert isinstance(e.value, outpost.ProcessError)


def test_api_errors(client):
    with pytest.raises(ConfigurationError) as e:
        client.start("x", agent="nope")
    assert (e.value.status, e.value.reason) == (400, "bad_request")
    with pytest.raises(TypeError):
        client.start("x", no_such_option=1)
    with pytest.raises(outpost.OutpostError) as e:
        client.turn("t000000000000000000000000")
    assert e.value.status == 404
    with pytest.raises(outpost.OutpostError) as e:
        list(client.events("t000000000000000000000000"))
    assert e.value.status == 404


def test_tcp_token_and_401(serve, tmp_path):
    s = serve("--listen", "127.0.0.1:0", token="py-test")
    assert s.where.startswith("http://127.0.0.1:")
    with Client(url=s.where, token=s.tokens[0]) as c:
        assert c.run("over tcp").error is None
    for token in ("opt_wrong", None):
        with Client(url=s.where, token=token) as c:
            with pytest.raises(RefusedError) as e:
                c.agents()
            assert (e.value.status, e.value.reason) == (401, "unauthorized")
            assert c.health().status == "ok"  # needs no token


def test_tcp_policy_and_tenancy(serve):
    """A client token asking for more than the client policy gets 403
    (RefusedError, reason policy); another token's conversation is 404."""
    s = serve("--listen", "127.0.0.1:0", "--token-limit", "alice=1000/5000", token="alice")
    bob_token = s.token("bob")
    with Client(url=s.where, token=s.tokens[0]) as alice, Client(url=s.where, token=bob_token) as bob:
        for req in ({"secrets": "env"}, {"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}},
                    {"egress_allow": ["127.0.0.1:8080"]}):
            with pytest.raises(RefusedError) as e:
                alice.start("x", **req)
            assert (e.value.status, e.value.code, e.value.reason) == (403, "refused", "policy")
        conv = alice.run("mine").conversation
        assert alice.conversations.show(conv).owner == "token:alice"
        with pytest.raises(outpost.OutpostError) as e:
            bob.conversations.show(conv)
        assert (e.value.status, e.value.reason) == (404, "not_found")
        assert conv not in [c.id for c in bob.conversations.list()]
        assert [x.prompt for x in alice.conversations.history(conv).exchanges] == ["mine"]
        with pytest.raises(outpost.OutpostError) as e:
            bob.conversations.history(conv)
        assert (e.value.status, e.value.reason) == (404, "not_found")
        # Each token sees its own limit; the fleet and gc are an operator's.
        (lim,) = alice.limits()
        assert (lim.token, lim.hour.limit, lim.day.limit, lim.hour.left + lim.hour.used) == ("alice", 1000, 5000, 1000)
        assert bob.limits() == []
        for call in (bob.fleet, bob.gc, bob.run_gc):
            with pytest.raises(RefusedError) as e:
                call()
            assert (e.value.status, e.value.reason) == (403, "forbidden")


def test_403_another_user(serve):
    if os.getuid() != 0:
        missing("root", "the 403 test connects as another user (nobody)")
    # A socket another user can reach (the test's own directories are
    # 0700): the server still checks the peer's uid.
    top = Path(tempfile.mkdtemp(prefix="outpost-py-"))
    try:
        run = top / "run"
        run.mkdir(mode=0o700)
        s = serve("--socket", str(run / "serve.sock"), default_socket=True)
        for d in (top, run):
            os.chmod(d, 0o755)
        os.chmod(s.socket, 0o666)
        # The package from a copy the other user can read: the checkout
        # may lie under a directory only we can enter.
        pkg = top / "pkg"
        shutil.copytree(PACKAGE / "outpost", pkg / "outpost", ignore=shutil.ignore_patterns("__pycache__"))
        for d, _, files in os.walk(pkg):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        code = (f"import sys; sys.path.insert(0, {str(pkg)!r}); import outpost\n"
                f"c = outpost.Client(socket={s.socket!r})\n"
                "try:\n    c.agents()\nexcept outpost.RefusedError as e:\n"
                "    print(e.status, e.reason)\n")
        out = subprocess.run([sys.executable, "-c", code], user=65534, group=65534, cwd="/",
                             capture_output=True, text=True)
        assert out.stdout.split() == ["403", "forbidden"], out.stderr
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_413_too_large(serve):
    s = serve("--max-body", "1024")
    with Client(socket=s.socket) as c:
        with pytest.raises(ConfigurationError) as e:
            c.start("x" * 2048)
        assert (e.value.status, e.value.reason) == (413, "too_large")
        assert c.run("small").error is None


def test_429_busy(serve):
    s = serve("--max-concurrent", "1", "--max-queue", "1")
    with Client(socket=s.socket) as c:
        running = c.start("#slow=2000")
        queued = c.start("#slow=2000")
        with pytest.raises(RefusedError) as e:
            c.start("one too many")
        assert (e.value.status, e.value.reason) == (429, "busy")
        assert e.value.retry_after and e.value.retry_after > 0
        for t in (queued, running):
            c.cancel(t.id)
            assert c.result(t.id, check=False).error.code == "cancelled"


def test_server_restart(serve):
    """A turn followed across a graceful restart ends with its result;
    the client then goes on with the new server, where the old turn id is
    unknown and its conversation is not."""
    s = serve("--grace", "60s")
    with Client(socket=s.socket) as c:
        t = c.start("#slow=20")
        it = c.events(t.id)
        items = [next(it)]
        s.proc.send_signal(signal.SIGTERM)  # draining: the turn finishes
        items += list(it)
        contiguous(items)
        assert items[-1].type == "result" and items[-1].error is None
        assert s.proc.wait(timeout=120) == 0
        with pytest.raises(outpost.TransportError):
            c.agents()
        s.start()
        again = c.run("after the restart", resume=items[-1].conversation)
        assert "(turn 2)" in again.text
        with pytest.raises(outpost.OutpostError) as e:
            c.turn(t.id)
        assert e.value.status == 404


def test_stream_survives_a_killed_server(serve):
    """A server killed outright: the iterator retries the connection,
    and raises the new server's 404 for the turn it does not know."""
    s = serve()
    with Client(socket=s.socket, max_reconnects=50) as c:
        t = c.start("#slow=200")
        it = c.events(t.id)
        next(it)
        s.stop(signal.SIGKILL)
        s.start()
        with pytest.raises(outpost.OutpostError) as e:
            list(it)
        assert e.value.status == 404 and e.value.reason == "not_found"


def test_docker_sandbox(serve):
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        missing("a running Docker Engine", "scripts/docker-up.sh")
    if subprocess.run(["docker", "image", "inspect", "outpost/debian:test"], capture_output=True).returncode != 0:
        missing("the image outpost/debian:test", "scripts/build-images.sh")
    s = serve("--sandbox", "docker", "--sandbox", "local", "--image", "outpost/debian:test", "--pool-size", "1")
    with Client(socket=s.socket) as c:
        res = c.run("in a container #tool #write note.txt", sandbox="docker")
        assert res.sandbox == "docker" and res.error is None
        assert res.text.startswith("echo: in a container")
        again = c.run("and again", resume=res.conversation, sandbox="docker")
        assert "(turn 2)" in again.text
        assert json.loads(json.dumps(outpost.models.encode(again)))["conversation"] == res.conversation


RACE_CHECK = 'test -f out.txt && case "$PWD" in *-race-1-*) exit 0;; *) exit 1;; esac'


def test_workspaces_diff_and_race(client):
    """A turn in a new workspace with a check, its checkpoint; the diff in
    its three formats; a race of three echo contestants whose check
    passes for the second only, with its progress; the refusals."""
    first = client.run("#write=out.txt go", workspace="new", check_command="test -f out.txt")
    assert first.checkpoint.turn == 1 and first.checkpoint.changed == 1
    assert first.check.passed and first.check.exit_code == 0 and first.workdir
    conv = first.conversation
    notices = []
    second = client.run("#write=two.txt more", resume=conv, workspace="new",
                        on_event=lambda ev: notices.append(ev.kind) if ev.type == "notice" else None)
    assert second.checkpoint.turn == 2 and "checkpoint" in notices
    assert [c.turn for c in client.conversations.show(conv).checkpoints] == [1, 2]

    patch = client.diff(conv)
    assert "+++ b/two.txt" in patch and "out.txt" not in patch
    stat = client.diff(f"{conv}@1", format="stat")
    assert "out.txt" in stat and " 1 file(s) changed, 1 insertion(s)(+)" in stat
    d = client.diff(f"{conv}@1", to=f"{conv}@2", format="json")
    assert isinstance(d, outpost.Diff) and [(f.path, f.action) for f in d.files] == [("two.txt", "added")]
    assert d.from_ == first.checkpoint.commit and d.to == second.checkpoint.commit
    with pytest.raises(ConversationError) as e:
        client.diff(f"{conv}@9")
    assert e.value.status == 404 and e.value.details["checkpoint"] == "not_found"
    with pytest.raises(ConfigurationError) as e:
        client.diff(f"{conv}@0")
    assert e.value.status == 400
    with pytest.raises(ValueError):
        client.diff(conv, format="html")

    seen = []
    r = client.race("#write=out.txt solve it", agents=["echo"], count=3, check=RACE_CHECK, on_event=seen.append)
    assert isinstance(r.race, outpost.RaceLine) and r.race.winner == 1
    assert r.race.conversation == r.results[1].conversation
    assert [(line.contestant, line.check.passed) for line in r.results] == [(0, False), (1, True), (2, False)]
    for i in range(3):
        assert [p.state for p in seen if isinstance(p, outpost.RaceProgress) and p.contestant == i] == ["started", "finished", "checked"]
    assert any(isinstance(ev, outpost.RaceEvent) and ev.type == "message" for ev in seen)
    # The stream itself, from the winner's checkpoint.
    items = list(client.race_events("#write=more.txt again", count=2, from_=r.race.conversation + "@1",
                                    check="test -f out.txt && test -f more.txt"))
    assert [i.seq for i in items] == list(range(1, len(items) + 1))
    assert isinstance(items[-1], outpost.RaceLine) and items[-1].winner >= 0
    assert all(line.parent == r.race.conversation for line in items if isinstance(line, outpost.RaceResultLine))
    with pytest.raises(ConfigurationError) as e:
        client.race("x", agents=["echo"], count=17)
    assert e.value.status == 400 and e.value.reason == "bad_request"
    with pytest.raises(ConversationError) as e:
        client.race("x", from_=conv + "@9")
    assert e.value.status == 404
