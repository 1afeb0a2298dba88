"""The catalog file format: its columns, the shipped path, the reader (``load``) and the writer.

A catalog is a CSV with one row per (machine type with its accelerators) × zone; see
``catalogs/README.md`` for columns, units and the pricing rule. An optional ``cloud`` column names the
cloud of each row (absent or empty: ``gcp``); ``load(clouds=...)`` reads the shipped
``catalogs/<cloud>.csv`` of each cloud and returns their union. Loading uses only the standard
library so that ``recommend`` starts fast. ``catalog_csv``/``write_catalog`` write the same columns
(``cloudfit catalog refresh`` writes through them), so one module owns the format.
"""

from __future__ import annotations

import fnmatch
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from cloudfit.cache import sha256
from cloudfit.catalog import hardware
from cloudfit.errors import CatalogError, UnknownAcceleratorError, UsageError
from cloudfit.types import CLOUDS, ClusterConfig, Offering

COLUMNS: tuple[str, ...] = (
    "machine_type", "accelerator", "accelerators_per_node", "vcpus", "memory_gib",
    "region", "zone", "price_per_hour", "spot_price_per_hour",
)
#: Optional column: the cloud selling the row (``cloudfit.types.CLOUDS``); empty or absent means GCP.
CLOUD_COLUMN = "cloud"
#: Separates the files of a union catalog in ``Catalog.path`` (``cloudfit.catalog.dates`` splits on it).
PATH_SEPARATOR = " + "


@dataclass(frozen=True)
class Catalog:
    """Validated offerings of one catalog file, plus its identity (path and content digest)."""

    offerings: tuple[Offering, ...]
    path: str
    digest: str  # "sha256:<hex>" of the file's bytes; recorded in plans

    def __len__(self) -> int:
        return len(self.offerings)

    @property
    def accelerators(self) -> list[str]:
        return sorted({o.accelerator for o in self.offerings})

    @property
    def regions(self) -> list[str]:
        return sorted({o.region for o in self.offerings})

    @property
    def clouds(self) -> list[str]:
        return sorted({o.cloud for o in self.offerings})

    def filter(
        self,
        *,
        accelerators: Sequence[str] = (),
        regions: Sequence[str] = (),
        spot: bool = False,
        clouds: Sequence[str] = (),
    ) -> "Catalog":
        """Offerings matching any accelerator and any region (names or globs) of any of ``clouds``;
        ``spot`` keeps only offerings with a spot price. Unknown names that match nothing raise
        ``CatalogError``."""
        offs = self.offerings
        if clouds and set(self.clouds) - set(clouds):
            offs = tuple(o for o in offs if o.cloud in clouds)
            if not offs:
                raise CatalogError(f"no offering of cloud(s) {', '.join(clouds)} in {self.path} "
                                   f"(it has: {', '.join(self.clouds)})")
        if accelerators:
            wanted = _match_names(accelerators, self.accelerators, "accelerator", canonicalise=True)
            offs = tuple(o for o in offs if o.accelerator in wanted)
        if regions:
            wanted = _match_names(regions, self.regions, "region")
            offs = tuple(o for o in offs if o.region in wanted)
        if spot:
            offs = tuple(o for o in offs if o.spot_price_per_hour is not None)
        return Catalog(offs, self.path, self.digest)


def _match_names(patterns: Iterable[str], names: list[str], what: str, canonicalise: bool = False) -> set[str]:
    out: set[str] = set()
    for p in patterns:
        if canonicalise and not any(ch in p for ch in "*?["):
            try:
                p = hardware.canonical_name(p)
            except UnknownAcceleratorError as e:
                raise CatalogError(str(e)) from None
        hits = [n for n in names if fnmatch.fnmatchcase(n.lower(), p.lower())]
        if not hits:
            raise CatalogError(f"no {what} in the catalog matches {p!r} (have: {', '.join(names)})")
        out.update(hits)
    return out


