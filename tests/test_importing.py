import sys
from pathlib import Path

import pytest

from fulmen.errors import ConfigError
from fulmen.importing import import_object, put_first_on_sys_path


def test_a_dotted_attribute_path_is_followed() -> None:
    assert import_object("os.path:join.__name__", what="x") == "join"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("os.path", "algorithm.tidy must look like 'module:attribute', got 'os.path'"),
        (":join", "must look like"),
        ("no_such_module_xyz:f", "cannot import algorithm.tidy 'no_such_module_xyz:f'"),
        ("os.path:no_such_attribute", "cannot import algorithm.tidy 'os.path:no_such_attribute'"),
    ],
)
def test_a_name_that_cannot_be_imported_is_a_config_error_naming_the_option(
    spec: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        import_object(spec, what="algorithm.tidy")


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("import os\n\n\ndef run(task):\n    x = = 1\n", 5),  # a SyntaxError has no frame there
        ("import os\n\nVALUE = undefined_name\n", 3),
        ("import os\nimport no_such_package_xyz\n", 2),
    ],
)
def test_an_import_error_names_the_users_file_and_line_not_importlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, line: int
) -> None:
    module = f"user_agent_{line}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as raised:
        import_object(f"{module}:run", what="agent")
    assert f"(at {tmp_path / module}.py:{line})" in raised.value.message
    assert "importlib" not in raised.value.message


def test_a_module_that_does_not_exist_names_no_line_of_importlib() -> None:
    with pytest.raises(ConfigError) as raised:
        import_object("no_such_module_xyz:run", what="agent")
    assert raised.value.message == (
        "cannot import agent 'no_such_module_xyz:run': No module named 'no_such_module_xyz'"
    )


def test_a_python_path_entry_moves_ahead_of_an_older_folder_with_a_module_of_the_same_name(
    tmp_path: Path,
) -> None:
    # CI once imported another test's ``agent.py`` this way: an in-process run's folder stayed
    # on sys.path ahead of the toy example's, which was already there and so was not moved.
    old, new = tmp_path / "old", tmp_path / "new"
    for folder in (old, new):
        folder.mkdir()
        (folder / "agent_shadow_probe.py").write_text(f"WHERE = {folder.name!r}\n")
    put_first_on_sys_path([new])
    put_first_on_sys_path([old])
    put_first_on_sys_path([new, tmp_path])
    assert import_object("agent_shadow_probe:WHERE", what="agent") == "new"
    assert sys.path[:2] == [str(new), str(tmp_path)]
    assert sys.path.count(str(new)) == 1
