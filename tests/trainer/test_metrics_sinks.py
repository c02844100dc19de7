"""Metrics sinks against their real libraries: TensorBoard event files, a W&B offline run, an
MLflow file store; per-name reward means; the config's sink selection."""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from fulmen.errors import ConfigError
from fulmen.tracing import semconv
from fulmen.trainer.config import load_config
from fulmen.trainer.metrics import MetricsLogger, read_metrics
from fulmen.trainer.sinks import open_sinks
from fulmen.trainer.sinks.config import MetricsConfig, MlflowSettings, WandbSettings
from fulmen.trainer.sinks.mlflow_sink import RUN_ID_TAG, mlflow_key
from fulmen.transitions import build_trajectory
from fulmen.transitions.named_rewards import named_reward_means, secondary_rewards
from fulmen.types import Reward, Span
from tests.prefork import python
from tests.transitions.factories import call

RUN_CONFIG = {"model": "tiny", "algorithm": {"name": "grpo", "lr": 1e-5}, "data": {"val": None}}

STEPS: list[dict[str, float]] = [
    {"reward/mean": 0.25, "loss": 1.5, "kl": float("nan"), "train/reward/format": 0.5},
    {"reward/mean": 0.75, "loss": 0.5, "kl": 0.01, "train/reward/format": 1.0},
]


def _log_steps(metrics: MetricsLogger, steps: list[dict[str, float]], first: int = 1) -> None:
    for i, values in enumerate(steps):
        metrics.log(first + i, values, echo=False)


# -- TensorBoard --------------------------------------------------------------------------------


