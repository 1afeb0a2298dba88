"""The whole bill of a job beyond its GPU hours: moving the data to the cluster once, keeping checkpoints
(and the moved data) in the destination cloud's object storage while the job runs, sending the final
model back — and the GPU quotas a plan must fit (``cloudfit.bill.quota``).

A ``Bill`` is attached to a ``Space`` (``Space.bill``): every whole-space assessment then adds, per
candidate, the one-time transfer (``cloudfit.catalog.egress``) to its cost and the copy's time to its
hours before training starts (so it counts against the deadline: P(on time) is that of the training
with the deadline shortened by the copy), storage at the destination's $/GB-month for the job's hours,
and the model's way back. Searchers, the Pareto front and the knee read these costs, so they rank the
whole bill. A plan in the data's own region pays nothing for the data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from cloudfit.errors import UsageError

HOURS_PER_MONTH = 730.0
_UNITS = {"b": 1e-9, "kb": 1e-6, "mb": 1e-3, "gb": 1.0, "tb": 1e3, "pb": 1e6,
          "kib": 1024 / 1e9, "mib": 1024 ** 2 / 1e9, "gib": 1024 ** 3 / 1e9, "tib": 1024 ** 4 / 1e9}


def parse_size_gb(text: str, flag: str = "--data-size") -> float:
    """``"150GB"``, ``"1.5 TB"``, ``"4TiB"``, ``"2e11B"`` → gigabytes (10⁹ bytes). A unit is required (a bare
    number could be bytes or gigabytes: 150 would be read 10⁹ times too small or too large)."""
    m = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if m and not m.group(2):
        raise UsageError(f"{flag} needs a unit: {text}GB, {text}TB or {text}B (bytes)?")
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"{flag} must be a size such as 150GB, 1.5TB or 4TiB (units B, KB, MB, GB, TB, PB, "
                         f"KiB … TiB), got {text!r}")
    gb = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not gb >= 0 or gb == float("inf"):
        raise UsageError(f"{flag} must not be negative, got {text!r}")
    return gb


@dataclass(frozen=True)
class Location:
    """Where data lives: a cloud (gcp, aws, or local), a region, and the URL or path as given."""

    cloud: str
    region: str
    url: str
    region_assumed: bool = False


def parse_location(url: str, region: str | None = None, flag: str = "--data") -> Location:
    """``gs://BUCKET/PATH`` (GCP), ``s3://BUCKET/PATH`` (AWS), a local path, or ``local``; the region is
    ``region`` or, for a bucket, the cloud's primary one (``region_assumed``)."""
    from cloudfit.catalog.egress import PRIMARY_REGION

    u = str(url).strip()
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", u)
    if m is None:
        if not u:
            raise UsageError(f"{flag} must be gs://BUCKET/PATH, s3://BUCKET/PATH or a local path")
        return Location("local", "local", u)
    scheme, rest = m.group(1).lower(), m.group(2)
    cloud = {"gs": "gcp", "s3": "aws"}.get(scheme)
    if cloud is None:
        raise UsageError(f"{flag}: unknown URL scheme {scheme + '://'!r} (use gs://, s3:// or a local path)")
    if not rest.split("/")[0]:
        raise UsageError(f"{flag}: {u!r} names no bucket")
    if region:
        return Location(cloud, region, u)
    return Location(cloud, PRIMARY_REGION[cloud], u, region_assumed=True)


def local_size_gb(path: str) -> float | None:
    """Bytes under a local file or folder, in GB; None if it does not exist."""
    p = Path(path).expanduser()
    if p.is_file():
        return p.stat().st_size / 1e9
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e9
    return None


