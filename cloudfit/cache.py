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

import os
import pickle
from pathlib import Path
from typing import Any

#: Entries kept per kind (a CNN space of the full catalog is ~6 MB).
MAX_ENTRIES = 16
FORMAT = 1
_CODE: str | None = None


def sha256(data: bytes = b""):
    """``sha256(data)`` without loading OpenSSL (``import hashlib`` costs ~2 ms, a quarter of what
    ``recommend`` spends reading its cache): CPython's own SHA-256 where it has one (the same digests;
    slower per byte, which does not matter for the kilobytes hashed here), else hashlib's."""
    try:
        from _sha256 import sha256 as impl  # CPython 3.11
    except ImportError:
        try:
            from _sha2 import sha256 as impl  # CPython 3.12+
        except ImportError:
            from hashlib import sha256 as impl
    return impl(data)


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
        h = sha256(f"{FORMAT}:{root}".encode())
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in sorted(files):
                st = os.stat(os.path.join(d, f))
                h.update(f"{d}/{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        _CODE = h.hexdigest()
    return _CODE


def key(*parts: Any) -> str:
    """A key for a value computed from ``parts`` (their ``repr``) and this package's code."""
    return sha256(repr((code_digest(), parts)).encode()).hexdigest()[:40]


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
    return sha256(Path(path).read_bytes()).hexdigest()


def memo(kind: str, parts: tuple, compute) -> Any:
    """``compute()``, or the value stored for ``parts`` by an earlier call (then stored for the next)."""
    k = key(kind, *parts)
    hit = get(kind, k)
    if hit is not None:
        return hit
    value = compute()
    put(kind, k, value)
    return value


#: Compiled sources kept by :func:`compiled_records` (a run that finds more starts the table afresh).
MAX_CODE_ENTRIES = 4000


def compiled_records() -> None:
    """Serve ``dataclasses``' generated methods from compiled code stored in the cache.

    Every ``@dataclass`` writes the source of its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, …
    and compiles it at import; for the ~30 record classes ``recommend`` imports (cloudfit's and rich's)
    compiling is ~80% of their creation, ~10 ms. The same source always compiles to the same code, so
    it is compiled once and stored, keyed by the source text itself, under a key naming this Python
    (bytecode is version-specific); later processes read it back (``marshal``). The classes are the
    same: the code is what ``exec`` would have compiled (no inherited ``__future__`` flags, file
    ``<string>``). New sources are stored when the process exits. Does nothing when the cache is off
    or ``dataclasses`` has no ``_create_fn`` hook to serve."""
    import dataclasses

    if not enabled() or "exec" in vars(dataclasses) or not hasattr(dataclasses, "_create_fn"):
        return
    import atexit
    import builtins
    import marshal
    import sys
    import types

    k = key("dataclass-code", sys.version, sys.implementation.cache_tag)
    stored = get("code", k)
    stored = stored if isinstance(stored, dict) and len(stored) <= MAX_CODE_ENTRIES else {}
    new: dict[str, bytes] = {}

    def exec_(source, globals=None, locals=None, /):
        if type(source) is str:
            code = None
            blob = stored.get(source)
            if type(blob) is bytes:
                try:
                    code = marshal.loads(blob)
                except Exception:  # a damaged entry: compile it again
                    code = None
            if type(code) is not types.CodeType:
                code = compile(source, "<string>", "exec", dont_inherit=True)
                new[source] = marshal.dumps(code)
            source = code
        return builtins.exec(source, globals, locals)

    dataclasses.exec = exec_  # the module's own global shadows the builtin; only dataclasses calls it

    def store() -> None:
        if new:
            put("code", k, {**(stored if len(stored) + len(new) <= MAX_CODE_ENTRIES else {}), **new})

    atexit.register(store)
