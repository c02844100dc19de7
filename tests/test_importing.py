import pytest

from fulmen.errors import ConfigError
from fulmen.importing import import_object


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
