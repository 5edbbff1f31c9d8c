"""Fixtures: a real ``outpost serve`` of the binary built from this
checkout (``go build -o``; or $OUTPOST_BIN), on a private socket or TCP,
and a Unix-socket proxy whose connections a test can cut."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]


def missing(what: str, how: str) -> None:
    """A test that needs what is missing fails under CI=true and is
    skipped, loudly, otherwise."""
    msg = f"{what} is missing: {how}"
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def outpost_bin(tmp_path_factory) -> str:
    if os.environ.get("OUTPOST_BIN"):
        return os.environ["OUTPOST_BIN"]
    if shutil.which("go") is None:
        missing("go", "install Go, or set OUTPOST_BIN to an outpost binary")
    bindir = tmp_path_factory.mktemp("bin")
    out = str(bindir / "outpost")
    subprocess.run(["go", "build", "-o", out, "./cmd/outpost"], cwd=REPO, check=True)
    # outpost-sandbox beside outpost, as a release installs them: the echo
    # agent then starts as the small in-sandbox binary, not the whole CLI.
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run(["go", "build", "-o", str(bindir / "outpost-sandbox"), "./cmd/outpost-sandbox"], cwd=REPO, check=True, env=env)
    return out


class Server:
    """One ``outpost serve`` process; ``restart`` starts a new one with the
    same arguments, home and socket."""

    def __init__(self, binary: str, root: Path, args: List[str]):
        self.binary, self.root, self.args = binary, root, args
        self.proc: Optional[subprocess.Popen] = None
        self.where = ""
        self.log = root / "serve.log"
        self.tokens: List[str] = []

    def env(self) -> dict:
        e = dict(os.environ)
        e.update(XDG_DATA_HOME=str(self.root / "data"), XDG_CONFIG_HOME=str(self.root / "config"),
                 OUTPOST_HOME=str(self.root / "home"))
        return e

    def start(self) -> "Server":
        work = self.root / "work"
        work.mkdir(exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--workdir", str(work), "--log-format", "text", *self.args],
                env=self.env(), stdout=subprocess.PIPE, stderr=log, text=True)
        for line in self.proc.stdout:
            if "listening on " in line:
                self.where = line.split("listening on ", 1)[1].strip()
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()
                return self
        raise RuntimeError(f"outpost serve exited with {self.proc.wait()}:\n{self.log.read_text()}")

    @property
    def socket(self) -> str:
        assert self.where.startswith("unix:"), self.where
        return self.where[len("unix:"):]

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=120)

    def restart(self) -> "Server":
        self.stop()
        return self.start()

    def token(self, name: str) -> str:
        out = subprocess.run([self.binary, "serve", "token", "add", name, "--tokens", str(self.root / "tokens")],
                             env=self.env(), check=True, capture_output=True, text=True)
        return out.stdout.strip()


@pytest.fixture
def serve(outpost_bin, tmp_path):
    """serve(*args) starts a server on a socket of its own (unless args
    say --listen); every server is stopped at the end of the test."""
    servers: List[Server] = []

    def start(*args: str, default_socket: bool = False, token: Optional[str] = None) -> Server:
        """default_socket: no --socket (the server's default); token: a
        token of that name is made (``Server.tokens``) and --tokens added."""
        root = tmp_path / f"s{len(servers)}"
        root.mkdir()
        if "--listen" not in args and not default_socket:
            run = root / "run"
            run.mkdir(mode=0o700)
            args = ("--socket", str(run / "serve.sock"), *args)
        s = Server(outpost_bin, root, list(args))
        if token:
            s.tokens.append(s.token(token))
            s.args += ["--tokens", str(root / "tokens")]
        servers.append(s.start())
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def shared(outpost_bin, tmp_path_factory):
    """One server for the tests that need nothing special (echo, local)."""
    root = tmp_path_factory.mktemp("shared")
    run = root / "run"
    run.mkdir(mode=0o700)
    s = Server(outpost_bin, root, ["--socket", str(run / "serve.sock")]).start()
    yield s
    s.stop()


class Proxy:
    """A Unix-socket proxy to a server's socket; ``cut`` closes every
    connection it carries, as a network drop would."""

    def __init__(self, upstream: str, path: str):
        self.upstream, self.path = upstream, path
        self.lock = threading.Lock()
        self.conns: List[socket.socket] = []
        self.cuts = 0
        self.sent: List[bytes] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(self.upstream)
            except OSError:
                down.close()
                continue
            with self.lock:
                self.conns += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pipe, args=(a, b, a is down), daemon=True).start()

    def requests(self) -> bytes:
        """requests is every byte the clients sent, in order."""
        with self.lock:
            return b"".join(self.sent)

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while data := src.recv(65536):
                if upstream:
                    with self.lock:
                        self.sent.append(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
            self.cuts += 1
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture
def proxy(tmp_path):
    made: List[Proxy] = []

    def make(upstream: str) -> Proxy:
        p = Proxy(upstream, str(tmp_path / f"proxy{len(made)}.sock"))
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()
