"""Atomic file writes: readers see the old file or the whole new one, never half of it.

Plans, profiles, catalogs, plots, checkpoints and the fitted model are all written through
:func:`atomic_open`, so a Ctrl-C, a crash or a full disk never leaves a half-written file behind.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path`` for writing; on a clean exit it is flushed, fsync'd,
    given ordinary permissions and renamed over ``path``; on any exception it is removed and
    ``path`` is left as it was. ``handle.name`` is the temporary file's path (to validate it before
    the rename). ``mode`` is ``"w"`` or ``"wb"``; ``kwargs`` go to :func:`open` (encoding, newline)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)  # reopened by name: a handle from os.fdopen would carry the descriptor as its .name
    try:
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; these are ordinary files
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` as indented JSON (NaN refused) through :func:`atomic_open`."""
    import json

    with atomic_open(path, encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, allow_nan=False)
        fh.write("\n")


__all__ = ["atomic_open", "write_json_atomic"]
