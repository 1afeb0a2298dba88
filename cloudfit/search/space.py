"""The configuration space of a workload, as columns: every offering × nodes 1..max × spot/on-demand.

Building a ``Space`` asks the performance model once per distinct hardware shape × node count
(a few thousand queries), then broadcasts to every candidate (~10⁵); ``Space.assess`` prices the
whole space with the preemption model in one vectorised pass. Candidates that differ only in price
(the zones of a region, regions at the same hazard) share every preemption-model input, so the
whole-space pass runs the model once per group (~5·10³ rows) and bills each candidate at its own
price — the same numbers as pricing every row (tests/search/test_fast_path.py). Searchers read
these arrays; the exhaustive searcher is simply an argmin over them.

A *shape* is a distinct VM (machine type, accelerator, accelerators per node, vCPUs): ``Space.shapes``
holds one representative ``Offering`` of each. A *hardware point* is what throughput depends on and a
probe measures: (accelerator, accelerators per node, nodes). ``Space.point_ids`` derives either key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from cloudfit.catalog import clouds, hardware
from cloudfit.catalog import Catalog
from cloudfit.errors import InfeasibleError
from cloudfit.spot.model import Assessment
from cloudfit.types import ClusterConfig, Estimate, Offering, Profile, Workload
from cloudfit.units import Z90

#: Billed seconds after training ends until every VM is gone (final save is in the spot model; this
#: is VM deletion, GCP's executor allows 180 s for it). Charged to every candidate's cost.
TEARDOWN_S = 180.0
#: Headroom a budget must leave beyond the expected/quantile cost: the launcher's budget guard looks
#: ahead one check interval (30 s on GCP) plus teardown before it lets a cluster keep running, so a
#: plan that spends the budget to the cent would be stopped just before it finishes.
GUARD_INTERVAL_S = 30.0
#: ``Space._cache`` key of (representative candidate per group, group of each candidate), where a
#: group is one (shape, nodes, spot, hazard): candidates whose preemption-model inputs agree.
_GROUPS = "groups"


def _assess_key(deadline_hours: float | None) -> tuple[str, float | None]:
    """``Space._cache`` key of the whole-space assessment at a deadline."""
    return ("assess", deadline_hours)


@dataclass(frozen=True)
class Priced(Assessment):
    """An ``Assessment`` with teardown in its costs and the budget guard's headroom per candidate."""

    reserve_usd: np.ndarray = None  # type: ignore[assignment]
    #: expected hours spent waiting for capacity (in ``hours``, not billed; cloudfit.spot.capacity)
    wait_hours: np.ndarray = None  # type: ignore[assignment]