def load(path: str | Path | None = None, *, clouds: Sequence[str] | None = None) -> Catalog:
    """Read and validate a catalog file (default: the shipped GCP catalog).

    ``clouds`` (default: GCP alone): without ``path``, the union of the shipped ``catalogs/<cloud>.csv``
    of those clouds (GCP alone is exactly the default catalog, ``$CLOUDFIT_CATALOG`` included); with
    ``path``, that file's rows of those clouds. Raises ``CatalogError`` naming the file and line of the
    first bad row: a missing column, a negative, zero, NaN or missing price, a missing or non-positive
    size, an unknown accelerator or cloud.
    """
    clouds = tuple(clouds) if clouds else ("gcp",)
    if path is None and clouds != ("gcp",):
        return _union([_load_file(_shipped_catalog(c)) for c in clouds])
    if path is None:
        from cloudfit.resources import default_catalog

        path = default_catalog()
    cat = _load_file(path)
    return cat.filter(clouds=clouds) if set(cat.clouds) != {"gcp"} or clouds != ("gcp",) else cat


def fingerprint(path: str | Path | None = None, *, clouds: Sequence[str] | None = None) -> tuple[str, str]:
    """``(path, digest)`` of the catalog ``load(path, clouds=clouds)`` returns, from the files' bytes alone
    (nothing parsed or checked: what finds a search space built from it before, ``cloudfit.cache``).
    ``CatalogError`` if a file cannot be read."""
    clouds = tuple(clouds) if clouds else ("gcp",)
    if path is None and clouds != ("gcp",):
        parts = [_file_fingerprint(_shipped_catalog(c)) for c in clouds]
        if len(parts) == 1:
            return parts[0]
        return (PATH_SEPARATOR.join(p for p, _ in parts),
                "sha256:" + sha256("".join(d for _, d in parts).encode()).hexdigest())
    if path is None:
        from cloudfit.resources import default_catalog

        path = default_catalog()
    return _file_fingerprint(path)


def _file_fingerprint(path: str | Path) -> tuple[str, str]:
    p = Path(path)
    return str(p), "sha256:" + sha256(_read(p)).hexdigest()


def _read(p: Path) -> bytes:
    try:
        return p.read_bytes()
    except OSError as e:
        raise CatalogError(f"{p}: cannot read catalog ({e.strerror or e})") from None


def _shipped_catalog(cloud: str) -> Path:
    from cloudfit.resources import default_catalog, shipped

    return default_catalog() if cloud == "gcp" else shipped(f"catalogs/{cloud}.csv")


def _union(parts: list[Catalog]) -> Catalog:
    """One catalog of several files' offerings; its digest covers every part, its path names them all."""
    if len(parts) == 1:
        return parts[0]
    digest = "sha256:" + sha256("".join(c.digest for c in parts).encode()).hexdigest()
    return Catalog(tuple(o for c in parts for o in c.offerings), PATH_SEPARATOR.join(c.path for c in parts), digest)


_PARSED: dict[tuple, Catalog] = {}


def _load_file(path: str | Path) -> Catalog:
    """A validated catalog file, parsed once per process while its size and modification time stay the same
    (``recommend --clouds`` reads the same files for the search and for its "why this cloud" line)."""
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _PARSED:
        return dataclasses.replace(_PARSED[key], path=str(p))
    cat = _parse_file(p)
    if key is not None:
        _PARSED[key] = cat
    return cat


def _parse_file(p: Path) -> Catalog:
    raw = _read(p)
    digest = "sha256:" + sha256(raw).hexdigest()
    from cloudfit import cache

    k = cache.key("catalog", str(p), digest)  # parsed before from these bytes: read back (~1 ms, not ~5)
    hit = cache.get("catalog", k)
    if isinstance(hit, Catalog) and hit.digest == digest:
        return hit
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CatalogError(f"{p}: not a UTF-8 CSV file") from None
    import csv  # only when the file was not parsed before (cloudfit.cache)

    reader = csv.DictReader(text.splitlines())
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(f"{p}:1: missing column(s) {', '.join(missing)}")
    offerings = []
    has_cloud = CLOUD_COLUMN in (reader.fieldnames or [])
    for lineno, row in enumerate(reader, start=2):
        offerings.append(_parse_row(row, p, lineno, has_cloud))
    if not offerings:
        raise CatalogError(f"{p}: catalog has no offerings")
    cat = Catalog(tuple(offerings), str(p), digest)
    cache.put("catalog", k, cat)
    return cat


