"""The commands a new user needs in the first hour, against real stores: enqueue tasks, publish
resources, see rewards, refuse a store that does not exist, doctor, completion, extras hints."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import fulmen
from fulmen.agent.runner import Runner
from fulmen.cli.completion import completion_script
from fulmen.cli.main import build_parser, main
from fulmen.store import open_store
from fulmen.types import Mode, RolloutQuery
from tests.store.http_server import ServerProcess

RESOURCES = """\
resources:
  llm:
    base_url: http://127.0.0.1:9/v1
    model: tiny
    api_key: not-shown
  system:
    template: "Answer: {question}"
metadata: {note: first}
"""


@fulmen.rollout
async def graded(task: dict[str, Any], llm: fulmen.LLM, prompt: Any) -> dict[str, float]:
    """Named rewards, primary `correct`; proves the task and resources reached the agent."""
    assert llm.model == "tiny"
    assert prompt.template.format(question=task["question"]).startswith("Answer: ")
    return {"correct": float(task["answer"]), "format": 0.5}


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "q1", "question": "1+1", "answer": 1}\n'
        '{"id": "q2", "question": "2+2", "answer": 0}\n'
    )
    resources = tmp_path / "resources.yaml"
    resources.write_text(RESOURCES)
    return tasks, resources


def run_agent(url: str) -> None:
    async def go() -> None:
        async with open_store(url) as store:
            runner = Runner(store, graded, heartbeat_interval=0.1, poll_interval=0.02)
            stats = await runner.run(until_idle=True)
            assert stats.succeeded == 6, stats

    asyncio.run(go())


def test_enqueue_resources_and_rewards_on_a_sqlite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, resources = write_inputs(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    enqueue = ["rollouts", "enqueue", "--store", url, "--tasks", str(tasks)]
    code, out, _ = run_cli(
        [*enqueue, "--resources", str(resources), "--group-size", "3", "--id-prefix", "b1"], capsys
    )
    assert code == 0, out
    assert "enqueued 6 rollouts (2 tasks x 3, mode train, resources v1)" in out
    # The same command again adds nothing: the rollout ids are fixed by --id-prefix.
    code, out, _ = run_cli([*enqueue, "--group-size", "3", "--id-prefix", "b1"], capsys)
    assert code == 0 and "resources v1" in out

    async def stored() -> list[Any]:
        async with open_store(url, watchdog_interval=None) as store:
            return (await store.query_rollouts(RolloutQuery(limit=100))).items

    rollouts = asyncio.run(stored())
    expected = [f"b1-t{t}-r{j}" for t in (0, 1) for j in range(3)]
    assert sorted(r.rollout_id for r in rollouts) == expected
    assert {r.task_id for r in rollouts} == {"q1", "q2"}
    assert {(r.mode, r.resources_version) for r in rollouts} == {(Mode.TRAIN, 1)}

    code, out, _ = run_cli(["resources", "show", "--store", url], capsys)
    assert code == 0
    assert out.splitlines()[0].startswith("resources v1 ") and '"note": "first"' in out
    assert "llm: llm tiny at http://127.0.0.1:9/v1  api_key set" in out
    assert "not-shown" not in out  # the key itself is only in --json
    code, out, _ = run_cli(["resources", "add", str(resources), "--store", url], capsys)
    assert code == 0 and out.startswith("resources v2 ")
    code, out, _ = run_cli(["resources", "list", "--store", url], capsys)
    assert [line.split()[0] for line in out.splitlines()] == ["v1", "v2"]
    assert "llm (llm), system (prompt)" in out

    run_agent(url)

    code, out, _ = run_cli(["rollouts", "list", "--store", url], capsys)
    header, *rows = out.splitlines()
    assert header.split()[-1] == "REWARD"
    rewards = {row.split()[0]: row.split()[-1] for row in rows}
    # Task q1 (t0) answers 1, q2 (t1) answers 0: the primary reward `correct`.
    assert rewards == {rid: "1" if rid.startswith("b1-t0") else "0" for rid in expected}
    code, out, _ = run_cli(["rollouts", "list", "--store", url, "--json"], capsys)
    assert {item["reward"] for item in json.loads(out)["items"]} == {0.0, 1.0}

    code, out, _ = run_cli(["rollouts", "show", "b1-t0-r0", "--store", url], capsys)
    assert code == 0
    (reward_row,) = [line for line in out.splitlines() if "fulmen.reward" in line]
    assert "correct=1 format=0.5" in reward_row  # named rewards, the primary first


def test_enqueue_over_http_with_a_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks, resources = write_inputs(tmp_path)
    server = ServerProcess(f"sqlite:///{tmp_path / 'served.db'}", tmp_path / "s.log", token="tok")
    try:
        common = ["--store", server.url, "--token", "tok"]
        code, out, err = run_cli(
            ["rollouts", "enqueue", *common, "--tasks", str(tasks), "--mode", "val"], capsys
        )
        assert code == 0, err
        assert "enqueued 2 rollouts (2 tasks x 1, mode val, no resources)" in out
        assert "fulmen resources add" in err  # warns that agents would get no llm
        code, out, _ = run_cli(["resources", "add", str(resources), *common], capsys)
        assert code == 0 and out.startswith("resources v1 ")
        code, out, _ = run_cli(["rollouts", "list", *common, "--json"], capsys)
        items = json.loads(out)["items"]
        assert [(i["mode"], i["status"]) for i in items] == [("val", "queuing")] * 2
        code, _, err = run_cli(["rollouts", "enqueue", "--store", server.url, "--tasks",
                                str(tasks), "--token", "wrong"], capsys)  # fmt: skip
        assert code == 1 and "token" in err and "Traceback" not in err
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    "command",
    [
        ["store", "stats"],
        ["rollouts", "list"],
        ["rollouts", "show", "ro-1"],
        ["resources", "list"],
        ["resources", "show"],
        ["export", "transitions", "--out", "x.jsonl"],
    ],
)
def test_read_commands_refuse_a_store_that_does_not_exist(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    missing = tmp_path / "typo.db"
    code, _, err = run_cli([*command, "--store", f"sqlite:///{missing}"], capsys)
    assert code == 1
    assert f"no store at sqlite:///{missing}" in err and "does not exist" in err
    assert not missing.exists()  # no empty file left behind
    # Without --store, the default file in the working directory is not created either.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FULMEN_STORE_URL", raising=False)
    code, _, err = run_cli(command, capsys)
    assert code == 1 and "(the default; no --store or $FULMEN_STORE_URL given)" in err
    assert not (tmp_path / "fulmen.db").exists()


def test_export_to_parquet_without_pyarrow_names_the_export_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tasks, _ = write_inputs(tmp_path)
    assert run_cli(["rollouts", "enqueue", "--store", url, "--tasks", str(tasks)], capsys)[0] == 0
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now fails
    code, _, err = run_cli(
        ["export", "sft", "--store", url, "--all-statuses", "--out", str(tmp_path / "x.parquet")],
        capsys,
    )
    assert code == 1
    assert "pip install 'fulmen[export]'" in err and "fulmen[train]" not in err


def test_missing_optional_module_is_one_line_naming_its_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    code, _, err = run_cli(["store", "stats", "--store", "postgresql://u@127.0.0.1:9/db"], capsys)
    assert code == 1
    assert err.strip() == (
        "fulmen: error: the 'asyncpg' package is missing (postgresql:// stores): "
        "pip install 'fulmen[postgres]'"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_doctor_checks_a_real_store_and_its_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'served.db'}", tmp_path / "s.log", token="tok")
    try:
        code, out, _ = run_cli(["doctor", "--store", server.url, "--token", "tok"], capsys)
        assert code == 0, out
        assert f"ok    store {server.url}: reachable (token accepted), 0 rollouts" in out
        assert "ok    python 3." in out and "torch" in out
        assert out.rstrip().endswith("all required checks passed")

        code, out, _ = run_cli(["doctor", "--store", server.url, "--token", "wrong"], capsys)
        assert code == 1
        (failed,) = [line for line in out.splitlines() if line.startswith("FAIL")]
        assert server.url in failed and "token" in failed
        assert "fix: pass the store's token with --token or $FULMEN_STORE_TOKEN" in out

        code, out, _ = run_cli(["doctor", "--store", server.url], capsys)
        assert code == 1 and "no store token set" in out
    finally:
        assert server.stop() == 0

    dead = f"http://127.0.0.1:{_free_port()}/v1"
    code, out, _ = run_cli(["doctor", "--engine", dead], capsys)
    assert code == 1
    assert f"FAIL  engine {dead}: unreachable" in out and "fix: start one: fulmen serve" in out


def test_doctor_reports_a_missing_extra_with_its_install_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # find_spec raises for a None entry
    code, out, _ = run_cli(["doctor"], capsys)
    assert code == 0  # optional: reported, not a failure
    assert "--    pyarrow: not installed (fulmen export ... --out F.parquet)" in out
    assert "fix: pip install 'fulmen[export]'" in out
    code, out, _ = run_cli(["doctor", "--need", "export"], capsys)
    assert code == 1  # asked for: now a failure
    assert "FAIL  pyarrow: not installed" in out and "1 check(s) failed" in out


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_names_every_subcommand(shell: str) -> None:
    script = completion_script(shell)
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    assert subcommands is not None
    assert {"train", "rollouts", "resources", "doctor", "completion"} <= set(subcommands)
    for name in subcommands:
        assert name in script, name
    for nested in ("enqueue", "--group-size", "--store"):
        assert nested in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_subcommands_and_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(["completion", "bash"], capsys)
    assert code == 0
    script = tmp_path / "fulmen.bash"
    script.write_text(out)

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        program = (
            f"source {script}; COMP_WORDS=(fulmen {line}); COMP_CWORD={len(words)}; "
            f'COMP_LINE="fulmen {line}"; _shtab_fulmen; printf "%s\\n" "${{COMPREPLY[@]}}"'
        )
        done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("roll") == ["rollouts"]
    assert complete("rollouts", "enq") == ["enqueue"]
    assert complete("rollouts", "enqueue", "--gr") == ["--group-size"]
    assert complete("doc") == ["doctor"]
