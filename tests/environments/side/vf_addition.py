"""A single-turn verifiers taskset for the tests: sums, scored by two weighted reward functions."""

from __future__ import annotations

import verifiers.v1 as vf


class AdditionData(vf.TaskData):
    answer: int


class AdditionTask(vf.Task[AdditionData]):
    @vf.reward(weight=0.75)
    async def correct(self, trace: vf.Trace) -> float:
        return float(str(self.data.answer) in (trace.last_reply or ""))

    @vf.reward(weight=0.25)
    async def brief(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or "") <= 8)


class AdditionConfig(vf.TasksetConfig):
    num_tasks: int = 50
    split: str = "train"


class AdditionTaskset(vf.Taskset[AdditionTask, AdditionConfig]):
    def load(self) -> list[AdditionTask]:
        offset = 0 if self.config.split == "train" else 1000
        return [
            AdditionTask(
                AdditionData(prompt=f"What is {i + offset} + {i}?", answer=2 * i + offset),
                self.config.task,
            )
            for i in range(self.config.num_tasks)
        ]


__all__ = ["AdditionTaskset"]