def _tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboardX.proto.event_pb2 import Event  # pyright: ignore[reportAttributeAccessIssue]

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):  # TFRecord: length, its CRC, the event, its CRC
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_sink_gets_the_finite_scalars(tmp_path: Path) -> None:
    config = MetricsConfig(sinks=["tensorboard"])
    sinks = open_sinks(config, run_dir=tmp_path, run_id="r1", run_config=RUN_CONFIG)
    with MetricsLogger(tmp_path, sinks=sinks) as metrics:
        _log_steps(metrics, STEPS)
    scalars = _tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars["reward/mean"] == [(1, 0.25), (2, 0.75)]
    assert scalars["train/reward/format"] == [(1, 0.5), (2, 1.0)]
    assert [step for step, _ in scalars["kl"]] == [2]  # the NaN of step 1 is left out
    # The JSONL file still has every step, the NaN as null.
    assert [r["kl"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [None, 0.01]


def test_tensorboard_true_still_opens_the_tensorboard_sink() -> None:
    assert MetricsConfig().selected(tensorboard=True) == ["tensorboard"]
    assert MetricsConfig(sinks=["tensorboard"]).selected(tensorboard=True) == ["tensorboard"]


# -- Weights & Biases ----------------------------------------------------------------------------


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """W&B in offline mode with every file of it under ``tmp_path/wandb-home``."""
    pytest.importorskip("wandb")
    home = tmp_path / "wandb-home"
    home.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(home))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(home / "data"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield home
    import wandb

    wandb.teardown()  # the wandb-core service this process started


def _offline_run_file(home: Path, run_id: str) -> Path:
    """The run's ``.wandb`` file, once W&B's service has written all of it.

    ``finish`` can return before the service has flushed the file; a process that ends (as
    ``fulmen train`` does) waits for it at exit, and ``wandb.teardown`` does so here.
    """
    import wandb

    wandb.teardown()
    (run_file,) = home.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")
    return run_file


def _wandb_records(run_file: Path) -> list[Any]:
    """Read the records of an offline run's ``.wandb`` file (W&B's LevelDB-style log)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending = 32768, 7, b""
    records: list[Any] = []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # full/first, middle/last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()  # pyright: ignore[reportAttributeAccessIssue]
            record.ParseFromString(pending)
            records.append(record)
    return records


def _wandb_history(records: list[Any]) -> list[dict[str, Any]]:
    # An item names its key in ``key`` or, split at the slashes, in ``nested_key``.
    return [
        {
            item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for item in r.history.item
        }
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]


def test_wandb_sink_logs_metrics_and_config_to_an_offline_run(
    tmp_path: Path, wandb_offline: Path
) -> None:
    config = MetricsConfig(sinks=["wandb"], wandb=WandbSettings(project="fulmen-test"))
    run_dir = tmp_path / "run"
    sinks = open_sinks(
        config,
        run_dir=run_dir,
        run_id="3f2a9c01",
        run_config=RUN_CONFIG,
        environ={"WANDB_DIR": str(wandb_offline)},  # as Settings.environ holds it
    )
    with MetricsLogger(run_dir, sinks=sinks) as metrics:
        _log_steps(metrics, STEPS)
    records = _wandb_records(_offline_run_file(wandb_offline, "3f2a9c01"))
    history = _wandb_history(records)
    assert [h["_step"] for h in history] == [1, 2]
    assert [h["reward/mean"] for h in history] == [0.25, 0.75]
    assert [h["train/reward/format"] for h in history] == [0.5, 1.0]
    assert "kl" not in history[0]  # NaN left out
    assert history[1]["kl"] == 0.01
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == "3f2a9c01"
    assert run.project == "fulmen-test"
    logged = {
        item.key or "/".join(item.nested_key): json.loads(item.value_json)
        for item in run.config.update
    }
    assert logged["algorithm"] == {"name": "grpo", "lr": 1e-5}
    assert logged["model"] == "tiny"
    exits = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
    assert exits == [0]


def test_wandb_run_of_a_failed_run_exits_nonzero(tmp_path: Path, wandb_offline: Path) -> None:
    config = MetricsConfig(sinks=["wandb"])
    run_dir = tmp_path / "run"
    sinks = open_sinks(config, run_dir=run_dir, run_id="abc", run_config=RUN_CONFIG, environ={})
    with pytest.raises(RuntimeError), MetricsLogger(tmp_path / "run", sinks=sinks) as metrics:
        metrics.log(1, {"loss": 1.0}, echo=False)
        raise RuntimeError("the run failed")
    # Without WANDB_DIR in the run's environment, W&B's files go under the run folder.
    records = _wandb_records(_offline_run_file(run_dir, "abc"))
    assert [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"] == [1]


# -- MLflow --------------------------------------------------------------------------------------


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A local MLflow file store (MLflow 3 opens one only when this variable allows it)."""
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return (tmp_path / "mlruns").as_uri()


def _mlflow_sinks(uri: str, run_dir: Path, run_id: str, run_config: Mapping[str, Any]) -> Any:
    settings = MlflowSettings(tracking_uri=uri, experiment="fulmen-test")
    config = MetricsConfig(sinks=["mlflow"], mlflow=settings)
    return open_sinks(config, run_dir=run_dir, run_id=run_id, run_config=run_config)


def test_mlflow_sink_logs_metrics_and_params_and_resumes(
    tmp_path: Path, mlflow_store: str, caplog: pytest.LogCaptureFixture
) -> None:
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    with MetricsLogger(run_dir, sinks=_mlflow_sinks(mlflow_store, run_dir, "r1", RUN_CONFIG)) as m:
        _log_steps(m, [*STEPS, {"train/reward/a:b//c": 0.5}])
    client = MlflowClient(tracking_uri=mlflow_store)
    experiment = client.get_experiment_by_name("fulmen-test")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "run"
    assert run.data.tags[RUN_ID_TAG] == "r1"
    assert run.data.params["algorithm.lr"] == "1e-05"
    assert run.data.params["model"] == "tiny"
    assert "data.val" not in run.data.params  # None has no param
    mlflow_id = run.info.run_id

    def history(key: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in client.get_metric_history(mlflow_id, key)]

    assert history("reward/mean") == [(1, 0.25), (2, 0.75)]
    assert history("train/reward/format") == [(1, 0.5), (2, 1.0)]
    assert history("kl") == [(2, 0.01)]  # the NaN of step 1 left out
    assert history(mlflow_key("train/reward/a:b//c")) == [(3, 0.5)]

    # The same fulmen run started again logs on in the same MLflow run; its changed
    # hyperparameter is reported, not logged over the first (MLflow params never change).
    changed = {**RUN_CONFIG, "algorithm": {"name": "grpo", "lr": 2e-5}, "seed": 3}
    with (
        caplog.at_level(logging.WARNING, logger="fulmen.train"),
        MetricsLogger(run_dir, sinks=_mlflow_sinks(mlflow_store, run_dir, "r1", changed)) as m,
    ):
        assert client.get_run(mlflow_id).info.status == "RUNNING"
        _log_steps(m, [{"reward/mean": 1.0}], first=4)
    (again,) = client.search_runs([experiment.experiment_id])
    assert again.info.run_id == mlflow_id
    assert history("reward/mean") == [(1, 0.25), (2, 0.75), (4, 1.0)]
    assert again.data.params["algorithm.lr"] == "1e-05"
    assert again.data.params["seed"] == "3"
    assert "algorithm.lr" in caplog.text


def test_mlflow_run_of_a_failed_run_is_failed(tmp_path: Path, mlflow_store: str) -> None:
    from mlflow.tracking import MlflowClient

    sinks = _mlflow_sinks(mlflow_store, tmp_path, "r2", RUN_CONFIG)
    with pytest.raises(KeyError), MetricsLogger(tmp_path, sinks=sinks):
        raise KeyError("boom")
    client = MlflowClient(tracking_uri=mlflow_store)
    experiment = client.get_experiment_by_name("fulmen-test")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED"


def test_mlflow_sink_that_cannot_start_is_a_config_error(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    with pytest.raises(ConfigError, match="metrics sink mlflow could not start"):
        _mlflow_sinks("unknownscheme://nowhere", tmp_path, "r3", RUN_CONFIG)


def test_mlflow_keys_are_names_mlflow_accepts() -> None:
    assert mlflow_key("train/reward/format") == "train/reward/format"
    assert mlflow_key("train/reward/a:b//c") == "train/reward/a_b/_/c"
    assert mlflow_key("val/reward/..") == "val/reward/__"
    assert len(mlflow_key("x" * 300)) == 250


# -- the metrics writer --------------------------------------------------------------------------


class _BrokenSink:
    """A sink whose tracking server has gone away."""

    def __init__(self) -> None:
        self.closed_failed: bool | None = None

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        raise ConnectionError("tracking server unreachable")

    def close(self, *, failed: bool = False) -> None:
        self.closed_failed = failed


def test_a_failing_sink_is_warned_about_once_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = _BrokenSink()
    with (
        caplog.at_level(logging.WARNING, logger="fulmen.train"),
        MetricsLogger(tmp_path, sinks=[broken]) as metrics,
    ):
        _log_steps(metrics, STEPS)
    warnings = [r for r in caplog.records if "metrics sink _BrokenSink" in r.getMessage()]
    assert len(warnings) == 1
    assert "tracking server unreachable" in warnings[0].getMessage()
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 2
    assert broken.closed_failed is False


# -- the config ----------------------------------------------------------------------------------


def _config_file(tmp_path: Path, **extra: Any) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "t1", "question": "q"}\n', encoding="utf-8")
    raw = {"model": "tiny", "agent": "tests.x:agent", "data": {"train": str(tasks)}, **extra}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_config_selects_sinks_with_their_settings(tmp_path: Path) -> None:
    config = load_config(
        _config_file(
            tmp_path,
            metrics={
                "sinks": ["tensorboard", "wandb", "mlflow"],
                "wandb": {"project": "p", "entity": "e", "mode": "offline"},
                "mlflow": {"tracking_uri": "http://127.0.0.1:5000", "experiment": "x"},
            },
        )
    )
    assert config.metrics.sinks == ["tensorboard", "wandb", "mlflow"]
    assert config.metrics.wandb == WandbSettings(project="p", entity="e", mode="offline")
    assert config.metrics.mlflow is not None
    assert config.metrics.mlflow.experiment == "x"


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"sinks": ["neptune"]}, "metrics.sinks.0"),
        ({"sinks": ["wandb", "wandb"]}, "names a sink twice"),
        ({"wandb": {"project": "p"}}, "metrics.wandb has no effect unless metrics.sinks"),
        ({"sinks": ["mlflow"], "mlflow": {"experimnt": "x"}}, "did you mean"),
    ],
)
def test_config_refuses_bad_metrics_sections(
    tmp_path: Path, metrics: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_config_file(tmp_path, metrics=metrics))