@dataclass
class Bill:
    """What a job pays besides compute, as the recommend options give it."""

    data: Location | None = None
    data_gb: float = 0.0
    keep_checkpoints: int = 2
    return_to: Location | None = None
    notes: list[str] = field(default_factory=list)
    _per_offering: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, data: str | None, data_size: str | None, data_region: str | None, keep_checkpoints: int,
           return_to: str | None) -> "Bill | None":
        """The bill of the recommend options, or None when none of them asks for one (nothing changes)."""
        if keep_checkpoints < 0:
            raise UsageError(f"--keep-checkpoints must be 0 or more, got {keep_checkpoints}")
        if data is None and data_size is not None:
            raise UsageError("--data-size needs --data (where the data lives)")
        if data is None and data_region is not None:
            raise UsageError("--data-region needs --data")
        if data is None and return_to is None:
            return None
        from cloudfit.catalog.egress import check_tables

        check_tables()
        bill = cls(keep_checkpoints=keep_checkpoints)
        if data is not None:
            loc = parse_location(data, data_region)
            gb = parse_size_gb(data_size) if data_size is not None else None
            if gb is None and loc.cloud == "local":
                gb = local_size_gb(loc.url)
                if gb is None:
                    raise UsageError(f"--data {loc.url}: no such file or folder (give --data-size to plan anyway)")
            if gb is None and loc.cloud == "gcp":
                from cloudfit.bill.listing import gcs_size_gb

                gb = gcs_size_gb(loc.url)
                if gb is not None:
                    bill.notes.append(f"Data size: {gb:,.1f} GB, read from the bucket listing.")
            if gb is None:
                raise UsageError(f"--data {loc.url}: size not read (no credentials or storage client for it): "
                                 "give --data-size")
            bill.data, bill.data_gb = loc, gb
            if loc.region_assumed:
                bill.notes.append(f"Data region not given: assumed {loc.region} ({loc.cloud}'s primary region); "
                                  "--data-region sets it.")
        if return_to is not None:
            r = parse_location(return_to, None, flag="--return-to")
            bill.return_to = r
        return bill

    # ------------------------------------------------------------------ per offering

    def per_offering(self, space) -> dict[str, np.ndarray]:
        """Columns per offering of ``space.catalog``: transfer $ and hours, the model's return $, and the
        storage $/hour of checkpoints (× kept copies) plus the moved data."""
        key = (id(space.catalog), float(space.checkpoint_bytes))
        if key not in self._per_offering:
            from cloudfit.catalog import egress

            offs = space.catalog.offerings
            n = len(offs)
            t_usd, t_h, ret, store = (np.zeros(n) for _ in range(4))
            moved = np.zeros(n, dtype=bool)
            model_gb = _model_gb(space)
            ckpt_gb = space.checkpoint_bytes / 1e9 * self.keep_checkpoints
            for i, o in enumerate(offs):
                stored = ckpt_gb
                if self.data is not None:
                    kind = egress.rate_kind(self.data.cloud, self.data.region, o.cloud, o.region)
                    t_usd[i] = egress.egress_usd(self.data_gb, self.data.cloud, self.data.region, o.cloud, o.region)
                    t_h[i] = egress.transfer_hours(self.data_gb, kind)
                    moved[i] = kind != "free" and self.data_gb > 0
                    stored += self.data_gb if moved[i] else 0.0
                if self.return_to is not None:
                    ret[i] = egress.egress_usd(model_gb, o.cloud, o.region, self.return_to.cloud, self.return_to.region)
                store[i] = stored * egress.storage_usd_per_gb_month(o.cloud) / HOURS_PER_MONTH
            self._per_offering[key] = {"transfer_usd": t_usd, "transfer_hours": t_h, "return_usd": ret,
                                       "storage_usd_per_hour": store, "moved": moved}
        return self._per_offering[key]

    # ------------------------------------------------------------------ assessment

    def assess(self, space, deadline_hours: float | None, ids=None):
        """``space.assess_at`` with the bill added (see the module docstring)."""
        col = self.per_offering(space)
        off = space.offering if ids is None else space.offering[ids]
        t = col["transfer_hours"][off]
        a = space.assess_at(deadline_hours, ids)
        cols = {f.name: np.array(getattr(a, f.name), dtype=float, copy=True) if getattr(a, f.name) is not None
                else None for f in fields(a)}
        if deadline_hours is not None:
            for v in np.unique(t[t > 0]):  # one copy time per distinct source/rate: one more assessment each
                rows = t == v
                if deadline_hours - v > 0:
                    b = space.assess_at(deadline_hours - v, ids)
                    cols["p_on_time"][rows] = np.asarray(b.p_on_time, dtype=float)[rows]
                else:
                    cols["p_on_time"][rows] = 0.0
        for k in ("hours", "hours_p90", "overhead_hours"):
            if cols.get(k) is not None:
                cols[k] = cols[k] + t
        once = col["transfer_usd"][off] + col["return_usd"][off]
        rate = col["storage_usd_per_hour"][off]
        cols["cost_usd"] = cols["cost_usd"] + once + rate * cols["hours"]
        cols["cost_p90_usd"] = cols["cost_p90_usd"] + once + rate * cols["hours_p90"]
        return type(a)(**cols)

    def split(self, space, e) -> dict[str, float]:
        """An estimate's cost split: compute / data transfer (in and back) / storage, USD (sum = cost_usd)."""
        col = self.per_offering(space)
        i = _offering_index(space, e.config.offering)
        transfer = float(col["transfer_usd"][i] + col["return_usd"][i])
        storage = float(col["storage_usd_per_hour"][i] * e.hours)
        return {"compute_usd": e.cost_usd - transfer - storage, "transfer_usd": transfer, "storage_usd": storage,
                "transfer_hours": float(col["transfer_hours"][i])}

    def provenance(self) -> dict:
        from cloudfit.catalog.egress import TRANSFER_GBPS

        d: dict = {"keep_checkpoints": self.keep_checkpoints, "transfer_gb_per_s": TRANSFER_GBPS,
                   "prices": "catalogs/egress.csv, catalogs/storage.csv (catalogs/README.md: Data transfer and storage)"}
        if self.data is not None:
            d.update(data=self.data.url, data_cloud=self.data.cloud, data_region=self.data.region,
                     data_region_assumed=self.data.region_assumed, data_gb=self.data_gb)
        if self.return_to is not None:
            d.update(return_to=self.return_to.url)
        return d


def _model_gb(space) -> float:
    """GB of the final model sent back: fp32 weights of a sample workload's 12-byte/parameter checkpoint, bf16
    weights (or LoRA adapters) of a large model's (``cloudfit.plan.llm.CHECKPOINT_BYTES_PER_PARAM``)."""
    if getattr(space, "job", None) is not None:
        from cloudfit.plan.llm import CHECKPOINT_BYTES_PER_PARAM

        return space.checkpoint_bytes / CHECKPOINT_BYTES_PER_PARAM * 2.0 / 1e9
    return space.checkpoint_bytes / 3.0 / 1e9


def _offering_index(space, o) -> int:
    idx = space._cache.get("offering_index")
    if idx is None:
        idx = space._cache["offering_index"] = {id(x): j for j, x in enumerate(space.catalog.offerings)}
    j = idx.get(id(o))
    if j is None:
        j = space.catalog.offerings.index(o)
    return j
