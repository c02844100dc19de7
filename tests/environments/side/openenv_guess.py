"""A small OpenEnv environment for the tests, written and served with OpenEnv's own API.

Guess a number between 1 and 10 in at most four steps. Each step's reward is how close the
guess was (``1 - |guess - target| / 10``, 0 for a reply with no number), so the rewards of a
random model vary from step to step. Run: ``python -m tests.environments.side.openenv_guess
--port 8000`` (it listens on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import random
import re
from typing import Any

from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

MAX_STEPS = 4


class GuessAction(Action):
    message: str


class GuessObservation(Observation):
    prompt: str


def target_of(seed: int | None) -> int:
    return random.Random(seed).randint(1, 10)


def step_reward(message: str, target: int) -> float:
    found = re.search(r"\d+", message)
    return 0.0 if found is None else 1.0 - min(abs(int(found.group()) - target), 10) / 10


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._target = 1

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **_: Any
    ) -> GuessObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        self._target = target_of(seed)
        return GuessObservation(prompt="Guess my number between 1 and 10.", done=False, reward=0.0)

    def step(
        self, action: GuessAction, timeout_s: float | None = None, **_: Any
    ) -> GuessObservation:
        self._state.step_count += 1
        reward = step_reward(action.message, self._target)
        done = reward == 1.0 or self._state.step_count >= MAX_STEPS
        hint = "correct" if reward == 1.0 else "wrong"
        return GuessObservation(prompt=f"{action.message!r} is {hint}.", done=done, reward=reward)

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=64
)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