@pytest.mark.parametrize(
    ("extra", "module", "sink"),
    [
        ({"metrics": {"sinks": ["wandb"]}}, "wandb", "wandb"),
        ({"metrics": {"sinks": ["mlflow"]}}, "mlflow", "mlflow"),
        ({"metrics": {"sinks": ["tensorboard"]}}, "tensorboardX", "tensorboard"),
        ({"tensorboard": True}, "tensorboardX", "tensorboard"),
    ],
)
def test_a_sink_without_its_library_is_refused_when_the_config_is_read(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, Any],
    module: str,
    sink: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: find_spec says None
    with pytest.raises(ConfigError, match=rf"pip install 'fulmen\[{sink}\]'"):
        load_config(_config_file(tmp_path, **extra))


# -- per-name reward means -----------------------------------------------------------------------


def _reward_span(seq: int, values: dict[str, float], primary: str, rollout_id: str) -> Span:
    return Span(
        rollout_id=rollout_id,
        attempt_id=f"{rollout_id}-a1",
        trace_id="t" * 32,
        span_id=f"s{seq:015d}",
        name=semconv.SPAN_REWARD,
        attributes={
            semconv.REWARD_NAMES: list(values),
            semconv.REWARD_VALUES: list(values.values()),
            semconv.REWARD_PRIMARY: primary,
            semconv.REWARD_SOURCE: "return",
        },
        start_time=float(seq),
        end_time=float(seq),
        sequence=seq,
    )