@dataclass
class Space:
    """Candidates of one workload as parallel numpy arrays (index = candidate id)."""

    workload: Workload
    profile: Profile
    catalog: Catalog  # the offerings the workload allows (filtered)
    shapes: list[Offering]  # one representative offering per distinct VM shape
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
    #: The rest of the job's bill (``cloudfit.bill.Bill``: data transfer, storage), added by ``assess``; None: compute only
    bill: object = None
    #: Derived data: whole-space assessments per deadline and, from ``build_space``, the groups of
    #: candidates that differ only in price (``_GROUPS``). Pass ``_cache={}`` when replacing columns.
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.offering.shape[0])

    def speed_free_cache(self) -> dict:
        """The derived data a copy with other speeds or another bill may keep: the string-keyed entries (price
        groups, per-shape columns, zones), not the whole-space assessments (tuple-keyed, per deadline)."""
        return {k: v for k, v in self._cache.items() if isinstance(k, str)}

    @property
    def compute_hours(self) -> np.ndarray:
        return _compute_hours(self.workload.samples, self.samples_per_second)

    @property
    def log_sigma(self) -> np.ndarray:
        """Std-dev of log throughput implied by the calibrated 10–90% band."""
        return _log_sigma(self.low, self.high)

    def assess(self, problem, ids: np.ndarray | None = None) -> "Priced":
        """Expected hours/cost, P90 and P(on time) for the candidates ``ids`` (default: all) under
        ``problem`` (a ``Problem``, or anything with its ``deadline_hours``: only the deadline matters).

        Costs include the VM teardown (``TEARDOWN_S`` billed at the cluster's price); ``reserve_usd``
        is the launcher's guard headroom a budget must also cover (``GUARD_INTERVAL_S``).
        The whole-space assessment is cached per deadline.
        """
        if self.bill is not None:
            key = ("billed", problem.deadline_hours)
            if ids is not None:
                return self.bill.assess(self, problem.deadline_hours, ids)
            if key not in self._cache:
                self._cache[key] = self.bill.assess(self, problem.deadline_hours)
            return self._cache[key]
        return self.assess_at(problem.deadline_hours, ids)

    def assess_at(self, deadline_hours: float | None, ids: np.ndarray | None = None) -> "Priced":
        """``assess`` at a deadline, compute only (without ``bill``)."""
        if ids is None:  # the searcher, the Pareto front and the explanation all price the whole space
            key = _assess_key(deadline_hours)
            if key not in self._cache:
                self._cache[key] = self._assess(deadline_hours, slice(None), self.price_groups)
            return self._cache[key]
        return self._assess(deadline_hours, ids)

    def assessed(self, problem) -> bool:
        """Whether the whole space is already priced (cached) at ``problem``'s deadline."""
        if self.bill is not None:
            return ("billed", problem.deadline_hours) in self._cache
        return _assess_key(problem.deadline_hours) in self._cache

    def point_ids(self, kind: str = "hardware") -> tuple[list[tuple], np.ndarray]:
        """(keys, key index of each candidate), keys sorted, for candidates grouped by ``kind``:

        - ``"hardware"``: (accelerator, accelerators per node, nodes) — what throughput depends on and
          what a probe measures (zones, machine families and spot only change price and risk);
        - ``"cluster"``: (shape index, nodes, spot) — one VM shape at a node count, in any zone.
        """
        width = int(self.nodes.max()) + 1 if len(self) else 1
        if kind == "cluster":
            code = (self.shape * width + self.nodes) * 2 + self.spot
            uniq, inverse = np.unique(code, return_inverse=True)
            keys = [(int(c) // 2 // width, int(c) // 2 % width, bool(int(c) % 2)) for c in uniq]
            return keys, inverse.reshape(-1)
        if kind != "hardware":
            raise ValueError(f"point kind must be 'hardware' or 'cluster', not {kind!r}")
        pair_of_shape = [(s.accelerator, s.accelerators_per_node) for s in self.shapes]
        pairs = sorted(set(pair_of_shape))
        pair_id = {p: j for j, p in enumerate(pairs)}
        shape_pair = np.array([pair_id[p] for p in pair_of_shape], dtype=np.int64)
        code = shape_pair[self.shape] * width + self.nodes
        uniq, inverse = np.unique(code, return_inverse=True)
        keys = [(pairs[int(c) // width][0], pairs[int(c) // width][1], int(c) % width) for c in uniq]
        return keys, inverse.reshape(-1)

    @property
    def price_groups(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(a candidate of each group, group of each candidate) for groups of candidates that differ
        only in price, as ``build_space`` finds them; None for a space made another way."""
        return self._cache.get(_GROUPS)

    def _assess(self, deadline_hours: float | None, sel, groups=None) -> "Priced":
        from cloudfit import spot
        from cloudfit.spot import capacity

        nodes, is_spot = self.nodes[sel], self.spot[sel]
        ov = spot.DEFAULT_OVERHEADS
        start = {True: ov.start_spot_s, False: ov.start_on_demand_s}
        if groups is not None:  # the preemption model's inputs of one candidate per group (all a group shares)
            first, inverse = groups
            r = first if isinstance(sel, slice) and sel == slice(None) else np.arange(len(self))[sel][first]
            a = spot.assess_groups(
                compute_hours=_compute_hours(self.workload.samples, self.samples_per_second[r]),
                log_sigma=_log_sigma(self.low[r], self.high[r]), nodes=self.nodes[r], spot=self.spot[r],
                hazard_per_node_hour=self.hazard_per_node_hour[r],
                startup_s=capacity.startup_seconds(self.nodes[r], self.spot[r], start),
                price_per_hour=self.price_per_hour[sel], inverse=inverse, checkpoint_bytes=self.checkpoint_bytes,
                deadline_hours=deadline_hours)
        else:
            a = spot.assess(  # compute_hours[sel] and log_sigma[sel], without computing every row first
                compute_hours=_compute_hours(self.workload.samples, self.samples_per_second[sel]),
                log_sigma=_log_sigma(self.low[sel], self.high[sel]), nodes=nodes, spot=is_spot,
                hazard_per_node_hour=self.hazard_per_node_hour[sel], price_per_hour=self.price_per_hour[sel],
                checkpoint_bytes=self.checkpoint_bytes, deadline_hours=deadline_hours,
                startup_s=capacity.startup_seconds(nodes, is_spot, start))
        price = self.price_per_hour[sel]
        teardown = price * (TEARDOWN_S / 3600.0)
        cols = {f.name: getattr(a, f.name) for f in fields(a)}
        cols["cost_usd"] = cols["cost_usd"] + teardown
        cols["cost_p90_usd"] = cols["cost_p90_usd"] + teardown
        # stockouts: waiting for capacity adds time (not billed) and deadline risk (spot/capacity.py)
        if groups is not None:  # rows of a price group share shape, nodes, spot and hours: one wait per group
            first, inverse = groups
            gpus, zones = self.gpus_and_zones(r)
            w, w90, f = capacity.wait_terms(gpus * self.nodes[r], self.spot[r], cols["hours"][first], deadline_hours,
                                            zones)
            wait, wait90, factor = w[inverse], w90[inverse], f[inverse]
        else:
            wait, wait90, factor = capacity.wait_terms(self.gpus_per_node[sel] * nodes, is_spot, cols["hours"], deadline_hours,
                                                       self.zones_offering[sel])
        cols["hours"] = cols["hours"] + wait
        cols["hours_p90"] = cols["hours_p90"] + wait90
        cols["overhead_hours"] = cols["overhead_hours"] + wait
        cols["p_on_time"] = cols["p_on_time"] * factor
        return Priced(**cols, reserve_usd=price * (GUARD_INTERVAL_S / 3600.0), wait_hours=wait)

    @property
    def gpus_per_node(self) -> np.ndarray:
        """GPUs per VM of every candidate."""
        if "gpus_per_node" not in self._cache:
            self._cache["gpus_per_node"] = self.shape_columns()[0][self.shape]
        return self._cache["gpus_per_node"]

    @property
    def zones_offering(self) -> np.ndarray:
        """How many zones of the (filtered) catalog offer each candidate's VM shape (with a spot price,
        for spot candidates): the zones launch can fall back between."""
        if "zones_offering" not in self._cache:
            self._cache["zones_offering"] = self.gpus_and_zones(slice(None))[1]
        return self._cache["zones_offering"]

    def gpus_and_zones(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """``gpus_per_node[rows]`` and ``zones_offering[rows]``, from the per-shape columns alone."""
        gpus, od, sp = self.shape_columns()
        shape = self.shape[rows]
        return gpus[shape], np.where(self.spot[rows], sp[shape], od[shape])

    def shape_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per VM shape (``shapes``): GPUs per VM, and the zones of the (filtered) catalog that offer it,
        on demand and with a spot price — what ``gpus_per_node`` and ``zones_offering`` index (computed once)."""
        if "per_shape" not in self._cache:
            offs = self.catalog.offerings
            od = np.zeros(len(self.shapes), dtype=np.int64)
            sp = np.zeros(len(self.shapes), dtype=np.int64)
            shape_of = {_shape_key(s): i for i, s in enumerate(self.shapes)}
            for o in offs:
                k = shape_of.get(_shape_key(o))
                if k is not None:
                    od[k] += 1
                    sp[k] += o.spot_price_per_hour is not None
            # a cloud whose catalog lists every region whatever is in stock offers one place to fall back to
            real = np.array([clouds.get(s.cloud).zones_are_real for s in self.shapes], dtype=bool)
            od, sp = np.where(real, od, np.minimum(od, 1)), np.where(real, sp, np.minimum(sp, 1))
            gpus = np.array([s.accelerators_per_node for s in self.shapes], dtype=np.int64)
            self._cache["per_shape"] = (gpus, od, sp)
        return self._cache["per_shape"]

    def config(self, i: int) -> ClusterConfig:
        return ClusterConfig(self.catalog.offerings[int(self.offering[i])], int(self.nodes[i]), bool(self.spot[i]))


def build_space(workload: Workload, profile: Profile, catalog: Catalog) -> Space:
    """Every allowed offering × nodes 1..max_nodes × spot/on-demand, with predicted throughput.

    Candidates whose per-device memory cannot hold the model at its batch are left out and counted
    in ``Space.excluded`` under a reason naming the accelerator. Raises ``InfeasibleError`` if
    nothing is left.
    """
    from cloudfit import perf, spot

    cat = catalog.filter(accelerators=workload.accelerators, regions=workload.regions, spot=workload.spot == "only",
                         clouds=workload.clouds)
    offs = cat.offerings
    if not offs:
        raise InfeasibleError("no catalog offering matches the allowed regions, accelerators and spot policy")

    shape_of: dict[tuple, int] = {}
    shapes: list[Offering] = []
    off_shape = np.empty(len(offs), dtype=np.int64)
    for i, o in enumerate(offs):
        key = _shape_key(o)
        if key not in shape_of:
            shape_of[key] = len(shapes)
            shapes.append(o)
        off_shape[i] = shape_of[key]

    network = [hardware.vm_network_gbps(s.machine_type, s.accelerator, s.accelerators_per_node, s.vcpus) for s in shapes]
    from cloudfit.catalog.network import fabric_of

    fabric = [fabric_of(s.machine_type) for s in shapes]  # NCCL's transport between the VMs
    batch = workload.batch_size_per_device or profile.stats.batch_size
    max_nodes = workload.max_nodes
    node_counts = np.arange(1, max_nodes + 1)
    queries = [
        perf.HardwareQuery(accelerator=s.accelerator, count=s.accelerators_per_node, nodes=int(n),
                           network_gbps=net, precision=workload.precision, batch_size=batch,
                           vcpus=float(s.vcpus), transport=fab)
        for s, net, fab in zip(shapes, network, fabric) for n in node_counts
    ]
    table = perf.predict_many(profile, queries)
    n_shapes = len(shapes)
    sps = np.asarray(table.samples_per_second, dtype=float).reshape(n_shapes, max_nodes)
    low = np.asarray(table.low, dtype=float).reshape(n_shapes, max_nodes)
    high = np.asarray(table.high, dtype=float).reshape(n_shapes, max_nodes)
    fits = np.asarray(table.fits, dtype=bool).reshape(n_shapes, max_nodes)

    excluded: dict[str, int] = {}
    no_fp8 = set()
    if workload.precision == "fp8":  # fp8 where the GPU has no FP8 tensor cores would silently run as fp16
        no_fp8 = {si for si, s in enumerate(shapes) if hardware.get(s.accelerator).fp8_tflops is None}
        fits[list(no_fp8)] = False
    for si, s in enumerate(shapes):
        if not fits[si, 0]:
            n_off = int((off_shape == si).sum())
            reason = (f"{s.accelerator} has no FP8 tensor cores" if si in no_fp8 else
                      f"{profile.model} at batch {batch}/device does not fit in {s.accelerator} memory "
                      f"({hardware.get(s.accelerator).memory_gib:g} GiB)")
            modes = 1 if workload.spot != "allow" else 2
            excluded[reason] = excluded.get(reason, 0) + n_off * max_nodes * modes

    od = np.array([o.price_per_hour for o in offs])
    sp = np.array([np.nan if o.spot_price_per_hour is None else o.spot_price_per_hour for o in offs])
    n_flagged = 0  # spot candidates left out for an outlier price (counted under their own reason)
    if workload.spot != "never" and not workload.allow_outlier_prices:
        from cloudfit.catalog.outliers import OUTLIER_REASON, spot_outliers

        flagged = np.asarray(spot_outliers(offs), dtype=bool)
        if flagged.any():
            n_flagged = int(fits[off_shape][flagged].sum())
            if n_flagged:
                excluded[OUTLIER_REASON] = n_flagged
            sp = np.where(flagged, np.nan, sp)
            if workload.spot == "only" and np.isnan(sp).all():
                raise InfeasibleError("every spot price left is an outlier; --allow-outlier-prices uses them")
    modes = {"allow": (False, True), "never": (False,), "only": (True,)}[workload.spot]

    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("offering", "nodes", "spot", "price")}
    fits_off = fits[off_shape]  # offering × nodes
    for is_spot in modes:
        per_node = sp if is_spot else od
        priced = ~np.isnan(per_node)
        if is_spot and workload.spot == "allow":
            n_nospot = int(fits_off[~priced].sum()) - n_flagged
            if n_nospot:
                excluded["no spot price in the catalog"] = excluded.get("no spot price in the catalog", 0) + n_nospot
        ok = fits_off & priced[:, None]
        if workload.max_gpus is not None:  # --max-gpus: the whole cluster's GPUs
            gpus_per_node = np.array([o.accelerators_per_node for o in offs])
            over = gpus_per_node[:, None] * node_counts[None, :] > workload.max_gpus
            n_over = int((ok & over).sum())
            if n_over:
                key = f"more than {workload.max_gpus} GPUs (--max-gpus)"
                excluded[key] = excluded.get(key, 0) + n_over
            ok &= ~over
        ok = single_node_clouds(ok, offs, excluded)
        add_candidates(cols, ok, per_node, is_spot)
    offering = np.concatenate(cols["offering"])
    if offering.size == 0:
        raise InfeasibleError("no configuration can hold the model: " + "; ".join(excluded) if excluded
                              else "no configuration left to consider")
    nodes = np.concatenate(cols["nodes"])
    shape = off_shape[offering]
    at = shape * max_nodes + (nodes - 1)  # row of (shape, nodes) in the prediction table
    accs = [offs[i].accelerator for i in range(len(offs))]
    regs = [offs[i].region for i in range(len(offs))]
    hz_off = np.asarray(spot.hazards(accs, regs, clouds=[o.cloud for o in offs]), dtype=float)
    is_spot = np.concatenate(cols["spot"])
    return Space(
        workload=workload, profile=profile, catalog=cat, shapes=shapes,
        offering=offering, shape=shape, nodes=nodes, spot=is_spot,
        price_per_hour=np.concatenate(cols["price"]),
        samples_per_second=sps.ravel()[at], low=low.ravel()[at], high=high.ravel()[at],
        hazard_per_node_hour=hz_off[offering],
        excluded=excluded, basis=_basis(table),
        checkpoint_bytes=_checkpoint_bytes(profile),
        _cache={_GROUPS: _price_groups(shape, nodes, is_spot, hz_off, offering, n_shapes, max_nodes)},
    )


def _shape_key(o: Offering) -> tuple:
    """What makes two offerings the same VM shape (so the same predictions): zones and prices aside."""
    return (o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus, o.cloud)


def single_node_clouds(ok: np.ndarray, offs, excluded: dict[str, int]) -> np.ndarray:
    """``ok`` (offering × nodes) without the node counts a cloud cannot network (``Cloud.max_nodes``)."""
    limits = {o.cloud: clouds.get(o.cloud).max_nodes for o in offs}
    if not any(v is not None for v in limits.values()):
        return ok
    cap = np.array([limits[o.cloud] or ok.shape[1] for o in offs])
    over = np.arange(1, ok.shape[1] + 1)[None, :] > cap[:, None]
    for cloud, n in limits.items():
        if n is None:
            continue
        mine = np.array([o.cloud == cloud for o in offs])
        k = int((ok & over & mine[:, None]).sum())
        if k:
            key = f"more than {n} node(s) on {cloud} ({clouds.get(cloud).title}: single machines)"
            excluded[key] = excluded.get(key, 0) + k
    return ok & ~over


def add_candidates(cols: dict[str, list[np.ndarray]], ok: np.ndarray, per_node: np.ndarray, is_spot: bool) -> None:
    """Append the candidates ``ok`` (offering × nodes, True where kept) to ``cols``: offering-major,
    then nodes (1-based), priced at ``per_node`` × nodes."""
    oi, ni = np.nonzero(ok)
    ni = ni + 1
    cols["offering"].append(oi)
    cols["nodes"].append(ni)
    cols["spot"].append(np.full(oi.size, is_spot))
    cols["price"].append(per_node[oi] * ni)


def _compute_hours(samples: float, samples_per_second: np.ndarray) -> np.ndarray:
    """Hours of pure training at the predicted throughput."""
    return samples / samples_per_second / 3600.0


def _log_sigma(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Std-dev of log throughput implied by a 10–90% band."""
    return np.maximum(np.log(high) - np.log(low), 0.0) / (2 * Z90)


def _price_groups(shape, nodes, is_spot, hz_off, offering, n_shapes: int, max_nodes: int):
    """(representative candidate of each group, group of each candidate) for groups of candidates
    that differ only in price: the same shape (so the same predictions), nodes and spot, and for
    spot the same per-node hazard (on-demand ignores it). Any member stands for its group."""
    _, hz_code = np.unique(hz_off, return_inverse=True)
    n_hz = int(hz_code.max()) + 1 if hz_code.size else 1
    hz = np.where(is_spot, hz_code.reshape(-1)[offering] + 1, 0)
    code = ((shape * max_nodes + (nodes - 1)) * (n_hz + 1) + hz) * 2 + is_spot
    n_codes = n_shapes * max_nodes * (n_hz + 1) * 2
    if n_codes <= 8 * code.size + 4096:  # dense table: no sort of the candidates
        present = np.zeros(n_codes, dtype=bool)
        present[code] = True
        dense = np.cumsum(present) - 1
        inv = dense[code]
        n_groups = int(dense[-1]) + 1
    else:
        _, inv = np.unique(code, return_inverse=True)
        inv = inv.reshape(-1)
        n_groups = int(inv.max()) + 1 if inv.size else 0
    rep = np.empty(n_groups, dtype=np.int64)
    rep[inv] = np.arange(code.size)  # some member of each group: all give the same answer
    return rep, inv


def _basis(table) -> str:
    b = getattr(table, "basis", "")
    if isinstance(b, str):
        return b
    # rows read "stats-only" or "anchored on …", with "; ACC: no measured rows, spec-based" for an accelerator the
    # training data never saw: say each kind once and name those accelerators together
    heads, unmeasured = set(), set()
    for v in {str(x) for x in b}:
        head, *rest = v.split("; ")
        heads.add(head)
        for r in rest:
            if r.endswith(": no measured rows, spec-based"):
                unmeasured.add(r.split(":")[0])
            else:
                heads.add(r)
    # "anchored on RUN" and "anchored on RUN (+N more)" name the profile's runs each row leans on most: say them once
    runs, more = set(), False
    for h in [h for h in heads if h.startswith("anchored on ")]:
        heads.discard(h)
        run, plus, _ = h[len("anchored on "):].partition(" (+")
        runs.add(run)
        more = more or bool(plus)
    if runs:
        others = ""
        if more:
            others = " (+ the profile's other runs)" if len(runs) == 1 else " (each chip on its own runs, the others on all)"
        heads.add("anchored on " + ", ".join(sorted(runs)) + others)
    out = ", ".join(sorted(heads))
    return out + (f"; no measured rows, spec-based: {', '.join(sorted(unmeasured))}" if unmeasured else "")


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
