"""The ``environment:`` section of a config: tasks, held-out split, agent and reward of one library.

Each library's settings are one model, selected by ``library``; none of them imports its
library (the config must load where it is not installed, and fast). ``apply_environment`` is
the one place that turns the section into what the rest of the config names: the agent (the
library's own loop, unless the config names its own agent) and the task sources
(``data.train: environment``, ``data.val: environment``), which the trainer then draws from
``fulmen.environments.tasks.environment_tasks``.

>>> config = EnvironmentAdapter.validate_python({"library": "textarena", "game": "Nim-v0"})
>>> (config.library, config.train_size, config.val_size, config.player)
('textarena', 1000, 128, 0)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, model_validator

__all__ = [
    "ENVIRONMENT_SOURCE",
    "EnvironmentAdapter",
    "EnvironmentConfig",
    "OpenEnvConfig",
    "ReasoningGymConfig",
    "ReasoningGymDataset",
    "TextArenaConfig",
    "TextArenaOpponent",
    "VerifiersConfig",
    "apply_environment",
]

#: The value of ``data.train`` / ``data.val`` that means "the environment's split".
ENVIRONMENT_SOURCE = "environment"

#: Seeds and sizes are kept where every library's generators accept them (32-bit seeds).
_MAX_SEED = 2**31 - 1
_MAX_TASKS = 1_000_000
#: A prime, so the seeds of neighbouring section seeds land far apart.
_SEED_STRIDE = 1_000_003


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Splits(_Strict):
    """What every library's section has: split sizes, the seed, the system prompt."""

    train_size: int = Field(default=1000, ge=1, le=_MAX_TASKS)
    val_size: int = Field(default=128, ge=0, le=_MAX_TASKS)
    seed: int = Field(default=0, ge=0, le=_MAX_SEED)
    system_prompt: str | None = Field(default=None, min_length=1)

    def episode_seeds(self, split: Literal["train", "val"]) -> range:
        """Return the game or episode seeds of ``split``: ``val`` first, ``train`` after them.

        The two ranges never overlap, and both stay below 2**31 (what every library's
        generators accept) whatever the section's seed.
        """
        first = (self.seed * _SEED_STRIDE) % (_MAX_SEED + 1 - 2 * _MAX_TASKS)
        if split == "val":
            return range(first, first + self.val_size)
        return range(first + self.val_size, first + self.val_size + self.train_size)


class ReasoningGymDataset(_Strict):
    """One dataset of a Reasoning Gym composite.

    Attributes:
        weight: its share of the drawn tasks (Reasoning Gym's ``DatasetSpec.weight``).
        config: the dataset's own config fields (``min_terms``, ``max_digits``, ...).
        curriculum: difficulty levels of the dataset's curriculum attributes
            (``{"*": 1}`` sets every attribute; named ones override), turned into config
            fields by Reasoning Gym's own curriculum (``generate_configuration``); the
            ``config`` fields it does not set are kept.
    """

    weight: float = Field(default=1.0, gt=0, le=1e6)
    config: dict[str, JsonValue] = Field(default_factory=dict)
    curriculum: dict[str, int] | None = None

    @model_validator(mode="after")
    def _levels(self) -> ReasoningGymDataset:
        for name, level in (self.curriculum or {}).items():
            if level < 0 or level > 1000:
                raise ValueError(f"curriculum level {name}={level} must be between 0 and 1000")
        for key in ("seed", "size"):
            if key in self.config:
                raise ValueError(
                    f"config.{key} is set by fulmen (the section's seed, train_size and "
                    "val_size), not per dataset"
                )
        return self


class ReasoningGymConfig(_Splits):
    """Reasoning Gym procedural datasets, scored by each dataset's own ``score_answer``.

    Give either one ``dataset`` (with ``config`` and ``curriculum``) or several ``datasets``
    (a composite, each with its weight). The built-in agent
    (``fulmen.environments.reasoning_gym:ReasoningGymAgent``) sends the question after the
    system prompt and scores the extracted answer.

    Attributes:
        library: ``reasoning_gym``.
        train_size / val_size / seed: how many training tasks, how many held-out tasks (0:
            none; never a training task), and the seed of their drawing (the same seed gives
            the same tasks in any process).
        dataset: a Reasoning Gym dataset name (``basic_arithmetic``, ``leg_counting``, ...).
        config / curriculum: that dataset's settings (see ``ReasoningGymDataset``).
        datasets: name → settings, for a composite of several datasets.
        answer_format: ``tag``: the answer is the last ``<answer>...</answer>`` of the reply
            (Reasoning Gym's ``extract_answer``; no tag scores as no answer); ``raw``: the
            whole reply, stripped.
        system_prompt: default: Reasoning Gym's ``default`` system prompt for ``tag``, a
            one-line "answer only" prompt for ``raw``.
        examples: worked examples before every question (0: none): problems of their own
            draw, never a training or held-out one, each an earlier user turn answered by an
            assistant turn in the answer format (``<answer>A</answer>`` for ``tag``, the bare
            answer for ``raw``). A small base model that copies the prompt zero-shot can then
            answer in the format (``docs/environments.md``).
    """

    library: Literal["reasoning_gym"] = "reasoning_gym"
    dataset: str | None = Field(default=None, min_length=1)
    config: dict[str, JsonValue] = Field(default_factory=dict)
    curriculum: dict[str, int] | None = None
    datasets: dict[str, ReasoningGymDataset] | None = Field(default=None, min_length=1)
    answer_format: Literal["tag", "raw"] = "tag"
    examples: int = Field(default=0, ge=0, le=32)

    @model_validator(mode="after")
    def _one_source(self) -> ReasoningGymConfig:
        if (self.dataset is None) == (self.datasets is None):
            raise ValueError("reasoning_gym needs either dataset (one) or datasets (a composite)")
        if self.datasets is not None and ({"config", "curriculum"} & self.model_fields_set):
            raise ValueError("config and curriculum go under each entry of datasets, not beside it")
        self.dataset_specs()  # the shorthand's config and curriculum, checked as an entry's
        return self

    def dataset_specs(self) -> dict[str, ReasoningGymDataset]:
        """Name → settings of every dataset drawn from (one entry without a composite)."""
        if self.datasets is not None:
            return dict(self.datasets)
        one = ReasoningGymDataset(config=self.config, curriculum=self.curriculum)
        return {str(self.dataset): one}