def test_trajectories_carry_secondary_rewards_and_their_means_reach_the_metrics(
    tmp_path: Path,
) -> None:
    first = build_trajectory(
        rollout_id="r1",
        calls=[call(1, [1, 2], [3], rollout_id="r1")],
        spans=[_reward_span(2, {"correct": 1.0, "format": 0.5, "length": 0.2}, "correct", "r1")],
    )
    # A reward posted later overrides a value by name.
    posted = Reward(
        key="k",
        rollout_id="r2",
        values={"format": 0.0},
        sequence=3,
        created_at=datetime.now(UTC),
    )
    second = build_trajectory(
        rollout_id="r2",
        calls=[call(1, [1, 2], [3], rollout_id="r2")],
        spans=[_reward_span(2, {"correct": 0.0, "format": 1.0}, "correct", "r2")],
        rewards=[posted],
    )
    assert first.final_reward == 1.0
    assert first.secondary_rewards == {"format": 0.5, "length": 0.2}
    assert second.secondary_rewards == {"format": 0.0}
    means = named_reward_means("train/reward", [t.secondary_rewards for t in (first, second)])
    assert means == {"train/reward/format": 0.25, "train/reward/length": 0.2}
    with MetricsLogger(tmp_path) as metrics:
        metrics.log(1, {"reward/mean": 0.5, **means}, echo=False)
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    assert record["train/reward/format"] == 0.25


def test_secondary_rewards_leave_out_the_latest_primary() -> None:
    spans = [
        _reward_span(1, {"reward": 1.0, "style": 0.3}, "reward", "r1"),
        _reward_span(2, {"reward": 0.5, "judge": 0.7}, "judge", "r1"),
    ]
    # The latest primary is "judge": the earlier primary "reward" is a secondary value now.
    assert secondary_rewards(spans) == {"reward": 0.5, "style": 0.3}
    assert named_reward_means("val/reward", []) == {}


