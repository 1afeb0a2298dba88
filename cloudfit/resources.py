"""Where shipped data lives: the repository's top-level folders in a source checkout (editable
install), or the copies a wheel carries under ``cloudfit/_shipped``."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent
_REPO = _PKG.parent


def shipped(relative: str) -> Path:
    """Path of a shipped file or folder such as ``catalogs/gcp.csv`` or ``profiles``."""
    for base in (_REPO, _PKG / "_shipped"):
        p = base / relative
        if p.exists():
            return p
    return _REPO / relative


def default_catalog() -> Path:
    """The catalog used when none is named: ``$CLOUDFIT_CATALOG`` or the shipped GCP catalog."""
    env = os.environ.get("CLOUDFIT_CATALOG")
    return Path(env) if env else shipped("catalogs/gcp.csv")


def profiles_dir() -> Path:
    """Folder of shipped profiles (``profiles/``)."""
    return shipped("profiles")


def home() -> Path:
    """cloudfit's state folder: ``$CLOUDFIT_HOME`` or ``~/.cloudfit``."""
    return Path(os.environ.get("CLOUDFIT_HOME", Path.home() / ".cloudfit"))
