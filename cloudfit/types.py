"""The records that flow through cloudfit (see DESIGN.md's vocabulary). Frozen, no heavy imports.

Units are in the names: ``price_per_hour`` (USD), ``memory_gib``, ``samples_per_second``,
``max_cost_usd``. FLOPs count a multiply-add as two FLOPs, as accelerator peak TFLOPS do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")

#: Op classes the profiler splits FLOPs and bytes into; the roofline prices each separately.
OP_CLASSES: tuple[str, ...] = ("matmul", "conv", "attention", "normalization", "elementwise", "other")

SpotPolicy = Literal["allow", "never", "only"]

#: Clouds with a shipped catalog (``catalogs/<cloud>.csv``); their properties are in ``cloudfit.catalog.clouds``.
CLOUDS: tuple[str, ...] = ("gcp", "aws", "lambda", "runpod", "nebius")

#: The longest job cloudfit plans (a deadline, or the fastest cluster's time for the samples asked): one year.
#: Prices, spot hazards and the catalog are snapshots of months; a plan beyond a year is not something they
#: describe (a documented cap, not a measurement).
MAX_JOB_HOURS = 365.0 * 24.0

#: The most VMs in one planned cluster: 256 (2,048 GPUs at 8 per VM). The capacity prior
#: (``cloudfit.spot.capacity``) is fitted on fleets of up to 16 GPUs, so larger fleets are an extrapolation
#: by two orders of magnitude already, and the search's memory grows with the node count (peak RSS of
#: ``recommend`` for llama3-8b at 256 nodes: 0.39 GB on GCP, 0.73 GB with ``--clouds all``; 23 GB and an OOM kill
#: at 100,000): a documented cap that bounds both.
MAX_NODES_LIMIT = 256


def check_clouds(clouds) -> tuple[str, ...]:
    """``clouds`` as a tuple if it is a non-empty collection of known cloud names; ``UsageError`` otherwise."""
    from cloudfit.errors import UsageError

    if isinstance(clouds, str) or not clouds:
        raise UsageError(f"clouds must be a non-empty list of cloud names (known: {', '.join(CLOUDS)})")
    bad = [c for c in clouds if c not in CLOUDS]
    if bad:
        raise UsageError(f"unknown cloud {bad[0]!r} (known: {', '.join(CLOUDS)}, or all)")
    return tuple(clouds)
Objective = Literal["cost", "time", "fastest"]


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, tuples and mappings → plain JSON types (dict, list, str, float, int, None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get("omit_if_default") and getattr(obj, f.name) == f.default)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------
# Catalog


@dataclass(frozen=True)
class Offering:
    """One catalog row: a VM shape with its accelerators, in one zone, at its hourly prices."""

    machine_type: str
    accelerator: str
    accelerators_per_node: int
    vcpus: float
    memory_gib: float
    region: str
    zone: str
    price_per_hour: float  # host + accelerators, on-demand, USD
    spot_price_per_hour: float | None  # None where the source lists no spot price
    #: The cloud selling it (``cloudfit.catalog.clouds``). Written to plans and JSON only when not "gcp", so
    #: GCP-only plans read and write exactly as before; a plan without it is a GCP plan.
    cloud: str = field(default="gcp", metadata={"omit_if_default": True})

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Offering":
        return cls(
            machine_type=str(d["machine_type"]),
            accelerator=str(d["accelerator"]),
            accelerators_per_node=int(d["accelerators_per_node"]),
            vcpus=float(d["vcpus"]),
            memory_gib=float(d["memory_gib"]),
            region=str(d["region"]),
            zone=str(d["zone"]),
            price_per_hour=float(d["price_per_hour"]),
            spot_price_per_hour=None if d.get("spot_price_per_hour") is None else float(d["spot_price_per_hour"]),
            cloud=str(d.get("cloud") or "gcp"),
        )


@dataclass(frozen=True)
class ClusterConfig:
    """A candidate cluster: an offering × a number of identical nodes × spot or on-demand."""

    offering: Offering
    nodes: int = 1
    spot: bool = False

    @property
    def accelerators(self) -> int:
        """Total accelerators in the cluster."""
        return self.nodes * self.offering.accelerators_per_node

    @property
    def price_per_hour(self) -> float:
        """USD per hour for the whole cluster (every node billed: host + accelerators)."""
        per_node = self.offering.spot_price_per_hour if self.spot else self.offering.price_per_hour
        if per_node is None:
            raise ValueError(f"{self.offering.machine_type} in {self.offering.zone} has no spot price")
        return self.nodes * per_node

    def label(self) -> str:
        o = self.offering
        kind = "spot" if self.spot else "on-demand"
        where = o.zone if o.cloud == "gcp" else f"{o.cloud}:{o.zone}"
        return f"{self.nodes}× {o.machine_type} ({o.accelerators_per_node}×{o.accelerator}) {where} {kind}"

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ClusterConfig":
        return cls(offering=Offering.from_dict(d["offering"]), nodes=int(d["nodes"]), spot=bool(d["spot"]))


# --------------------------------------------------------------------------------------------
# Profiles


@dataclass(frozen=True)
class OpClassStats:
    """FLOPs and bytes moved per training sample (forward + backward) by one op class."""

    flops: float
    bytes: float


@dataclass(frozen=True)
class ModelStats:
    """Device-independent facts about a model at a batch size; what the physics prior reads."""

    parameters: int
    flops_per_sample: float  # forward + backward; multiply-add = 2 FLOPs
    forward_flops_per_sample: float
    gradient_bytes: int  # bytes all-reduced per step (fp32 gradients of trainable parameters)
    activation_bytes_per_sample: float  # saved activations per sample for backward
    op_classes: Mapping[str, OpClassStats]
    batch_size: int  # the batch per device the profile was made at (the default for predictions)
    input: str = ""  # e.g. "3x224x224 image" or "384 tokens"
    task: str = ""  # e.g. "image classification"
    #: ATen ops that launch work in one forward + backward (per step, not per sample): the launch-bound
    #: floor of a step's time (``cloudfit.perf.prior.launch_bound_sps``); None in older profiles.
    kernels_per_step: int | None = None

    @property
    def weight_bytes(self) -> int:
        return 4 * self.parameters


@dataclass(frozen=True)
class StepTime:
    median: float
    p90: float


@dataclass(frozen=True)
class Measurement:
    """Samples/s of the model on some hardware: measured here, reported elsewhere, or probed."""

    accelerator: str  # canonical catalog name (A100, H100, T4, …) or "cpu"
    count: int  # accelerators per node
    nodes: int
    batch_size_per_device: int
    precision: str
    samples_per_second: float
    step_time_s: StepTime | None = None
    source: str = "measured"  # measured | reported | probe
    note: str = ""
    peak_memory_bytes: int | None = None
    op_time_share: Mapping[str, float] | None = None  # share of step time per op class, where measured
    device_name: str = ""  # raw device name before canonicalisation
    torch_version: str = ""
    host: str = ""
    measured_at: str = ""  # ISO-8601 date-time (UTC) the measurement was taken or added


@dataclass(frozen=True)
class Profile:
    """A model's stats plus every measurement of its throughput (``profiles/*.json``)."""

    model: str
    stats: ModelStats
    measurements: tuple[Measurement, ...] = ()
    schema_version: int = 1

    def with_measurement(self, m: Measurement) -> "Profile":
        return dataclasses.replace(self, measurements=self.measurements + (m,))

    def to_frame(self):
        """The measurements as a pandas DataFrame, one row each (step times flattened, no op shares)."""
        import pandas as pd

        rows = []
        for m in self.measurements:
            d = to_jsonable(m)
            step = d.pop("step_time_s", None) or {}
            d.pop("op_time_share", None)
            d.update({f"step_{k}_s": v for k, v in (step.items() if isinstance(step, dict) else [])})
            rows.append({"model": self.model, **d})
        return pd.DataFrame(rows)

    def stats_frame(self):
        """The model stats as a one-row DataFrame (op-class breakdowns left out)."""
        import pandas as pd

        d = {k: v for k, v in to_jsonable(self.stats).items() if not isinstance(v, (dict, list))}
        return pd.DataFrame([{"model": self.model, **d}])


