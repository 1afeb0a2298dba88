"""The configuration space of a workload, as columns: every offering × nodes 1..max × spot/on-demand.

Building a ``Space`` asks the performance model once per distinct hardware shape × node count
(a few thousand queries), then broadcasts to every candidate (~10⁵); ``Space.evaluate`` prices the
whole space with the preemption model in one vectorised pass. Searchers read these arrays; the
exhaustive searcher is simply an argmin over them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from cloudfit import hardware
from cloudfit.catalog import Catalog
from cloudfit.errors import InfeasibleError, UsageError
from cloudfit.types import ClusterConfig, Estimate, Profile, Workload

from cloudfit.spot.model import Assessment

Z90 = 1.2815515655446004  # standard normal 90% quantile: the band is 10–90%

#: Billed seconds after training ends until every VM is gone (final save is in the spot model; this
#: is VM deletion, GCP's executor allows 180 s for it). Charged to every candidate's cost.
TEARDOWN_S = 180.0
#: Headroom a budget must leave beyond the expected/quantile cost: the launcher's budget guard looks
#: ahead one check interval (30 s on GCP) plus teardown before it lets a cluster keep running, so a
#: plan that spends the budget to the cent would be stopped just before it finishes.
GUARD_INTERVAL_S = 30.0


@dataclass(frozen=True)
class Shape:
    """A distinct hardware shape: what the performance model needs to know about one VM."""

    machine_type: str
    accelerator: str
    accelerators_per_node: int
    vcpus: float
    network_gbps: float


@dataclass(frozen=True)
class Priced(Assessment):
    """An ``Assessment`` with teardown in its costs and the budget guard's headroom per candidate."""

    reserve_usd: np.ndarray = None  # type: ignore[assignment]


@dataclass
class Space:
    """Candidates of one workload as parallel numpy arrays (index = candidate id)."""

    workload: Workload
    profile: Profile
    catalog: Catalog  # the offerings the workload allows (filtered)
    shapes: list[Shape]
    offering: np.ndarray  # int: index into catalog.offerings
    shape: np.ndarray  # int: index into shapes
    nodes: np.ndarray  # int
    spot: np.ndarray  # bool
    price_per_hour: np.ndarray  # cluster USD/h
    samples_per_second: np.ndarray
    low: np.ndarray
    high: np.ndarray
    hazard_per_node_hour: np.ndarray
    excluded: dict[str, int] = field(default_factory=dict)  # reason → number of candidates left out
    basis: str = ""
    checkpoint_bytes: float = 0.0
    _full: dict = field(default_factory=dict, repr=False, compare=False)  # deadline → whole-space assessment

    def __len__(self) -> int:
        return int(self.offering.shape[0])

    @property
    def compute_hours(self) -> np.ndarray:
        return self.workload.samples / self.samples_per_second / 3600.0

    @property
    def log_sigma(self) -> np.ndarray:
        """Std-dev of log throughput implied by the calibrated 10–90% band."""
        return np.maximum(np.log(self.high) - np.log(self.low), 0.0) / (2 * Z90)

    def assess(self, deadline_hours: float | None = None, idx: np.ndarray | None = None) -> "Priced":
        """Expected hours/cost, P90 and P(on time) for the candidates ``idx`` (default: all).

        Costs include the VM teardown (``TEARDOWN_S`` billed at the cluster's price); ``reserve_usd``
        is the launcher's guard headroom a budget must also cover (``GUARD_INTERVAL_S``).
        """
        if idx is None:  # the searcher, the Pareto front and the explanation all price the whole space
            if deadline_hours not in self._full:
                self._full[deadline_hours] = self._assess(deadline_hours, slice(None))
            return self._full[deadline_hours]
        return self._assess(deadline_hours, idx)

    def _assess(self, deadline_hours: float | None, sel) -> "Priced":
        from cloudfit import spot

        a = spot.assess(
            compute_hours=self.compute_hours[sel],
            log_sigma=self.log_sigma[sel],
            nodes=self.nodes[sel],
            spot=self.spot[sel],
            hazard_per_node_hour=self.hazard_per_node_hour[sel],
            price_per_hour=self.price_per_hour[sel],
            checkpoint_bytes=self.checkpoint_bytes,
            deadline_hours=deadline_hours,
        )
        price = self.price_per_hour[sel]
        teardown = price * (TEARDOWN_S / 3600.0)
        cols = {f.name: getattr(a, f.name) for f in fields(a)}
        cols["cost_usd"] = cols["cost_usd"] + teardown
        cols["cost_p90_usd"] = cols["cost_p90_usd"] + teardown
        return Priced(**cols, reserve_usd=price * (GUARD_INTERVAL_S / 3600.0))

    def config(self, i: int) -> ClusterConfig:
        return ClusterConfig(self.catalog.offerings[int(self.offering[i])], int(self.nodes[i]), bool(self.spot[i]))


