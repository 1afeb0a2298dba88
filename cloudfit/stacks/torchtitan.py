"""torchtitan (PyTorch's LLM training platform; ``pip install 'cloudfit[titan]'``) as a cloudfit stack.

torchtitan 0.3.0 builds its configuration from a Python ``config_registry`` function chosen with
``--module M --config F`` and overridden by ``--section.key value`` flags (tyro; there is no TOML file any
more). A plan becomes:

* ``cloudfit_titan.py`` (written into the run folder): ``cloudfit_job()`` starts from torchtitan's own
  ``llama3_8b`` / ``llama3_70b`` / ``llama3_405b`` config and sets the model flavour and the float8 converter
  (``model_spec`` is not a command-line field in torchtitan);
* ``torchrun … -m torchtitan.train --module cloudfit_titan --config cloudfit_job`` + one flag per degree:
  ``--parallelism.data_parallel_replicate_degree / data_parallel_shard_degree / tensor_parallel_degree /
  pipeline_parallel_degree / pipeline_parallel_schedule / pipeline_parallel_layers_per_stage (vp > 2) /
  pipeline_parallel_microbatch_size / context_parallel_degree``, ``--training.local_batch_size /
  global_batch_size / seq_len / steps``, ``activation_checkpoint:{none,selective,full}``, ``--compile.enable``
  (+ ``--compile.enable_async_tensor_parallel`` with TP), ``--checkpoint.enable --checkpoint.folder
  --checkpoint.interval``.

Batch mapping: without a pipeline ``local_batch_size`` = the plan's micro-batch and torchtitan accumulates
``global_batch_size ÷ (local × dp)`` = the plan's accumulation steps; with a pipeline the plan's micro-batches
of one step go through the pipeline (``local_batch_size`` = micro-batch × accumulation,
``pipeline_parallel_microbatch_size`` = micro-batch), as cloudfit's step model prices it.

Log: ``step: 10  loss:  7.12  grad_norm: …  memory: 30.12GiB(38.09%)  tps: 6,123  tflops: 350.10  mfu: 35.40%``
(``components/metrics.py``; ``tps`` is tokens per second *per GPU*: the job's is tps × GPUs; older versions
print ``wps``). A checkpoint: ``Finished saving the checkpoint in 3.21 seconds.`` (the step is the last one
logged). The mesh: ``Building device mesh with parallelism: pp=1, dp_replicate=1, dp_shard=8, cp=1, tp=1``
(older: ``Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]``).

Names from torchtitan 0.3.0's wheel (PyPI ``torchtitan==0.3.0``): ``torchtitan/config/{configs,manager}.py``,
``trainer.py``, ``models/llama3/{__init__,config_registry}.py``, ``distributed/pipeline_parallel.py``,
``distributed/activation_checkpoint.py``, ``components/metrics.py``, ``components/checkpointer/{base,dcp}.py``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Iterator, Mapping

from cloudfit.errors import UsageError
from cloudfit.stacks.base import (CheckpointSaved, Event, Progress, Stack, StackCommand, StackJob,
                                  StackNotInstalled, LayoutView)

CONFIG_MODULE = "cloudfit_titan"
CONFIG_FUNCTION = "cloudfit_job"
CONFIG_FILE = f"{CONFIG_MODULE}.py"
VERSION = "0.3.0"

#: torchtitan's llama3 flavours: (hidden, layers, heads, kv_heads, ffn_hidden, vocab) → (flavour, base config,
#: output layer tied?) — models/llama3/__init__.py (ffn = compute_ffn_hidden_dim(dim, multiple_of, multiplier)).
FLAVORS: dict[tuple[int, int, int, int, int, int], tuple[str, str]] = {
    (2048, 16, 32, 8, 8192, 128256): ("1B", "llama3_8b"),
    (3072, 28, 24, 8, 8192, 128256): ("3B", "llama3_8b"),
    (4096, 32, 32, 8, 14336, 128256): ("8B", "llama3_8b"),
    (8192, 80, 64, 8, 28672, 128256): ("70B", "llama3_70b"),
    (16384, 126, 128, 8, 53248, 128256): ("405B", "llama3_405b"),
}
#: cloudfit's schedule → torchtitan's (torch.distributed.pipelining names) and whether it runs several stages per rank
SCHEDULES: dict[str, tuple[str, bool]] = {
    "1f1b": ("1F1B", False), "gpipe": ("GPipe", False), "interleaved": ("Interleaved1F1B", True),
    "looped-bfs": ("LoopedBFS", True), "interleaved-zb": ("InterleavedZeroBubble", True),
    "zbv": ("ZBVZeroBubble", True),
}
#: each AC mode's tyro subcommand (distributed/activation_checkpoint.py: ActivationCheckpointingConfig)
AC_SUBCOMMAND = {"none": "activation_checkpoint:none", "selective": "activation_checkpoint:selective",
                 "full": "activation_checkpoint:full"}

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"(?<![\w ])\s*step:\s*(\d+)\s+loss:\s*([-+0-9.eEnaif]+)(.*)$")
_MEM = re.compile(r"memory:\s*([0-9.]+)\s*GiB\s*\(\s*([0-9.]+)%\)")
_TPS = re.compile(r"\b(?:tps|wps):\s*([0-9,]+(?:\.[0-9]+)?)")
_TFLOPS = re.compile(r"tflops:\s*([0-9,]+(?:\.[0-9]+)?)")
_MFU = re.compile(r"mfu:\s*([0-9.]+)%")
#: a save finished (synchronous DCP: the files are written; "staging" of an async save is not a save)
_CKPT_DONE = re.compile(r"Finished saving the checkpoint|Last step checkpoint completed")
#: a save begins at step N (older torchtitan: "Saving a checkpoint at step N."; 0.3: "… at last step, step N.")
_CKPT_STEP = re.compile(r"[Ss]aving (?:a |the )?(?:full |model only )?checkpoint\b.*?\bstep,? (?:step )?(\d+)")
_CKPT_ID = re.compile(r"(\S*step-(\d+))")
_MESH_NEW = re.compile(r"Building device mesh with parallelism:\s*(.*)$")
_MESH_OLD = re.compile(r"Building (\d+)-D device mesh with \[([^\]]*)\],\s*\[([^\]]*)\]")
_BATCH = re.compile(r"local batch size (\d+), global batch size (\d+)(?:, gradient accumulation steps (\d+))?"
                    r", sequence length (\d+)")
_PP_SCHED = re.compile(r"Using pipeline schedule (\S+) with (\d+) microbatches and (\d+) stages")
_AC = re.compile(r"Applied (SelectiveAC|FullAC|selective|full)\b.*activation checkpointing")
_FLOAT8 = re.compile(r"Float8 training active|Swapped to Float8Linear")
_MESH_KEYS = {"pp": "pp", "dp_replicate": "dp_replicate", "dp_shard": "dp_shard", "cp": "cp", "tp": "tp",
              "dp": "dp_shard"}


def flavor_of(shape: Mapping[str, Any]) -> tuple[str, str] | None:
    """torchtitan's llama3 flavour (and its base config function) of a cloudfit shape, or None."""
    try:
        key = (int(shape["hidden"]), int(shape["layers"]), int(shape["heads"]), int(shape["kv_heads"]),
               int(shape["ffn_hidden"]), int(shape["vocab"]))
    except (KeyError, TypeError, ValueError):
        return None
    return FLAVORS.get(key)


