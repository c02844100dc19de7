"""``CommandAgentConfig``: an agent that is an executable, how it gets its task and its reward.

The training config's ``agent:`` takes either ``"module:object"`` (a Python rollout function) or
a mapping, by default this one (``agent: {command: [...], ...}``; ``kind: command``, the
``AgentSpec`` of ``fulmen.agent.kinds``); ``fulmen runner --command`` builds one from its flags.
Every string in ``command``, ``stdin``, ``env`` and ``files`` is a template: ``${name}`` is
replaced per rollout (``fulmen.agent.command.template`` lists the names), ``$$`` is a dollar.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fulmen.agent.command.template import check_template, names_in
from fulmen.agent.spec import AgentSpec, ImagePath

__all__ = ["CommandAgentConfig", "SandboxConfig", "VerifierConfig"]

_MB = 1024 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _argv(value: object) -> object:
    """Split a command given as one string as a shell would (no shell runs it)."""
    return shlex.split(value) if isinstance(value, str) else value


class SandboxConfig(_Strict):
    """Where and within what limits a command runs (``docs/command-agents.md``, "Sandbox").

    Attributes:
        backend: ``bwrap`` (bubblewrap: own PID, network and mount namespaces; the rest of the
            file system read-only, other rollouts' directories hidden, a private ``/tmp``),
            ``process`` (own process group and resource limits only: the command shares the
            machine's network and file system), or ``auto`` (``bwrap`` when it is installed,
            else ``process`` with a warning).
        network: ``gateway`` (the command reaches the rollout's model URL and nothing else:
            with ``bwrap`` that URL is a relay inside the sandbox), ``none`` (no network at all)
            or ``host`` (the machine's network; model calls could then bypass recording).
            ``process`` cannot restrict the network and accepts only ``host`` (``auto`` falls
            back to it with the warning).
        memory_mb: the memory of the whole rollout: with control groups (``cgroups``, a root
            runner on Linux) every process of it together, shared memory, tmpfs and page cache
            included; the command is killed past it (status ``memory_limit``). Each process
            also gets it as its data segment limit (``RLIMIT_DATA``: heap and private
            mappings; unlike an address-space limit, it lets Node and Go reserve their
            arenas), which is all that holds without control groups; ``bwrap``'s
            ``/dev/shm`` is a tmpfs of this size (at most 1 GiB).
        cpu_s: CPU seconds of the whole rollout, every process it ran counted (killed past it,
            status ``cpu_limit``); also each process's own limit (``RLIMIT_CPU``).
        max_processes: processes the command may have at once (``RLIMIT_NPROC``). Run by root,
            each running rollout gets a user id of its own from ``uid_base``, so the limit
            counts that rollout alone; run by another user, it counts all of that user's
            processes, so it is set to their number at start plus this.
        max_file_mb: the largest file the command may write (``RLIMIT_FSIZE``).
        disk_mb: the most its rollout directory may hold, its ``/tmp`` included (``bwrap``'s
            private ``/tmp`` is a folder of it); past it the command is killed.
        max_files: the most files, folders and links its rollout directory may hold (empty
            files take no disk blocks; each takes an inode), and a tree deeper than 256 levels
            counts as past it; the command is killed (status ``files_limit``).
        disk_check_s: how often the rollout directory's size, files and CPU time are measured.
        output_bytes: stdout and stderr together; the command is killed past it.
        keep_output_bytes: how much of each stream the attempt keeps: this many bytes from its
            start and as many from its end.
        user: ``rollout`` (default): when the runner runs as root, each running rollout runs
            as a user id of its own (from ``uid_base``), so it cannot read other rollouts' files
            and the process limit counts it alone; the command and its interpreter must then be
            readable by other users (not under ``/root``, say). ``runner``: as the runner's
            user, for a runner that is not root; a root runner refuses it (its rollouts would
            run as root, free to read any file on the machine).
        uid_base: first user id given to rollouts with ``user: rollout`` under root.
        hidden_paths: with ``bwrap``, absolute paths hidden behind an empty directory (the
            runner's secrets, say); the other rollouts' directories, ``/run`` (the host's
            sockets) and the runner's run folder, store and virtual environment are always
            hidden.
        max_connections: the most connections a rollout may hold open to its gateway at once
            (``network: gateway``); one more is closed at once.
        base_dir: the folder that holds the rollouts' own directories (each made and removed
            per attempt, closed to the others); ``None``: a new folder under ``$TMPDIR``. It is
            hidden from every command: the agent's files may not lie in it.
        cgroups: put each rollout in control groups of its own where the machine allows it
            (a root runner): its memory, processes and CPU time counted together, and every
            process of it killed at the end. ``false``: resource limits per process only.
    """

    backend: Literal["auto", "bwrap", "process"] = "auto"
    network: Literal["gateway", "none", "host"] = "gateway"
    memory_mb: int | None = Field(default=4096, ge=16, le=1_048_576)
    cpu_s: int | None = Field(default=600, ge=1, le=10_000_000)
    max_processes: int | None = Field(default=256, ge=1, le=1_000_000)
    max_file_mb: int | None = Field(default=1024, ge=1, le=10_000_000)
    disk_mb: int | None = Field(default=2048, ge=1, le=10_000_000)
    max_files: int | None = Field(default=100_000, ge=1, le=1_000_000_000)
    disk_check_s: float = Field(default=0.5, gt=0, le=60)
    output_bytes: int = Field(default=16 * _MB, ge=1024, le=1 << 40)
    keep_output_bytes: int = Field(default=32 * 1024, ge=256, le=16 * _MB)
    user: Literal["rollout", "runner"] = "rollout"
    uid_base: int = Field(default=61000, ge=1000, le=2**31 - 100_000)
    hidden_paths: list[Path] = Field(default_factory=list)
    max_connections: int = Field(default=32, ge=1, le=100_000)
    base_dir: Path | None = None
    cgroups: bool = True

    @field_validator("hidden_paths")
    @classmethod
    def _absolute(cls, paths: list[Path]) -> list[Path]:
        for path in paths:
            if not path.is_absolute():
                raise ValueError(f"hidden path {str(path)!r} must be absolute")
        return paths

    @field_validator("base_dir")
    @classmethod
    def _absolute_base(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_absolute():
            raise ValueError(f"base_dir {str(path)!r} must be absolute")
        return path


class VerifierConfig(_Strict):
    """A command run after the agent, in the same directory, that decides the reward.

    Attributes:
        command: the verifier (templated like the agent's command).
        reward: ``exit_code`` (0 → 1.0, anything else → 0.0) or ``json`` (the last line of its
            stdout that parses as JSON: a number, or an object of named numbers).
        timeout_s: how long it may run; past it the attempt fails.
    """

    command: list[str] = Field(min_length=1)
    reward: Literal["exit_code", "json"] = "exit_code"
    timeout_s: float = Field(default=120.0, gt=0, le=86_400)

    _split = field_validator("command", mode="before")(_argv)

    @field_validator("command")
    @classmethod
    def _templates(cls, command: list[str]) -> list[str]:
        for part in command:
            check_template(part, where="verifier.command")
        return command


class CommandAgentConfig(AgentSpec):
    """An agent run as a program, once per rollout (``docs/command-agents.md``).

    Attributes:
        kind: ``command``, the kind of agent a mapping is when it names none (left out of
            the config's dump, which reads as it always did).
        command: the program and its arguments (a list, or one string split as a shell
            would); templated, so ``${task.question}`` passes a task field as an argument.
        stdin: what the command reads on stdin (a template such as ``${task}``); ``None``:
            nothing (stdin is empty). The task is also always in ``$FULMEN_TASK_FILE`` as JSON.
        env: more environment variables (values templated). The command does not inherit the
            runner's environment beyond ``PATH``, ``LANG``, ``TERM`` and ``pass_env``.
        pass_env: names of the runner's environment variables to pass through unchanged.
        files: files written before the command starts, path → template: ``~/...`` under the
            rollout's home directory (``$HOME``), anything else relative to the working
            directory. For clients that read their endpoint only from a file (the Codex CLI's
            ``~/.codex/config.toml`` with ``${openai_base_url}``, say).
        workdir_template: a directory copied into each rollout's fresh working directory
            (a git repository for a coding task); ``None``: the directory starts empty.
        model: the model name the command is told (``${model}``, ``$FULMEN_MODEL``); ``None``:
            the served policy's name from the rollout's ``llm`` resource.
        timeout_s: how long the command may run; the whole process tree is then killed and
            the attempt fails with status ``timeout`` (the rollout's own timeout also applies).
        private_fields: top-level task fields the command never sees (the expected answer):
            left out of its task file, its stdin and every template it gets; the verifier and
            the reward function get the whole task. A template of the command that names one
            is a config error.
        verifier: a command that scores the agent's work (see ``VerifierConfig``).
        reward_function: ``"module:function"`` called with a ``CommandResult`` (exit status,
            stdout, stderr, working directory, task); returns a number, a dict of named
            numbers or ``None``. At most one of ``verifier`` and ``reward_function``; with
            neither, the command posts its own rewards to ``$FULMEN_REWARD_URL``. It runs in
            the runner once the command's processes are gone, with links out of the working
            directory, FIFOs, sockets and devices removed from it first.
        reward_timeout_s: how long the reward function may take; past it the attempt fails.
        fail_on_exit_code: a non-zero exit fails the attempt; by default it is recorded and
            the reward (verifier, function or posted) decides.
        keep_workdir: leave each rollout's directory behind (for debugging); default: removed.
        sandbox: isolation and limits (``SandboxConfig``).
        config_dir: what ``${config_dir}`` stands for, and what a relative
            ``workdir_template`` is relative to: the training config file's folder (set when
            the file is read), else (``None``) the current directory. The command runs in the
            rollout's own directory, so a script beside the config is
            ``${config_dir}/agent.js``.
    """

    kind: Literal["command"] = Field(default="command", exclude=True)
    command: list[str] = Field(min_length=1)
    stdin: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    pass_env: list[str] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    workdir_template: Path | None = None
    model: str | None = Field(default=None, min_length=1)
    timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    private_fields: list[str] = Field(default_factory=list)
    verifier: VerifierConfig | None = None
    reward_function: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    reward_timeout_s: float = Field(default=60.0, gt=0, le=86_400)
    fail_on_exit_code: bool = False
    keep_workdir: bool = False
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    config_dir: Path | None = None

    _split = field_validator("command", mode="before")(_argv)

    @field_validator("command")
    @classmethod
    def _command_templates(cls, command: list[str]) -> list[str]:
        for part in command:
            check_template(part, where="command")
            if "api_key" in names_in(part):
                # Any process of the machine reads a command line (/proc/PID/cmdline).
                raise ValueError(
                    "command: ${api_key} may not be passed on the command line, where other "
                    "processes can read it; the command has it in $OPENAI_API_KEY and "
                    "$ANTHROPIC_API_KEY (or write it into a file with files:)"
                )
        return command

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"environment variable name {name!r} is not valid")
            check_template(value, where=f"env.{name}")
        return env

    @field_validator("files")
    @classmethod
    def _files(cls, files: dict[str, str]) -> dict[str, str]:
        for name, text in files.items():
            relative = name[2:] if name.startswith("~/") else name
            path = PurePosixPath(relative)
            if not relative or path.is_absolute() or ".." in path.parts:
                raise ValueError(
                    f"file {name!r} must be relative to the working directory or start with "
                    "'~/' (the rollout's home), without '..'"
                )
            check_template(text, where=f"files.{name}")
        return files

    @field_validator("stdin")
    @classmethod
    def _stdin(cls, stdin: str | None) -> str | None:
        if stdin is not None:
            check_template(stdin, where="stdin")
        return stdin

    @model_validator(mode="after")
    def _check(self) -> CommandAgentConfig:
        if self.verifier is not None and self.reward_function is not None:
            raise ValueError("give verifier or reward_function, not both")
        if self.private_fields:
            texts = {
                "command": self.command,
                "stdin": [self.stdin or ""],
                **{f"env.{name}": [value] for name, value in self.env.items()},
                **{f"files.{name}": [text] for name, text in self.files.items()},
            }
            for where, parts in texts.items():
                for name in (n for part in parts for n in names_in(part)):
                    if name.startswith("task.") and name.split(".")[1] in self.private_fields:
                        raise ValueError(
                            f"{where}: ${{{name}}} would show the command a private field "
                            f"({', '.join(self.private_fields)}); only the verifier and the "
                            "reward function see them"
                        )
        config_dir = (self.config_dir or Path.cwd()).resolve()
        object.__setattr__(self, "config_dir", config_dir)
        if self.workdir_template is not None:
            template = config_dir / self.workdir_template  # an absolute one stays
            if not template.is_dir():
                raise ValueError(f"workdir_template {str(template)!r} is not a directory")
            object.__setattr__(self, "workdir_template", template.resolve())
        if self.sandbox.backend == "process" and self.sandbox.network != "host":
            raise ValueError(
                f"sandbox.network {self.sandbox.network!r} needs backend bwrap or auto; "
                "backend process cannot restrict the network (set sandbox.network: host)"
            )
        return self

    @property
    def folder(self) -> Path:
        """``config_dir`` as resolved when the config was read (an absolute path)."""
        return self.config_dir if self.config_dir is not None else Path.cwd()

    def describe(self) -> str:
        """Name the agent by its command line (``command: node agent.js ...``)."""
        return f"command: {shlex.join(self.command)}"

    def hiding(self, paths: Sequence[Path]) -> CommandAgentConfig:
        """Return the config with ``paths`` among those its sandbox hides."""
        hidden = [*self.sandbox.hidden_paths, *(p.resolve() for p in paths)]
        sandbox = self.sandbox.model_copy(update={"hidden_paths": hidden})
        return self.model_copy(update={"sandbox": sandbox})

    def in_image(self, place: ImagePath) -> CommandAgentConfig:
        """Return the config with its folders (``config_dir``, ``workdir_template``) in an image."""
        update: dict[str, Path] = {
            "config_dir": Path(place(self.folder, "the command agent's config_dir"))
        }
        if self.workdir_template is not None:
            template = place(self.workdir_template, "the command agent's workdir_template")
            update["workdir_template"] = Path(template)
        return self.model_copy(update=update)

    def runner_args(self) -> list[str]:
        """Return the ``fulmen runner`` options that run this agent (``--command-config``)."""
        return ["--command-config", self.model_dump_json(exclude_defaults=True)]