class TextArenaOpponent(_Strict):
    """The fixed opponent of a two-player TextArena game: any OpenAI-compatible endpoint.

    Its calls do not go through the rollout's gateway, so they are neither recorded nor
    trained: it is part of the environment.

    Attributes:
        base_url: the endpoint (``http://127.0.0.1:8001/v1``).
        model: the model name to request.
        api_key_env: the environment variable holding its key (``None``: no key).
        sampling: request fields of its calls (``temperature``, ``max_tokens``).
    """

    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    api_key_env: str | None = None
    sampling: dict[str, JsonValue] = Field(default_factory=lambda: {"temperature": 0.0})


class TextArenaConfig(_Splits):
    """A TextArena game (``ta.make(game)`` with its default wrappers), one game per task.

    A task is a game seed; the policy plays player ``player`` and each of its turns is one
    model call (the observation TextArena's wrappers give, as the user message). The reward
    is the game's own reward for that player (win 1, loss -1 or 0, draws and single-player
    scores as the game sets them).

    Attributes:
        library: ``textarena``.
        train_size / val_size / seed: how many training tasks, how many held-out tasks (0:
            none; never a training task), and the seed of their drawing (the same seed gives
            the same tasks in any process).
        system_prompt: the system message of each turn (``None``: none).
        game: a registered TextArena env id (``GuessTheNumber-v0``, ``TicTacToe-v0``).
        kwargs: extra arguments of the game's constructor (``max_turns``, ...).
        opponent: the fixed opponent's endpoint; required for two-player games, refused for
            single-player ones.
        player: the seat the policy plays in a two-player game (0 moves first).
        max_calls: a bound on the policy's model calls in one game (a game that is not over
            then ends with reward ``0``).
    """

    library: Literal["textarena"] = "textarena"
    game: str = Field(min_length=1)
    kwargs: dict[str, JsonValue] = Field(default_factory=dict)
    opponent: TextArenaOpponent | None = None
    player: Literal[0, 1] = 0
    max_calls: int = Field(default=40, ge=1, le=10_000)


