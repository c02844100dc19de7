"""``CommandAgent``: an executable run once per rollout, as an ``Agent`` the runner knows.

Per attempt: a fresh directory (``Workspaces``), the command started in the sandbox with the
rollout's model endpoint in its environment (``command_env``), its exit status, output and
duration stored as a ``fulmen.command`` span of the attempt, then the reward from the verifier,
the reward function, or what the command posted itself. A command the sandbox had to stop
(timeout, output, disk, CPU or file-size limit) fails its attempt with that status.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fulmen.agent.api import Agent, RolloutResult, check_result
from fulmen.agent.command.access import check_rollout_access, rollouts_get_own_users
from fulmen.agent.command.config import CommandAgentConfig, VerifierConfig
from fulmen.agent.command.sandbox import Finished, Sandbox, inner_port
from fulmen.agent.command.template import render
from fulmen.agent.command.workspace import Workspace, Workspaces
from fulmen.errors import ConfigError
from fulmen.importing import import_object
from fulmen.settings import inherited_environment
from fulmen.tracing import semconv
from fulmen.tracing.context import current_trace

if TYPE_CHECKING:
    from collections.abc import Callable

    from fulmen.agent.context import LLM, RolloutContext

__all__ = ["CommandAgent", "CommandFailed", "CommandResult"]

logger = logging.getLogger(__name__)

_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TERM")


class CommandFailed(RuntimeError):
    """The command (or its verifier) was stopped by the sandbox or failed; the attempt fails."""


@dataclass(frozen=True)
class CommandResult:
    """What a reward function gets: the task and how the command ended.

    Attributes:
        task: the rollout's task.
        exit_code: the command's exit status (``128 + N`` when signal N ended it).
        stdout / stderr: its output (the middle cut out past ``sandbox.keep_output_bytes``).
        workdir: its working directory, as it left it (removed after the reward function).
        duration_s: how long it ran.
    """

    task: Any
    exit_code: int
    stdout: str
    stderr: str
    workdir: Path
    duration_s: float


def _without_v1(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class CommandAgent(Agent):
    """Runs ``config.command`` per rollout (``CommandAgentConfig``, ``docs/command-agents.md``)."""

    def __init__(self, config: CommandAgentConfig, *, base: Path | None = None) -> None:
        self.config = config
        self._base = base
        self._reward_function: Callable[[CommandResult], Any] | None = None
        if config.reward_function is not None:
            self._reward_function = import_object(config.reward_function, what="reward_function")
        self._spaces: Workspaces | None = None
        self._sandbox: Sandbox | None = None

    def setup(self) -> None:
        """Check what rollouts' own users must reach, make their base folder, pick the sandbox.

        Once per runner. Under root with ``sandbox.user: rollout`` a program or file the command
        names that other users may not read is a ``ConfigError`` here, not a silent failure of
        every rollout (``check_rollout_access``).
        """
        box = self.config.sandbox
        own_user = rollouts_get_own_users(box)
        if own_user:
            check_rollout_access(self.config)
        self._spaces = Workspaces(self._base, uid_base=box.uid_base if own_user else None)
        self._sandbox = Sandbox(box, self._spaces.base)

    async def training_rollout(  # type: ignore[override]  # takes what it needs by name
        self, task: Any, context: RolloutContext
    ) -> RolloutResult:
        """Run the command for this attempt and return its reward (``None``: it posted its own)."""
        if self._spaces is None or self._sandbox is None:
            self.setup()
        assert self._spaces is not None and self._sandbox is not None
        spaces, sandbox, config = self._spaces, self._sandbox, self.config
        values: dict[str, str] = {}
        llm = _llm_of(context)

        def files(space: Workspace) -> dict[str, str]:
            values.update(self._values(context, llm, space))
            return {path: render(text, task, values) for path, text in config.files.items()}

        space = await asyncio.to_thread(
            spaces.create, task, template=config.workdir_template, files=files
        )
        try:
            env = self._env(task, values, space, sandboxed=sandbox.backend == "bwrap")
            argv = [render(part, task, values) for part in config.command]
            stdin = render(config.stdin, task, values).encode() if config.stdin else None
            finished = await sandbox.run(
                argv,
                env=env,
                root=space.root,
                cwd=space.work,
                uid=space.uid,
                stdin=stdin,
                timeout_s=config.timeout_s,
                gateway=_address(llm.base_url) if llm is not None else None,
                expose=[str(config.folder)],
            )
            _record("command", finished, sandbox.level)
            self._check(finished, "command", config.timeout_s)
            assert finished.exit_code is not None
            if config.fail_on_exit_code and finished.exit_code != 0:
                raise CommandFailed(_describe("command", finished, config.timeout_s))
            return await self._reward(task, values, env, space, finished)
        finally:
            await asyncio.to_thread(spaces.remove, space, keep=config.keep_workdir)

    def _values(self, context: RolloutContext, llm: LLM | None, space: Workspace) -> dict[str, str]:
        base_url = llm.base_url.rstrip("/") if llm is not None else ""
        if llm is not None and self._sandbox is not None and self._sandbox.network == "gateway":
            # Inside the sandbox the gateway is the relay on the sandbox's own loopback.
            parts = urlsplit(base_url)
            port = inner_port(_address(base_url)[1])
            base_url = parts._replace(netloc=f"127.0.0.1:{port}").geturl()
        root = _without_v1(base_url)
        gateway_root = root.split("/rollout/", 1)[0]
        return {
            "openai_base_url": base_url,
            "base_url": base_url,
            "anthropic_base_url": root,
            "api_key": llm.api_key if llm is not None else "",
            "model": self.config.model or (llm.model if llm is not None else ""),
            "rollout_id": context.rollout_id,
            "attempt_id": context.attempt_id,
            "mode": context.mode.value,
            "reward_url": f"{gateway_root}/v1/rewards",
            "workdir": str(space.work),
            "home": str(space.home),
            "task_file": str(space.task_file),
            "config_dir": str(self.config.folder),
        }

    def _env(
        self, task: Any, values: dict[str, str], space: Workspace, *, sandboxed: bool
    ) -> dict[str, str]:
        config = self.config
        env = inherited_environment((*_PASSED_ENV, *config.pass_env))
        env.update(
            HOME=str(space.home),
            TMPDIR="/tmp" if sandboxed else str(space.tmp),
            OPENAI_BASE_URL=values["openai_base_url"],
            OPENAI_API_KEY=values["api_key"],
            ANTHROPIC_BASE_URL=values["anthropic_base_url"],
            ANTHROPIC_API_KEY=values["api_key"],
            FULMEN_MODEL=values["model"],
            FULMEN_ROLLOUT_ID=values["rollout_id"],
            FULMEN_ATTEMPT_ID=values["attempt_id"],
            FULMEN_MODE=values["mode"],
            FULMEN_REWARD_URL=values["reward_url"],
            FULMEN_TASK_FILE=values["task_file"],
            FULMEN_WORKDIR=values["workdir"],
        )
        env.update({name: render(value, task, values) for name, value in config.env.items()})
        return env

    def _check(self, finished: Finished, what: str, timeout_s: float) -> None:
        if finished.status != "exited":
            raise CommandFailed(_describe(what, finished, timeout_s))

    async def _reward(
        self,
        task: Any,
        values: dict[str, str],
        env: dict[str, str],
        space: Workspace,
        finished: Finished,
    ) -> RolloutResult:
        assert finished.exit_code is not None
        verifier = self.config.verifier
        if verifier is not None:
            return await self._verify(verifier, task, values, env, space, finished.exit_code)
        if self._reward_function is not None:
            result = CommandResult(
                task=task,
                exit_code=finished.exit_code,
                stdout=finished.stdout,
                stderr=finished.stderr,
                workdir=space.work,
                duration_s=finished.duration_s,
            )
            value = await asyncio.to_thread(self._reward_function, result)
            if asyncio.iscoroutine(value):
                value = await value
            return check_result(value)
        return None  # the command posted its rewards to $FULMEN_REWARD_URL (or gave none)

    async def _verify(
        self,
        verifier: VerifierConfig,
        task: Any,
        values: dict[str, str],
        env: dict[str, str],
        space: Workspace,
        exit_code: int,
    ) -> RolloutResult:
        assert self._sandbox is not None
        argv = [render(part, task, values) for part in verifier.command]
        finished = await self._sandbox.run(
            argv,
            env={**env, "FULMEN_AGENT_EXIT_CODE": str(exit_code)},
            root=space.root,
            cwd=space.work,
            uid=space.uid,
            stdin=None,
            timeout_s=verifier.timeout_s,
            gateway=None,
            network=False,
            expose=[str(self.config.folder)],
        )
        _record("verifier", finished, self._sandbox.level)
        self._check(finished, "verifier", verifier.timeout_s)
        if verifier.reward == "exit_code":
            return 1.0 if finished.exit_code == 0 else 0.0
        for line in reversed(finished.stdout.strip().splitlines()):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            try:
                return check_result(value)
            except ConfigError as exc:
                raise CommandFailed(
                    f"verifier printed a JSON line that is no reward: {exc}"
                ) from None
        raise CommandFailed(
            "verifier (reward: json) printed no JSON line; its stdout ended with:\n"
            + finished.stdout[-2000:]
        )


def _llm_of(context: RolloutContext) -> LLM | None:
    """Return the rollout's model endpoint; ``None`` when its resources hold none."""
    try:
        return context.llm()
    except ConfigError:
        return None


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ConfigError(f"the rollout's model URL has no host: {url!r}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _describe(what: str, finished: Finished, timeout_s: float) -> str:
    reasons = {
        "timeout": f"ran past its timeout of {timeout_s:g} s",
        "output_limit": "printed more than its output limit",
        "disk_limit": "wrote more than its disk limit",
        "cpu_limit": "used up its CPU time limit",
        "file_limit": "wrote a file larger than its file-size limit",
        "exited": f"exited with status {finished.exit_code}",
    }
    stopped = "" if finished.status == "exited" else "; its whole process tree was killed"
    tail = finished.stderr.strip()[-2000:]
    return f"{what} {reasons[finished.status]} (status {finished.status}{stopped})" + (
        f"; stderr ended with:\n{tail}" if tail else ""
    )


def _record(what: str, finished: Finished, level: str) -> None:
    """Store how the command ended as a span of the attempt (the dashboard shows it)."""
    scope = current_trace()
    if scope is None:
        return
    attributes: dict[str, Any] = {
        semconv.COMMAND_ROLE: what,
        semconv.COMMAND_STATUS: finished.status,
        semconv.COMMAND_DURATION_S: finished.duration_s,
        semconv.COMMAND_STDOUT: finished.stdout,
        semconv.COMMAND_STDERR: finished.stderr,
        semconv.COMMAND_OUTPUT_BYTES: finished.output_bytes,
        semconv.COMMAND_SANDBOX: level,
    }
    if finished.exit_code is not None:
        attributes[semconv.COMMAND_EXIT_CODE] = finished.exit_code
    scope.tracer.start_span(semconv.SPAN_COMMAND, attributes=attributes).end()
