"""A disk cache of derived data (parsed catalogs, built search spaces), so that ``recommend`` repeats no work
its inputs have not changed.

An entry is found by a key: a hash of everything the value was computed from — the input files' content
(catalog, profile), the code and data shipped in the ``cloudfit`` package (:func:`code_digest`: every
file's name, size and modification time), and the options. Change any of them and the key changes: a stale
entry is never read, it only ages out (at most ``MAX_ENTRIES`` per kind are kept, the least recently
used go first).

Entries live under ``$CLOUDFIT_HOME/cache`` (``~/.cloudfit/cache``), one pickle per key, written to a
temporary file and renamed into place (readers see a whole entry or none; no fsync: an entry lost in a
crash is recomputed). The folder is the user's own state folder, like ``state.db``; an entry that cannot
be read, does not unpickle or carries another key is a miss and is rewritten — never an error.
``CLOUDFIT_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

#: Entries kept per kind (a CNN space of the full catalog is ~6 MB).
MAX_ENTRIES = 16
FORMAT = 1
_CODE: str | None = None


def enabled() -> bool:
    return os.environ.get("CLOUDFIT_CACHE", "1") not in ("0", "false", "no", "off")


def folder() -> Path:
    from cloudfit.resources import home

    return home() / "cache"


def code_digest() -> str:
    """Name, size and modification time of every file of the installed ``cloudfit`` package (code and
    shipped data such as ``perf/model.json``), hashed; computed once per process."""
    global _CODE
    if _CODE is None:
        root = Path(__file__).resolve().parent
        h = hashlib.sha256(f"{FORMAT}:{root}".encode())
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in sorted(files):
                st = os.stat(os.path.join(d, f))
                h.update(f"{d}/{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        _CODE = h.hexdigest()
    return _CODE


def key(*parts: Any) -> str:
    """A key for a value computed from ``parts`` (their ``repr``) and this package's code."""
    return hashlib.sha256(repr((code_digest(), parts)).encode()).hexdigest()[:40]


def get(kind: str, k: str) -> Any | None:
    """The value stored under ``k``, or None (missing, unreadable, or not this key's)."""
    if not enabled():
        return None
    path = folder() / kind / f"{k}.pickle"
    try:
        with open(path, "rb") as fh:
            entry = pickle.load(fh)
        os.utime(path)  # recently used: kept longer
    except Exception:  # absent, truncated, foreign: recompute
        return None
    if not (isinstance(entry, tuple) and len(entry) == 2 and entry[0] == k):
        return None
    return entry[1]


def put(kind: str, k: str, value: Any) -> None:
    """Store ``value`` under ``k`` (atomically: a temporary file renamed into place); errors are ignored."""
    if not enabled():
        return
    import tempfile

    d = folder() / kind
    tmp = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{k}.", suffix=".tmp", dir=d)
        with os.fdopen(fd, "wb") as fh:
            pickle.dump((k, value), fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, d / f"{k}.pickle")
        tmp = None
        _evict(d)
    except Exception:  # a read-only home, a full disk: the cache is an optimisation only
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _evict(d: Path) -> None:
    entries = sorted(d.glob("*.pickle"), key=lambda p: p.stat().st_mtime_ns)
    for p in entries[:-MAX_ENTRIES]:
        p.unlink(missing_ok=True)


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def memo(kind: str, parts: tuple, compute) -> Any:
    """``compute()``, or the value stored for ``parts`` by an earlier call (then stored for the next)."""
    k = key(kind, *parts)
    hit = get(kind, k)
    if hit is not None:
        return hit
    value = compute()
    put(kind, k, value)
    return value