def layers_per_stage(layers: int, stages: int) -> int | None:
    """``pipeline_parallel_layers_per_stage`` giving exactly ``stages`` virtual stages (torchtitan counts the
    embedding and the output as one layer each: ceil((layers + 2) ÷ per_stage) = stages), or None."""
    eff = layers + 2
    for per in range(max(1, eff // stages), eff + 1):
        n = math.ceil(eff / per)
        if n == stages:
            return per
        if n < stages:
            return None
    return None


class Torchtitan(Stack):
    name = "torchtitan"
    framework = "fsdp"  # FSDP2 + DTensor TP/SP + torch.distributed.pipelining: the step model's FSDP constants
    extra = "titan"
    launcher = "torchrun"
    description = "PyTorch's torchtitan (FSDP2/HSDP, TP + async TP, PP schedules, CP, float8, torch.compile)"
    schedules = tuple(SCHEDULES)
    checkpoint_on_sigterm = False
    guarantee = ("torchtitan saves DCP checkpoints every checkpoint.interval steps and none on SIGTERM: a budget "
                 "or deadline stop is placed right after a checkpoint its log reports (at most one interval of "
                 "steps is redone on resume)")

    # ------------------------------------------------------------------ planning
    def layout_ok(self, layout: Any, shape: Mapping[str, Any] | None = None) -> str | None:
        pp, vp = int(getattr(layout, "pp", 1)), int(getattr(layout, "vp", 1))
        zero = int(getattr(layout, "zero", 3))
        if zero in (1, 2) and int(getattr(layout, "dp_shard", 1)) * int(getattr(layout, "dp_replicate", 1)) > 1:
            return f"torchtitan has no ZeRO-{zero} (optimizer-only sharding): it runs DDP, FSDP (ZeRO-3) or HSDP"
        if pp > 1:
            sched = str(getattr(layout, "schedule", "1f1b"))
            if vp > 1 and sched == "1f1b":
                sched = "interleaved"
            if sched not in SCHEDULES:
                return f"torchtitan has no {sched} pipeline schedule"
            multi = SCHEDULES[sched][1]
            if not multi and vp > 1:
                return f"torchtitan's {SCHEDULES[sched][0]} runs one stage per rank, not vp={vp}"
            if multi and vp < 2:
                return f"torchtitan's {SCHEDULES[sched][0]} needs at least 2 stages per rank (vp ≥ 2), got vp={vp}"
            if sched == "zbv" and vp != 2:
                return f"torchtitan's ZBVZeroBubble runs exactly 2 stages per rank, got vp={vp}"
            if shape is not None and "layers" in shape and vp > 2:  # torchtitan's default: 2 stages per rank
                if layers_per_stage(int(shape["layers"]), pp * vp) is None:
                    return (f"torchtitan cannot split {int(shape['layers'])} layers (+ embedding and output) into "
                            f"{pp * vp} whole stages (pp={pp} × vp={vp})")
            if shape is not None and "layers" in shape and pp * vp > int(shape["layers"]) + 2:
                return f"torchtitan cannot make {pp * vp} pipeline stages of {int(shape['layers'])} layers"
        if shape is not None and shape.get("tied_embeddings") and pp > 1:
            return "torchtitan's llama3 has no tied embeddings to split over a pipeline"
        tp = int(getattr(layout, "tp", 1))
        kv = int((shape or {}).get("kv_heads") or (shape or {}).get("heads") or 0)
        if tp > 1 and kv and kv % tp:
            return (f"torchtitan splits the {kv} KV heads over the TP ranks (it does not replicate them): "
                    f"tp={tp} must divide {kv}")
        return None

    def refuse_workload(self, shape, *, finetune="full", precision="bf16", model="") -> str | None:
        if flavor_of(shape) is None:
            dims = ", ".join(f"{k}={shape.get(k)}" for k in ("hidden", "layers", "heads", "kv_heads", "ffn_hidden",
                                                             "vocab") if k in shape)
            return (f"torchtitan's llama3 flavours are 1B, 3B, 8B, 70B and 405B; {model or 'the model'} "
                    f"({dims}) is none of them: register a flavour in torchtitan and run it with "
                    "`cloudfit launch plan.json --stack custom -- torchrun …`")
        if finetune == "lora":
            return ("torchtitan's LoRA is a model converter without a pretraining recipe here: run it with "
                    "`--stack custom` or plan full fine-tuning")
        return None

    def refuse(self, job: StackJob) -> str | None:
        why = self.refuse_workload(job.shape, finetune=job.finetune, precision=job.precision, model=job.model)
        if why:
            return why
        why = self.layout_ok(LayoutView(job), job.shape)
        if why:
            return why
        if job.cp > 1 and job.seq_len % (2 * job.cp):
            return f"torchtitan's context parallel splits each sequence into 2·cp chunks: {job.seq_len} ÷ {2 * job.cp}"
        if job.tp > 1 and int(job.shape.get("heads", 0)) % job.tp:
            return f"tp={job.tp} does not divide the model's {job.shape.get('heads')} attention heads"
        return None

    # ------------------------------------------------------------------ command
    def command(self, job: StackJob, extra_args: tuple[str, ...] | list[str] = ()) -> StackCommand:
        """``extra_args``: the user's own torchtitan flags (``--hf_assets_path …``, ``--dataloader.dataset …``),
        placed after cloudfit's (tyro: the last one wins) and before the activation-checkpoint subcommand."""
        self._check(job)
        flavor, base = flavor_of(job.shape)  # type: ignore[misc]
        notes: list[str] = []
        if job.shape.get("tied_embeddings"):
            notes.append(f"torchtitan's llama3 {flavor} has its own output layer (the plan's {job.model} ties it to "
                         "the embedding)")
        p = "--parallelism."
        argv: list[str] = ["-m", "torchtitan.train", "--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION,
                           f"{p}data_parallel_replicate_degree", str(job.dp_replicate),
                           f"{p}data_parallel_shard_degree", str(job.dp_shard),
                           f"{p}tensor_parallel_degree", str(job.tp),
                           f"{p}pipeline_parallel_degree", str(job.pp),
                           f"{p}context_parallel_degree", str(job.cp)]
        if job.pp > 1:
            sched, multi = SCHEDULES[job.pp_schedule or "1f1b"]
            if job.virtual_stages > 1 and job.pp_schedule == "1f1b":
                sched, multi = SCHEDULES["interleaved"]
            argv += [f"{p}pipeline_parallel_schedule", sched]
            if job.virtual_stages > 2:  # torchtitan runs 1 stage per rank (single-stage schedules) or 2 (looped)
                per = layers_per_stage(int(job.shape["layers"]), job.pp * job.virtual_stages)
                argv += [f"{p}pipeline_parallel_layers_per_stage", str(per)]
            argv += [f"{p}pipeline_parallel_microbatch_size", str(job.micro_batch)]
            local = job.micro_batch * job.grad_accum  # the step's micro-batches flow through the pipeline
        else:
            local = job.micro_batch
        argv += ["--training.local_batch_size", str(local), "--training.global_batch_size", str(job.global_batch),
                 "--training.seq_len", str(job.seq_len), "--training.steps", str(job.steps)]
        if job.pp > 1:
            argv.append("--training.disable_cuda_graphs")  # trainer.py: CUDA graphs do not support PP yet
        argv += ["--training.mixed_precision_param", "float32" if job.precision == "fp32" else "bfloat16"]
        # every switch said outright: torchtitan's base configs differ (llama3_405b compiles, for one). A plan that
        # does not say compiles: its speed is priced on public runs' fused kernels, and eager runs fell short of
        # it on an H200 (bench/RESULTS_gpu.md: torchtitan eager 1.20x slower than planned; cloudfit's own step
        # 1.44x faster compiled)
        compiled = job.compile is not False
        if job.compile is None:
            notes.append("torch.compile on (the plan's speed assumes fused kernels; eager ran 20–30% below plans on an "
                         "H200, bench/RESULTS_gpu.md): the first steps pay the compilation — `-- --compile.no-enable` "
                         "turns it off")
        argv.append("--compile.enable" if compiled else "--compile.no-enable")
        argv.append("--compile.enable-async-tensor-parallel" if compiled and job.tp > 1
                    else "--compile.no-enable-async-tensor-parallel")
        if job.checkpoint_dir or job.checkpoint_every_steps:
            argv.append("--checkpoint.enable")
            if job.checkpoint_dir:
                argv += ["--checkpoint.folder", job.checkpoint_dir]
            if job.checkpoint_every_steps:
                argv += ["--checkpoint.interval", str(job.checkpoint_every_steps)]
        else:
            argv.append("--checkpoint.no-enable")
            notes.append("no checkpoint folder or interval: torchtitan checkpoints are off")
        argv += [str(a) for a in extra_args]
        argv.append(AC_SUBCOMMAND[job.ac])  # a tyro subcommand: after every other flag
        if job.precision == "fp8":
            notes.append("float8: torchtitan's Float8LinearConverter (its default rowwise recipe; SM89+ GPUs)"
                         + ("" if compiled else "; without torch.compile its casts are not fused and float8 "
                            "runs slower than planned: launch with compile on"))
        files = {CONFIG_FILE: _config_source(flavor, base, job.precision == "fp8", compiled)}
        env = {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}  # as torchtitan's run_train.sh sets it
        assets = {"llama3_8b": "8B", "llama3_70b": "70B", "llama3_405b": "405B"}[base]
        notes.append(f"torchtitan reads its tokenizer from hf_assets_path (./assets/hf/Llama-3.1-{assets}) and "
                     "streams the c4 dataset: ship them or override --hf_assets_path / --dataloader.dataset")
        if job.checkpoint_dir and "://" in job.checkpoint_dir:
            notes.append(f"checkpoints go straight to {job.checkpoint_dir.split('://')[0]}:// through fsspec "
                         "(torchtitan/tools/filesystem.py): the nodes need its filesystem package (gcsfs for gs://)")
        return StackCommand(argv=tuple(argv), launcher="torchrun", files=files, env=env, notes=tuple(notes),
                            checkpoint_on_sigterm=False, guarantee=self.guarantee)

    # ------------------------------------------------------------------ validation
    def validate(self, cmd: StackCommand, workdir: str | None = None, world_size: int | None = None) -> dict[str, Any]:
        """Parse ``cmd`` with torchtitan's own ``ConfigManager`` (on CPU: no GPU) and return the values cloudfit
        set, flat (``parallelism.tensor_parallel_degree`` → 2, ``model.flavor`` → "8B", ``activation_checkpoint`` →
        "full", ``model.float8`` → True). With ``world_size``, torchtitan's ``ParallelDims`` also builds its device
        meshes for that many ranks on its ``fake_backend`` process group (``comm.mode`` = fake_backend: no GPU, no
        communication): ``mesh`` → {axis: size}. ``StackNotInstalled`` without torchtitan."""
        out, cfg = _parse_with_torchtitan(cmd, workdir)
        try:  # the trainer's own model checks: TP against the heads and KV heads, seq_len against RoPE, tying vs PP
            cfg.model_spec.model.update_from_config(config=cfg)
        except (ValueError, AssertionError, NotImplementedError) as e:
            raise UsageError(f"torchtitan rejected the model for this layout: {str(e).splitlines()[0]}") from None
        if world_size is not None:
            out["mesh"], out["pipeline.stages"] = _fake_mesh(out, cfg, world_size)
        return out

    # ------------------------------------------------------------------ logs
    def parse_line(self, line: str) -> Event | None:
        line = _ANSI.sub("", line)
        m = _STEP.search(line)
        if m and "validate step" not in line:
            rest = m.group(3)
            try:
                loss = float(m.group(2))
            except ValueError:
                loss = None
            mem, tps, tfl, mfu = _MEM.search(rest), _TPS.search(rest), _TFLOPS.search(rest), _MFU.search(rest)
            return Progress(step=int(m.group(1)), loss=loss,
                            tokens_per_second_per_gpu=float(tps.group(1).replace(",", "")) if tps else None,
                            memory_gib=float(mem.group(1)) if mem else None,
                            memory_fraction=float(mem.group(2)) / 100.0 if mem else None,
                            tflops=float(tfl.group(1).replace(",", "")) if tfl else None,
                            mfu=float(mfu.group(1)) / 100.0 if mfu else None)
        if _CKPT_DONE.search(line):
            ident = _CKPT_ID.search(line)
            return CheckpointSaved(step=int(ident.group(2)) if ident else -1, path=ident.group(1) if ident else None)
        return None

    def parse_log(self, lines: Iterable[str]) -> Iterator[Event]:
        """Progress once per step (every rank may print the same line); a finished save with the step its
        "Saving … step N" line named, else the last step logged."""
        last, pending = 0, None
        seen: set[int] = set()
        for line in lines:
            ev = self.parse_line(line)
            if isinstance(ev, Progress):
                if ev.step in seen:
                    continue
                seen.add(ev.step)
                last = max(last, ev.step)
                yield ev
            elif isinstance(ev, CheckpointSaved):
                yield ev if ev.step >= 0 else CheckpointSaved(step=pending if pending is not None else last,
                                                               path=ev.path)
                pending = None
            else:
                m = _CKPT_STEP.search(_ANSI.sub("", line))
                if m:
                    pending = int(m.group(1))

    def layout_from_log(self, lines: Iterable[str]) -> dict[str, Any]:
        """What the log states: the mesh (``dp_replicate``, ``dp_shard``, ``tp``, ``pp``, ``cp``), the batch
        (``micro_batch``, ``grad_accum``, ``global_batch``, ``seq_len``), ``ac``, ``schedule``/``vp`` and
        ``precision`` (fp8 when float8 training is active)."""
        out: dict[str, Any] = {}
        local = n_mb = stages = None
        for raw in lines:
            line = _ANSI.sub("", raw)
            m = _MESH_NEW.search(line)
            if m and "_mesh" not in out:
                for part in m.group(1).split(","):
                    k, _, v = part.strip().partition("=")
                    if k in _MESH_KEYS and v.strip().isdigit():
                        out[_MESH_KEYS[k]] = int(v)
                out["_mesh"] = True
                continue
            m = _MESH_OLD.search(line)
            if m and "_mesh" not in out:
                names = [n.strip().strip("'\"") for n in m.group(2).split(",") if n.strip()]
                sizes = [int(x) for x in m.group(3).split(",") if x.strip()]
                out.update({_MESH_KEYS[n]: v for n, v in zip(names, sizes) if n in _MESH_KEYS})
                out["_mesh"] = True
                continue
            m = _BATCH.search(line)
            if m and local is None:
                local, out["global_batch"] = int(m.group(1)), int(m.group(2))
                if m.group(3):
                    out["grad_accum"] = int(m.group(3))
                out["seq_len"] = int(m.group(4))
                continue
            m = _PP_SCHED.search(line)
            if m:
                out["schedule_name"], n_mb, stages = m.group(1), int(m.group(2)), int(m.group(3))
                continue
            m = _AC.search(line)
            if m:
                out["ac"] = "full" if m.group(1).lower().startswith("full") else "selective"
            elif _FLOAT8.search(line):
                out["precision"] = "fp8"
        out.pop("_mesh", None)
        if local is not None:
            if n_mb and out.get("pp", 1) > 1:  # the step's micro-batches flow through the pipeline
                out["micro_batch"], out["grad_accum"] = max(1, local // n_mb), n_mb * out.get("grad_accum", 1)
                if stages and out.get("pp"):
                    out["vp"] = max(1, stages // out["pp"])
            else:
                out["micro_batch"] = local
        name = out.pop("schedule_name", None)
        if name:
            out["schedule"] = {v[0]: k for k, v in SCHEDULES.items()}.get(name, name)
        return out

    def layout_from_config_text(self, text: str) -> dict[str, Any]:
        """The layout from a run's configuration: a TOML job file (torchtitan ≤ 0.2), a JSON config
        (``--debug.save_config_file``) or the command line itself (flags, one or many lines)."""
        import json
        import shlex
        import tomllib

        d: Any = None
        try:
            d = json.loads(text)
        except ValueError:
            try:
                d = tomllib.loads(text)
            except tomllib.TOMLDecodeError:
                d = None
        if isinstance(d, dict) and d:
            flags: list[str] = []
            for sec in ("parallelism", "training", "activation_checkpoint"):
                for k, v in (d.get(sec) or {}).items() if isinstance(d.get(sec), dict) else ():
                    flags += [f"--{sec}.{k}", str(v)]
            ac = d.get("activation_checkpoint")
            if isinstance(ac, dict) and "mode" in ac:  # torchtitan ≤ 0.2: [activation_checkpoint] mode = "full"
                flags.append(f"activation_checkpoint:{ac['mode']}")
            elif ac is None and "activation_checkpoint" in d:
                flags.append("activation_checkpoint:none")
            tr = d.get("training") if isinstance(d.get("training"), dict) else {}
            if "batch_size" in tr and "local_batch_size" not in tr:  # torchtitan ≤ 0.2 named it batch_size
                flags += ["--training.local_batch_size", str(tr["batch_size"])]
            return self.layout_from_config(flags)
        try:
            return self.layout_from_config(shlex.split(text, comments=True))
        except ValueError as e:
            raise UsageError(f"the torchtitan configuration is neither JSON, TOML nor a command line ({e})") from None

    def layout_from_config(self, argv: Iterable[str]) -> dict[str, Any]:
        """Degrees and batch from torchtitan flags (``--parallelism.tensor_parallel_degree 2`` or ``…=2``)."""
        a = list(argv)
        keys = {"--parallelism.data_parallel_replicate_degree": "dp_replicate",
                "--parallelism.data_parallel_shard_degree": "dp_shard", "--parallelism.tensor_parallel_degree": "tp",
                "--parallelism.pipeline_parallel_degree": "pp", "--parallelism.context_parallel_degree": "cp",
                "--parallelism.pipeline_parallel_microbatch_size": "_ppmb",
                "--training.local_batch_size": "_local", "--training.global_batch_size": "global_batch",
                "--training.seq_len": "seq_len"}
        out: dict[str, Any] = {}
        for i, t in enumerate(a):
            k, eq, v = t.partition("=")
            if k in keys:
                val = v if eq else (a[i + 1] if i + 1 < len(a) else "")
                try:
                    out[keys[k]] = int(val)
                except ValueError:
                    raise UsageError(f"torchtitan flag {k} needs an integer, got {val!r}") from None
            elif k == "--parallelism.pipeline_parallel_schedule":
                name = v if eq else (a[i + 1] if i + 1 < len(a) else "")
                out["schedule"] = {s[0]: c for c, s in SCHEDULES.items()}.get(name, name)
            elif t.startswith("activation_checkpoint:") or t.startswith("activation-checkpoint:"):
                mode = t.split(":", 1)[1]
                out["ac"] = {"memory-budget": "selective"}.get(mode, mode)
        if out.get("dp_shard", 0) < 0:
            out.pop("dp_shard")  # -1: the ranks left over (filled in from the GPU count)
        local, ppmb = out.pop("_local", None), out.pop("_ppmb", None)
        if local is not None:
            if out.get("pp", 1) > 1:
                out["micro_batch"] = ppmb or 1
                out["grad_accum"] = max(1, local // (ppmb or 1))
            else:
                out["micro_batch"] = local
        if out.get("global_batch", 0) < 0:
            out.pop("global_batch")
        return out

    def sample_log(self) -> tuple[str, ...]:
        return (
            "[rank0]:[titan] 2026-01-01 00:00:00,000 - root - INFO - Building device mesh with parallelism: pp=1, "
            "dp_replicate=1, dp_shard=8, cp=1, tp=1, ep=1",
            "[rank0]:[titan] 2026-01-01 00:00:10,000 - root - INFO - step:  1  loss: 12.25000  grad_norm:  4.1000  "
            "memory: 41.20GiB(52.10%)  tps: 1,200  tflops: 69.50  mfu: 7.03%",
            "[rank0]:[titan] 2026-01-01 00:00:20,000 - root - INFO - step: 10  loss:  9.80000  grad_norm:  2.0000  "
            "memory: 45.10GiB(57.03%)  tps: 6,100  tflops: 353.20  mfu: 35.71%",
            "[rank0]:[titan] 2026-01-01 00:00:21,000 - root - INFO - Saving the checkpoint.",
            "[rank0]:[titan] 2026-01-01 00:00:25,000 - root - INFO - Finished saving the checkpoint in 4.00 seconds.",
        )


def _config_source(flavor: str, base: str, fp8: bool, compiled: bool) -> str:
    conv = ("[Float8LinearConverter.Config(model_compile_enabled=" + repr(compiled) + ")]") if fp8 else "[]"
    imp = "from torchtitan.components.quantization import Float8LinearConverter\n" if fp8 else ""
    return (
        '"""Written by cloudfit for torchtitan 0.3: the plan\'s model; the layout comes as command-line flags."""\n'
        f"{imp}"
        f"from torchtitan.models.llama3 import model_registry\n"
        f"from torchtitan.models.llama3.config_registry import {base} as _base\n\n\n"
        f"def {CONFIG_FUNCTION}():\n"
        f"    config = _base()\n"
        f"    config.model_spec = model_registry({flavor!r}, converters={conv})\n"
        f"    return config\n")


def _parse_with_torchtitan(cmd: StackCommand, workdir: str | None) -> tuple[dict[str, Any], Any]:
    import os
    import sys
    import tempfile

    try:
        from torchtitan.config.manager import ConfigManager  # noqa: F401 (heavy: torch, tyro)
    except ImportError as e:
        raise StackNotInstalled(f"torchtitan is not installed here ({e}): pip install 'cloudfit[titan]'") from None
    argv = list(cmd.argv)
    if argv[:2] == ["-m", "torchtitan.train"]:
        argv = argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        root = workdir or tmp
        for rel, text in cmd.files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        sys.path.insert(0, root)
        sys.modules.pop(CONFIG_MODULE, None)
        try:
            with _float8_gpu_check_answered():
                cfg = ConfigManager().parse_args(argv)
        except SystemExit as e:  # tyro reports a bad flag by exiting
            raise UsageError(f"torchtitan's config manager rejected the command (exit {e.code})") from None
        finally:
            sys.path.remove(root)
            sys.modules.pop(CONFIG_MODULE, None)
    par, tr, ck, cp = cfg.parallelism, cfg.training, cfg.checkpoint, cfg.compile
    ac = cfg.activation_checkpoint
    ac_name = "none" if ac is None else {"FullAC": "full", "SelectiveAC": "selective"}.get(
        type(ac).__qualname__.split(".")[0], type(ac).__qualname__)
    spec = cfg.model_spec
    model = spec.model
    convs = [type(c).__name__ for c in getattr(model, "converters", []) or []]
    float8 = any("Float8" in type(m).__name__ for m in _walk_linears(model))
    out = {
        "parallelism.data_parallel_replicate_degree": par.data_parallel_replicate_degree,
        "parallelism.data_parallel_shard_degree": par.data_parallel_shard_degree,
        "parallelism.tensor_parallel_degree": par.tensor_parallel_degree,
        "parallelism.pipeline_parallel_degree": par.pipeline_parallel_degree,
        "parallelism.pipeline_parallel_schedule": par.pipeline_parallel_schedule,
        "parallelism.pipeline_parallel_layers_per_stage": par.pipeline_parallel_layers_per_stage,
        "parallelism.pipeline_parallel_microbatch_size": par.pipeline_parallel_microbatch_size,
        "parallelism.context_parallel_degree": par.context_parallel_degree,
        "parallelism.spmd_backend": par.spmd_backend,
        "training.local_batch_size": tr.local_batch_size, "training.global_batch_size": tr.global_batch_size,
        "training.seq_len": tr.seq_len, "training.steps": tr.steps,
        "training.mixed_precision_param": tr.mixed_precision_param,
        "checkpoint.enable": ck.enable, "checkpoint.folder": ck.folder, "checkpoint.interval": ck.interval,
        "compile.enable": cp.enable, "compile.enable_async_tensor_parallel": cp.enable_async_tensor_parallel,
        "activation_checkpoint": ac_name, "model.flavor": spec.flavor, "model.layers": len(model.layers),
        "model.dim": model.dim, "model.vocab_size": model.vocab_size, "model.float8": float8,
        "model.converters": convs,
    }
    return out, cfg


def _fake_mesh(parsed: dict[str, Any], cfg: Any, world_size: int) -> tuple[dict[str, int], int]:
    """torchtitan's own ParallelDims and device meshes for ``world_size`` ranks on the fake backend, and the
    pipeline's virtual stages and layer split as torchtitan's pipeline code computes them."""
    import torch.distributed as dist
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.distributed.utils import init_fake_mode

    if dist.is_initialized():
        raise UsageError("a process group is already initialised here: validate meshes in a fresh process")
    try:
        dims = ParallelDims(dp_replicate=parsed["parallelism.data_parallel_replicate_degree"],
                            dp_shard=parsed["parallelism.data_parallel_shard_degree"],
                            cp=parsed["parallelism.context_parallel_degree"],
                            tp=parsed["parallelism.tensor_parallel_degree"],
                            pp=parsed["parallelism.pipeline_parallel_degree"], ep=1, world_size=world_size,
                            spmd_backend=parsed.get("parallelism.spmd_backend", "spmd_types"))
    except AssertionError as e:
        raise UsageError(f"torchtitan's ParallelDims rejected the layout: {e}") from None
    init_fake_mode(world_size)
    try:
        dims.build_mesh()
        mesh = {k: int(v.size()) for k, v in dims.get_all_one_dimensional_meshes().items()}
        stages = 1
        if dims.pp > 1:
            from torchtitan.distributed.pipeline_parallel import (_generate_llm_fqn_per_model_part,
                                                                  _get_pipeline_metadata)
            try:
                stages, layers, w_in, w_out = _get_pipeline_metadata(dims, cfg.parallelism, cfg.model_spec.model)
                _generate_llm_fqn_per_model_part(stages, layers, w_in, w_out)
            except ValueError as e:
                raise UsageError(f"torchtitan cannot split the pipeline: {str(e).splitlines()[0]}") from None
        return mesh, int(stages)
    finally:
        dist.destroy_process_group()


class _float8_gpu_check_answered:
    """torchtitan's Float8LinearConverter refuses to build unless the GPU is SM89+ (H100, L4, B200); on a CPU the
    check (``has_cuda_capability``) is answered yes while the configuration is parsed — nothing else is replaced."""

    def __enter__(self) -> None:
        import torchtitan.components.quantization.float8 as f8

        self.mod, self.saved = f8, f8.has_cuda_capability
        f8.has_cuda_capability = lambda major, minor: True

    def __exit__(self, *exc: Any) -> None:
        self.mod.has_cuda_capability = self.saved


def _walk_linears(model_config: Any) -> Iterator[Any]:
    """Every sub-config of torchtitan's model config (its ``traverse`` where it has one)."""
    seen = 0
    stack = [model_config]
    while stack and seen < 100000:
        c = stack.pop()
        seen += 1
        yield c
        fields = getattr(c, "__dataclass_fields__", None)
        if fields:
            for f in fields:
                v = getattr(c, f, None)
                if isinstance(v, list):
                    stack.extend(x for x in v if hasattr(x, "__dataclass_fields__"))
                elif hasattr(v, "__dataclass_fields__"):
                    stack.append(v)


STACK = Torchtitan()
