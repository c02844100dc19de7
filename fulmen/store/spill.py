"""``SpillQueue``: a FIFO of records for the store, bounded in memory, spilling to a local file.

Runners (spans) and gateways (call records) queue what they write to the store. While the store
is away that queue grows; a ``SpillQueue`` keeps at most ``max_in_memory`` items in memory and
appends the rest to a JSONL spill file (written and fsync'd in batches of ``spill_batch``).
Items come out in the order they went in: first those in memory, then those in the file, then
the newest, not yet written ones. A batch taken from the file is deleted from it only once the
consumer acknowledges it (``ack``); a batch that could not be stored is put back (``requeue``)
and comes out first again. When everything in the file is acknowledged the file is deleted and
new items stay in memory again. The writes it feeds are idempotent by the records' own ids
(span ids, call ids), so an item replayed after a failure lands in the store exactly once.

One consumer takes batches (one at a time); any thread may append.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Generic, TypeVar

__all__ = ["SpillBatch", "SpillQueue"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class SpillBatch(Generic[T, R]):
    """Items taken from a ``SpillQueue``: ``memory`` as queued, ``records`` read from the file."""

    memory: list[T] = field(default_factory=lambda: [])
    records: list[R] = field(default_factory=lambda: [])
    file_end: int = 0  # file offset after the last record taken

    def __len__(self) -> int:
        return len(self.memory) + len(self.records)


class SpillQueue(Generic[T, R]):
    """A FIFO of ``T`` items holding at most ``max_in_memory`` of them in memory.

    Args:
        encode: turns an item into one JSON line (no newline) for the file, or ``None`` when the
            item cannot be stored at all (it is then counted in ``unencodable``).
        decode: turns a line of the file back into a record ``R`` the consumer can store.
        max_in_memory: items kept in memory; beyond this they go to the spill file.
        directory: where the spill file is created (default: a new temporary directory).
        name: a prefix for the file name (the pid and a random suffix follow).
        spill_batch: items written (and fsync'd) to the file together.
    """

    def __init__(
        self,
        *,
        encode: Callable[[T], bytes | None],
        decode: Callable[[bytes], R],
        max_in_memory: int,
        directory: Path | None = None,
        name: str = "spill",
        spill_batch: int = 64,
    ) -> None:
        if max_in_memory < 1:
            raise ValueError(f"max_in_memory must be at least 1, got {max_in_memory}")
        if spill_batch < 1:
            raise ValueError(f"spill_batch must be at least 1, got {spill_batch}")
        self._encode = encode
        self._decode = decode
        self._max = max_in_memory
        self._directory = directory
        self._keeps_files = directory is not None  # unsent items outlive the process there
        self._name = name
        self._spill_batch = spill_batch
        self._lock = threading.Lock()
        self._memory: deque[T] = deque()
        self._staged: list[T] = []  # overflow not yet written to the file
        self._path: Path | None = None
        self._writer: IO[bytes] | None = None
        self._made_directory = False
        self._read_pos = 0  # offset of the first record not yet taken
        self._ack_pos = 0  # offset of the first record not yet acknowledged
        self._file_items = 0  # records in the file not yet acknowledged
        self._taken_from_file = 0
        self.spilled = 0  # items ever written to the file
        self.unencodable = 0

    # -- producers (any thread) -----------------------------------------------------------------

    def append(self, items: Iterable[T]) -> None:
        """Queue ``items`` after everything queued so far; never waits for the store."""
        with self._lock:
            for item in items:
                if self._path is None and not self._staged and len(self._memory) < self._max:
                    self._memory.append(item)
                else:
                    self._staged.append(item)
            if len(self._staged) >= self._spill_batch:
                self._write_staged()

    def persist(self) -> None:
        """Write the overflow that waits for a full spill batch to the file now (and fsync)."""
        with self._lock:
            self._write_staged()

    # -- the consumer ---------------------------------------------------------------------------

    def __len__(self) -> int:
        """Items queued and not yet acknowledged, wherever they are."""
        with self._lock:
            return len(self._memory) + len(self._staged) + self._file_items - self._taken_from_file

    @property
    def in_memory(self) -> int:
        """Items held in memory now (the queue's own memory bound applies to this)."""
        with self._lock:
            return len(self._memory) + len(self._staged)

    @property
    def path(self) -> Path | None:
        """The spill file while one exists."""
        return self._path

    def take(self, limit: int) -> SpillBatch[T, R]:
        """Take up to ``limit`` items from the head; ``ack`` or ``requeue`` them afterwards."""
        with self._lock:
            if self._taken_from_file:
                raise RuntimeError("the previous batch taken from the spill file is still open")
            batch: SpillBatch[T, R] = SpillBatch()
            while self._memory and len(batch.memory) < limit:
                batch.memory.append(self._memory.popleft())
            if batch.memory or (self._path is None and not self._staged):
                return batch
            self._write_staged()  # the file's records come before the staged ones
            batch.records, batch.file_end = self._read(limit)
            self._taken_from_file = len(batch.records)
            return batch

    def ack(self, batch: SpillBatch[T, R]) -> None:
        """Forget the stored items of ``batch``; a spill file read to its end is deleted."""
        with self._lock:
            if not batch.records:
                return
            self._ack_pos = self._read_pos = batch.file_end
            self._file_items -= len(batch.records)
            self._taken_from_file = 0
            if self._file_items == 0 and not self._staged:
                self._delete_file()

    def requeue(self, batch: SpillBatch[T, R]) -> None:
        """Put back the items of ``batch``, which were not stored: they come out first again."""
        with self._lock:
            self._memory.extendleft(reversed(batch.memory))
            if batch.records:
                self._read_pos = self._ack_pos
                self._taken_from_file = 0

    def close(self) -> None:
        """Close the queue, keeping what was not stored when that can be picked up later.

        With a ``directory`` given, every unsent item (those in memory first, in order) is left
        in the spill file, for ``adopt_orphans`` of the next process that uses the directory.
        Without one, the overflow file is kept but nothing adopts it; items in memory are lost.
        """
        with self._lock:
            if self._keeps_files and (self._memory or self._staged or self._file_items):
                self._rewrite_memory_first()
            else:
                self._write_staged()
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self._path is not None and self._file_items:
                logger.error("%d records left unsent in %s", self._file_items, self._path)

    def adopt_orphans(self) -> int:
        """Take over the spill files nobody holds in ``directory`` (same ``name``).

        A queue holds a lock on its file while it lives; files of processes that died, or of
        queues that closed while the store was away, are orphans.

        Their records come out before anything queued here, oldest file first. Each file is
        claimed by renaming it, so two processes starting together never both replay it.
        Call before queueing anything; returns how many records were adopted.
        """
        directory = self._directory
        if not self._keeps_files or directory is None or not directory.is_dir():
            return 0
        with self._lock:
            if self._path is not None or self._memory or self._staged:
                raise RuntimeError("adopt_orphans must run before anything is queued")
            orphans = [p for p in directory.glob(f"{self._name}-*.jsonl") if _is_orphan(p)]
            adopted = 0
            for orphan in sorted(orphans, key=lambda p: p.stat().st_mtime):
                claimed = orphan.with_name(f".{orphan.name}.adopted-{os.getpid()}")
                try:
                    orphan.rename(claimed)
                except OSError:
                    continue  # another process claimed it first
                data = claimed.read_bytes()
                complete = data[: data.rfind(b"\n") + 1]  # a line cut short by a crash is lost
                writer = self._open_writer()
                writer.write(complete)
                writer.flush()
                os.fsync(writer.fileno())
                self._file_items += complete.count(b"\n")
                adopted += complete.count(b"\n")
                claimed.unlink()
            if adopted:
                logger.warning("replaying %d records spilled by earlier processes", adopted)
            return adopted

    # -- the file (under the lock) --------------------------------------------------------------

    def _rewrite_memory_first(self) -> None:
        """Leave every unsent item in the spill file: memory, then the file's rest, then staged."""
        head = [line for line in map(self._encode, self._memory) if line is not None]
        tail = [line for line in map(self._encode, self._staged) if line is not None]
        rest = b""
        if self._path is not None:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            with self._path.open("rb") as reader:
                reader.seek(self._ack_pos)
                rest = reader.read()
                rest = rest[: rest.rfind(b"\n") + 1]
        if self._path is None:
            self._open_writer().close()
            self._writer = None
        path = self._path
        if path is None:
            raise RuntimeError("the spill file could not be created")
        temporary = path.with_name(f".{path.name}.tmp")
        with temporary.open("wb") as out:
            out.write(b"".join(line + b"\n" for line in head) + rest)
            out.write(b"".join(line + b"\n" for line in tail))
            out.flush()
            os.fsync(out.fileno())
        temporary.replace(path)
        self._memory.clear()
        self._staged.clear()
        self._file_items = len(head) + rest.count(b"\n") + len(tail)
        self._read_pos = self._ack_pos = 0

    def _write_staged(self) -> None:
        if not self._staged:
            return
        lines: list[bytes] = []
        for item in self._staged:
            line = self._encode(item)
            if line is None:
                self.unencodable += 1
            else:
                lines.append(line + b"\n")
        self._staged.clear()
        if not lines:
            return
        writer = self._open_writer()
        writer.write(b"".join(lines))
        writer.flush()
        os.fsync(writer.fileno())
        self._file_items += len(lines)
        self.spilled += len(lines)

    def _open_writer(self) -> IO[bytes]:
        if self._writer is None:
            if self._directory is None:
                self._made_directory = True  # removed again once its file is replayed
            directory = self._directory or Path(tempfile.mkdtemp(prefix="fulmen-spill-"))
            directory.mkdir(parents=True, exist_ok=True)
            self._directory = directory
            self._path = directory / f"{self._name}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
            self._writer = self._path.open("ab")
            # Held while this queue owns the file; a file nobody holds is an orphan to adopt.
            fcntl.flock(self._writer.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._read_pos = self._ack_pos = 0
            logger.warning("store unreachable: spilling records to %s", self._path)
        return self._writer

    def _read(self, limit: int) -> tuple[list[R], int]:
        if self._path is None:
            return [], self._read_pos
        records: list[R] = []
        with self._path.open("rb") as reader:
            reader.seek(self._read_pos)
            position = self._read_pos
            while len(records) < limit:
                line = reader.readline()
                if not line.endswith(b"\n"):
                    break  # end of file (or a line cut short by a crash: never acknowledged)
                position += len(line)
                records.append(self._decode(line))
        return records, position

    def _delete_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            logger.warning("spill file %s replayed to the store and deleted", self._path)
            if self._made_directory:
                with contextlib.suppress(OSError):
                    self._path.parent.rmdir()
                self._directory = None
                self._made_directory = False
            self._path = None
        self._read_pos = self._ack_pos = 0


def _is_orphan(path: Path) -> bool:
    """Whether no live queue holds the spill file ``path`` (its owner died or closed it)."""
    try:
        with path.open("rb") as probe:
            fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its owner is alive and holds it
    except OSError:
        return False  # gone meanwhile
    return True