@dataclass(frozen=True)
class LLMMeasurement:
    """One large-model training run: tokens/s of the whole cluster at a setup (``profile add``), or a short
    per-layer profile (``profile run``: ``layers`` holds the per-layer timings and memory)."""

    accelerator: str  # canonical name (H100, B200, GB200 …) or "cpu"
    gpus_per_node: int
    nodes: int
    precision: str  # bf16 | fp16 | fp8 (fp32 on a CPU profile run)
    seq_len: int
    batch_size: int  # sequences per data-parallel rank and step (micro-batch × accumulation)
    layout: str  # the --layout text (fsdp=8,ac=selective …)
    framework: str  # fsdp | megatron | megatron-deepspeed
    tokens_per_second: float  # whole cluster (of the model run: ``layers`` says when fewer layers ran)
    memory_gib: float | None = None  # peak per GPU
    source: str = "reported"  # measured | reported | probe
    note: str = ""
    layers: Mapping[str, Any] | None = None  # per-layer profile of ``profile run`` (see profiles/README.md)
    device_name: str = ""
    torch_version: str = ""
    host: str = ""
    measured_at: str = ""

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class LLMProfile:
    """A large model's profile: its shape (a zoo name or a config.json's), device-independent per-token stats
    and LLM measurements (``profiles/*.json`` with ``kind: llm``)."""

    model: str
    shape: Mapping[str, Any]  # cloudfit.llm.zoo.LLMShape fields
    origin: str  # "zoo" or "config"
    stats: Mapping[str, Any]  # per-token stats at stats["seq_len"] (cloudfit.llm.stats.TokenStats.to_dict)
    measurements: tuple[LLMMeasurement, ...] = ()
    schema_version: int = 2
    kind: str = "llm"

    def with_measurement(self, m: LLMMeasurement) -> "LLMProfile":
        return dataclasses.replace(self, measurements=self.measurements + (m,))


