"""The package installs with pip, without the network: in a virtual
environment made with --system-site-packages (httpx from Debian), with
--no-build-isolation (setuptools from Debian)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import missing

PACKAGE = Path(__file__).resolve().parents[1]


def test_pip_install_in_a_venv(shared, tmp_path):
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        missing("python3-venv", f"scripts/test.sh installs it ({made.stderr.strip()})")
    # Build from a copy: pip builds in the source tree.
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info", "build"))
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet", str(src)],
                   check=True)
    code = ("import outpost; c = outpost.Client(socket=%r); r = c.run('installed');"
            " print(outpost.__file__); print(r.text)" % shared.socket)
    out = subprocess.run([py, "-c", code], cwd="/", check=True, capture_output=True, text=True)
    where, text = out.stdout.splitlines()
    assert where.startswith(str(venv)), where
    assert text == "echo: installed (turn 1)"
    listed = subprocess.run([py, "-m", "pip", "show", "outpost-client"], check=True, capture_output=True, text=True)
    assert "Name: outpost-client" in listed.stdout
