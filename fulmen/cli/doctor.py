"""``fulmen doctor``: check this environment and say what to fix.

Checks, in order: the Python version, that ``fulmen`` is on the PATH, the optional packages and
which extra brings each, the torch build (CPU or CUDA, and whether a GPU is there for it), the
model cache, and, when given, an inference engine (``--engine URL``) and a store (``--store URL``
with its token). Each check prints one line: ``ok``, ``--`` (optional, not there) or ``FAIL``,
with the command that fixes it. The exit code is 1 when a required check failed: an engine or
store that was asked for and does not answer, or a package of an extra named with ``--need``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fulmen.cli.parsers import add_command, arg
from fulmen.cli.store import add_store_options, cli_settings, open_cli_store, run_async
from fulmen.errors import FulmenError
from fulmen.extras import OPTIONAL_PACKAGES, install_hint

__all__ = ["Check", "register", "run_checks"]

_MARKS = {"ok": "ok  ", "optional": "--  ", "fail": "FAIL"}
_CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Check:
    """The outcome of one check.

    Attributes:
        state: ``ok``; ``optional`` (something optional is missing: a hint, not a failure);
            ``fail`` (something required or asked for does not work).
        title: what was checked, with what was found.
        fix: the command or step that fixes it (empty when nothing is to fix).
    """

    state: Literal["ok", "optional", "fail"]
    title: str
    fix: str = ""

    def line(self) -> str:
        """Render the check as one console line (two when there is a fix)."""
        text = f"{_MARKS[self.state]}  {self.title}"
        return text + (f"\n      fix: {self.fix}" if self.fix else "")


def _python() -> Check:
    version = ".".join(str(p) for p in sys.version_info[:3])
    return Check("ok", f"python {version} at {sys.executable}")


def _on_path() -> Check:
    found = shutil.which("fulmen")
    scripts = Path(sys.executable).parent
    if found is None:
        return Check(
            "optional",
            "`fulmen` is not on the PATH",
            f"source {scripts / 'activate'}   (or run {scripts / 'fulmen'})",
        )
    return Check("ok", f"fulmen {_version('fulmen')} on the PATH at {found}")


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _packages(needed: set[str]) -> list[Check]:
    checks = []
    for package in OPTIONAL_PACKAGES:
        # find_spec instead of an import: transformers and friends take seconds to import.
        try:
            found = importlib.util.find_spec(package.module) is not None
        except ImportError:  # a dotted name whose parent package is missing
            found = False
        if not found:
            state: Literal["optional", "fail"] = "fail" if package.extra in needed else "optional"
            checks.append(
                Check(state, f"{package.module}: not installed ({package.needed_for})",
                      package.hint)
            )  # fmt: skip
            continue
        checks.append(Check("ok", f"{package.module} {_version(package.distribution)}"))
    return checks


def _torch_build() -> Check | None:
    try:
        import torch
    except ImportError:
        return None  # reported with the packages
    cuda = torch.version.cuda
    if cuda is None:
        return Check("ok", f"torch {torch.__version__}: CPU build")
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return Check("ok", f"torch {torch.__version__}: CUDA {cuda} build, GPU {name}")
    return Check(
        "optional",
        f"torch {torch.__version__}: CUDA {cuda} build but no GPU is visible (a CPU build is "
        "several GB smaller and works the same here)",
        _CPU_TORCH,
    )


def _model_cache(cache_dir: Path) -> Check:
    if not cache_dir.is_dir():
        return Check("ok", f"model cache {cache_dir}: empty (models are built there on first use)")
    models = sorted(p.name for p in cache_dir.iterdir() if p.is_dir())
    listed = ", ".join(models) if models else "empty"
    return Check("ok", f"model cache {cache_dir}: {listed}")


async def _engine(url: str) -> Check:
    import httpx

    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.get(f"{base}/models")
    except httpx.HTTPError as exc:
        return Check(
            "fail",
            f"engine {base}: unreachable ({exc!r})",
            "start one: fulmen serve --model tiny --port 8000 (then --engine "
            "http://127.0.0.1:8000/v1)",
        )
    if response.status_code != 200:
        return Check(
            "fail",
            f"engine {base}: GET /models answered {response.status_code}",
            "give the engine's OpenAI base URL, e.g. http://127.0.0.1:8000/v1",
        )
    try:
        ids = [str(m.get("id")) for m in response.json().get("data", [])]
    except (ValueError, AttributeError):
        ids = []
    return Check("ok", f"engine {base}: serving {', '.join(ids) or 'no models'}")


async def _store(args: argparse.Namespace, url: str, token: str | None) -> list[Check]:
    from fulmen.store.urls import is_service_url

    is_http = is_service_url(url)
    checks: list[Check] = []
    if is_http:
        if token:
            checks.append(Check("ok", "store token set (--token or $FULMEN_STORE_TOKEN)"))
        else:
            checks.append(
                Check("optional", "no store token set (needed when the store has one)",
                      "pass --token TOKEN or export FULMEN_STORE_TOKEN=TOKEN")
            )  # fmt: skip
    try:
        async with open_cli_store(args) as store:
            stats = await store.stats()
    except FulmenError as exc:
        fix = "check the URL; start one with `fulmen store serve --db runs.db`"
        if "token" in exc.message.lower():
            fix = "pass the store's token with --token or $FULMEN_STORE_TOKEN"
        return [*checks, Check("fail", f"store {url}: {exc.message}", fix)]
    except ModuleNotFoundError as exc:
        hint = install_hint(exc) or f"pip install {exc.name}"
        return [*checks, Check("fail", f"store {url}: the {exc.name!r} package is missing", hint)]
    rollouts = sum(stats.rollouts.values())
    accepted = " (token accepted)" if is_http and token else ""
    checks.append(
        Check("ok", f"store {url}: reachable{accepted}, {rollouts} rollouts, "
                    f"{stats.resources_versions} resources versions")
    )  # fmt: skip
    return checks


def run_checks(args: argparse.Namespace) -> list[Check]:
    """Run every check ``args`` asks for and return them in print order."""
    from fulmen.cli.store import store_address

    settings = cli_settings(args)
    checks = [_python(), _on_path(), *_packages(set(args.need or ()))]
    torch_check = _torch_build()
    if torch_check is not None:
        checks.append(torch_check)
    checks.append(_model_cache(settings.cache_dir))
    if settings.vllm_python:
        exists = os.access(settings.vllm_python, os.X_OK)
        checks.append(
            Check("ok", f"vLLM interpreter {settings.vllm_python}")
            if exists
            else Check("fail", f"$FULMEN_VLLM_PYTHON={settings.vllm_python} is not executable",
                       "point it at the python of the environment where vllm is installed")
        )  # fmt: skip
    gateway = "set" if settings.gateway_token else "not set (only loopback gateways work)"
    checks.append(Check("ok", f"gateway token ($FULMEN_GATEWAY_TOKEN): {gateway}"))

    async def remote() -> list[Check]:
        found: list[Check] = []
        if args.engine:
            found.append(await _engine(args.engine))
        if args.store or settings.store_url:
            url, token = store_address(args)
            found += await _store(args, url, token)
        return found

    return checks + run_async(remote)


def _doctor(args: argparse.Namespace) -> int:
    checks = run_checks(args)
    for check in checks:
        print(check.line())
    failed = [c for c in checks if c.state == "fail"]
    if failed:
        print(f"\n{len(failed)} check(s) failed")
        return 1
    print("\nall required checks passed")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``doctor`` subcommand."""
    add_command(
        subparsers,
        "doctor",
        _doctor,
        arg("--engine", metavar="URL", help="an inference engine to reach"),
        arg(
            "--need",
            action="append",
            choices=sorted({p.extra for p in OPTIONAL_PACKAGES}),
            metavar="EXTRA",
            help="fail unless this extra's packages are installed (repeatable), e.g. --need train",
        ),
        add_store_options,
        help="check the environment (packages, torch build, engine, store) and say what to fix",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        epilog="example: fulmen doctor --engine http://127.0.0.1:8000/v1 "
        "--store http://127.0.0.1:4747 --token $TOKEN",
    )
