"""Megatron-LM (Megatron-Core) as a stack: ``pretrain_gpt.py`` under torchrun, driven by the plan's layout.

The flags and the rules they must obey are Megatron-LM's own, read from ``megatron/training/arguments.py`` of
NVIDIA/Megatron-LM at commit 000c4ac24f61159c138b0975def722c65245983c (``_add_*_args`` for the flags,
``validate_args`` for the rules; tests/stacks/golden/megatron_args.json holds them, PROVENANCE.md says how).
``megatron-core`` on the package index ships ``megatron/core`` only, not that parser, so ``validate`` uses the real
parser only where a Megatron-LM checkout is importable and says ``StackNotInstalled`` otherwise.

How the plan's layout becomes Megatron's:

- tp / pp / cp → ``--tensor-model-parallel-size`` / ``--pipeline-model-parallel-size`` /
  ``--context-parallel-size``; ``--sequence-parallel`` with tp > 1 (Megatron turns it off itself at tp = 1).
- interleaved pipeline (vp > 1) → ``--num-layers-per-virtual-pipeline-stage``; Megatron runs 1F1B and
  interleaved 1F1B only, any other schedule is refused. Interleaving also needs the micro-batches per step (ga)
  to be a multiple of pp (``forward_backward_pipelining_with_interleaving`` in
  ``megatron/core/pipeline_parallel/schedules.py`` at 00611e6eeb0b09b5ee074750956855215ddbd67f: micro-batch
  groups of pp, the last group full or ≥ pp), else refused. A layer count the pipeline does not divide is run with
  ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`` when layers + 2 divides
  (llama3-405b's 126 layers on pp = 8, 16 …), else refused.
- data parallelism: Megatron's data-parallel size is world ÷ (tp·pp·cp) = dp_replicate × dp_shard. How the
  shard group is sharded follows ``zero``: 0 (or dp_shard = 1) plain DDP; 1 the distributed optimizer
  (``--use-distributed-optimizer``, ZeRO-1); 2 / 3 Megatron-FSDP (``--use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads`` / ``optim_grads_params`` with ``--ckpt-format fsdp_dtensor``,
  ``--no-gradient-accumulation-fusion``, as Megatron-FSDP's user guide requires). HSDP (dp_replicate > 1 with a
  sharded dp_shard) → ``--num-distributed-optimizer-instances dp_replicate``. Megatron-FSDP (and torch-FSDP2,
  whose ``validate_args`` asserts pp == 1) is not offered with pipeline parallelism, so zero ≥ 2 with pp > 1
  is refused (plan it with zero=1).
- micro-batch / global batch → ``--micro-batch-size`` / ``--global-batch-size`` (= mb × ga × dp).
- ac none / selective / full → no recompute / ``--recompute-granularity selective`` / ``full --recompute-method
  uniform --recompute-num-layers 1``.
- precision bf16 → ``--bf16``; fp8 → ``--bf16 --fp8-format hybrid`` (Transformer Engine's default delayed
  scaling recipe); fp32 → neither.
- steps / checkpoints → ``--train-iters``, ``--save``/``--load``/``--save-interval`` and
  ``--exit-signal-handler`` (SIGTERM saves a checkpoint and exits).
- the model → ``--num-layers --hidden-size --num-attention-heads --group-query-attention --num-query-groups
  --ffn-hidden-size --seq-length --max-position-embeddings`` and the family's architecture switches (llama:
  RMSNorm, SwiGLU, RoPE, no biases, untied embeddings).

Data: cloudfit has no dataset of yours, so the command trains on Megatron's mock data with the null tokenizer
unless ``command(job, extra_args)`` passes your ``--data-path`` / ``--tokenizer-*`` flags (then those replace the
mock ones; anything in ``extra_args`` comes last and so wins over cloudfit's choice).

Logs: Megatron prints, at every ``--log-interval``, a line ``iteration N/ M | consumed samples: … | elapsed time
per iteration (ms): T | throughput per GPU (TFLOP/s/GPU): F | learning rate: … | global batch size: B | lm loss:
L | …``; tokens/s = B × seq_len ÷ T. seq_len is the job's (``bind``) or the ``seq_length`` line of the argument
dump Megatron prints at start-up (``parse_log``; ``parse_line`` remembers it for the lines after it). The first log interval also prints ``[Rank 0] (after N iterations) memory (MB)
| allocated: … | max allocated: … | reserved: … | max reserved: …`` (MiB: Megatron divides by 1024²): the peak
is max reserved (what the allocator held, as torchtitan reports), else max allocated. A checkpoint is saved when
``successfully saved checkpoint from iteration N to DIR`` (``at iteration`` in older releases) is printed.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Iterable, Iterator, Mapping, Sequence

from cloudfit.errors import UsageError
from cloudfit.stacks.base import CheckpointSaved, Event, Progress, Stack, StackCommand, StackJob, StackNotInstalled

#: where the facts above come from (tests/stacks/golden/PROVENANCE.md)
MEGATRON_LM_COMMIT = "000c4ac24f61159c138b0975def722c65245983c"
SCRIPT = "pretrain_gpt.py"

_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
_MEM = re.compile(r"\(after\s+(\d+)\s+iterations\)\s+memory\s+\(MB\)\s*\|(.*)$")
_SAVED = re.compile(r"successfully saved checkpoint (?:from|at) iteration\s+(\d+)(?:\s+to\s+(\S+))?")
_ARG = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s\.{2,}\s(.*?)\s*$")
_WORLD = re.compile(r"using world size:\s*(\d+), data-parallel size:\s*(\d+), context-parallel size:\s*(\d+),.*?"
                    r"tensor-model-parallel size:\s*(\d+), pipeline-model-parallel size:\s*(\d+)")
_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"


def _fields(rest: str) -> dict[str, str]:
    """``key: value | key: value |`` → {key: value} (Megatron's log format)."""
    out = {}
    for part in rest.split("|"):
        if ":" in part:
            k, v = part.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def _float(s: str | None) -> float | None:
    if s is None:
        return None
    m = re.match(_NUM, s.strip())
    if not m:
        return None
    v = float(m.group(1))
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _layers_extra(layers: int, pp: int, vp: int) -> int | None:
    """0 when ``pp × vp`` stages divide the layers, 2 when they divide layers + embedding + loss (Megatron's
    ``--account-for-*-in-pipeline-split``), None when neither."""
    for extra in (0, 2):
        if (layers + extra) % (pp * vp) == 0:
            return extra
    return None


class MegatronStack(Stack):
    name = "megatron"
    framework = "megatron"
    extra = None  # Megatron-LM is a git checkout (with Transformer Engine), not a pip extra of cloudfit
    launcher = "torchrun"
    description = "Megatron-LM pretrain_gpt.py (Megatron-Core) under torchrun"
    schedules = ("1f1b", "interleaved")
    checkpoint_on_sigterm = True
    guarantee = ("Megatron saves a checkpoint every --save-interval iterations and on SIGTERM "
                 "(--exit-signal-handler), then exits; a stop counts only checkpoints whose "
                 "'successfully saved checkpoint' line the log shows")

    def __init__(self, seq_len: int | None = None) -> None:
        self.seq_len = seq_len

    def bind(self, job: StackJob | int) -> "MegatronStack":
        """A parser that knows the job's sequence length (tokens/s from a log tail with no argument dump)."""
        return MegatronStack(job if isinstance(job, int) else job.seq_len)

    # ---------------------------------------------------------------- planning
    def layout_ok(self, layout: Any, shape: Mapping[str, Any] | None = None) -> str | None:
        why = super().layout_ok(layout, shape)
        if why:
            return why
        g = lambda k, d=1: int(getattr(layout, k, d))  # noqa: E731
        pp, vp, tp, dp_shard, zero = g("pp"), g("vp"), g("tp"), g("dp_shard"), g("zero", 3)
        if dp_shard > 1 and zero >= 2 and pp > 1:
            return (f"megatron: FSDP (fsdp={dp_shard}, zero={zero}) with a pipeline (pp={pp}) is not a Megatron path "
                    "(Megatron-FSDP and --use-torch-fsdp2 run without pipeline parallelism); use zero=1, Megatron's "
                    "distributed optimizer")
        ga = g("grad_accum")
        if pp > 1 and vp > 1 and (ga < pp or ga % pp):
            return (f"megatron: the interleaved schedule needs the micro-batches per step to be a multiple of pp "
                    f"(ga={ga}, pp={pp}): Megatron-Core's schedule raises otherwise")
        if shape:
            layers, kv = int(shape.get("layers", 0) or 0), int(shape.get("kv_heads", 0) or 0)
            if kv and tp > kv:
                return (f"megatron: tp={tp} is more than the model's {kv} KV heads "
                        "(Megatron splits --num-query-groups across tensor-parallel ranks)")
            if layers and pp > 1 and _layers_extra(layers, pp, vp) is None:
                return (f"megatron: {layers} layers do not split into pp={pp}" + (f" × vp={vp}" if vp > 1 else "")
                        + " stages (even with the embedding and loss counted as layers)")
        return None

    def refuse_workload(self, shape, *, finetune="full", precision="bf16", model="") -> str | None:
        if finetune == "lora":
            return "megatron: pretrain_gpt.py has no LoRA; plan a full fine-tune, or run LoRA with --stack accelerate"
        return None

    def refuse(self, job: StackJob) -> str | None:
        why = super().refuse(job)
        if why:
            return why
        why = self.refuse_workload(job.shape, finetune=job.finetune, precision=job.precision, model=job.model)
        if why:
            return why
        if job.cp > 1 and job.seq_len % (2 * job.cp):
            return (f"megatron: context parallelism needs the sequence length to be a multiple of 2·cp "
                    f"({job.seq_len} with cp={job.cp})")
        sh = job.shape
        heads = int(sh.get("heads", 0) or 0)
        if heads and heads % job.tp:
            return f"megatron: tp={job.tp} does not divide the model's {heads} attention heads"
        missing = [k for k in ("layers", "hidden", "heads", "ffn_hidden", "vocab") if not sh.get(k)]
        if missing:
            return f"megatron: the plan's model shape lacks {', '.join(missing)}"
        return None

    # ---------------------------------------------------------------- running
    def _sharding(self, job: StackJob) -> tuple[str, list[str], list[str]]:
        """(mode, flags, notes) for the data-parallel sharding: ddp | distopt | fsdp."""
        if job.dp_shard == 1 or job.zero == 0:
            return "ddp", [], []
        inst = ["--num-distributed-optimizer-instances", str(job.dp_replicate)] if job.dp_replicate > 1 else []
        overlap = ["--overlap-grad-reduce", "--overlap-param-gather"]
        if job.zero == 1:
            return "distopt", ["--use-distributed-optimizer", *inst, *overlap], []
        strategy = "optim_grads" if job.zero == 2 else "optim_grads_params"
        notes = ["Megatron-FSDP checkpoints are in fsdp_dtensor format (Megatron-LM's checkpoint_inspector "
                 "converts torch_dist ones)"]
        return "fsdp", ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy,
                        "--no-gradient-accumulation-fusion", "--use-distributed-optimizer", *inst,
                        "--ckpt-format", "fsdp_dtensor", *overlap], notes

    def command(self, job: StackJob, extra_args: Sequence[str] = ()) -> StackCommand:
        """``pretrain_gpt.py`` and its flags for ``job``; ``extra_args`` (your data and tokenizer flags, or overrides)
        goes last."""
        self._check(job)
        sh = job.shape
        layers, hidden, heads = int(sh["layers"]), int(sh["hidden"]), int(sh["heads"])
        kv = int(sh.get("kv_heads") or heads)
        llama_like = str(sh.get("mlp", "swiglu")) == "swiglu"
        notes: list[str] = []
        a: list[str] = [SCRIPT]
        # --- model
        a += ["--num-layers", str(layers), "--hidden-size", str(hidden), "--num-attention-heads", str(heads),
              "--ffn-hidden-size", str(int(sh["ffn_hidden"])),
              "--seq-length", str(job.seq_len), "--max-position-embeddings", str(job.seq_len)]
        if kv != heads:
            a += ["--group-query-attention", "--num-query-groups", str(kv)]
        if llama_like:
            theta = 500000 if str(job.model).startswith("llama3") else 10000
            a += ["--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope",
                  "--rotary-base", str(theta)]
        else:
            a += ["--normalization", "RMSNorm" if sh.get("norm") == "rms" else "LayerNorm",
                  "--position-embedding-type", "learned_absolute" if sh.get("learned_positions") else "rope"]
        if not sh.get("bias", False):
            a += ["--disable-bias-linear"]
        if not sh.get("tied_embeddings", False):
            a += ["--untie-embeddings-and-output-weights"]
        a += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
        # --- parallelism
        a += ["--tensor-model-parallel-size", str(job.tp), "--pipeline-model-parallel-size", str(job.pp),
              "--context-parallel-size", str(job.cp)]
        if job.tp > 1:
            a += ["--sequence-parallel"]
        if job.pp > 1:
            extra_layers = _layers_extra(layers, job.pp, job.virtual_stages) or 0
            if extra_layers:
                a += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
                notes.append(f"{layers} layers over pp={job.pp}: the embedding and the loss count as pipeline "
                             "layers (Megatron's --account-for-*-in-pipeline-split)")
            if job.virtual_stages > 1:
                a += ["--num-layers-per-virtual-pipeline-stage",
                      str((layers + extra_layers) // (job.pp * job.virtual_stages))]
        mode, flags, more = self._sharding(job)
        a += flags
        notes += more
        # --- batch, recompute, precision
        a += ["--micro-batch-size", str(job.micro_batch), "--global-batch-size", str(job.global_batch)]
        if job.ac == "selective":
            a += ["--recompute-granularity", "selective"]
        elif job.ac == "full":
            a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
        if job.precision in ("bf16", "fp8"):
            a += ["--bf16"]
        if job.precision == "fp8":
            a += ["--fp8-format", "hybrid"]
        if job.compile:
            notes.append("Megatron-LM has no torch.compile switch: the plan's compile is dropped (it uses "
                         "Transformer Engine's fused kernels instead)")
        # --- schedule, optimizer, logging
        # warm-up: 1 % of the steps (at most 2,000); Megatron's scheduler asserts warm-up < decay steps
        warmup = min(2000, job.steps // 100)
        a += ["--train-iters", str(job.steps), "--lr", "3e-4", "--min-lr", "3e-5", "--lr-decay-style", "cosine",
              *(["--lr-warmup-iters", str(warmup)] if warmup else []), "--weight-decay", "0.1", "--clip-grad", "1.0",
              "--log-interval", str(max(1, min(10, job.steps))), "--log-throughput", "--eval-iters", "0"]
        # --- checkpoints
        ckpt = job.checkpoint_dir
        if ckpt:
            every = job.checkpoint_every_steps or job.steps
            a += ["--save", ckpt, "--load", ckpt, "--save-interval", str(every), "--exit-signal-handler"]
        else:
            notes.append("no checkpoint folder: Megatron saves nothing and a stop loses the run's progress")
        # --- data (mock unless the user's flags bring theirs)
        user = [str(a) for a in extra_args]
        if not any(f in user for f in ("--data-path", "--train-data-path", "--data-args-path",
                                       "--per-split-data-args-path", "--mock-data")):
            a += ["--mock-data"]
            notes.append("data: Megatron's mock dataset; pass --data-path (and a tokenizer) after the plan to "
                         "train on yours")
        if "--tokenizer-type" not in user:
            a += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(int(sh["vocab"]))]
        a += user
        env = {}
        if mode != "fsdp" and (job.tp > 1 or job.cp > 1):
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # validate_args asserts it (before Blackwell)
        if mode == "fsdp":
            notes.append("Megatron-FSDP needs CUDA_DEVICE_MAX_CONNECTIONS unset (or > 1): cloudfit does not set it")
        return StackCommand(argv=tuple(a), launcher="torchrun", env=env, notes=tuple(notes),
                            checkpoint_on_sigterm=bool(ckpt), guarantee=self.guarantee if ckpt else
                            "no checkpoint folder: a budget or deadline stop loses the run's progress")

    def validate(self, cmd: StackCommand) -> dict[str, Any]:
        """The argv as Megatron-LM's own argument parser reads it (where a Megatron-LM checkout is importable)."""
        import importlib

        try:  # a Megatron-LM checkout on the path, not a package cloudfit declares (no wheel ships this module)
            add_megatron_arguments = importlib.import_module("megatron.training.arguments").add_megatron_arguments
        except Exception:
            raise StackNotInstalled("megatron: Megatron-LM's training arguments (megatron.training.arguments) are "
                                    "not importable here; the megatron-core wheel does not ship them") from None
        parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
        argv = list(cmd.argv[1:] if cmd.argv and cmd.argv[0].endswith(".py") else cmd.argv)
        try:
            ns = parser.parse_args(argv)
        except SystemExit:
            raise UsageError(f"megatron: its parser rejects {' '.join(argv)[:200]}") from None
        return vars(ns)

    # ---------------------------------------------------------------- logs
    def parse_line(self, line: str) -> Event | None:
        """One line. Unbound, the sequence length is the one the argument dump at the top of the log printed (a
        reader that follows the log from its start, as ``cloudfit.runtime.logprogress`` does, sees it first)."""
        if self.seq_len is None:
            m = _ARG.match(line)
            if m and m.group(1) == "seq_length" and m.group(2).isdigit():
                self._dump_seq_len = int(m.group(2))
                return None
        return self._parse(line, self.seq_len or getattr(self, "_dump_seq_len", None))

    def _parse(self, line: str, seq_len: int | None) -> Event | None:
        m = _ITER.search(line)
        if m:
            f = _fields(m.group(3))
            step = int(m.group(1))
            ms = _float(f.get("elapsed time per iteration (ms)"))
            gbs = _float(f.get("global batch size"))
            tps = None
            if ms and gbs and seq_len:
                tps = gbs * seq_len / (ms / 1000.0)
            return Progress(step=step, tokens_per_second=tps, loss=_float(f.get("lm loss")),
                            tflops=_float(f.get("throughput per GPU (TFLOP/s/GPU)")))
        m = _MEM.search(line)
        if m:
            f = _fields(m.group(2))
            mib = _float(f.get("max reserved")) or _float(f.get("max allocated"))
            return Progress(step=int(m.group(1)), memory_gib=mib / 1024.0 if mib else None) if mib else None
        m = _SAVED.search(line)
        if m:
            return CheckpointSaved(step=int(m.group(1)), path=m.group(2))
        return None

    def parse_log(self, lines: Iterable[str]) -> Iterator[Event]:
        """Events of a whole log; the sequence length comes from the argument dump when the stack is not bound."""
        seq_len = self.seq_len
        for line in lines:
            if seq_len is None:
                m = _ARG.match(line)
                if m and m.group(1) == "seq_length" and m.group(2).isdigit():
                    seq_len = int(m.group(2))
                    continue
            ev = self._parse(line, seq_len)
            if ev is not None:
                yield ev

    def layout_from_log(self, lines: Iterable[str]) -> dict[str, Any]:
        """Degrees and batch the log states: the world-size line and Megatron's argument dump."""
        out: dict[str, Any] = {}
        args: dict[str, str] = {}
        for line in lines:
            m = _WORLD.search(line)
            if m:
                world, dp, cp, tp, pp = (int(x) for x in m.groups())
                out.update(gpus=world, cp=cp, tp=tp, pp=pp, dp=dp)
                continue
            m = _ARG.match(line)
            if m:
                args[m.group(1)] = m.group(2)
        if "dp" in out:
            dp = out.pop("dp")
            sharded = args.get("use_megatron_fsdp") == "True" or args.get("use_distributed_optimizer") == "True"
            inst = int(args.get("num_distributed_optimizer_instances", "1") or 1) if sharded else 1
            out.update(dp_replicate=inst if sharded else dp, dp_shard=dp // inst if sharded else 1)
            out["zero"] = (3 if args.get("data_parallel_sharding_strategy") == "optim_grads_params" else 2) \
                if args.get("use_megatron_fsdp") == "True" else (1 if sharded else 0)
        for key, name in (("micro_batch_size", "micro_batch"), ("global_batch_size", "global_batch"),
                          ("seq_length", "seq_len")):
            if args.get(key, "").isdigit():
                out[name] = int(args[key])
        if args.get("recompute_granularity") in ("full", "selective"):
            out["ac"] = args["recompute_granularity"]
        elif args.get("recompute_granularity") == "None":
            out["ac"] = "none"
        return out

    def sample_log(self) -> tuple[str, ...]:
        """Lines in Megatron's format (the shapes of training.py's training_log and report_memory)."""
        return (
            "  seq_length ...................................... 4096",
            " [2026-11-27 10:00:00] iteration       10/     100 | consumed samples:          640 | elapsed time per "
            "iteration (ms): 4000.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | learning rate: 3.000000E-04 | "
            "global batch size:    64 | lm loss: 9.500000E+00 | loss scale: 1.0 | grad norm: 2.000 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |",
            "[Rank 0] (after 10 iterations) memory (MB) | allocated: 30000.0 | max allocated: 60000.0 | "
            "reserved: 64000.0 | max reserved: 64000.0",
            " [2026-11-27 10:00:40] iteration       20/     100 | consumed samples:         1280 | elapsed time per "
            "iteration (ms): 3900.0 | throughput per GPU (TFLOP/s/GPU): 410.3 | learning rate: 3.000000E-04 | "
            "global batch size:    64 | lm loss: 8.900000E+00 | loss scale: 1.0 | grad norm: 1.800 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |",
            "  successfully saved checkpoint from iteration      20 to /ckpt",
        )


STACK = MegatronStack()
