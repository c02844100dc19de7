"""``tests/prefork.py``: a forked process behaves for its caller as ``python -m`` would.

A real server (preloading only ``json``, forking only ``tests.prefork_probe``) and real askers.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import prefork

REPO = Path(__file__).resolve().parents[1]
PROBE = ["-m", "tests.prefork_probe"]
SMALL = ["json", "tests.prefork_probe"]  # what the server preloads, and what it forks
LOG = "PREFORK_TEST_LOG"  # the variable the fixture names the server's log in


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A server; yields the environment its askers need."""
    folder = tmp_path_factory.mktemp("prefork")
    socket_path = folder / "s.sock"
    log = folder / "server.log"
    with open(log, "wb") as written:  # each request, forked or why not: in failures' messages
        process = subprocess.Popen(
            [sys.executable, prefork.__file__, "serve", str(socket_path), str(os.getpid()), *SMALL],
            stdout=subprocess.DEVNULL,
            stderr=written,
        )
    deadline = time.monotonic() + 30
    while not socket_path.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the server did not bind"
        time.sleep(0.01)
    yield {**os.environ, prefork.SOCKET_VARIABLE: str(socket_path), "PROBE": "seen", LOG: str(log)}
    process.terminate()
    process.wait(10)


def _said(server: dict[str, str], asker: subprocess.Popen[str] | None = None) -> str:
    """The server's log (and the asker's standard error), for a failure's message."""
    said = "server: " + Path(server[LOG]).read_text(errors="replace")[-3000:]
    if asker is not None and asker.stderr is not None:
        if asker.poll() is None:  # its standard error ends with it
            asker.kill()
            asker.wait()
        with contextlib.suppress(OSError, ValueError):
            said += "\nasker: " + asker.stderr.read()[-3000:]
    return said


def _ask(*args: str) -> list[str]:
    return [sys.executable, "-I", "-S", prefork.__file__, *args]


def _gone(pid: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_child_gets_the_askers_arguments_streams_directory_and_exit_status(
    server: dict[str, str],
) -> None:
    asker = subprocess.Popen(
        _ask(*PROBE, "report", "5"),
        cwd=REPO,
        env=server,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = asker.communicate("hello", timeout=30)
    assert asker.returncode == 5, err
    seen = json.loads(out)
    assert seen["argv"] == ["report", "5"]
    assert seen["cwd"] == str(REPO) == seen["path0"]
    assert seen["probe"] == "seen"
    assert seen["stdin"] == "hello"
    assert seen["name"] == "__main__"
    assert "to stderr" in err
    assert seen["pid"] != asker.pid and seen["ppid"] != asker.pid  # forked by the server


def _fewer_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


@pytest.mark.parametrize(
    ("args", "change", "limit"),
    [
        (["-c", "import os, json; print(json.dumps({'pid': os.getpid()}))"], {}, None),
        ([*PROBE, "report", "0"], {"HF_HOME": "/nonexistent/elsewhere"}, None),
        ([*PROBE, "report", "0"], {}, _fewer_files),
    ],
    ids=["not-python-m", "import-time-variable", "resource-limit"],
)
def test_what_a_fresh_interpreter_would_see_differently_runs_on_one(
    server: dict[str, str],
    args: list[str],
    change: dict[str, str],
    limit: Callable[[], None] | None,
) -> None:
    asker = subprocess.Popen(
        _ask(*args),
        cwd=REPO,
        env={**server, **change},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )
    out, err = asker.communicate(timeout=60)
    assert asker.returncode == 0, err
    # The asker became the real interpreter (exec): the same process.
    assert json.loads(out)["pid"] == asker.pid


def test_signals_to_the_asker_reach_the_child_and_its_end_is_the_askers(
    server: dict[str, str],
) -> None:
    for signum, code in ((signal.SIGTERM, 3), (signal.SIGINT, -signal.SIGINT)):
        asker = subprocess.Popen(
            _ask(*PROBE, "wait"),
            cwd=REPO,
            env=server,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert asker.stdout is not None
        child = int(asker.stdout.readline())
        assert child != asker.pid, _said(server, asker)  # forked, not the real interpreter
        asker.send_signal(signum)
        try:
            ended = asker.wait(60)
        except subprocess.TimeoutExpired:
            ended = None  # _said stops it
        assert ended == code, (signal.Signals(signum).name, ended, _said(server, asker))
        assert _gone(child), _said(server, asker)
        asker.stdout.close()
        assert asker.stderr is not None
        asker.stderr.close()


def test_a_killed_asker_takes_its_child_and_an_orphaned_one_stops_it(
    server: dict[str, str],
) -> None:
    asker = subprocess.Popen(
        _ask(*PROBE, "wait"), cwd=REPO, env=server, stdout=subprocess.PIPE, text=True
    )
    assert asker.stdout is not None
    child = int(asker.stdout.readline())
    asker.kill()
    asker.wait(10)
    asker.stdout.close()
    assert _gone(child), "the child outlived its killed asker"

    # The asker's parent (a shell) exits at once: the asker is orphaned and stops its child,
    # as fulmen's engine stops itself when its launcher dies.
    command = " ".join(f"'{arg}'" for arg in _ask(*PROBE, "wait"))
    shell = subprocess.run(
        ["sh", "-c", f"{command} & sleep 2"],
        cwd=REPO,
        env=server,
        capture_output=True,
        text=True,
        timeout=30,
    )
    child = int(shell.stdout.split()[0])
    assert _gone(child), "the child outlived its orphaned asker"
