from __future__ import annotations

import json
from pathlib import Path

import pytest

from fulmen.errors import ConfigError
from fulmen.trainer.data import TaskSampler, load_tasks, task_id_of
from fulmen.trainer.metrics import MetricsLogger, console_line, read_metrics


def test_load_tasks_from_jsonl_and_callable(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps({"id": i}) for i in range(3)) + "\n", encoding="utf-8")
    assert load_tasks(str(path)) == [{"id": 0}, {"id": 1}, {"id": 2}]
    (tmp_path / "mytasks.py").write_text("def make():\n    return [1, 2]\n", encoding="utf-8")
    assert load_tasks("mytasks:make", python_path=[tmp_path]) == [1, 2]


def test_a_bad_line_of_a_tasks_file_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    good = [json.dumps({"id": i}) for i in range(3)]
    path.write_text("\n".join([good[0], "", good[1], '{"id": 3, "prompt": "x",}', good[2]]))
    with pytest.raises(ConfigError) as raised:
        load_tasks(str(path))
    assert raised.value.message.startswith(
        f"cannot read tasks from {path}: line 4 is not JSON (Expecting property name enclosed "
        'in double quotes at column 25: \'{"id": 3, "prompt": "x",}\')'
    )


def test_load_tasks_errors_name_the_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.jsonl"):
        load_tasks(str(tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match="no_such_module"):
        load_tasks("no_such_module:f")
    with pytest.raises(ConfigError, match="module:callable"):
        load_tasks("tasks.csv")
    with pytest.raises(ConfigError, match="no tasks"):
        load_tasks([])


def test_sampler_covers_each_epoch_once_and_is_reproducible() -> None:
    tasks = list(range(10))
    sampler = TaskSampler(tasks, seed=3)
    first_epoch = [t for step in range(5) for _, t in sampler.batch(step, 2)]
    assert sorted(first_epoch) == tasks
    assert [t for _, t in TaskSampler(tasks, seed=3).batch(7, 4)] == [
        t for _, t in sampler.batch(7, 4)
    ]
    assert [t for _, t in TaskSampler(tasks, seed=4).batch(0, 10)] != first_epoch


def test_task_id_of() -> None:
    assert task_id_of({"id": 7}, 0) == "7"
    assert task_id_of({"name": "x"}, 3) == "task-3"
    assert task_id_of({"name": "x"}, 3, key="name") == "x"


def test_metrics_logger_writes_jsonl(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path) as metrics:
        metrics.log(1, {"reward/mean": 0.5, "loss": float("nan")}, echo=False)
        metrics.log(2, {"reward/mean": 0.75}, echo=False)
    with (tmp_path / "metrics.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"step": 3, "rew')  # a torn line from a crash
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["loss"] is None and records[1]["reward/mean"] == 0.75


def test_console_line_shows_the_figures_of_every_algorithm() -> None:
    grpo = {"reward/mean": 0.5, "task/success": 0.25, "loss": 0.125, "time/step_s": 3.0}
    assert console_line(4, grpo) == (
        "step 4: reward/mean=0.5 task/success=0.25 loss=0.125 time/step_s=3"
    )
    # an APO round: its best validation score, the beam's mean and size, its candidates
    apo = {
        "apo/best_score": 0.75,
        "apo/beam_mean_score": 0.625,
        "apo/beam_size": 2.0,
        "apo/candidates": 4.0,
        "apo/rollouts": 48.0,
        "time/round_s": 61.5,
    }
    assert console_line(2, apo, labels={"stage": 1, "algorithm": "apo"}) == (
        "step 2 [apo]: apo/best_score=0.75 apo/beam_mean_score=0.625 apo/beam_size=2 "
        "apo/candidates=4 time/round_s=61.5"
    )
    demos = {"demos/candidate": 3.0, "demos/score": 0.5, "demos/best_score": 0.5}
    assert console_line(3, demos) == "step 3: demos/score=0.5 demos/best_score=0.5"
    sft = {"sft/kept_fraction": 0.25, "sft/logprob_gain": 0.5, "loss": 1.5}
    assert console_line(1, sft) == "step 1: loss=1.5 sft/kept_fraction=0.25 sft/logprob_gain=0.5"
    assert console_line(5, {"unwatched": 1.0}) == "step 5"


def test_metrics_logger_writes_tensorboard_events(tmp_path: Path) -> None:
    pytest.importorskip("tensorboardX")
    with MetricsLogger(tmp_path, tensorboard=True) as metrics:
        metrics.log(1, {"reward/mean": 0.5, "loss": 0.25}, echo=False)
        metrics.log(2, {"reward/mean": 0.75, "loss": float("nan")}, echo=False)
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    # What TensorBoard would plot: (tag, step, value) of every scalar, non-finite ones left out.
    assert sorted(_scalars(events[0])) == [
        ("loss", 1, 0.25),
        ("reward/mean", 1, 0.5),
        ("reward/mean", 2, 0.75),
    ]


def _scalars(path: Path) -> list[tuple[str, int, float]]:
    """Read an event file back: TFRecord framing (length, crc, data, crc), ``Event`` protos."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    data = path.read_bytes()
    out: list[tuple[str, int, float]] = []
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + 12  # 8 bytes of length, 4 of its masked CRC
        event = Event.FromString(data[start : start + length])
        offset = start + length + 4  # the data's masked CRC
        out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    assert offset == len(data), "truncated event file"
    return out


def test_refill_draws_other_tasks_reproducibly_without_moving_the_epoch_order() -> None:
    tasks = list(range(10))
    sampler = TaskSampler(tasks, seed=3)
    before = [sampler.batch(step, 2) for step in range(5)]
    step_tasks = {i for i, _ in sampler.batch(2, 2)}
    refill = sampler.refill(2, 1, 3, step_tasks)
    assert len(refill) == 3 and not {i for i, _ in refill} & step_tasks
    assert refill == TaskSampler(tasks, seed=3).refill(2, 1, 3, step_tasks)
    assert refill != sampler.refill(2, 2, 3, step_tasks)  # another draw, other tasks
    assert [sampler.batch(step, 2) for step in range(5)] == before
    # the list runs out: fewer come back, never an excluded one
    assert sampler.refill(0, 1, 5, set(range(8))) in ([(8, 8), (9, 9)], [(9, 9), (8, 8)])
