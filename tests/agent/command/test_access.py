"""What a rollout's own user may reach: the programs and files a command line names.

Pure permission-bit checks on real files; they hold whoever runs them. The end-to-end case (a
runner under root refusing a private checkout) is in ``test_command_agent.py``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fulmen.agent.command import CommandAgentConfig
from fulmen.agent.command.access import blocked_for_others, check_rollout_access
from fulmen.agent.command.sandbox import interpreter_for
from fulmen.errors import ConfigError

PY = interpreter_for(61000)  # one that other users may run (the venv's may live under /root)


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder other users may enter (pytest's tmp_path is under a 0700 folder)."""
    folder = Path(tempfile.mkdtemp(prefix="fulmen-access-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_folder_above_the_file_that_others_cannot_enter_is_named(open_folder: Path) -> None:
    private = open_folder / "private"
    private.mkdir(mode=0o700)
    (private / "agent.py").write_text("print('hi')\n")
    (private / "agent.py").chmod(0o644)
    why = blocked_for_others(private / "agent.py", read=True, execute=False)
    assert why is not None and str(private) in why and "mode 700" in why
    private.chmod(0o711)  # searchable is enough to reach a file inside
    assert blocked_for_others(private / "agent.py", read=True, execute=False) is None
    (private / "agent.py").chmod(0o640)
    why = blocked_for_others(private / "agent.py", read=True, execute=False)
    assert why is not None and "may not be read" in why


def config_in(folder: Path, **fields: object) -> CommandAgentConfig:
    return CommandAgentConfig.model_validate({"config_dir": str(folder), **fields})


def test_a_script_beside_the_config_must_be_readable(open_folder: Path) -> None:
    (open_folder / "agent.py").write_text("print('hi')\n")
    (open_folder / "agent.py").chmod(0o600)
    config = config_in(open_folder, command=[PY, "${config_dir}/agent.py"])
    with pytest.raises(ConfigError) as caught:
        check_rollout_access(config)
    message = str(caught.value)
    assert "'${config_dir}/agent.py'" in message and "may not be read" in message
    assert "sandbox.user: runner" in message and "chmod o+rx" in message
    (open_folder / "agent.py").chmod(0o644)
    check_rollout_access(config)


def test_the_program_on_path_and_the_verifiers_files_are_checked(
    open_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = open_folder / "bin"
    tools.mkdir(mode=0o755)
    program = tools / "my-agent"
    program.write_text("#!/bin/sh\necho hi\n")
    program.chmod(0o711)  # runnable, but a #! script is read by its interpreter
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    with pytest.raises(ConfigError, match=r"'my-agent' is out of reach.*may not be read"):
        check_rollout_access(config_in(open_folder, command=["my-agent"]))
    program.chmod(0o755)
    check_rollout_access(config_in(open_folder, command=["my-agent"]))

    # As execvp does, an entry others may not run is passed over for a later one they may.
    private = open_folder / "private"
    private.mkdir(mode=0o700)
    (private / "my-agent").write_text("#!/bin/sh\necho shim\n")
    (private / "my-agent").chmod(0o755)
    monkeypatch.setenv("PATH", f"{private}:{tools}:/usr/bin:/bin")
    check_rollout_access(config_in(open_folder, command=["my-agent"]))
    monkeypatch.setenv("PATH", f"{private}:/usr/bin:/bin")
    with pytest.raises(ConfigError, match=f"folder {private} \\(mode 700\\)"):
        check_rollout_access(config_in(open_folder, command=["my-agent"]))
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    # A console script whose #! line names a Python others may not run (a venv under /root).
    (private / "python").write_text("")  # never run: the check reads permissions only
    (private / "python").chmod(0o755)
    program.write_text(f"#!{private / 'python'}\necho hi\n")
    with pytest.raises(ConfigError, match=r"'my-agent \(its #! line\)' is out of reach"):
        check_rollout_access(config_in(open_folder, command=["my-agent"]))
    program.write_text("#!/bin/sh\necho hi\n")

    verifier = open_folder / "verify.py"
    verifier.write_text("print(1)\n")
    verifier.chmod(0o600)
    config = config_in(
        open_folder, command=["my-agent"], verifier={"command": ["python3", str(verifier)]}
    )
    with pytest.raises(ConfigError, match=r"verify\.py' is out of reach"):
        check_rollout_access(config)


def test_config_dir_used_anywhere_must_be_enterable(open_folder: Path) -> None:
    private = open_folder / "private"
    private.mkdir(mode=0o700)
    config = config_in(private, command=["true"], env={"AGENT_HOME": "${config_dir}/data"})
    with pytest.raises(ConfigError, match=r"'\$\{config_dir\}' is out of reach.*not be run"):
        check_rollout_access(config)
    # Not named by the command line: the folder is not needed, so it is not checked.
    check_rollout_access(config_in(private, command=["true"]))


def test_what_a_rollout_fills_in_is_not_checked_up_front(open_folder: Path) -> None:
    private = open_folder / "private"
    private.mkdir(mode=0o700)
    config = config_in(open_folder, command=["true", "${task.path}", "${workdir}/x", "relative"])
    check_rollout_access(config)
