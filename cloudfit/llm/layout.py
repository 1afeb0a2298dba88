"""The parallel layout of a training job: a frozen, self-validating record and its text form.

Text form (``--layout``): comma-separated ``key=value``; keys you leave out take defaults.
  ``dp``        data-parallel replicas (plain DDP, or the replicate dimension of HSDP)
  ``fsdp``      data-parallel shard degree (FSDP / ZeRO-3 unless ``zero`` says otherwise)
  ``zero``      0 (DDP), 1 (optimizer states sharded: Megatron's distributed optimizer), 2 (+ gradients),
                3 (+ weights: FSDP). ``dp=8,zero=1`` shards the optimizer over the 8 replicas.
  ``tp``, ``pp``, ``cp``  tensor (with sequence parallelism), pipeline and context parallel degrees
  ``vp``        virtual pipeline stages per GPU (interleaved 1F1B when > 1)
  ``mb``        micro-batch (sequences); ``ga`` gradient-accumulation steps (micro-batches per step)
  ``ac``        activation checkpointing: none | selective | full
  ``schedule``  1f1b | interleaved | gpipe
``auto`` asks the predictor for the fastest layout that fits (see ``cloudfit.llm.predict.best_layout``).

World size = dp × fsdp × tp × pp × cp. Missing data-parallel degrees are inferred from the GPU count:
with neither ``dp`` nor ``fsdp``, all remaining GPUs shard (FSDP; with a pipeline, the stack's ZeRO stage:
``parse(pipeline_zero=...)``); ``zero=0|1|2`` without ``fsdp`` makes them replicas (``dp``), with states sharded
over them as the stage says.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from cloudfit.errors import UsageError

AC_CODE = {"none": 0, "selective": 1, "full": 2}
SCHEDULES = ("1f1b", "interleaved", "gpipe")
_KEYS = ("dp", "fsdp", "zero", "tp", "pp", "cp", "vp", "mb", "ga", "ac", "schedule")


class LayoutError(UsageError):
    """A layout that cannot run (bad key, degrees that don't multiply to the GPU count, tp vs heads…)."""


@dataclass(frozen=True)
class Layout:
    dp_replicate: int = 1
    dp_shard: int = 1
    zero: int = 3
    tp: int = 1
    pp: int = 1
    cp: int = 1
    vp: int = 1
    micro_batch: int = 1
    grad_accum: int = 1
    ac: str = "selective"
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        for f in ("dp_replicate", "dp_shard", "tp", "pp", "cp", "vp", "micro_batch", "grad_accum"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise LayoutError(f"layout: {f} must be a positive integer, got {v!r}")
        if self.zero not in (0, 1, 2, 3):
            raise LayoutError(f"layout: zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.ac not in AC_CODE:
            raise LayoutError(f"layout: ac must be none, selective or full, got {self.ac!r}")
        if self.schedule not in SCHEDULES:
            raise LayoutError(f"layout: schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.vp > 1 and self.pp == 1:
            raise LayoutError("layout: vp > 1 needs pipeline parallelism (pp > 1)")
        if self.dp_shard > 1 and self.zero == 0:
            raise LayoutError("layout: fsdp > 1 with zero=0 shards nothing; use dp= for plain replicas")

    # --- derived -------------------------------------------------------------------------------
    @property
    def dp(self) -> int:
        """Data-parallel degree: replicas × shards."""
        return self.dp_replicate * self.dp_shard

    @property
    def shard(self) -> int:
        """Degree over which ZeRO-sharded states are divided (the shard group; all of dp when not HSDP)."""
        return self.dp_shard if self.zero > 0 else 1

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def sequences_per_replica(self) -> int:
        """Sequences one data-parallel rank trains per step (micro-batch × accumulation)."""
        return self.micro_batch * self.grad_accum

    @property
    def global_batch(self) -> int:
        return self.sequences_per_replica * self.dp

    def check(self, *, gpus: int | None = None, heads: int | None = None, kv_heads: int | None = None,
              layers: int | None = None, gpus_per_node: int | None = None) -> "Layout":
        """Raise ``LayoutError`` (one line) when the layout cannot run on this model / cluster."""
        if gpus is not None and self.gpus != gpus:
            raise LayoutError(f"layout degrees multiply to {self.gpus} GPUs ({self.describe()}), "
                              f"but the cluster has {gpus}")
        if heads is not None and heads % self.tp:
            raise LayoutError(f"tp={self.tp} does not divide the model's {heads} attention heads")
        if kv_heads is not None and self.tp > kv_heads and self.tp % kv_heads:
            raise LayoutError(f"tp={self.tp} cannot split the model's {kv_heads} KV heads")
        if layers is not None and self.pp * self.vp > layers:
            raise LayoutError(f"pp={self.pp}{f' × vp={self.vp}' if self.vp > 1 else ''} is more pipeline "
                              f"stages than the model's {layers} layers")
        return self

    def describe(self) -> str:
        """Canonical text form (parses back to the same layout)."""
        parts = []
        if self.dp_replicate > 1 or self.zero < 3:
            parts.append(f"dp={self.dp_replicate}")
        if self.zero == 3 or self.dp_shard > 1:
            parts.append(f"fsdp={self.dp_shard}")
        parts += [f"zero={self.zero}", f"tp={self.tp}", f"pp={self.pp}", f"cp={self.cp}"]
        if self.vp > 1:
            parts.append(f"vp={self.vp}")
        parts += [f"mb={self.micro_batch}", f"ga={self.grad_accum}", f"ac={self.ac}", f"schedule={self.schedule}"]
        return ",".join(parts)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(dp=self.dp, gpus=self.gpus, global_batch=self.global_batch, text=self.describe())
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Layout":
        keys = ("dp_replicate", "dp_shard", "zero", "tp", "pp", "cp", "vp", "micro_batch", "grad_accum", "ac",
                "schedule")
        return cls(**{k: d[k] for k in keys if k in d})


def _int(key: str, val: str) -> int:
    try:
        v = int(val)
    except ValueError:
        raise LayoutError(f"layout: {key}={val!r} is not an integer") from None
    if v < (0 if key == "zero" else 1):
        raise LayoutError(f"layout: {key} must be {'≥ 0' if key == 'zero' else 'at least 1'}, got {v}")
    return v


def pairs(text: str) -> list[tuple[str, str]]:
    """``fsdp=128, tp=8`` → [("fsdp", "128"), ("tp", "8")], lower-cased; ``LayoutError`` for a part that is
    not key=value or names an unknown key."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" not in part:
            raise LayoutError(f"layout: expected key=value, got {part!r} (keys: {', '.join(_KEYS)})")
        k, v = (x.strip().lower() for x in part.split("=", 1))
        if k not in _KEYS:
            raise LayoutError(f"layout: unknown key {k!r} (keys: {', '.join(_KEYS)})")
        out.append((k, v))
    return out


def parse(text: str, *, gpus: int, sequences_per_replica: int | None = None, pipeline_zero: int = 1) -> Layout:
    """Parse ``fsdp=128,tp=1,ac=selective`` for a cluster of ``gpus`` GPUs.

    ``sequences_per_replica`` (the batch of sequences per data-parallel rank and step, ``--batch-size``)
    fills in ``mb``/``ga``: with neither, mb = that batch and ga = 1; with one, the other is the quotient.
    ``auto`` is not parsed here (the predictor resolves it). ``pipeline_zero``: the ZeRO stage a pipeline gets
    when the text names neither ``zero`` nor ``fsdp`` (1: Megatron's distributed optimizer; 3: a PyTorch stack
    that shards every stage with FSDP, as cloudfit's trainer does).
    """
    if gpus < 1:
        raise LayoutError(f"the cluster must have at least 1 GPU, got {gpus}")
    raw: dict[str, str] = {}
    for k, v in pairs(text):
        if k in raw:
            raise LayoutError(f"layout: {k} given twice")
        raw[k] = v
    ints = {k: _int(k, v) for k, v in raw.items() if k not in ("ac", "schedule")}
    tp, pp, cp, vp = (ints.get(k, 1) for k in ("tp", "pp", "cp", "vp"))
    model_par = tp * pp * cp
    if gpus % model_par:
        raise LayoutError(f"tp × pp × cp = {model_par} does not divide the {gpus} GPUs")
    dp_total = gpus // model_par
    zero = ints.get("zero")
    if "fsdp" in ints and "dp" in ints:
        rep, shard = ints["dp"], ints["fsdp"]
        zero = 3 if zero is None else zero
    elif "fsdp" in ints:
        shard = ints["fsdp"]
        if dp_total % shard:
            raise LayoutError(f"fsdp={shard} does not divide the {dp_total} data-parallel ranks "
                              f"({gpus} GPUs ÷ tp·pp·cp {model_par})")
        rep, zero = dp_total // shard, (3 if zero is None else zero)
    elif "dp" in ints:
        rep = ints["dp"]
        zero = 0 if zero is None else zero
        shard = 1
        if zero > 0:
            rep, shard = 1, ints["dp"]
    else:  # FSDP by default; a pipeline defaults to the stack's stage (Megatron's distributed optimizer: ZeRO-1)
        zero = (3 if pp == 1 else pipeline_zero) if zero is None else zero
        rep, shard = (1, dp_total) if zero > 0 else (dp_total, 1)
    if zero == 0 and shard > 1:
        raise LayoutError("layout: fsdp > 1 with zero=0 shards nothing; use dp= for plain replicas")
    schedule = raw.get("schedule") or ("interleaved" if vp > 1 else "1f1b")
    if schedule == "interleaved" and vp == 1 and pp > 1:
        vp = 2
    mb, ga = ints.get("mb"), ints.get("ga")
    if sequences_per_replica is not None:
        if sequences_per_replica < 1:
            raise LayoutError(f"the batch per data-parallel rank must be at least 1, got {sequences_per_replica}")
        if mb is None and ga is None:
            mb, ga = sequences_per_replica, 1
            if pp > 1:  # a pipeline needs micro-batches: one sequence each
                mb, ga = 1, sequences_per_replica
        elif mb is None:
            if sequences_per_replica % ga:
                raise LayoutError(f"ga={ga} does not divide the batch of {sequences_per_replica} per rank")
            mb = sequences_per_replica // ga
        elif ga is None:
            if sequences_per_replica % mb:
                raise LayoutError(f"mb={mb} does not divide the batch of {sequences_per_replica} per rank")
            ga = sequences_per_replica // mb
        elif mb * ga != sequences_per_replica:
            raise LayoutError(f"mb × ga = {mb * ga} but the batch per rank is {sequences_per_replica}")
    lay = Layout(dp_replicate=rep, dp_shard=shard, zero=zero, tp=tp, pp=pp, cp=cp, vp=vp,
                 micro_batch=mb or 1, grad_accum=ga or 1, ac=raw.get("ac", "selective"), schedule=schedule)
    return lay.check(gpus=gpus)
