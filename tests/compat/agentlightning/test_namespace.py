"""Every module path and public name of Agent Lightning 0.2.2 and 0.3.0 resolves under the layer.

The released wheels are downloaded (``pip download``, no dependencies, into pytest's cache
directory) and read with ``ast``, never imported or copied: for every module, its export list
is its ``__all__``, or, for a package without one, what its ``from .x import *`` lines bring,
or else its public classes and functions. Under ``fulmen.compat.agentlightning`` each module
path must import or raise ``NotSupported``, and each name of an imported one must be the working
object or raise ``NotSupported`` saying what to write instead; no ``AttributeError``, no
``ImportError``. The names 0.x's examples import from modules without an export list are
checked too.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import fulmen.compat.agentlightning as agl
from fulmen.compat.agentlightning import names

VERSIONS = ("0.2.2", "0.3.0")
PACKAGE = "fulmen.compat.agentlightning"

# Names 0.x's examples (v0.2.2, v0.3.0) import from modules that declare no export list.
EXAMPLE_IMPORTS = [
    ("adapter.messages", "OpenAIMessages"),
    ("adapter.messages", "TraceToMessages"),
    ("adapter.triplet", "LlmProxyTraceToTriplet"),
    ("algorithm.utils", "batch_iter_over_dataset"),
    ("reward", "reward"),
    ("reward", "find_final_reward"),
    ("llm_proxy", "ModelConfig"),
    ("semconv", "LightningSpanAttributes"),
    ("store.mongo", "MongoLightningStore"),
    ("tracer.agentops", "AgentOpsTracer"),
    ("tracer.weave", "WeaveTracer"),
    ("utils.otel", "make_link_attributes"),
    ("env_var", "resolve_bool_env_var"),
]


@dataclass
class Release:
    """One 0.x wheel's modules (path → source, is a package), read with ``ast`` on demand."""

    version: str
    sources: dict[str, tuple[bytes, bool]]
    _exports: dict[str, set[str]] = field(default_factory=dict[str, set[str]])

    def exports(self, path: str) -> set[str]:
        """Return the module's export list (see the module docstring)."""
        if path in self._exports:
            return self._exports[path]
        source, is_package = self.sources[path]
        package = path if is_package else path.rpartition(".")[0]
        names: set[str] = set()
        stars: list[str] = []
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                self._exports[path] = set(ast.literal_eval(node.value))
                return self._exports[path]
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - node.level + 1] if node.level > 1 else base
                target = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    if alias.name == "*":
                        stars.append(target)
                    elif stars or not path:  # a package re-exporting its modules' names
                        names.add(alias.asname or alias.name)
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
        for star in stars:
            names |= self.exports(star)
        self._exports[path] = {n for n in names if not n.startswith("_")}
        return self._exports[path]


def _download(cache: Path) -> dict[str, Path]:
    """Download the wheels of ``VERSIONS`` into ``cache`` (at once; once per cache)."""
    wheels = {v: cache / f"agentlightning-{v}-py3-none-any.whl" for v in VERSIONS}
    missing = [v for v, wheel in wheels.items() if not wheel.exists()]
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    pip += ["--disable-pip-version-check", "-q", "-d", str(cache)]
    pips = {
        v: subprocess.Popen(
            [*pip, f"agentlightning=={v}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for v in missing
    }
    for version, process in pips.items():
        _, stderr = process.communicate(timeout=120)
        if process.returncode != 0 or not wheels[version].exists():
            reason = f"cannot download agentlightning=={version}: {stderr.strip()[-300:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)  # CI reaches PyPI: a skip there would hide the whole check
            pytest.skip(reason)
    return wheels


def _read(wheel: Path, version: str) -> Release:
    sources: dict[str, tuple[bytes, bool]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not name.startswith("agentlightning/") or not name.endswith(".py"):
                continue
            parts = name[: -len(".py")].split("/")
            is_package = parts[-1] == "__init__"
            path = ".".join(parts[1:-1] if is_package else parts[1:])
            if any(p.startswith("_") for p in path.split(".") if p):
                continue  # private modules and __main__
            sources[path] = (archive.read(name), is_package)
    return Release(version, sources)


@pytest.fixture(scope="module")
def wheels(request: pytest.FixtureRequest) -> dict[str, Path]:
    store = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    if store is not None:
        cache = Path(store.mkdir("agentlightning-wheels"))
    else:
        cache = Path(request.getfixturevalue("tmp_path_factory").mktemp("wheels"))
    return _download(cache)


@pytest.fixture(params=VERSIONS)
def release(request: pytest.FixtureRequest, wheels: dict[str, Path]) -> Release:
    version: str = request.param
    return _read(wheels[version], version)


def _import(path: str) -> object:
    """Import the module path under the layer; the module, or the ``NotSupported`` raised."""
    name = f"{PACKAGE}.{path}" if path else PACKAGE
    try:
        return importlib.import_module(name)
    except agl.NotSupported as refused:
        return refused


def test_every_module_path_and_name_resolves(release: Release) -> None:
    assert len(release.sources) > 60  # the whole wheel was read
    working = refused = 0
    for path in sorted(release.sources):
        module = _import(path)
        if isinstance(module, agl.NotSupported):
            assert module.detail["instead"], path
            refused += 1
            continue
        for name in sorted(release.exports(path)):
            try:
                value = getattr(module, name)
            except agl.NotSupported as exc:
                assert exc.detail["instead"], f"{path}.{name}"
                refused += 1
                continue
            assert value is not None, f"agentlightning.{path}.{name}"
            working += 1
    # Most of what 0.x users import works; the refusals are the machinery fulmen runs itself.
    assert working > 100 and refused > 0


def test_names_0x_examples_import_resolve() -> None:
    for path, name in EXAMPLE_IMPORTS:
        try:
            module = importlib.import_module(f"{PACKAGE}.{path}")
            value = getattr(module, name)
        except agl.NotSupported as exc:
            assert exc.detail["instead"]
            continue
        assert value is getattr(agl, name, value)  # one object, whatever the path


def test_a_name_is_the_same_object_on_every_path() -> None:
    from fulmen.compat.agentlightning.algorithm.apo import APO
    from fulmen.compat.agentlightning.litagent.litagent import LitAgent
    from fulmen.compat.agentlightning.types.core import Dataset
    from fulmen.compat.agentlightning.types.resources import PromptTemplate

    assert (APO, LitAgent, Dataset, PromptTemplate) == (
        agl.APO, agl.LitAgent, agl.Dataset, agl.PromptTemplate,
    )  # fmt: skip
    assert agl.reward is agl.emitter.reward  # the decorator, not the module, as in 0.x
    assert agl.Trainer.fit_v0 is not None and agl.setup_logging is agl.logging.setup


def test_unknown_names_and_paths_are_errors_not_refusals() -> None:
    with pytest.raises(AttributeError):
        _ = agl.NoSuchName  # type: ignore[attr-defined]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"{PACKAGE}.no_such_module")
    with pytest.raises(AttributeError):
        _ = importlib.import_module(f"{PACKAGE}.types").NoSuchName
    assert names.MODULES["verl"] is not None  # 0.x's VERL internals: refused on import
    with pytest.raises(agl.NotSupported, match=r"agentlightning\.verl is not supported.*agl\.VERL"):
        importlib.import_module(f"{PACKAGE}.verl.trainer")
