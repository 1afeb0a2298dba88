"""The stack plug-in interface: what every training stack (torchtitan, Megatron, Accelerate, cloudfit's own
trainer, a user's command) implements so that a plan can be run on it, priced for it and profiled from its logs.

Plain Python only (no torch, no stack import at module import time): the planner calls ``Stack.pins`` and
``Stack.layout_ok`` inside ``recommend``.

``StackJob`` (frozen): the job in the plan's words, stack-neutral.
  model, shape         cloudfit's model name (``llama3-8b``) and its shape mapping (``plan.layout["shape"]``:
                       layers, hidden, heads, kv_heads, ffn_hidden, vocab, tied_embeddings …)
  seq_len              tokens per sequence
  nodes, gpus_per_node the cluster; ``gpus`` = nodes × gpus_per_node = dp_replicate × dp_shard × tp × pp × cp
  dp_replicate, dp_shard, tp, pp, cp   the parallel degrees (HSDP = dp_replicate > 1 with dp_shard > 1)
  zero                 0 DDP, 1 optimizer sharded (Megatron's distributed optimizer), 3 FSDP (cloudfit's meaning)
  micro_batch, grad_accum   sequences per micro-batch per data-parallel rank; micro-batches per optimizer step
  ac                   activation checkpointing: none | selective | full
  precision            bf16 | fp8 | fp32
  compile              torch.compile the model (stacks that can); None: the plan does not say — the stack's default
                       (torchtitan: on, the speed its plans are priced at; the others: off)
  pp_schedule          cloudfit's schedule name (``PP_SCHEDULES``) or None without a pipeline
  virtual_stages       stages per pipeline rank (1 = not interleaved)
  steps                optimizer steps; ``checkpoint_every_steps`` / ``checkpoint_dir`` the checkpoint interval and
                       folder (None = the stack's default / none)
  finetune, lora_rank  full | lora
  trainer_model_args   the plan's model for ``cloudfit.train_llm`` (``--shape NAME`` or its dimensions)
  ``global_batch`` (sequences per optimizer step) = micro_batch × grad_accum × dp_replicate × dp_shard.
  ``StackJob.from_plan(plan, config=None)`` reads ``plan.layout``; for another cluster than the plan's it
  re-computes the degrees with ``relayout`` (``LlmJob.layout_on``'s rule) (TP kept inside a node, FSDP over the rest, accumulation
  raised to keep the global batch).

``StackCommand`` (frozen): what the launcher runs on each node.
  argv        the program and its arguments after the launcher (``("-m", "torchtitan.train", "--job.config_file",
              "cloudfit_job.toml", …)``); the launcher puts ``torchrun --nnodes … --nproc_per_node …`` before it
  launcher    ``torchrun`` | ``accelerate`` | ``none`` (argv is the whole command, run once per node)
  files       relative path → text, written into the run folder before the command starts; the command runs
              with the run folder as its working directory (torchtitan imports its ``cloudfit_titan.py`` from there)
  env         environment variables for every rank
  notes       one line per thing that differs from the plan
  checkpoint_on_sigterm   the stack saves a checkpoint when it receives SIGTERM
  guarantee   one line: what a budget or deadline stop guarantees for this stack

Events (``Stack.parse_line`` / ``Stack.parse_log``):
  ``Progress(step, tokens_per_second, tokens_per_second_per_gpu, loss, memory_gib, memory_fraction, mfu, tflops)``
  — each field but ``step`` optional; tokens/s of the whole job when the stack prints it, else per GPU (torchtitan
  prints per-GPU ``tps``): ``Progress.job_tokens_per_second(gpus)`` gives the whole job's either way. ``mfu`` and
  ``memory_fraction`` are fractions (0.35, not 35 %); ``memory_gib`` the peak per GPU the stack reports.
  ``CheckpointSaved(step, path)`` — ``step`` -1 when the line does not say (torchtitan's save line): the newest
  step the log reported (``parse_log`` fills it in; a line-by-line reader keeps the last step itself).

``Stack``: ``name``; ``framework`` (the step model's constants: one of ``cloudfit.llm.step.FRAMEWORKS``);
``extra`` (the pip extra that installs it, or None); ``refuse(job)`` → one line why it cannot run ``job`` or
None; ``command(job, extra_args=())`` → ``StackCommand`` (``UsageError`` with the refusal line; ``extra_args``:
the user's own flags for the stack, or for ``custom`` the user's whole command); ``parse_line`` / ``parse_log``;
``bind(job | seq_len)`` → the stack reading that job's log; ``validate(cmd)`` → the configuration as the stack's own parser read it (flat dict) or ``StackNotInstalled``;
``pins(shape)`` → degrees the layout search must pin for this stack (``parse_constraints``' format, e.g.
``{"tp": 1}``); ``layout_ok(layout, shape)`` → None or why not (one line; cheap, pure Python);
``sample_log`` → a few log lines in the stack's format (the contract test parses them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from cloudfit.errors import UsageError

AC_MODES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8", "fp32")
FINETUNES = ("full", "lora")
#: cloudfit's pipeline schedule names (the planner's: 1f1b, interleaved, gpipe) and the ones stacks add.
PP_SCHEDULES = ("1f1b", "interleaved", "gpipe", "looped-bfs", "interleaved-zb", "zbv")
FRAMEWORKS = ("cloudfit", "fsdp", "megatron", "megatron-deepspeed")  # = cloudfit.llm.step.FRAMEWORKS
_POSITIVE = ("seq_len", "nodes", "gpus_per_node", "dp_replicate", "dp_shard", "tp", "pp", "cp", "micro_batch",
             "grad_accum", "virtual_stages", "steps")


class StackNotInstalled(UsageError):
    """The stack's own package (its parser) is not installed here."""


