"""Where the run commands read runs: one store, or the stores of several run folders.

``fulmen train`` records a run in its own folder's store (``RUN_DIR/store.db``), so two runs
of two configs live in two stores. ``fulmen runs list|compare|suggest`` and ``fulmen models
list`` read several at once: each SOURCE is

* a store URL (``sqlite:///PATH.db``, ``http://HOST:PORT``, ``postgresql://...``),
* a SQLite file (``PATH.db``),
* a run folder (a folder holding ``store.db``: that store),
* a folder of run folders (``runs/``: every ``store.db`` below it).

Without a SOURCE a command reads the one store of ``--store`` (``$FULMEN_STORE_URL``), as
before. Runs trained with one shared ``store_url`` (or ``--store sqlite:///...``) are all in
that store and need no SOURCE.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.cli.store import cli_settings, open_cli_store, store_address, store_options
from fulmen.errors import ConfigError, NotFound

if TYPE_CHECKING:
    from fulmen.store import Store
    from fulmen.types import Run

__all__ = [
    "OpenSource",
    "Source",
    "add_sources_argument",
    "all_runs",
    "find_run",
    "only_run",
    "open_sources",
    "resolve_source",
    "resolve_sources",
]

_STORE_FILE = "store.db"


@dataclass(frozen=True)
class Source:
    """One store to read: its ``url`` and the ``label`` the tables show (a folder or the URL)."""

    url: str
    label: str


@dataclass(frozen=True)
class OpenSource:
    """An opened ``Source`` and its store."""

    source: Source
    store: Store


def add_sources_argument(parser: argparse.ArgumentParser) -> None:
    """Add the positional ``SOURCE ...`` of a command that reads several stores."""
    parser.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="run folders (each holds store.db), folders of run folders (every */store.db "
        "below), .db files or store URLs to read together (default: the one store of --store)",
    )


def _looks_like_url(text: str) -> bool:
    return "://" in text


def resolve_source(text: str) -> list[Source]:
    """Return the stores ``text`` names (see the module docstring); raise ``ConfigError`` if none.

    A folder of run folders yields its stores in path order.
    """
    if _looks_like_url(text):
        return [Source(url=text, label=text)]
    path = Path(text).expanduser()
    if path.is_file():
        return [Source(url=f"sqlite:///{path.resolve()}", label=text)]
    if not path.is_dir():
        raise ConfigError(
            f"{text!r} is neither a store URL nor an existing run folder, folder of run folders "
            "or .db file"
        )
    if (path / _STORE_FILE).is_file():
        return [Source(url=f"sqlite:///{(path / _STORE_FILE).resolve()}", label=text)]
    found = sorted(path.rglob(_STORE_FILE))
    if not found:
        raise ConfigError(
            f"no run folder in {text!r}: no {_STORE_FILE} below it (a run folder is the "
            "run_dir of a training config)"
        )
    return [
        Source(url=f"sqlite:///{db.resolve()}", label=str(Path(text) / db.parent.relative_to(path)))
        for db in found
    ]


def resolve_sources(texts: Sequence[str]) -> list[Source]:
    """Resolve every SOURCE in order; a store named twice is read once."""
    out: dict[str, Source] = {}
    for text in texts:
        for source in resolve_source(text):
            out.setdefault(source.url, source)
    return list(out.values())


def _folders_hint() -> str:
    """Point at the run folders here: where ``fulmen train`` records runs by default."""
    cwd = Path.cwd()
    here = [*cwd.glob(f"*/{_STORE_FILE}"), *cwd.glob(f"*/*/{_STORE_FILE}")]
    if here:
        parents = sorted({db.parent.parent.relative_to(cwd).as_posix() + "/" for db in here})
        return f"or name run folders as SOURCEs (here: {' '.join(parents)})"
    return "or name run folders as SOURCEs (each run's RUN_DIR holds its store.db)"


@contextlib.asynccontextmanager
async def open_sources(
    args: argparse.Namespace, sources: Sequence[Source]
) -> AsyncIterator[list[OpenSource]]:
    """Open ``sources`` (none: the store of ``--store``) for reading, without watchdogs.

    A protected ``http(s)://`` source gets ``--token`` (``$FULMEN_STORE_TOKEN``).
    """
    from fulmen.store import open_store

    async with contextlib.AsyncExitStack() as stack:
        if not sources:
            try:
                store = await stack.enter_async_context(open_cli_store(args))
            except ConfigError as exc:
                raise ConfigError(f"{exc.message}; {_folders_hint()}") from None
            url = store_address(args)[0]
            yield [OpenSource(Source(url=url, label=url), store)]
            return
        token = args.token or cli_settings(args).store_token
        opened: list[OpenSource] = []
        for source in sources:
            options = store_options(source.url, token) or {"watchdog_interval": None}
            store = await stack.enter_async_context(open_store(source.url, **options))
            opened.append(OpenSource(source, store))
        yield opened


async def all_runs(store: Store) -> list[Run]:
    """Return every run of ``store``, latest started first (``list_runs`` page by page)."""
    runs: list[Run] = []
    offset: int | None = 0
    while offset is not None:
        page = await store.list_runs(limit=500, offset=offset)
        runs += page.items
        offset = page.next_cursor
    return runs


async def find_run(opened: Sequence[OpenSource], run_id: str) -> OpenSource:
    """Return the opened store that holds ``run_id``; ``NotFound`` names the stores searched.

    A run id found in several stores (a run folder copied) is ambiguous: ``ConfigError``.
    """
    holders: list[OpenSource] = []
    for item in opened:
        try:
            await item.store.get_run(run_id)
        except NotFound:
            continue
        holders.append(item)
    if not holders:
        searched = ", ".join(o.source.label for o in opened)
        raise NotFound(f"run {run_id!r} does not exist in {searched}")
    if len(holders) > 1:
        raise ConfigError(
            f"run {run_id!r} is in several stores ({', '.join(h.source.label for h in holders)}): "
            "name the one to read as the only SOURCE"
        )
    return holders[0]


async def only_run(item: OpenSource) -> str:
    """Return the id of the run a run folder's store holds (the latest started if several)."""
    runs = await all_runs(item.store)
    if not runs:
        raise NotFound(f"{item.source.label} holds no run")
    return runs[0].run_id
