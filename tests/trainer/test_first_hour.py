"""What a new user meets first with `fulmen train` / `fulmen dev`: config errors reported before
anything starts, a console line when a step made no update, log lines that do not break the
progress bar, and `dev` numbering a rollout's calls from 1."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fulmen.algorithms.grpo.diagnose import no_update_reason
from fulmen.cli.main import main
from tests.prefork import python

AGENT = '''
from typing import Any

import fulmen
from openai import OpenAI


def tasks() -> list[dict[str, Any]]:
    return [{"id": "t0", "prompt": "Say a."}]


@fulmen.rollout
def constant(task: dict[str, Any], llm: fulmen.LLM) -> float:
    """A sync agent with one call and the same reward every time: GRPO has nothing to learn."""
    client = OpenAI(base_url=llm.base_url, api_key=llm.api_key)
    client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    client.close()
    return 0.5
'''


def write_project(tmp_path: Path, *, agent: str = "my_agent:constant", extra: str = "") -> Path:
    """An agent module next to a config file, as a user lays them out."""
    (tmp_path / "my_agent.py").write_text(AGENT)
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            model: tiny
            agent: {agent}
            run_dir: run
            data: {{train: "my_agent:tasks"}}
            rollouts:
              concurrency: 2
              timeout_s: 60
              train_sampling: {{temperature: 1.0, max_tokens: 4}}
              val_sampling: {{temperature: 0.0, max_tokens: 4}}
            algorithm: {{steps: 1, tasks_per_step: 1, group_size: 2}}
            """
        )
        + extra
    )
    return config


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "dev"])
def test_agent_outside_python_path_fails_before_the_engine_starts_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    config = write_project(tmp_path)
    code, err = run_cli([command, str(config)], capsys)
    assert code == 1
    assert "cannot import agent 'my_agent:constant'" in err
    assert "add `python_path: [.]` to the config" in err
    # Nothing was started: the engine writes its log into the run directory when it starts.
    assert not (tmp_path / "run").exists()


def test_wrong_agent_name_is_reported_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_project(tmp_path, agent="my_agent:constnat", extra="python_path: ['.']\n")
    code, err = run_cli(["train", str(config)], capsys)
    assert code == 1
    assert "constnat" in err and "check the name after ':'" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="rollouts get users of their own under root only")
@pytest.mark.parametrize("command", ["train", "dev"])
def test_a_command_agent_its_rollouts_could_not_read_fails_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    from fulmen.agent.command.sandbox import interpreter_for

    # pytest's tmp_path lies under a folder only root may enter, as /root or mktemp -d do.
    (tmp_path / "agent.py").write_text("print('never run')\n")
    config = write_project(tmp_path, extra="python_path: ['.']\n")
    agent = f'{{command: ["{interpreter_for(61000)}", "${{config_dir}}/agent.py"]}}'
    config.write_text(config.read_text().replace("my_agent:constant", agent))
    code, err = run_cli([command, str(config)], capsys)
    assert code == 1
    assert "'${config_dir}/agent.py' is out of reach of the rollouts' own users" in err
    assert "(mode 700) is not searchable by other users" in err
    assert "sandbox.user: runner" in err
    assert not (tmp_path / "run").exists()


def test_missing_python_path_entry_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_project(tmp_path, extra="python_path: [agents]\n")
    code, err = run_cli(["train", str(config)], capsys)
    assert code == 1
    assert f"python_path entry {tmp_path / 'agents'} is not a directory" in err


def test_missing_tasks_file_says_where_relative_paths_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_project(tmp_path, extra="python_path: ['.']\n")
    config.write_text(config.read_text().replace('"my_agent:tasks"', "data/tasks.jsonl"))
    code, err = run_cli(["train", str(config)], capsys)
    assert code == 1
    missing = tmp_path / "data" / "tasks.jsonl"  # resolved against the config's directory
    assert f"cannot read tasks from {missing}: No such file or directory" in err
    assert "relative to the config file" in err
    assert not (tmp_path / "run").exists()


def test_progress_bar_keeps_log_lines_off_the_bar_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from fulmen.algorithms.step_loop import progress_bar

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)  # the bar and the console handler both use it
    handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.addHandler(handler)
    log = logging.getLogger("fulmen.test.progress")
    log.setLevel(logging.INFO)
    try:
        with progress_bar(3, 0) as bar:
            bar.update(1)
            log.info("engine ready")
            bar.update(1)
    finally:
        root.removeHandler(handler)
    (line,) = [line for line in stream.getvalue().split("\n") if "engine ready" in line]
    # The bar is drawn with carriage returns; the log line must start a line of its own, not
    # follow the bar's text on the same line.
    assert line.split("\r")[-1] == "engine ready", repr(line)


def test_no_update_reasons_name_the_cause() -> None:
    same = no_update_reason(
        {"rollouts/finished": 8, "rollouts/failed": 0, "transitions": 8, "groups": 2,
         "skipped_zero_advantage": 8, "reward/mean": 1.0, "updated": 0.0}
    )  # fmt: skip
    assert "every rollout in each of the 2 task groups scored the same" in same
    assert "every advantage is 0" in same
    failed = no_update_reason({"rollouts/finished": 4, "rollouts/failed": 4, "transitions": 0})
    assert failed.startswith("all 4 rollouts failed")
    unselected = no_update_reason(
        {
            "rollouts/finished": 2,
            "transitions": 0,
            "transitions/calls": 4,
            "transitions/skipped_agent": 4,
        }
    )
    assert "algorithm.transitions.agents" in unselected
    dropped = no_update_reason(
        {"rollouts/finished": 2, "transitions": 2, "dropped_overlong": 2, "groups": 1}
    )
    assert "2 longer than grpo.max_seq_len" in dropped
    nonfinite = no_update_reason(
        {"transitions": 8, "skipped_nonfinite": 1, "grad_norm": float("nan")}
    )
    assert "gradient norm was not finite" in nonfinite


