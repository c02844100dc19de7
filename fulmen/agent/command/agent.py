"""``CommandAgent``: an executable run once per rollout, as an ``Agent`` the runner knows.

Per attempt: a fresh directory (``Workspaces``), the command started in the sandbox with the
rollout's model endpoint and its attempt's own key in its environment, its exit status, output
and duration stored as a ``fulmen.command`` span of the attempt, then the reward from the
verifier, the reward function, or what the command posted itself. A command the sandbox had to
stop (timeout, output, disk, files, CPU, memory or file-size limit), or could not start at all,
fails its attempt with that status.

Scoring happens where the agent cannot reach it (``docs/security.md``): once the command's
processes are gone, links out of its working directory, FIFOs, sockets and devices are removed
from it; the verifier runs with a home, a ``/tmp`` and a task file of its own (the whole task,
private fields included), the rollout's files read-only (``bwrap``), and hands its reward over
in a file only it can write (``$FULMEN_REWARD_FILE``) or as its first JSON line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fulmen.agent.api import Agent, RolloutResult, check_result
from fulmen.agent.command import tree
from fulmen.agent.command.access import (
    check_rollout_access,
    check_visible,
    rollouts_get_own_users,
)
from fulmen.agent.command.config import CommandAgentConfig, VerifierConfig
from fulmen.agent.command.sandbox import Finished, Sandbox, inner_port
from fulmen.agent.command.template import names_in, render
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
# The most a verifier's reward file may hold.
_REWARD_FILE_BYTES = 65536


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

    def __init__(
        self,
        config: CommandAgentConfig,
        *,
        base: Path | None = None,
        hidden: list[Path] | None = None,
    ) -> None:
        """Take the config; ``base`` holds the rollouts' folders (default: a new temporary one).

        ``hidden``: paths of the runner's own (its run folder, its store) that no command may
        see, besides the config's ``sandbox.hidden_paths``.
        """
        self.config = config
        self._base = base
        self._hidden = list(hidden or [])
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
        if os.geteuid() == 0 and box.user == "runner":
            raise ConfigError(
                "command agent: sandbox.user: runner would run every rollout as root (uid 0), "
                "which may read any file of this machine (its keys, other rollouts' answers, "
                "the store). Use sandbox.user: rollout (the default: each rollout a user id of "
                "its own; put the agent's files where other users may read them), or run the "
                "runner as an unprivileged user"
            )
        own_user = rollouts_get_own_users(box)
        if own_user:
            check_rollout_access(self.config)
        check_visible(self.config, hidden=self._hidden)
        base = self._base or box.base_dir
        self._spaces = Workspaces(base, uid_base=box.uid_base if own_user else None)
        self._sandbox = Sandbox(box, self._spaces.base, hidden=self._runner_paths())

    def _runner_paths(self) -> list[Path]:
        """Return the runner's own paths to hide: those given, and its virtual environment.

        The environment is left visible when the command runs an interpreter from it.
        """
        paths = list(self._hidden)
        prefix = Path(sys.prefix)
        if sys.prefix != sys.base_prefix:
            programs = [self.config.command[0]]
            if self.config.verifier is not None:
                programs.append(self.config.verifier.command[0])
            used = any(
                Path(os.path.abspath(p)).is_relative_to(prefix) or p.startswith(str(prefix))
                for p in programs
            )
            if not used:
                paths.append(prefix)
        return paths

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
        shown = _public(task, config.private_fields)  # what the command may see of the task

        def files(space: Workspace) -> dict[str, str]:
            values.update(self._values(context, llm, space))
            return {path: render(text, shown, values) for path, text in config.files.items()}

        space = await asyncio.to_thread(
            spaces.create, shown, template=config.workdir_template, files=files
        )
        try:
            env = self._env(shown, values, space, sandboxed=sandbox.backend == "bwrap")
            argv = [render(part, shown, values) for part in config.command]
            stdin = render(config.stdin, shown, values).encode() if config.stdin else None
            started_ns = time.time_ns()
            finished = await sandbox.run(
                argv,
                env=env,
                root=space.root,
                cwd=space.work,
                uid=space.uid,
                stdin=stdin,
                timeout_s=config.timeout_s,
                gateway=_address(llm.base_url) if llm is not None else None,
                expose=self._needed(config.command),
            )
            _record("command", finished, sandbox.level, started_ns)
            self._check(finished, "command", config.timeout_s)
            assert finished.exit_code is not None
            if config.fail_on_exit_code and finished.exit_code != 0:
                raise CommandFailed(_describe("command", finished, config.timeout_s))
            # The command's processes are gone: nothing can put back what is removed here.
            defused = await asyncio.to_thread(tree.defuse, space.work)
            if defused:
                logger.info(
                    "rollout %s: removed %d links out of its directory, FIFOs, sockets or "
                    "devices before scoring: %s",
                    context.rollout_id,
                    len(defused),
                    ", ".join(defused[:5]),
                )
            return await self._reward(task, values, env, space, finished)
        finally:
            await asyncio.to_thread(spaces.remove, space, keep=config.keep_workdir)

    def _seen(self, space: Workspace, path: Path) -> str:
        """Return ``path`` (in the rollout's directory) as the command sees it."""
        assert self._sandbox is not None
        return str(self._sandbox.view(space.root, path))

    def _needed(self, command: list[str]) -> list[str]:
        """Paths a command needs to see: its config folder, and what its line names by itself.

        Parts filled from the task or per rollout are left out: a task must not choose what
        the sandbox shows.
        """
        fixed = [
            render(part, None, {"config_dir": str(self.config.folder)})
            for part in command
            if not set(names_in(part)) - {"config_dir"}
        ]
        return [str(self.config.folder), *fixed]

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
            "workdir": self._seen(space, space.work),
            "home": self._seen(space, space.home),
            "task_file": self._seen(space, space.task_file),
            "config_dir": str(self.config.folder),
        }

    def _env(
        self, task: Any, values: dict[str, str], space: Workspace, *, sandboxed: bool
    ) -> dict[str, str]:
        config = self.config
        env = inherited_environment((*_PASSED_ENV, *config.pass_env))
        env.update(
            HOME=values["home"],
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
        if not finished.started:
            tail = finished.stderr.strip()[-2000:]
            raise CommandFailed(
                f"{what} could not be started in the sandbox (status {finished.exit_code}): "
                + (tail or "no message")
            )
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
            function = self._reward_function
            limit = self.config.reward_timeout_s

            async def call() -> Any:
                value = await asyncio.to_thread(function, result)
                return await value if asyncio.iscoroutine(value) else value

            try:
                async with asyncio.timeout(limit):
                    value = await call()
            except TimeoutError:
                raise CommandFailed(
                    f"reward function {self.config.reward_function} ran past its "
                    f"reward_timeout_s of {limit:g} s"
                ) from None
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
        own = await asyncio.to_thread(_verifier_folder, space, task)
        argv = [render(part, task, values) for part in verifier.command]
        verifier_env = {
            name: value
            for name, value in env.items()
            if name not in _MODEL_ENV  # the verifier calls no model
        }
        verifier_env.update(
            HOME=self._seen(space, own / "home"),
            TMPDIR="/tmp" if self._sandbox.backend == "bwrap" else str(own / "tmp"),
            FULMEN_TASK_FILE=self._seen(space, own / "task.json"),
            FULMEN_REWARD_FILE=self._seen(space, own / "reward.json"),
            FULMEN_AGENT_EXIT_CODE=str(exit_code),
            PYTHONNOUSERSITE="1",  # no user site of any home: nothing the agent planted loads
        )
        started_ns = time.time_ns()
        finished = await self._sandbox.run(
            argv,
            env=verifier_env,
            root=space.root,
            cwd=space.work,
            uid=space.uid,
            stdin=None,
            timeout_s=verifier.timeout_s,
            gateway=None,
            network=False,
            expose=self._needed(verifier.command),
            writable=own,
            tmp=own / "tmp",
        )
        _record("verifier", finished, self._sandbox.level, started_ns)
        self._check(finished, "verifier", verifier.timeout_s)
        if verifier.reward == "exit_code":
            return 1.0 if finished.exit_code == 0 else 0.0
        written = await asyncio.to_thread(_read_reward_file, own / "reward.json")
        if written is not None:
            return _reward_of(written, "wrote to $FULMEN_REWARD_FILE")
        # The first JSON line: what the verifier says before it echoes anything of the agent's.
        for line in finished.stdout.strip().splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            return _reward_of(value, "printed a JSON line")
        raise CommandFailed(
            "verifier (reward: json) wrote no $FULMEN_REWARD_FILE and printed no JSON line; "
            "its stdout ended with:\n" + finished.stdout[-2000:]
        )


_MODEL_ENV = frozenset(
    {"OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"}
)


def _public(task: Any, private: list[str]) -> Any:
    """Return ``task`` without its ``private`` top-level fields (what the command sees)."""
    if not private or not isinstance(task, dict):
        return task
    return {key: value for key, value in task.items() if key not in private}


def _verifier_folder(space: Workspace, task: Any) -> Path:
    """Make the verifier's own folder (home, tmp, the whole task), new and unguessable.

    Made after the command's processes are gone, under a name the command could not know, so
    nothing in it was put there by the agent. Owned by the rollout's user, closed to others.
    """
    own = space.root / f"verify-{uuid.uuid4().hex}"
    own.mkdir(mode=0o700)
    (own / "home").mkdir(mode=0o700)
    (own / "tmp").mkdir(mode=0o700)
    (own / "task.json").write_text(json.dumps(task, ensure_ascii=False))
    if space.uid is not None:
        for path in (own, own / "home", own / "tmp", own / "task.json"):
            os.chown(path, space.uid, space.uid)
    return own


def _read_reward_file(path: Path) -> Any:
    """Return the JSON of the verifier's reward file; ``None`` when it wrote none.

    Opened without following a link and read only if it is a regular file of bounded size.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CommandFailed(f"the verifier's reward file cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _REWARD_FILE_BYTES:
            raise CommandFailed(
                f"the verifier's reward file is not a regular file of at most "
                f"{_REWARD_FILE_BYTES} bytes"
            )
        text = handle.read(_REWARD_FILE_BYTES)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandFailed(f"the verifier's reward file is not JSON: {exc}") from None


def _reward_of(value: Any, how: str) -> RolloutResult:
    try:
        return check_result(value)
    except ConfigError as exc:
        raise CommandFailed(f"verifier {how} that is no reward: {exc}") from None


def _llm_of(context: RolloutContext) -> LLM | None:
    """Return the rollout's model endpoint; ``None`` when its resources hold none."""
    try:
        return context.llm(key_in_url=False)  # the key apart: command lines are no secret
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
        "files_limit": "made more files than its max_files (or a tree deeper than 256 levels)",
        "memory_limit": "used more than its memory limit (the kernel killed it)",
        "cpu_limit": "used up its CPU time limit",
        "file_limit": "wrote a file larger than its file-size limit",
        "exited": f"exited with status {finished.exit_code}",
    }
    stopped = "" if finished.status == "exited" else "; its whole process tree was killed"
    tail = finished.stderr.strip()[-2000:]
    return f"{what} {reasons[finished.status]} (status {finished.status}{stopped})" + (
        f"; stderr ended with:\n{tail}" if tail else ""
    )


def _record(what: str, finished: Finished, level: str, started_ns: int) -> None:
    """Store how the command ended as a span of the attempt (the dashboard shows it).

    The span covers the command's run, from ``started_ns`` (wall clock, before the sandbox
    started it) for its measured duration, so listings show how long it took; a command that
    did not exit 0 by itself (a non-zero status, a limit, a failed start) is an error span whose
    description says how it ended.
    """
    from opentelemetry.trace import Status, StatusCode

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
    span = scope.tracer.start_span(
        semconv.SPAN_COMMAND, attributes=attributes, start_time=started_ns
    )
    if not finished.started:
        span.set_status(
            Status(StatusCode.ERROR, f"could not be started (status {finished.exit_code})")
        )
    elif finished.status != "exited":
        span.set_status(Status(StatusCode.ERROR, finished.status))
    elif finished.exit_code != 0:
        span.set_status(Status(StatusCode.ERROR, f"exited with status {finished.exit_code}"))
    span.end(end_time=started_ns + max(0, round(finished.duration_s * 1e9)))
