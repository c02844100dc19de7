"""What a rollout's own user may reach, checked before the first rollout.

Under root with ``sandbox.user: rollout`` each rollout runs as a user id that owns nothing, so
only the "others" permission bits let it reach the command's interpreter and the files its
command line names. A checkout under a folder only root may enter (``/root``, a ``mktemp -d``
folder) used to fail every rollout at its first read, quietly: the command exited non-zero, the
rollout ended ``succeeded`` with no model call and no reward. ``check_rollout_access`` turns that
into one error naming the folder, before anything runs.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.agent.command.template import names_in, render
from fulmen.errors import ConfigError
from fulmen.settings import inherited_environment

if TYPE_CHECKING:
    from fulmen.agent.command.config import CommandAgentConfig, SandboxConfig

__all__ = [
    "blocked_for_others",
    "check_rollout_access",
    "check_visible",
    "rollouts_get_own_users",
    "runnable_by_others",
]


def rollouts_get_own_users(sandbox: SandboxConfig) -> bool:
    """Whether each rollout runs as a user id of its own: a root runner, ``user: rollout``."""
    return os.geteuid() == 0 and sandbox.user == "rollout"


def blocked_for_others(path: str | Path, *, read: bool, execute: bool) -> str | None:
    """Say why a user other than the owner may not use ``path``; ``None`` when they may.

    Every folder above the (symlink-resolved) path must be searchable by others; the path itself
    readable (``read``) and runnable or, for a folder, enterable (``execute``) by others. ACLs
    are not consulted: a rollout's user id is fresh, so no ACL names it.
    """
    target = Path(path).resolve()
    for folder in reversed(target.parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            return f"the folder {folder} (mode {mode & 0o7777:o}) is not searchable by other users"
    mode = target.stat().st_mode
    missing = [
        word
        for word, bit, wanted in (("read", stat.S_IROTH, read), ("run", stat.S_IXOTH, execute))
        if wanted and not mode & bit
    ]
    if missing:
        return f"{target} (mode {mode & 0o7777:o}) may not be {' or '.join(missing)} by other users"
    return None


def runnable_by_others(path: str | Path) -> bool:
    """Whether a user other than its owner may run ``path`` (every folder above it searchable)."""
    try:
        return blocked_for_others(path, read=False, execute=True) is None
    except OSError:
        return False


def _fixed(part: str, folder: Path) -> Path | None:
    """Return the existing absolute path ``part`` names before any rollout, else ``None``."""
    if set(names_in(part)) - {"config_dir"}:
        return None  # filled per rollout (the task, the workdir): nothing to check up front
    text = render(part, None, {"config_dir": str(folder)})
    path = Path(text)
    return path if path.is_absolute() and path.exists() else None


def _shebang(path: Path) -> str | None:
    """Return a ``#!`` script's interpreter ("" if it names none); ``None`` for no script."""
    try:
        with path.open("rb") as handle:
            line = handle.readline(4096)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode(errors="replace").split()
    return words[0] if words else ""


def _is_script(path: Path) -> bool:
    return _shebang(path) is not None


def _search_path(config: CommandAgentConfig) -> str:
    """Return the ``PATH`` the command gets: its config's own unless filled per rollout."""
    own = config.env.get("PATH")
    if own is not None and not names_in(own):
        return own
    return inherited_environment(["PATH"]).get("PATH", os.defpath)


def _on_path(program: str, search: str) -> Path | None:
    """Return the file a rollout's user would run for ``program``, as ``execvp`` looks it up.

    ``execvp`` passes over an entry it may not run (a ``/root/.pyenv/shims`` first on ``PATH``)
    and takes the next one, so the first entry others may run wins; when there is none, the
    first found is returned so that the error names it. ``None``: not on ``PATH`` at all.
    """
    first: Path | None = None
    for entry in search.split(os.pathsep):
        found = shutil.which(program, path=entry or ".")
        if found is None:
            continue
        candidate = Path(found)
        if not candidate.is_absolute():
            continue  # relative to the rollout's own directory, which it may always enter
        if runnable_by_others(candidate) and (
            not _is_script(candidate) or _readable_by_others(candidate)
        ):
            return candidate
        first = first or candidate
    return first