# --------------------------------------------------------------------------------------------
# Predictions and plans


@dataclass(frozen=True)
class Prediction:
    """The performance model's answer for one hardware configuration."""

    samples_per_second: float
    low: float  # 10% quantile of the calibrated band
    high: float  # 90% quantile
    step_time_s: float
    compute_s: float
    communication_s: float
    basis: str  # which measurement anchored it, or "stats-only"
    fits: bool = True
    reason: str = ""


@dataclass(frozen=True)
class Workload:
    """What to train and under which limits."""

    model: str
    samples: float  # total training samples (epochs × dataset size)
    deadline_hours: float | None = None
    budget_usd: float | None = None
    objective: Objective = "cost"
    regions: tuple[str, ...] = ()  # names or globs; empty = every region
    accelerators: tuple[str, ...] = ()  # empty = every accelerator
    spot: SpotPolicy = "allow"
    max_nodes: int = 64
    confidence: float = 0.9  # required P(meeting the deadline)
    precision: str = "fp16"
    batch_size_per_device: int | None = None  # None = the profile's
    profile_path: str | None = None
    max_gpus: int | None = None  # most GPUs in the whole cluster (None = no limit besides max_nodes)
    allow_outlier_prices: bool = False  # use spot prices cloudfit.catalog.outliers flags
    #: Clouds whose catalogs to search (``cloudfit.catalog.clouds.CLOUDS``); written to plans only when not
    #: the default, GCP alone.
    clouds: tuple[str, ...] = field(default=("gcp",), metadata={"omit_if_default": True})
    #: What the workload counts: "samples" (a profiled model); "tokens" is cloudfit.plan.llm.TokenWorkload.
    kind: ClassVar[str] = "samples"

    def __post_init__(self) -> None:
        """A Workload checks its limits once, when it is made: every holder may trust them.

        Raises ``UsageError`` (one line) for limits that make no sense. A workload with neither a
        deadline nor a budget is well formed (a plan file may carry one) but cannot be planned:
        ``require_limit`` is what ``make_workload`` and ``recommend`` call.
        """
        import math

        from cloudfit.errors import UsageError

        if not (self.samples > 0 and math.isfinite(self.samples)):
            raise UsageError(f"the number of training samples must be positive, got {self.samples:g}")
        if self.deadline_hours is not None and not (self.deadline_hours > 0 and math.isfinite(self.deadline_hours)):
            raise UsageError(f"the deadline must be positive, got {self.deadline_hours:g} h")
        if self.budget_usd is not None and not (self.budget_usd > 0 and math.isfinite(self.budget_usd)):
            raise UsageError(f"the budget must be positive, got ${self.budget_usd:g}")
        if not 0.0 < self.confidence < 1.0:
            raise UsageError(f"--confidence must be between 0 and 1 (exclusive), got {self.confidence:g}")
        if self.objective not in ("cost", "time", "fastest"):
            raise UsageError(f"--objective must be cost, time or fastest, got {self.objective!r}")
        if self.spot not in ("allow", "never", "only"):
            raise UsageError(f"spot policy must be allow, never or only, got {self.spot!r}")
        if not str(self.model).strip():
            raise UsageError("the model name is empty: give --model NAME (see `cloudfit models`) or --profile PATH")
        if self.deadline_hours is not None and self.deadline_hours > MAX_JOB_HOURS:
            raise UsageError(f"a deadline of {self.deadline_hours / 24:,.0f} days is beyond the year cloudfit plans "
                             "for (prices and spot hazards are snapshots of months): give at most 365d")
        if not 1 <= self.max_nodes <= MAX_NODES_LIMIT:
            raise UsageError(f"--max-nodes must be between 1 and {MAX_NODES_LIMIT} (the largest cluster cloudfit "
                             f"plans: {MAX_NODES_LIMIT * 8:,} GPUs at 8 per VM), got {self.max_nodes}")
        if self.max_gpus is not None and self.max_gpus < 1:
            raise UsageError(f"--max-gpus must be at least 1, got {self.max_gpus}")
        check_clouds(self.clouds)

    def require_limit(self) -> "Workload":
        """This workload, if it has a deadline or a budget to plan under; ``UsageError`` otherwise."""
        if self.deadline_hours is None and self.budget_usd is None:
            from cloudfit.errors import UsageError

            raise UsageError("give a --deadline, a --budget, or both")
        return self

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Workload":
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d}
        for name in ("regions", "accelerators", "clouds"):
            if name in kw:
                kw[name] = tuple(kw[name])
        return cls(**kw)


