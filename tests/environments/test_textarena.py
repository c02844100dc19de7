"""TextArena through fulmen: its games as multi-turn rollouts rewarded by the game itself.

Scripted models (real HTTP servers on 127.0.0.1) prove the loop: a bisecting player wins
Guess the Number and gets the game's win reward; in Tic Tac Toe the fixed opponent's moves
come from its own endpoint, never from the policy's. A GRPO run on the tiny model stores every
turn at token level, and replaying the recorded replies into the same seeded game gives the
stored reward back: the reward is the game's own.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter, deque
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textarena")

from fulmen.agent.context import LLM
from fulmen.environments.config import EnvironmentAdapter, TextArenaConfig
from fulmen.environments.textarena import TextArenaAgent, make_game, textarena_tasks
from fulmen.errors import ConfigError
from tests.gateway.scripted_upstream import Reply, Script, create_upstream_app, serve_app

EXAMPLE = Path(__file__).parents[2] / "examples" / "textarena" / "config.yaml"


def _config(**raw: Any) -> TextArenaConfig:
    config = EnvironmentAdapter.validate_python({"library": "textarena", **raw})
    assert isinstance(config, TextArenaConfig)
    return config


def test_held_out_games_use_other_seeds() -> None:
    config = _config(game="GuessTheNumber-v0", train_size=30, val_size=10, seed=4)
    train, val = textarena_tasks(config, "train"), textarena_tasks(config, "val")
    seeds = [t["textarena"]["seed"] for t in train + val]
    assert len(set(seeds)) == 40
    assert textarena_tasks(config, "val") == val


def test_games_that_cannot_be_made_here_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"no game 'GuessTheNumbr-v0'.*GuessTheNumber-v0"):
        make_game("GuessTheNumbr-v0", {})
    # Wordle needs NLTK's word list, which it downloads at run time: not here.
    with pytest.raises(ConfigError, match="cannot make 'Wordle-v0'"):
        textarena_tasks(_config(game="Wordle-v0"), "train")


def _bisect(body: dict[str, Any]) -> Reply:
    """Guess the Number's optimal player: halve the range the hints leave."""
    text = body["messages"][-1]["content"]
    low, high = 1, 20
    pattern = r"\[Player\] My guess: \[(\d+)\]\s*\[GAME\] The target number is (\w+)"
    for guess, hint in re.findall(pattern, text):
        if hint == "higher":
            low = max(low, int(guess) + 1)
        else:
            high = min(high, int(guess) - 1)
    return Reply(content=f"My guess: [{(low + high) // 2}]")


def _llm(url: str) -> LLM:
    return LLM(name="llm", base_url=f"{url}/v1", model="tiny-model", api_key="k")


def _play(task: dict[str, Any], *scripts: Script) -> tuple[float, list[list[dict[str, Any]]]]:
    async def run() -> float:
        async with contextlib_stack(scripts) as urls:
            if len(urls) > 1:
                task["textarena"]["opponent"] = {"base_url": f"{urls[1]}/v1", "model": "rival"}
            return await TextArenaAgent().training_rollout(task, _llm(urls[0]))

    reward = asyncio.run(run())
    return reward, [s.requests for s in scripts]


def contextlib_stack(scripts: tuple[Script, ...]) -> Any:
    import contextlib

    @contextlib.asynccontextmanager
    async def serve() -> Any:
        async with contextlib.AsyncExitStack() as stack:
            urls = [
                await stack.enter_async_context(serve_app(create_upstream_app(s))) for s in scripts
            ]
            yield urls

    return serve()


def test_a_winning_player_gets_the_games_win_reward_over_several_turns() -> None:
    task = textarena_tasks(_config(game="GuessTheNumber-v0", train_size=3, val_size=0), "train")[2]
    reward, (requests,) = _play(task, Script(reply_for=_bisect))
    assert reward == 1.0
    assert 2 <= len(requests) <= 5  # bisection finds 1..20 in at most 5 guesses
    # Each turn shows TextArena's own observation: the history of guesses and hints so far.
    assert requests[-1]["messages"][-1]["content"].count("[Player]") == len(requests) - 1


def test_two_player_game_against_the_fixed_opponent_endpoint() -> None:
    task = textarena_tasks(_config(game="TicTacToe-v0", train_size=1, val_size=0), "train")[0]
    policy = Script(replies=deque(Reply(content=f"[{c}]") for c in (4, 5, 3)))
    rival = Script(replies=deque(Reply(content=f"[{c}]") for c in (0, 1)))
    reward, (ours, theirs) = _play(task, policy, rival)
    assert reward == 1.0  # three in a row: 3, 4, 5
    assert (len(ours), len(theirs)) == (3, 2)
    assert {r["model"] for r in theirs} == {"rival"}


def test_a_two_player_game_without_opponent_is_refused() -> None:
    task = textarena_tasks(_config(game="TicTacToe-v0", train_size=1, val_size=0), "train")[0]
    with pytest.raises(ConfigError, match="cannot start with one player"):
        _play(task, Script())


def _replay(task: dict[str, Any], actions: list[str]) -> float:
    """The game's own reward for playing ``actions`` in the task's seeded game."""
    spec = task["textarena"]
    env = make_game(spec["game"], spec["kwargs"])
    env.reset(num_players=1, seed=spec["seed"])
    for action in actions:
        env.get_observation()
        done, _ = env.step(action)
        if done:
            break
    rewards, _ = env.close()
    return float(rewards[0])


@pytest.mark.slow
def test_example_trains_on_the_tiny_model_turn_by_turn(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from fulmen.store import open_store
    from fulmen.store.reading import iter_rollouts
    from fulmen.trainer.config import load_config
    from fulmen.trainer.metrics import read_metrics
    from fulmen.trainer.trainer import Trainer
    from fulmen.transitions.trajectory import load_attempt
    from fulmen.types import RolloutQuery, RolloutStatus

    overrides = [
        f"run_dir={tmp_path}",
        "model=tiny",
        "algorithm.steps=1",
        "algorithm.tasks_per_step=2",
        "algorithm.group_size=2",
        "environment.train_size=8",
        "environment.val_size=0",
        "validation=null",
        "rollouts.concurrency=4",
        "engine.max_batch=4",
    ]
    config = load_config(EXAMPLE, overrides=overrides)
    Trainer(config).fit()
    (step,) = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "time/step_s" in r]
    assert step["rollouts/finished"] == 4 and step["rollouts/failed"] == 0

    async def rollouts() -> list[tuple[Any, Any, Any]]:
        out = []
        async with open_store(f"sqlite:///{tmp_path / 'store.db'}", watchdog_interval=None) as s:
            async for rollout in iter_rollouts(s, RolloutQuery(limit=100)):
                assert rollout.status is RolloutStatus.SUCCEEDED, rollout.error
                records = await load_attempt(s, rollout.rollout_id)
                out.append((rollout, records.calls, records.final_reward))
        return out

    found = asyncio.run(rollouts())
    turns = Counter(len(calls) for _, calls, _ in found)
    assert sum(turns.values()) == 4 and max(turns) >= 2  # games of several turns
    for rollout, calls, reward in found:
        assert all(c.is_token_level and c.choices[0].token_ids for c in calls)
        actions = [c.response["choices"][0]["message"]["content"] or "" for c in calls]
        assert reward == _replay(rollout.input, actions)