def _readable_by_others(path: Path) -> bool:
    try:
        return blocked_for_others(path, read=True, execute=False) is None
    except OSError:
        return False


def _needs(config: CommandAgentConfig) -> list[tuple[str, Path, bool, bool]]:
    """List (as written, path, read, execute) for what the command lines name that exists."""
    folder = config.folder
    needs: list[tuple[str, Path, bool, bool]] = []
    commands = [config.command]
    if config.verifier is not None:
        commands.append(config.verifier.command)
    for command in commands:
        program, *arguments = command
        path = _fixed(program, folder)
        if path is None and "/" not in program and "$" not in program:
            path = _on_path(program, _search_path(config))
        if path is not None and path.is_file():
            needs.append((program, path, _is_script(path), True))
            # A console script of a virtualenv under /root names that venv's Python here.
            interpreter = _shebang(path)
            if interpreter and interpreter.startswith("/") and Path(interpreter).exists():
                needs.append((f"{program} (its #! line)", Path(interpreter), False, True))
        for argument in arguments:
            path = _fixed(argument, folder)
            if path is not None:
                needs.append((argument, path, True, path.is_dir()))
    texts = [*config.command, *config.env.values(), config.stdin or "", *config.files.values()]
    if config.verifier is not None:
        texts += config.verifier.command
    if any("config_dir" in names_in(text) for text in texts):
        needs.append(("${config_dir}", folder, False, True))
    return needs


def check_rollout_access(config: CommandAgentConfig) -> None:
    """Raise ``ConfigError`` if a rollout's own user could not use what the command names.

    Checked: the program (found on ``PATH`` or named by path; a ``#!`` script must also be
    readable), every argument that is an existing absolute path or ``${config_dir}/...``, the
    verifier's command the same way, and ``${config_dir}`` itself wherever it is used. Arguments
    filled from the task are not known before a rollout and are not checked.
    """
    for written, path, read, execute in _needs(config):
        try:
            why = blocked_for_others(path, read=read, execute=execute)
        except OSError as exc:
            why = f"{path} cannot be examined: {exc.strerror}"
        if why is not None:
            raise ConfigError(
                f"command agent: {written!r} is out of reach of the rollouts' own users: {why}. "
                "Under root each rollout runs as a user id of its own (sandbox.user: rollout), "
                "which reaches files through their 'other' permissions only: put the agent's "
                "files where other users may read them (chmod o+rx on the folders, o+r on the "
                "files), or run the runner as an unprivileged user (sandbox.user: runner)"
            )


def check_visible(config: CommandAgentConfig, *, hidden: Sequence[Path] = ()) -> None:
    """Raise ``ConfigError`` if the sandbox would hide what the command needs to run.

    The sandbox hides the rollouts' base folder (``sandbox.base_dir``), ``sandbox.hidden_paths``
    and the runner's own ``hidden`` paths (its run folder, its store): a program, a ``#!``
    interpreter, a file the command line names or the config folder inside one of them would
    be missing in every rollout. Checked before the first rollout, with the path and the fix.
    """
    box = config.sandbox
    covers = [(Path(os.path.realpath(h)), "sandbox.hidden_paths") for h in box.hidden_paths]
    covers += [(Path(os.path.realpath(h)), "the run folder or store") for h in hidden]
    if box.base_dir is not None:
        covers.append((Path(os.path.realpath(box.base_dir)), "sandbox.base_dir"))
    needs = [(written, path) for written, path, _, _ in _needs(config)]
    needs.append(("the config folder", config.folder))
    for written, path in needs:
        real = Path(os.path.realpath(path))
        for cover, what in covers:
            if real == cover or real.is_relative_to(cover):
                raise ConfigError(
                    f"command agent: {written!r} ({real}) lies in {cover}, which the sandbox "
                    f"hides from every rollout ({what}): move the agent's files out of it, or "
                    f"choose another {what}"
                )