def build_space(workload: Workload, profile: Profile, catalog: Catalog) -> Space:
    """Every allowed offering × nodes 1..max_nodes × spot/on-demand, with predicted throughput.

    Candidates whose per-device memory cannot hold the model at its batch are left out and counted
    in ``Space.excluded`` under a reason naming the accelerator. Raises ``InfeasibleError`` if
    nothing is left.
    """
    from cloudfit import perf, spot

    if workload.max_nodes < 1:
        raise UsageError(f"--max-nodes must be at least 1, got {workload.max_nodes}")
    cat = catalog.filter(accelerators=workload.accelerators, regions=workload.regions, spot=workload.spot == "only")
    offs = cat.offerings
    if not offs:
        raise InfeasibleError("no catalog offering matches the allowed regions, accelerators and spot policy")

    shape_of: dict[tuple, int] = {}
    shapes: list[Shape] = []
    off_shape = np.empty(len(offs), dtype=np.int64)
    for i, o in enumerate(offs):
        key = (o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus)
        if key not in shape_of:
            shape_of[key] = len(shapes)
            shapes.append(Shape(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus,
                                hardware.vm_network_gbps(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus)))
        off_shape[i] = shape_of[key]

    batch = workload.batch_size_per_device or profile.stats.batch_size
    max_nodes = workload.max_nodes
    node_counts = np.arange(1, max_nodes + 1)
    queries = [
        perf.HardwareQuery(accelerator=s.accelerator, count=s.accelerators_per_node, nodes=int(n),
                           network_gbps=s.network_gbps, precision=workload.precision, batch_size=batch)
        for s in shapes for n in node_counts
    ]
    table = perf.predict_many(profile, queries)
    n_shapes = len(shapes)
    sps = np.asarray(table.samples_per_second, dtype=float).reshape(n_shapes, max_nodes)
    low = np.asarray(table.low, dtype=float).reshape(n_shapes, max_nodes)
    high = np.asarray(table.high, dtype=float).reshape(n_shapes, max_nodes)
    fits = np.asarray(table.fits, dtype=bool).reshape(n_shapes, max_nodes)

    excluded: dict[str, int] = {}
    for si, s in enumerate(shapes):
        if not fits[si, 0]:
            n_off = int((off_shape == si).sum())
            reason = (f"{profile.model} at batch {batch}/device does not fit in {s.accelerator} memory "
                      f"({hardware.get(s.accelerator).memory_gib:g} GiB)")
            modes = 1 if workload.spot != "allow" else 2
            excluded[reason] = excluded.get(reason, 0) + n_off * max_nodes * modes

    od = np.array([o.price_per_hour for o in offs])
    sp = np.array([np.nan if o.spot_price_per_hour is None else o.spot_price_per_hour for o in offs])
    modes = {"allow": (False, True), "never": (False,), "only": (True,)}[workload.spot]

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("offering", "nodes", "spot", "price")}
    oi, ni = np.meshgrid(np.arange(len(offs)), node_counts, indexing="ij")
    oi, ni = oi.ravel(), ni.ravel()
    ok = fits[off_shape[oi], ni - 1]
    for is_spot in modes:
        per_node = sp[oi] if is_spot else od[oi]
        keep = ok & ~np.isnan(per_node)
        if is_spot and workload.spot == "allow":
            n_nospot = int((ok & np.isnan(per_node)).sum())
            if n_nospot:
                excluded["no spot price in the catalog"] = excluded.get("no spot price in the catalog", 0) + n_nospot
        cols["offering"].append(oi[keep])
        cols["nodes"].append(ni[keep])
        cols["spot"].append(np.full(int(keep.sum()), is_spot))
        cols["price"].append(per_node[keep] * ni[keep])
    offering = np.concatenate(cols["offering"])
    if offering.size == 0:
        raise InfeasibleError("no configuration can hold the model: " + "; ".join(excluded) if excluded
                              else "no configuration left to consider")
    nodes = np.concatenate(cols["nodes"])
    shape = off_shape[offering]
    accs = [offs[i].accelerator for i in range(len(offs))]
    regs = [offs[i].region for i in range(len(offs))]
    hz_off = spot.hazards(accs, regs)
    return Space(
        workload=workload, profile=profile, catalog=cat, shapes=shapes,
        offering=offering, shape=shape, nodes=nodes, spot=np.concatenate(cols["spot"]),
        price_per_hour=np.concatenate(cols["price"]),
        samples_per_second=sps[shape, nodes - 1], low=low[shape, nodes - 1], high=high[shape, nodes - 1],
        hazard_per_node_hour=np.asarray(hz_off, dtype=float)[offering],
        excluded=excluded, basis=_basis(table),
        checkpoint_bytes=_checkpoint_bytes(profile),
    )


def _basis(table) -> str:
    b = getattr(table, "basis", "")
    if isinstance(b, str):
        return b
    vals = sorted({str(x) for x in b})
    return vals[0] if len(vals) == 1 else ", ".join(vals)


def _checkpoint_bytes(profile: Profile) -> float:
    # weights + Adam-style optimizer state (2 moments), fp32: 3 × 4 bytes per parameter
    return 12.0 * profile.stats.parameters


def estimate(space: Space, i: int, a: "Assessment", j: int | None = None, *, feasible: bool = True, reason: str = "") -> Estimate:
    """The Estimate of candidate ``i``; ``a`` holds assessments and ``j`` is ``i``'s row in it."""
    j = i if j is None else j
    return Estimate(
        config=space.config(i),
        samples_per_second=float(space.samples_per_second[i]),
        low=float(space.low[i]),
        high=float(space.high[i]),
        hours=float(a.hours[j]),
        hours_p90=float(a.hours_p90[j]),
        cost_usd=float(a.cost_usd[j]),
        cost_p90_usd=float(a.cost_p90_usd[j]),
        p_on_time=float(a.p_on_time[j]),
        feasible=feasible,
        reason=reason,
    )
