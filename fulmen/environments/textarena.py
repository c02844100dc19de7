"""TextArena: its games as multi-turn environments, rewarded by the game's own outcome.

A task is one game: the env id, its constructor arguments, the seed and the seat the policy
plays. ``TextArenaAgent`` runs TextArena's own loop (``get_observation`` → ``step`` until the
game is done, then ``close`` for the rewards) with the game's default wrappers, so the model
sees exactly what a TextArena agent sees; each turn of the policy is one model call through the
rollout's recorded endpoint, and a two-player game's other seat is the fixed opponent model
(``TextArenaOpponent``), called directly and never recorded or trained.

The held-out split uses other seeds than the training split; a game whose seeds make few
different games (Guess the Number between 1 and 20) repeats games across seeds.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Literal, cast

from fulmen.agent.api import Agent
from fulmen.chat_call import post_chat
from fulmen.environments.chat import chat_client, send_chat
from fulmen.environments.libraries import require
from fulmen.errors import ConfigError, GatewayError
from fulmen.settings import Settings
from fulmen.tls import tls_context

if TYPE_CHECKING:
    import httpx

    from fulmen.agent.context import LLM
    from fulmen.environments.config import TextArenaConfig

__all__ = ["TextArenaAgent", "make_game", "textarena_tasks"]


def make_game(game: str, kwargs: dict[str, Any]) -> Any:
    """``ta.make(game, **kwargs)``; ``ConfigError`` naming the game when it cannot be made."""
    textarena = require("textarena", extra="textarena")
    registry = require("textarena.envs.registration", extra="textarena").ENV_REGISTRY
    if game not in registry:
        close = difflib.get_close_matches(game, list(registry), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"textarena has no game {game!r}{hint}")
    try:
        return textarena.make(game, **kwargs)
    except Exception as exc:  # the game's own constructor: a missing corpus, a bad argument
        raise ConfigError(f"textarena cannot make {game!r}: {type(exc).__name__}: {exc}") from exc


def textarena_tasks(
    config: TextArenaConfig, split: Literal["train", "val"]
) -> list[dict[str, Any]]:
    """One task per game seed; the held-out seeds are never training seeds."""
    make_game(config.game, dict(config.kwargs))  # fails here, not in every rollout
    opponent = config.opponent.model_dump() if config.opponent is not None else None
    return [
        {
            "id": f"{split}-{i}",
            "textarena": {
                "game": config.game,
                "kwargs": dict(config.kwargs),
                "seed": seed,
                "player": config.player,
                "max_calls": config.max_calls,
                "opponent": opponent,
            },
            "agent": {"system_prompt": config.system_prompt},
        }
        for i, seed in enumerate(config.episode_seeds(split))
    ]


class TextArenaAgent(Agent):
    """The built-in TextArena agent: plays one seat of the task's game to its end."""

    async def training_rollout(self, task: dict[str, Any], llm: LLM) -> float:  # type: ignore[override]  # by name
        """Play the game; the reward is the game's reward for the policy's seat."""
        spec = cast("dict[str, Any]", task["textarena"])
        system = cast("dict[str, Any]", task.get("agent") or {}).get("system_prompt")
        opponent = cast("dict[str, Any] | None", spec.get("opponent"))
        env = make_game(str(spec["game"]), dict(spec.get("kwargs") or {}))
        try:
            env.reset(num_players=2 if opponent else 1, seed=int(spec["seed"]))
        except (AssertionError, ValueError) as exc:
            players = "two players (an opponent)" if opponent else "one player"
            raise ConfigError(
                f"textarena {spec['game']} cannot start with {players}: {exc}"
            ) from exc
        async with chat_client(llm) as http, _opponent_client(opponent) as rival:
            return await _play(env, spec, system, http, llm, rival)


async def _play(
    env: Any,
    spec: dict[str, Any],
    system: Any,
    http: httpx.AsyncClient,
    llm: LLM,
    rival: httpx.AsyncClient,
) -> float:
    """TextArena's loop: observe, act (the policy or the opponent), step; the seat's reward."""
    player, opponent = int(spec["player"]), cast("dict[str, Any] | None", spec.get("opponent"))
    calls, done = 0, False
    while not done:
        seat, observation = env.get_observation()
        if seat == player:
            if calls == int(spec["max_calls"]):
                return 0.0  # unfinished: no outcome to credit
            calls += 1
            action = (await send_chat(http, llm, _turn(system, observation))).text
        elif opponent is not None:
            action = await _opponent_move(rival, opponent, system, observation)
        else:
            raise ConfigError(f"textarena {spec['game']} asked seat {seat} to move")
        done, _ = env.step(action)
    rewards, _ = env.close()
    return float(cast("dict[int, float]", rewards)[player])


def _turn(system: Any, observation: Any) -> list[dict[str, Any]]:
    """Return one turn's messages: the system prompt, then the observation as the user."""
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": str(system)})
    messages.append({"role": "user", "content": str(observation)})
    return messages


def _opponent_client(opponent: dict[str, Any] | None) -> httpx.AsyncClient:
    """Return the HTTP client of the opponent's endpoint (its key from ``api_key_env``)."""
    import httpx

    headers: dict[str, str] = {}
    name = (opponent or {}).get("api_key_env")
    if name:
        headers["Authorization"] = f"Bearer {Settings.from_env().variable(str(name)) or ''}"
    return httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(600.0), verify=tls_context())


async def _opponent_move(
    rival: httpx.AsyncClient, opponent: dict[str, Any], system: Any, observation: Any
) -> str:
    """Ask the fixed opponent for its move at its own endpoint (not the rollout's gateway)."""
    request = {
        "model": opponent["model"],
        "messages": _turn(system, observation),
        **dict(opponent.get("sampling") or {}),
    }
    call = await post_chat(rival, str(opponent["base_url"]).rstrip("/"), request)
    if call.error is not None:
        raise GatewayError(f"the textarena opponent's call failed: {call.error}")
    return call.text or ""