@dataclass(frozen=True)
class Estimate:
    """The prediction for one ClusterConfig, priced and risk-weighted."""

    config: ClusterConfig
    samples_per_second: float
    low: float
    high: float
    hours: float  # expected wall-clock hours including preemption overhead
    hours_p90: float
    cost_usd: float  # expected
    cost_p90_usd: float
    p_on_time: float  # P(finishing by the deadline); 1.0 when there is no deadline
    feasible: bool = True
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    def row(self, cloud: bool | None = None) -> dict[str, Any]:
        """The flat form of this candidate (``recommend --json`` candidates, ``Plan.to_frame`` rows);
        ``cloud``: include the cloud (default: only when it is not GCP)."""
        c, o = self.config, self.config.offering
        head = {"cloud": o.cloud} if (o.cloud != "gcp" if cloud is None else cloud) else {}
        return {
            **head,
            "machine_type": o.machine_type,
            "accelerator": o.accelerator,
            "accelerators_per_node": o.accelerators_per_node,
            "nodes": c.nodes,
            "region": o.region,
            "zone": o.zone,
            "spot": c.spot,
            "price_per_hour": round(c.price_per_hour, 5),
            "samples_per_second": self.samples_per_second,
            "low": self.low,
            "high": self.high,
            "hours": self.hours,
            "hours_p90": self.hours_p90,
            "cost_usd": self.cost_usd,
            "cost_p90_usd": self.cost_p90_usd,
            "p_on_time": self.p_on_time,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Estimate":
        kw = {f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d and f.name != "config"}
        return cls(config=ClusterConfig.from_dict(d["config"]), **kw)


@dataclass(frozen=True)
class Plan:
    """The recommendation: the chosen estimate, ranked fallbacks, the Pareto front, provenance.

    ``plan.json`` is its serialised form and the only input ``cloudfit launch`` needs.
    """

    workload: Workload
    chosen: Estimate
    alternatives: tuple[Estimate, ...] = ()  # ranked, best first, excluding ``chosen``
    pareto: tuple[Estimate, ...] = ()  # cost × time front, fastest first
    provenance: Mapping[str, Any] = field(default_factory=dict)
    explanation: str = ""  # why the chosen config beats the runner-up, in one sentence
    sensitivity: str = ""  # what relaxing the limit would buy, in one sentence
    schema_version: int = 1
    #: Large-model plans only (``cloudfit.plan.llm``): the parallel layout of the chosen cluster and what a
    #: launcher needs to run it (model shape, sequence length, global batch, trainer arguments, checkpoints).
    layout: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    def candidates(self, k: int | None = None) -> tuple[Estimate, ...]:
        """The chosen estimate followed by the ranked alternatives (best first)."""
        out = (self.chosen,) + tuple(self.alternatives)
        return out if k is None else out[:k]

    def to_frame(self, which: str = "candidates"):
        """A pandas DataFrame of the ranked candidates (rank 1 = chosen) or of the Pareto front
        (``which="pareto"``, fastest first, with a ``feasible`` column)."""
        import pandas as pd

        if which == "candidates":
            return pd.DataFrame([{"rank": i + 1, **e.row()} for i, e in enumerate(self.candidates())])
        if which == "pareto":
            return pd.DataFrame([{**e.row(), "feasible": e.feasible} for e in self.pareto])
        raise ValueError(f"which must be 'candidates' or 'pareto', not {which!r}")