class OpenEnvConfig(_Splits):
    """An OpenEnv environment server, stepped by the built-in agent over OpenEnv's client.

    A task is an episode seed. ``reset`` gives the first observation; each model reply
    becomes the action ``{action_field: reply, **action}`` stepped into the environment, and
    each step's reward is emitted for that call (per-call credit and PPO's critic see it).
    The rollout's return is the sum of the step rewards.

    Attributes:
        library: ``openenv``.
        train_size / val_size / seed: how many training tasks, how many held-out tasks (0:
            none; never a training task), and the seed of their drawing (the same seed gives
            the same tasks in any process).
        system_prompt: the chat's system message (``None``: none).
        url: a running server (``http://127.0.0.1:8000``); or
        command: the server started per rollout as a local process (``{port}`` in an
            argument is replaced by a free port, where it must listen on 127.0.0.1;
            ``{python}`` by the trainer's interpreter).
        reset: keyword arguments of ``reset`` (the episode seed is added as ``seed``).
        action_field / action: the action's text field, and its fixed other fields.
        observation_field: the observation field shown to the model (``None``: the whole
            observation as JSON).
        max_steps: a bound on the steps of one episode.
        startup_timeout_s: how long a started server may take to answer.
    """

    library: Literal["openenv"] = "openenv"
    url: str | None = Field(default=None, min_length=1)
    command: list[str] | None = Field(default=None, min_length=1)
    reset: dict[str, JsonValue] = Field(default_factory=dict)
    action_field: str = Field(default="message", min_length=1)
    action: dict[str, JsonValue] = Field(default_factory=dict)
    observation_field: str | None = Field(default=None, min_length=1)
    max_steps: int = Field(default=20, ge=1, le=10_000)
    startup_timeout_s: float = Field(default=60.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _one_server(self) -> OpenEnvConfig:
        if (self.url is None) == (self.command is None):
            raise ValueError("openenv needs either url (a running server) or command")
        if self.command is not None and not any("{port}" in arg for arg in self.command):
            raise ValueError("openenv.command must pass the port somewhere as {port}")
        if self.action_field in self.action:
            raise ValueError(f"action.{self.action_field} is the model's reply (action_field)")
        return self


class VerifiersConfig(_Splits):
    """A ``verifiers`` (``verifiers.v1``) environment, running its own rollout loop.

    Each rollout is one verifiers episode (``Env.run_episode``) whose model client points at
    the rollout's gateway URL; its rubric functions (``@vf.reward``) become named rewards and
    their weighted sum is the primary reward.

    Attributes:
        library: ``verifiers``.
        train_size / val_size / seed: how many training tasks, how many held-out tasks (0:
            none; never a training task), and the seed of their drawing (the same seed gives
            the same tasks in any process).
        system_prompt: not used: a verifiers task carries its own (refused when set).
        env: verifiers' own ``[env]`` settings as a mapping (``taskset: {id: ..., ...}``,
            ``agent: {harness: {id: null}}``, ...); the agent's ``runtime`` defaults to
            ``subprocess``; a runtime, harness or tunnel that needs a container or a remote
            service is refused.
        val_taskset: settings merged over ``env.taskset`` for the held-out split (a test
            ``split``, say); without it the held-out tasks are the first ``val_size`` of
            the taskset and the training tasks the ones after them.
        shuffle: shuffle the taskset (seeded) before splitting it (bounded tasksets only).
        allow_unsandboxed_code: run a harness that executes the model's commands
            (``bash``, ...) in verifiers' ``subprocess`` runtime, i.e. on this machine without
            a sandbox; refused unless set.
    """

    library: Literal["verifiers"] = "verifiers"
    env: dict[str, JsonValue]
    val_taskset: dict[str, JsonValue] | None = None
    shuffle: bool = False
    allow_unsandboxed_code: bool = False

    @model_validator(mode="after")
    def _taskset_named(self) -> VerifiersConfig:
        if self.system_prompt is not None:
            raise ValueError(
                "verifiers tasks carry their own system prompt (a file: env.taskset.system_prompt)"
            )
        taskset = self.env.get("taskset")
        if not isinstance(taskset, dict) or not taskset.get("id"):
            raise ValueError("verifiers.env.taskset.id names the taskset (a module or package)")
        return self


#: What ``environment:`` holds, selected by ``library``.
EnvironmentConfig: TypeAlias = Annotated[
    ReasoningGymConfig | VerifiersConfig | OpenEnvConfig | TextArenaConfig,
    Field(discriminator="library"),
]

EnvironmentAdapter: TypeAdapter[EnvironmentConfig] = TypeAdapter(EnvironmentConfig)

#: The built-in agent of each library: the library's own interaction loop.
_AGENTS = {
    "reasoning_gym": "fulmen.environments.reasoning_gym:ReasoningGymAgent",
    "verifiers": "fulmen.environments.verifiers:VerifiersAgent",
    "openenv": "fulmen.environments.openenv:OpenEnvAgent",
    "textarena": "fulmen.environments.textarena:TextArenaAgent",
}


def builtin_agent(library: str) -> str:
    """Return the ``module:object`` of ``library``'s built-in agent."""
    return _AGENTS[library]


def apply_environment(raw: dict[str, Any]) -> dict[str, Any]:
    """Fill in what a config's ``environment:`` section implies (``TrainConfig``'s hook).

    ``agent`` defaults to the library's built-in agent (a config naming its own agent keeps
    it), ``data.train`` to ``environment`` and ``data.val`` to ``environment`` when the
    section holds out tasks. A ``data.train`` or ``data.val`` naming other tasks is refused:
    the environment's splits are disjoint by construction, other tasks are not.
    """
    section = raw.get("environment")
    if section is None:
        return raw
    if not isinstance(section, dict) or not isinstance(
        cast("dict[str, Any]", section).get("library"), str
    ):
        return raw  # the model's own validation reports it
    library = cast("dict[str, Any]", section)["library"]
    if library not in _AGENTS:
        return raw
    out = dict(raw)
    out.setdefault("agent", builtin_agent(library))
    data = out.get("data")
    data = dict(cast("dict[str, Any]", data)) if isinstance(data, dict) else {}
    for key in ("train", "val"):
        value = data.get(key)
        if value is not None and value != ENVIRONMENT_SOURCE:
            raise ValueError(
                f"data.{key} {value!r} with environment: the environment's tasks are the "
                f"data (data.{key}: {ENVIRONMENT_SOURCE}, or leave it out)"
            )
    if "from_store" in data:
        raise ValueError("data.from_store trains offline: it takes no environment section")
    data["train"] = ENVIRONMENT_SOURCE
    val_size = cast("dict[str, Any]", section).get("val_size", 128)
    if val_size != 0:
        data["val"] = ENVIRONMENT_SOURCE
    else:
        data.pop("val", None)
    out["data"] = data
    return out