# -- a whole run ---------------------------------------------------------------------------------

NAMED_AGENT = '''
from typing import Any

import fulmen
from openai import OpenAI


def tasks() -> list[dict[str, Any]]:
    return [{"id": "t0", "prompt": "Say a."}, {"id": "t1", "prompt": "Say b."}]


@fulmen.rollout
def graded(task: dict[str, Any], llm: fulmen.LLM) -> dict[str, float]:
    """One call; the reward and a named secondary reward that differs by task."""
    client = OpenAI(base_url=llm.base_url, api_key=llm.api_key)
    client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    client.close()
    return {"reward": 0.5, "format": 1.0 if task["id"] == "t0" else 0.0}
'''


@pytest.mark.slow
def test_train_logs_to_mlflow_under_the_run_id_with_named_reward_means(
    tmp_path: Path, mlflow_store: str
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("openai")
    from mlflow.tracking import MlflowClient

    (tmp_path / "my_agent.py").write_text(NAMED_AGENT)
    uri = mlflow_store
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": "tiny",
                "agent": "my_agent:graded",
                "run_dir": "run",
                "python_path": ["."],
                "data": {"train": "my_agent:tasks", "val": "my_agent:tasks"},
                "validation": {"every": 1},
                "rollouts": {
                    "concurrency": 2,
                    "timeout_s": 60,
                    "train_sampling": {"temperature": 1.0, "max_tokens": 4},
                    "val_sampling": {"temperature": 0.0, "max_tokens": 4},
                },
                "algorithm": {"steps": 1, "tasks_per_step": 1, "group_size": 2},
                "metrics": {"sinks": ["mlflow"], "mlflow": {"tracking_uri": uri}},
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "MLFLOW_ALLOW_FILE_STORE": "true",
    }
    trained = subprocess.run(
        [python(), "-m", "fulmen", "train", str(config), "--no-dashboard"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    validated = [r for r in records if "val/reward_mean" in r]
    assert [r["val/reward/format"] for r in validated] == [0.5, 0.5]  # 1 and 0 over 2 tasks
    (step,) = [r for r in records if "reward/mean" in r]
    assert step["train/reward/format"] in (0.0, 1.0)  # one task a step: its rollouts agree

    run_id = json.loads((tmp_path / "run" / "state.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("fulmen")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags[RUN_ID_TAG] == run_id
    assert run.info.status == "FINISHED"
    assert run.data.params["model"] == "tiny"
    assert run.data.params["algorithm.group_size"] == "2"
    history = client.get_metric_history(run.info.run_id, "val/reward/format")
    assert [(m.step, m.value) for m in history] == [(r["step"], 0.5) for r in validated]
    assert client.get_metric_history(run.info.run_id, "reward/mean")


def test_values_that_may_be_secrets_never_reach_a_tracking_tool() -> None:
    from fulmen.trainer.sinks import HIDDEN, shareable_config

    config = {
        "model": "tiny",
        "agent": {"command": ["node", "a.mjs"], "env": {"OPENAI_API_KEY": "sk-live"}},
        "judges": [{"api_key": "sk-judge", "model": "m"}],
        "store_token": "t0k",
        "algorithm": {"grpo": {"learning_rate": 0.01}, "max_tokens": 8},
        "keys_seen": 3,
    }
    shared = shareable_config(config)
    assert shared["agent"] == {"command": ["node", "a.mjs"], "env": HIDDEN}
    assert shared["judges"] == [{"api_key": HIDDEN, "model": "m"}]
    assert shared["store_token"] == HIDDEN
    # hyperparameters stay, names that only look alike too
    assert shared["algorithm"] == config["algorithm"] and shared["keys_seen"] == 3
    assert "sk-" not in repr(shared) and "t0k" not in repr(shared)
