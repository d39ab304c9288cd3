"""Writing result files whole or not at all, and one clear line when the disk is full.

Every figure, table and derived file the testbed writes goes through `replacing()`: the content is written to a
temporary file beside the target and renamed over it only once complete, so a reader (a PDF viewer, pandas, the
next sweep) sees the old file or the new one, never half of one, and a failed write leaves the old file as it was.
A write that fails for lack of space (ENOSPC, EDQUOT) raises DiskFull, whose message is one line naming the path and
the space left on its file system.
"""
from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(OSError):
    """A write failed for lack of space: str() is one line naming the path and the free space."""

    def __str__(self) -> str:
        return str(self.strerror)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def room(path) -> str:
    """'<free> free of <total> on <the folder>' of the file system holding `path` (its nearest existing folder)."""
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        du = shutil.disk_usage(where)
    except OSError:
        return f"free space unknown on {where}"
    return f"{_size(du.free)} free of {_size(du.total)} on {where.resolve()}"


def disk_full(path, err: OSError) -> DiskFull:
    """DiskFull for a write of `path` that failed with `err`: 'cannot write PATH: no space left on device (FREE
    free of TOTAL on FOLDER)'."""
    path = Path(path)
    return DiskFull(err.errno, f"cannot write {path}: {os.strerror(err.errno).lower()} ({room(path.parent)})")


def is_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in FULL


@contextmanager
def replacing(path):
    """Yields a temporary path beside `path` to write; renamed over `path` when the block ends without an error,
    removed otherwise. A failure for lack of space is raised as DiskFull (one line naming `path` and the space)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as e:
        if is_full(e) and not isinstance(e, DiskFull):
            raise disk_full(path, e) from e
        raise
    finally:
        tmp.unlink(missing_ok=True)


def overwrite_in_place(path, text: str) -> bool:
    """Best effort on a full disk: rewrite an existing file's bytes in place (no second copy, so no new space while
    the text fits the blocks the file holds). False when even that failed."""
    try:
        with open(path, "r+b") as f:
            data = text.encode()
            f.write(data)
            f.truncate(len(data))
        return True
    except OSError:
        return False


def write_text(path, text: str) -> Path:
    """Write `text` to `path` whole or not at all (replacing())."""
    with replacing(path) as tmp:
        tmp.write_text(text)
    return Path(path)