def _parse_row(row: dict[str, str | None], path: Path, lineno: int, has_cloud: bool = False) -> Offering:
    where = f"{path}:{lineno}"
    cloud = (row.get(CLOUD_COLUMN) or "").strip().lower() or "gcp" if has_cloud else "gcp"
    if cloud not in CLOUDS:
        raise CatalogError(f"{where}: unknown cloud {cloud!r} (known: {', '.join(CLOUDS)})")

    def text(col: str) -> str:
        v = (row.get(col) or "").strip()
        if not v:
            raise CatalogError(f"{where}: empty {col}")
        return v

    def number(col: str, *, optional: bool = False, positive: bool = False) -> float | None:
        v = (row.get(col) or "").strip()
        if v == "":
            if optional:
                return None
            raise CatalogError(f"{where}: empty {col}")
        try:
            x = float(v)
        except ValueError:
            raise CatalogError(f"{where}: {col} {v!r} is not a number") from None
        if math.isnan(x) or math.isinf(x):
            raise CatalogError(f"{where}: {col} is {v}")
        if x < 0 or (positive and x == 0):
            raise CatalogError(f"{where}: {col} must be {'positive' if positive else 'non-negative'}, got {v}")
        return x

    try:
        acc = hardware.canonical_name(text("accelerator"))
    except UnknownAcceleratorError as e:
        raise CatalogError(f"{where}: {e}") from None
    count = number("accelerators_per_node", positive=True)
    assert count is not None
    if count != int(count):
        raise CatalogError(f"{where}: accelerators_per_node must be a whole number, got {count:g}")
    region, zone = text("region"), text("zone")
    if cloud == "gcp" and not zone.startswith(region + "-"):
        raise CatalogError(f"{where}: zone {zone!r} is not in region {region!r}")
    price = number("price_per_hour", positive=True)
    assert price is not None
    return Offering(
        machine_type=text("machine_type"),
        accelerator=acc,
        accelerators_per_node=int(count),
        vcpus=number("vcpus", positive=True) or 0.0,
        memory_gib=number("memory_gib", positive=True) or 0.0,
        region=region,
        zone=zone,
        price_per_hour=price,
        spot_price_per_hour=number("spot_price_per_hour", optional=True, positive=True),
        cloud=cloud,
    )


def price_per_hour(config: ClusterConfig) -> float:
    """USD/hour for a cluster: nodes × (host + accelerators), at the spot price when ``spot``."""
    return config.price_per_hour


# --------------------------------------------------------------------------------------------
# Writing


def _money(x: float | None) -> str:
    return "" if x is None else f"{x:.5f}"


def catalog_csv(offerings: Iterable[Offering]) -> str:
    """The catalog CSV text (the columns of ``COLUMNS``, prices to 5 decimals; a ``cloud`` column first
    when any offering is not GCP's)."""
    import io

    offerings = list(offerings)
    with_cloud = any(o.cloud != "gcp" for o in offerings)
    buf = io.StringIO()
    import csv

    w = csv.writer(buf, lineterminator="\n")
    w.writerow(((CLOUD_COLUMN,) if with_cloud else ()) + COLUMNS)
    for o in offerings:
        w.writerow(([o.cloud] if with_cloud else []) + [
            o.machine_type, o.accelerator, o.accelerators_per_node, f"{o.vcpus:g}", f"{o.memory_gib:g}",
            o.region, o.zone, _money(o.price_per_hour), _money(o.spot_price_per_hour)])
    return buf.getvalue()


def write_catalog(offerings: Iterable[Offering], out: str | Path) -> Catalog:
    """Write a catalog atomically: a temporary file beside ``out`` is validated by ``load`` before it
    replaces ``out``; on any failure ``out`` is untouched. Returns the loaded ``Catalog``."""
    from cloudfit.atomic import atomic_open

    out = Path(out)
    if out.is_dir():
        raise UsageError(f"{out} is a directory; give a file path for the catalog")
    text = catalog_csv(offerings)
    with atomic_open(out, encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        try:
            cat = _load_file(fh.name)
        except CatalogError as e:
            raise CatalogError(f"refreshed catalog failed validation, {out} not written: {e}") from None
    return dataclasses.replace(cat, path=str(out))
