"""When a catalog's prices were taken: a ``<catalog>.meta.json`` sidecar (``catalogs/gcp.meta.json``
for the shipped one; ``cloudfit catalog refresh`` writes one), else the file's modification date."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path


def meta_path(catalog_path: str | Path) -> Path:
    return Path(catalog_path).with_suffix(".meta.json")


def price_date(catalog_path: str | Path) -> str:
    """One phrase naming the prices' date and source, for every recommendation; a union catalog
    (paths joined by ``loader.PATH_SEPARATOR``) names each file's date, prefixed by its name."""
    from cloudfit.catalog.loader import PATH_SEPARATOR

    parts = str(catalog_path).split(PATH_SEPARATOR)
    if len(parts) > 1:
        return "; ".join(f"{Path(x).stem}: {_one_date(x)}" for x in parts)
    return _one_date(catalog_path)


def _one_date(catalog_path: str | Path) -> str:
    p = Path(catalog_path)
    try:
        meta = json.loads(meta_path(p).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = None
    if isinstance(meta, dict):
        src = meta.get("source") or p.name
        if meta.get("prices_as_of"):
            return f"{meta['prices_as_of']} ({src})"
        copied = f"; copied {meta['copied']}" if meta.get("copied") else ""
        return f"undated in the source ({src}{copied})"
    try:
        day = _dt.datetime.fromtimestamp(p.stat().st_mtime, _dt.timezone.utc).date().isoformat()
    except OSError:
        return f"of unknown date ({p.name})"
    return f"{p.name}, file dated {day} (no {meta_path(p).name})"


def write_meta(catalog_path: str | Path, *, source: str, prices_as_of: str | None = None) -> Path:
    """Write the sidecar of a catalog just priced (default date: today, UTC)."""
    from cloudfit.atomic import atomic_open

    day = prices_as_of or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    out = meta_path(catalog_path)
    with atomic_open(out, encoding="utf-8") as fh:
        fh.write(json.dumps({"prices_as_of": day, "source": source}, indent=2) + "\n")
    return out
