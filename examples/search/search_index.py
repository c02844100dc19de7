"""A full-text index over the generated corpus: SQLite FTS5, ranked by BM25.

The index is built once per process in memory (3,600 short passages take a few milliseconds)
from ``search_world.make_world``. A query is free text: its words are OR-ed (FTS5 would AND
them and find nothing for "founder of Velora Labs"), and ``bm25()`` ranks the matches with a
title match weighted above a body match, so searching an entity's name returns that entity's
own passages first.
"""

from __future__ import annotations

import functools
import re
import sqlite3

from search_world import make_world

__all__ = ["TITLE_WEIGHT", "PassageIndex", "fts_query", "open_index"]

#: BM25 weight of the title column relative to the text column.
TITLE_WEIGHT = 4.0
_WORD = re.compile(r"\w+")
_MAX_TERMS = 16


def fts_query(text: str) -> str | None:
    """The FTS5 MATCH expression for free text: each word quoted, OR-ed; ``None`` if no word.

    >>> fts_query('founder of "Velora Labs"?')
    '"founder" OR "of" OR "Velora" OR "Labs"'
    """
    words = _WORD.findall(text)[:_MAX_TERMS]
    return " OR ".join(f'"{w}"' for w in words) or None


class PassageIndex:
    """Passages in an FTS5 table (porter stemming), searched with BM25."""

    def __init__(self, passages: list[tuple[str, str]]) -> None:
        # check_same_thread=False: the SDK may run a sync tool in a worker thread; the
        # connection is only read after the build.
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE VIRTUAL TABLE passages USING fts5(title, text, tokenize='porter unicode61')"
        )
        self._db.executemany("INSERT INTO passages (title, text) VALUES (?, ?)", passages)
        self._db.commit()
        self.size = len(passages)

    def search(self, query: str, k: int = 3) -> list[str]:
        """The texts of the ``k`` best passages for ``query`` (best first; none for no words)."""
        match = fts_query(query)
        if match is None:
            return []
        rows = self._db.execute(
            "SELECT text FROM passages WHERE passages MATCH ? "
            "ORDER BY bm25(passages, ?, 1.0), rowid LIMIT ?",
            (match, TITLE_WEIGHT, k),
        ).fetchall()
        return [text for (text,) in rows]


@functools.cache
def open_index(seed: int = 0) -> PassageIndex:
    """The index of the world for ``seed``, built on first use and shared by the process."""
    return PassageIndex(make_world(seed).passages())