@dataclass(frozen=True)
class StackJob:
    model: str
    shape: Mapping[str, Any]
    seq_len: int
    nodes: int
    gpus_per_node: int
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    micro_batch: int = 1
    grad_accum: int = 1
    ac: str = "selective"
    precision: str = "bf16"
    compile: bool | None = None
    pp_schedule: str | None = None
    virtual_stages: int = 1
    steps: int = 1
    checkpoint_every_steps: int | None = None
    checkpoint_dir: str | None = None
    finetune: str = "full"
    lora_rank: int | None = None
    zero: int = 3
    trainer_model_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f in _POSITIVE:
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise UsageError(f"stack job: {f} must be a positive integer, got {v!r}")
        if self.ac not in AC_MODES:
            raise UsageError(f"stack job: ac must be one of {', '.join(AC_MODES)}, got {self.ac!r}")
        if self.precision not in PRECISIONS:
            raise UsageError(f"stack job: precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.finetune not in FINETUNES:
            raise UsageError(f"stack job: finetune must be full or lora, got {self.finetune!r}")
        if self.finetune == "lora" and not (isinstance(self.lora_rank, int) and self.lora_rank >= 1):
            raise UsageError(f"stack job: LoRA needs a positive lora_rank, got {self.lora_rank!r}")
        if self.zero not in (0, 1, 2, 3):
            raise UsageError(f"stack job: zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.pp > 1 and self.pp_schedule not in PP_SCHEDULES:
            raise UsageError(f"stack job: a pipeline needs a schedule ({', '.join(PP_SCHEDULES)}), "
                             f"got {self.pp_schedule!r}")
        if self.virtual_stages > 1 and self.pp == 1:
            raise UsageError("stack job: virtual pipeline stages need pp > 1")
        if self.checkpoint_every_steps is not None and (
                not isinstance(self.checkpoint_every_steps, int) or self.checkpoint_every_steps < 1):
            raise UsageError(f"stack job: checkpoint_every_steps must be a positive integer or None, "
                             f"got {self.checkpoint_every_steps!r}")
        if not isinstance(self.shape, Mapping):
            raise UsageError("stack job: shape must be a mapping (layers, hidden, heads …)")
        if self.world != self.gpus:
            raise UsageError(f"stack job: the degrees cover {self.world} ranks but the cluster has {self.gpus} GPUs "
                             f"({self.nodes} × {self.gpus_per_node})")

    # ------------------------------------------------------------------ derived
    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def world(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step."""
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def replace(self, **kw: Any) -> "StackJob":
        return dataclasses.replace(self, **kw)

    def layout_text(self) -> str:
        """cloudfit's ``--layout`` text of these degrees (``cloudfit.llm.layout.parse`` reads it back)."""
        parts = [f"dp={self.dp_replicate}", f"fsdp={self.dp_shard}", f"zero={self.zero}", f"tp={self.tp}",
                 f"pp={self.pp}", f"cp={self.cp}"]
        if self.virtual_stages > 1:
            parts.append(f"vp={self.virtual_stages}")
        parts += [f"mb={self.micro_batch}", f"ga={self.grad_accum}", f"ac={self.ac}"]
        if self.pp > 1 and self.pp_schedule in ("1f1b", "interleaved", "gpipe"):
            parts.append(f"schedule={self.pp_schedule}")
        return ",".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["shape"] = dict(self.shape)
        d.update(gpus=self.gpus, global_batch=self.global_batch, layout=self.layout_text())
        return d

    # ------------------------------------------------------------------ from a plan
    @classmethod
    def from_plan(cls, plan: Any, config: Any = None) -> "StackJob":
        """The job of ``plan`` (its layout block) on ``config`` (default: the plan's own cluster)."""
        lay = getattr(plan, "layout", None)
        if not isinstance(lay, Mapping) or not lay:
            raise UsageError("the plan has no layout block (not a large-model plan): re-run `cloudfit recommend`")
        try:
            d = dict(lay["degrees"])
            deg = {k: int(d[k]) for k in ("dp_replicate", "dp_shard", "tp", "pp", "cp", "micro_batch", "grad_accum")}
            vp = int(d.get("vp", 1))
            zero = int(d.get("zero", 3))
            ac = str(d.get("ac", "selective"))
            schedule = str(d.get("schedule") or "1f1b")
            seq_len, steps = int(lay["seq_len"]), int(lay["steps"])
            nodes, per_node = int(lay["nodes"]), int(lay["gpus_per_node"])
            shape = dict(lay.get("shape") or {})
            model = str(lay.get("model") or "")
            precision = str(lay.get("precision") or "bf16")
            finetune = str(lay.get("finetune") or "full")
            lora_rank = lay.get("lora_rank")
            tps = float(lay.get("tokens_per_second") or 0.0)
            interval_h = (lay.get("checkpoint") or {}).get("interval_h")
            compile_ = None if lay.get("compile") is None else bool(lay["compile"])
            model_args = _model_args(list((lay.get("launch") or {}).get("args") or ()))
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"the plan's layout block is malformed ({e!s:.80}): re-run `cloudfit recommend`") from None
        global_batch = deg["micro_batch"] * deg["grad_accum"] * deg["dp_replicate"] * deg["dp_shard"]
        if config is not None:
            gpus, per_node = int(config.accelerators), int(config.offering.accelerators_per_node)
            nodes = int(config.nodes)
            if gpus != nodes * per_node or gpus != deg["dp_replicate"] * deg["dp_shard"] * deg["tp"] * deg["pp"] * deg["cp"]:
                deg = relayout(deg, global_batch, gpus, per_node)
                if deg["pp"] == 1:
                    vp = 1
        step_s = global_batch * seq_len / tps if tps > 0 else None
        every = None
        if interval_h and step_s and math.isfinite(float(interval_h)):
            every = max(1, int(round(float(interval_h) * 3600.0 / step_s)))
        return cls(model=model, shape=shape, seq_len=seq_len, nodes=nodes, gpus_per_node=per_node, **deg, ac=ac,
                   precision=precision, compile=compile_, pp_schedule=schedule if deg["pp"] > 1 else None,
                   virtual_stages=vp, steps=steps, checkpoint_every_steps=every, finetune=finetune,
                   lora_rank=int(lora_rank) if finetune == "lora" and lora_rank is not None else None,
                   zero=zero if deg["dp_shard"] > 1 or zero < 3 else 3, trainer_model_args=model_args)


def _model_args(args: list[str]) -> tuple[str, ...]:
    """The model part of the planner's ``cloudfit.train_llm`` arguments (``--shape X`` or the dimensions)."""
    keep = {"--shape", "--layers", "--dim", "--heads", "--kv-heads", "--ffn-dim", "--vocab"}
    out: list[str] = []
    for i, a in enumerate(args):
        if a in keep and i + 1 < len(args):
            out += [a, str(args[i + 1])]
        elif a == "--tie-embeddings":
            out.append(a)
    return tuple(out)


def relayout(deg: Mapping[str, int], global_batch: int, gpus: int, per_node: int) -> dict[str, int]:
    """The degrees on another GPU count (a fallback cluster, fewer nodes after a loss): tensor parallel kept
    inside a node, pipeline and context degrees kept where the GPUs divide, data-parallel shards over the rest,
    accumulation raised so that the global batch stays (a pipeline gets at least ``pp`` micro-batches)."""
    tp = deg["tp"] if deg["tp"] <= per_node and gpus % deg["tp"] == 0 else 1
    pp = deg["pp"] if gpus % (tp * deg["pp"]) == 0 else 1
    cp = deg["cp"] if gpus % (tp * pp * deg["cp"]) == 0 else 1
    dp = max(1, gpus // (tp * pp * cp))
    mb = deg["micro_batch"]
    ga = max(1, math.ceil(global_batch / (mb * dp)), pp)
    return {**deg, "dp_replicate": 1, "dp_shard": dp, "tp": tp, "pp": pp, "cp": cp, "micro_batch": mb, "grad_accum": ga}


@dataclass(frozen=True)
class StackCommand:
    argv: tuple[str, ...]
    launcher: str = "torchrun"
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    checkpoint_on_sigterm: bool = False
    guarantee: str = ""

    def shell(self) -> str:
        """argv as one shell-quoted line (for dry runs)."""
        import shlex

        return " ".join(shlex.quote(a) for a in self.argv)


@dataclass(frozen=True)
class Progress:
    step: int
    tokens_per_second: float | None = None  # the whole job's
    tokens_per_second_per_gpu: float | None = None  # as stacks that report per rank print it
    loss: float | None = None
    memory_gib: float | None = None  # peak per GPU
    memory_fraction: float | None = None
    mfu: float | None = None  # fraction
    tflops: float | None = None  # per GPU

    def job_tokens_per_second(self, gpus: int) -> float | None:
        if self.tokens_per_second is not None:
            return self.tokens_per_second
        if self.tokens_per_second_per_gpu is not None:
            return self.tokens_per_second_per_gpu * gpus
        return None


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    path: str | None = None


Event = Progress | CheckpointSaved


class Stack:
    """One training stack. Subclasses set the class attributes and implement ``command`` and ``parse_line``."""

    name: str = ""
    framework: str = "fsdp"
    extra: str | None = None
    launcher: str = "torchrun"
    description: str = ""
    #: the pipeline schedules it runs (cloudfit names); () = no pipeline parallelism
    schedules: tuple[str, ...] = ()
    checkpoint_on_sigterm: bool = False
    guarantee: str = ""

    # ---------------------------------------------------------------- planning
    def pins(self, shape: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Degrees the layout search pins for this stack (``cloudfit.plan.llm.parse_constraints``' format)."""
        return {} if self.schedules else {"pp": 1, "vp": 1}

    def layout_ok(self, layout: Any, shape: Mapping[str, Any] | None = None) -> str | None:
        """None when the stack runs ``layout`` (a ``cloudfit.llm.layout.Layout`` or any object with its
        attributes), else one line why not. Cheap: the planner calls it per candidate layout."""
        pp = int(getattr(layout, "pp", 1))
        if pp > 1:
            sched = str(getattr(layout, "schedule", "1f1b"))
            if int(getattr(layout, "vp", 1)) > 1 and sched == "1f1b":
                sched = "interleaved"
            if sched not in self.schedules:
                return (f"{self.name} does not run the {sched} pipeline schedule"
                        if self.schedules else f"{self.name} has no pipeline parallelism (pp={pp})")
        return None

    def refuse_workload(self, shape: Mapping[str, Any], *, finetune: str = "full", precision: str = "bf16",
                        model: str = "") -> str | None:
        """One line why this stack cannot train this model this way whatever the layout (the model, fine-tuning
        mode, precision), or None: ``recommend --stack`` asks it before searching any layout, ``refuse`` at launch."""
        return None

    def refuse(self, job: StackJob) -> str | None:
        """One line why this stack cannot run ``job``, or None."""
        return self.layout_ok(LayoutView(job), job.shape)

    # ---------------------------------------------------------------- running
    def command(self, job: StackJob, extra_args: tuple[str, ...] | list[str] = ()) -> StackCommand:
        raise NotImplementedError

    def _check(self, job: StackJob) -> None:
        why = self.refuse(job)
        if why:
            raise UsageError(why)

    def validate(self, cmd: StackCommand) -> dict[str, Any]:
        """The configuration as the stack's own parser reads it (flat ``section.key`` → value);
        ``StackNotInstalled`` when that parser is not installed here."""
        raise StackNotInstalled(f"{self.name} has no parser of its own to validate with")

    # ---------------------------------------------------------------- logs
    def bind(self, job: "StackJob | int") -> "Stack":
        """This stack reading the log of ``job`` (or of a run with that sequence length): stacks whose log lines
        need the job to give tokens/s (Megatron prints step time and batch) return a bound copy; others themselves."""
        return self

    def parse_line(self, line: str) -> Event | None:
        raise NotImplementedError

    def parse_log(self, lines: Iterable[str]) -> Iterator[Event]:
        for line in lines:
            ev = self.parse_line(line)
            if ev is not None:
                yield ev

    def sample_log(self) -> tuple[str, ...]:
        """A few lines in the stack's own log format: at least two progress lines (the contract test)."""
        return ()

    def layout_from_log(self, lines: Iterable[str]) -> dict[str, Any]:
        """What the log states of the run's layout, in these keys (each optional): ``dp_replicate``, ``dp_shard``,
        ``zero``, ``tp``, ``pp``, ``cp``, ``vp``, ``schedule`` (cloudfit's name), ``micro_batch``, ``grad_accum``,
        ``global_batch`` (sequences per step), ``seq_len``, ``ac``, ``precision``, ``gpus``."""
        return {}

    def layout_from_config_text(self, text: str) -> dict[str, Any]:
        """The same keys from the run's own configuration file (``profile add --stack-config``)."""
        return {}


@dataclass(frozen=True)
class LayoutView:
    """A StackJob seen as a ``Layout`` (for ``layout_ok``)."""

    job: StackJob

    def __getattr__(self, k: str) -> Any:
        j = object.__getattribute__(self, "job")
        if k == "vp":
            return j.virtual_stages
        if k == "schedule":
            return j.pp_schedule or "1f1b"
        return getattr(j, k)


def median_rate(events: Iterable[Event], gpus: int, warmup_steps: int = 3) -> dict[str, Any]:
    """The after-warm-up medians of a log's progress: tokens/s (whole job), MFU, TFLOPS, the peak memory and
    the steps used. Warm-up: the first logged step line (compilation, allocation, the first log interval) and every
    step ≤ ``warmup_steps``; a log with nothing after them falls back to every line but the first (or its only one)."""
    prog = [e for e in events if isinstance(e, Progress)]
    speed = [p for p in prog if p.job_tokens_per_second(gpus) is not None]
    if not speed:
        return {}
    late = [p for p in speed[1:] if p.step > warmup_steps] or speed[1:] or speed
    steps = {p.step for p in late}

    def med(xs: list[float | None]) -> float | None:
        ys = sorted(x for x in xs if x is not None)
        if not ys:
            return None
        n = len(ys)
        return ys[n // 2] if n % 2 else 0.5 * (ys[n // 2 - 1] + ys[n // 2])

    mem = [p.memory_gib for p in prog if p.memory_gib is not None and (p.step in steps or p.step > min(steps))]
    return {"tokens_per_second": med([p.job_tokens_per_second(gpus) for p in late]),
            "tokens_per_second_per_gpu": med([p.tokens_per_second_per_gpu for p in late]),
            "mfu": med([p.mfu for p in late]), "tflops": med([p.tflops for p in late]),
            "memory_gib": max(mem) if mem else None, "steps": sorted(steps), "loss": late[-1].loss,
            "warmup_lines": len(speed) - len(late)}
