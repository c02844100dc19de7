"""Which optional package comes with which fulmen extra, and the install hint for a missing one.

``fulmen doctor`` lists these packages; the root command turns a ``ModuleNotFoundError`` for one
of them into a one-line error that names the extra to install instead of a traceback, and an
engine that failed to start names the extra its log's missing module comes with. A module of
the lowest layer (no imports of fulmen), so every component can name an extra.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OPTIONAL_PACKAGES", "OptionalPackage", "install_hint", "package_of_module"]


@dataclass(frozen=True)
class OptionalPackage:
    """An optional dependency: its import name, the extra that installs it, what it is for.

    Attributes:
        module: the import name (``torch``).
        extra: the fulmen extra that installs it (``engine``); ``pip install 'fulmen[extra]'``.
        needed_for: what needs it, in a few words.
        distribution: the PyPI distribution's name, when it differs from ``module``.
    """

    module: str
    extra: str
    needed_for: str
    distribution: str = ""

    def __post_init__(self) -> None:
        if not self.distribution:
            object.__setattr__(self, "distribution", self.module)

    @property
    def hint(self) -> str:
        """The install command that brings this package."""
        return f"pip install 'fulmen[{self.extra}]'"


# The order is the order `fulmen doctor` prints them in.
OPTIONAL_PACKAGES: tuple[OptionalPackage, ...] = (
    OptionalPackage("torch", "engine", "the built-in engine and training"),
    OptionalPackage("transformers", "engine", "the built-in engine and training"),
    OptionalPackage("peft", "engine", "LoRA training and hot-loading"),
    OptionalPackage("accelerate", "engine", "loading models"),
    OptionalPackage("tqdm", "train", "fulmen train's progress bar"),
    OptionalPackage("tensorboardX", "tensorboard", "metrics.sinks: tensorboard"),
    OptionalPackage("wandb", "wandb", "metrics.sinks: wandb"),
    OptionalPackage("mlflow", "mlflow", "metrics.sinks: mlflow", "mlflow-skinny"),
    OptionalPackage("gguf", "gemma", "the gemma-3-270m model"),
    OptionalPackage("asyncpg", "postgres", "postgresql:// stores"),
    OptionalPackage("pyarrow", "export", "fulmen export ... --out F.parquet"),
    OptionalPackage("openai", "examples", "the agents under examples/"),
    OptionalPackage(
        "reasoning_gym", "reasoning-gym", "environment: library: reasoning_gym", "reasoning-gym"
    ),
    OptionalPackage("textarena", "textarena", "environment: library: textarena"),
    OptionalPackage("verifiers", "verifiers", "environment: library: verifiers"),
    OptionalPackage("openenv", "openenv", "environment: library: openenv"),
    OptionalPackage(
        "openinference.instrumentation.langchain",
        "instrument",
        "LangGraph node names as agent names",
        "openinference-instrumentation-langchain",
    ),
)


def package_of_module(name: str | None) -> OptionalPackage | None:
    """Return the optional package a missing module (``ModuleNotFoundError.name``) belongs to.

    ``torch.nn`` maps to ``torch``; a module fulmen does not know returns ``None``.
    """
    if not name:
        return None
    for package in OPTIONAL_PACKAGES:
        if name == package.module or name.startswith(package.module + "."):
            return package
    root = name.split(".", 1)[0]
    for package in OPTIONAL_PACKAGES:
        if package.module == root:
            return package
    return None


def install_hint(error: ModuleNotFoundError) -> str | None:
    """Return the one-line message for a missing optional package, or ``None`` if it is not one."""
    package = package_of_module(error.name)
    if package is None:
        return None
    return f"the {error.name!r} package is missing ({package.needed_for}): {package.hint}"
