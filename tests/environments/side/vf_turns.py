"""A multi-turn verifiers environment for the tests: a scripted user asks for words, turn by turn.

The env's own ``run`` drives the conversation (verifiers' ``interaction``): each user turn asks
the model to repeat a word. Two weighted reward functions: the share of turns whose reply
holds its word (weight 1), and the share of replies of at most 20 characters (weight 0.5).
"""

from __future__ import annotations

import verifiers.v1 as vf

WORDS = ("apple", "river", "stone", "cloud", "maple", "tiger")


class TurnsData(vf.TaskData):
    words: list[str]


def replies_of(trace: vf.Trace) -> list[str]:
    return [m.content or "" for m in trace.assistant_messages]


def repeated_score(words: list[str], replies: list[str]) -> float:
    return sum(w in r for w, r in zip(words, replies, strict=False)) / len(words)


def brief_score(replies: list[str]) -> float:
    return sum(len(r) <= 20 for r in replies) / max(len(replies), 1)


class TurnsTask(vf.Task[TurnsData]):
    @vf.reward(weight=1.0)
    async def repeated(self, trace: vf.Trace) -> float:
        return repeated_score(self.data.words, replies_of(trace))

    @vf.reward(weight=0.5)
    async def brief(self, trace: vf.Trace) -> float:
        return brief_score(replies_of(trace))


class TurnsEnv(vf.SingleAgentEnv):
    async def run(self, task: TurnsTask, agents: vf.Agents) -> None:
        async with agents.agent.interaction(task) as interaction:
            for word in task.data.words:
                if (await interaction.turn(f"Say the word {word}.")).terminated:
                    break


class TurnsTaskset(vf.Taskset[TurnsTask, vf.TasksetConfig]):
    def load(self) -> list[TurnsTask]:
        return [
            TurnsTask(
                TurnsData(prompt=None, words=[WORDS[i % 6], WORDS[(i + 1) % 6]]), self.config.task
            )
            for i in range(24)
        ]


__all__ = ["TurnsEnv", "TurnsTaskset"]