@pytest.mark.slow
def test_train_says_why_a_step_made_no_update_and_dev_numbers_calls_from_one(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    config = write_project(tmp_path, extra="python_path: ['.']\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def fulmen(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python(), "-m", "fulmen", *args],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    trained = fulmen("train", str(config))
    assert trained.returncode == 0, trained.stderr[-3000:]
    # The end of the run says where its time went (fulmen.trainer.diagnosis), once.
    both = trained.stdout + trained.stderr
    assert both.count("diagnosis: step time (1 steps") == 1, both[-3000:]
    lines = trained.stderr.split("\n")
    (line,) = [line for line in lines if "step 1 made no update" in line]
    assert "step 1 made no update: every rollout in each of the 1 task groups scored the same" in (
        line
    )
    # The warning is a line of its own, not glued after the progress bar's text.
    own_line = line.split("\r")[-1]
    assert re.match(r"\d{4}-\d\d-\d\d [\d:,]+ WARNING fulmen\.train: step 1", own_line), line

    # Started again, the finished run says so before starting anything.
    again = fulmen("train", str(config))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished its plan (1 steps of grpo" in again.stderr
    assert "--set algorithm.steps=2" in again.stderr
    assert "starting the builtin engine" not in again.stderr

    dev = fulmen("dev", str(config), "-n", "1")
    assert dev.returncode == 0, dev.stderr[-3000:]
    calls = [line.split()[1] for line in dev.stdout.splitlines() if line.strip().startswith("call")]
    assert calls == ["#1"], dev.stdout


@pytest.mark.parametrize(
    ("module_text", "agent", "expected"),
    [
        # A package the agent imports is missing: say which, and where to install it.
        (
            "import not_installed_pkg\n",
            "my_agent:constant",
            "imports 'not_installed_pkg', which is not installed in this environment",
        ),
        # The module raises while imported: its own line, not fulmen's frames.
        ("x = undefined_name\n", "my_agent:constant", "NameError: name 'undefined_name'"),
        # A misspelt module with python_path set: no python_path hint, the closest module.
        ("", "my_agnet:constant", "no module 'my_agnet' in python_path"),
    ],
)
def test_import_errors_point_at_the_cause(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    module_text: str,
    agent: str,
    expected: str,
) -> None:
    monkeypatch.delitem(sys.modules, "my_agent", raising=False)  # another test's project
    config = write_project(tmp_path, agent=agent, extra="python_path: ['.']\n")
    agent_file = tmp_path / "my_agent.py"
    agent_file.write_text(module_text + agent_file.read_text())
    code, err = run_cli(["train", str(config)], capsys)
    assert code == 1
    assert expected in err
    assert "fix the import error above" not in err and "Traceback" not in err
    if "undefined_name" in module_text or "not_installed" in module_text:
        assert f"(at {agent_file}:1)" in err
    if agent == "my_agnet:constant":
        assert "did you mean 'my_agent'?" in err and "add `python_path: [.]`" not in err


def test_progress_bar_shows_the_time_budget_left_when_there_is_one() -> None:
    import time

    from fulmen.algorithms.step_loop import step_postfix

    metrics = {"reward/mean": 0.25, "time/step_s": 31.97}
    assert step_postfix(metrics, float("inf")) == {"reward": "0.250", "step_s": "32.0"}
    figures = step_postfix(metrics, time.monotonic() + 90)
    assert figures["budget_left"] in ("1.5min", "1.4min"), figures
    assert step_postfix(metrics, time.monotonic() - 5)["budget_left"] == "0.0min"


class _Terminal(io.StringIO):
    """A captured stream that says it is a terminal, as a user's console does."""

    def isatty(self) -> bool:
        return True


def _draw(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch, *, budgeted: bool) -> str:
    from fulmen.algorithms.step_loop import progress_bar

    monkeypatch.setattr(sys, "stderr", stream)
    with progress_bar(1000, 0, budgeted=budgeted) as bar:
        bar.update(12)
        bar.set_postfix({"budget_left": "29.5min"})
    return stream.getvalue()


def test_progress_bar_draws_nothing_into_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # Redirected output (CI, nohup) held every frame of the bar, joined by carriage returns.
    assert _draw(io.StringIO(), monkeypatch, budgeted=False) == ""


def test_a_budgeted_bar_shows_no_estimate_to_its_step_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = _draw(_Terminal(), monkeypatch, budgeted=False)
    assert "12/1000" in plain and "<" in plain  # tqdm's own "elapsed<remaining"
    budgeted = _draw(_Terminal(), monkeypatch, budgeted=True).split("\r")[-1]
    assert "12/1000 steps" in budgeted and "budget_left=29.5min" in budgeted
    assert "<" not in budgeted, budgeted  # "29:40:53 left" for 1000 steps is no estimate
