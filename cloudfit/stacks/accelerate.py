"""Hugging Face Accelerate (FSDP2) as a stack: ``accelerate launch --config_file cloudfit_accelerate.yaml … SCRIPT``.

Accelerate runs *your* training script; cloudfit writes the launch configuration from the plan's layout and reads
your script's progress from cloudfit's one-line progress format (the ``custom`` stack's parser). Checked against
Accelerate 1.15.0 (``accelerate/commands/launch.py``, ``commands/config/config_args.py``,
``parallelism_config.py``, ``utils/dataclasses.py:FullyShardedDataParallelPlugin``):

- data parallelism: ``dp_shard`` > 1 (zero ≥ 1) → ``distributed_type: FSDP`` with ``fsdp_version: 2``;
  ``fsdp_reshard_after_forward`` true for zero=3 (ZeRO-3), false for zero 1/2 (FSDP2's ZeRO-2: it also shards the
  gradients, which zero=1 does not — less memory than planned, the same traffic). Plain replicas (dp_shard = 1 or
  zero=0) → ``MULTI_GPU`` (DDP); one GPU → ``NO``.
- HSDP, tensor and context parallelism → Accelerate's ``ParallelismConfig`` (``parallelism_config_dp_replicate_size
  / dp_shard_size / tp_size / cp_size``), which needs FSDP2 and, its ``__post_init__`` / ``_validate_accelerator``
  say, a dimension for FSDP to shard over (dp_shard or cp > 1) and no TP/CP beside pure replicas. TP needs your
  Transformers model to carry a ``tp_plan``; CP needs SDPA attention and ``accelerator.maybe_context_parallel``
  in your loop (the notes say so).
- no pipeline parallelism (pp > 1 refused); activation checkpointing is ``fsdp_activation_checkpointing``, which
  checkpoints whole layers: ac=full → true, ac=none → false, ac=selective refused (Accelerate has no selective
  mode).
- precision bf16 → ``mixed_precision: bf16``; fp8 → ``mixed_precision: fp8`` with ``fp8_config: {backend: AO}``
  (torchao float8, with FSDP2's float8 all-gather); fp32 → ``no``. compile → ``dynamo_config: {dynamo_backend:
  INDUCTOR}``.
- gradient accumulation → ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` (the Accelerator reads it when your script
  does not pass ``gradient_accumulation_steps``); micro-batch, steps, checkpoint interval and folder reach your
  script as the custom stack's layout variables and JSON file.

The command runs once per node (``launcher`` "accelerate": accelerate starts the node's processes itself):
``bash -c 'exec accelerate launch --config_file cloudfit_accelerate.yaml --machine_rank "$NODE_RANK"
--main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" "$@"' accelerate SCRIPT ARGS…`` — the node's
rank and the head's address from the environment the launcher exports, the script's words passed unchanged.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping, Sequence

from cloudfit.errors import UsageError
from cloudfit.stacks.base import Event, Stack, StackCommand, StackJob, StackNotInstalled
from cloudfit.stacks.custom import STACK as CUSTOM
from cloudfit.stacks.custom import environment, parse_progress_line

CONFIG_FILE = "cloudfit_accelerate.yaml"
#: the Accelerate release the configuration was written against (``validate`` uses whatever is installed)
TESTED_WITH = "1.15.0"
DEFAULT_PORT = 29500


def _yaml(d: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(d), sort_keys=False)


class AccelerateStack(Stack):
    name = "accelerate"
    framework = "fsdp"
    extra = None  # `pip install accelerate` beside your script's own requirements
    launcher = "accelerate"
    description = "Hugging Face Accelerate (FSDP2, ParallelismConfig) running your script"
    schedules = ()
    checkpoint_on_sigterm = False
    guarantee = ("Accelerate runs your script: a stop lands after the last checkpoint your script reported on "
                 "cloudfit's progress line (ckpt=…); what it saves on SIGTERM is up to your script")

    # ---------------------------------------------------------------- planning
    def layout_ok(self, layout: Any, shape: Mapping[str, Any] | None = None) -> str | None:
        g = lambda k, d=1: int(getattr(layout, k, d))  # noqa: E731
        pp, tp, cp, rep, shard = g("pp"), g("tp"), g("cp"), g("dp_replicate"), g("dp_shard")
        zero = g("zero", 3)
        if pp > 1:
            return f"accelerate has no pipeline parallelism (pp={pp}): plan it with --stack torchtitan or megatron"
        if str(getattr(layout, "ac", "none")) == "selective":
            return ("accelerate: selective activation checkpointing is not an Accelerate option "
                    "(fsdp_activation_checkpointing checkpoints whole layers): use ac=full or ac=none")
        sharded = shard > 1 and zero > 0
        if (tp > 1 or cp > 1) and not (sharded or cp > 1):
            return (f"accelerate: tp={tp} needs a dimension for FSDP to shard over (fsdp > 1 or cp > 1): "
                    "Accelerate's ParallelismConfig composes TP/CP with FSDP2 only")
        if (tp > 1 or cp > 1) and rep > 1 and shard == 1:
            return "accelerate: TP/CP beside plain replicas (dp > 1, fsdp = 1) is refused by Accelerate's ParallelismConfig"
        if shape and tp > 1 and int(shape.get("kv_heads", 0) or 0) % tp:
            return f"accelerate: tp={tp} does not divide the model's {shape.get('kv_heads')} KV heads (Transformers' tp_plan)"
        return None

    def refuse(self, job: StackJob) -> str | None:
        why = self.layout_ok(_View(job), job.shape)
        if why:
            return why
        if job.cp > 1 and job.seq_len % (2 * job.cp):
            return (f"accelerate: context parallelism needs the sequence length to be a multiple of 2·cp "
                    f"({job.seq_len} with cp={job.cp})")
        return None

    # ---------------------------------------------------------------- running
    def config(self, job: StackJob) -> dict[str, Any]:
        """The ``accelerate launch`` configuration (a ``ClusterConfig`` YAML) for ``job``."""
        sharded = job.dp_shard > 1 and job.zero > 0
        nd = job.dp_replicate > 1 and sharded or job.tp > 1 or job.cp > 1
        if sharded or nd:
            dist = "FSDP"
        else:
            dist = "MULTI_GPU" if job.gpus > 1 else "NO"
        cfg: dict[str, Any] = {
            "compute_environment": "LOCAL_MACHINE", "distributed_type": dist,
            "mixed_precision": {"bf16": "bf16", "fp8": "fp8", "fp32": "no"}[job.precision],
            "num_machines": job.nodes, "num_processes": job.gpus, "machine_rank": 0,
            "main_process_port": DEFAULT_PORT, "rdzv_backend": "static", "same_network": True,
            "use_cpu": False, "debug": False,
        }
        if dist == "FSDP":
            cfg["fsdp_config"] = {
                "fsdp_version": 2,
                "fsdp_reshard_after_forward": job.zero >= 3 or not sharded,
                "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                "fsdp_offload_params": False,
                "fsdp_activation_checkpointing": job.ac == "full",
            }
        if nd:
            cfg["parallelism_config"] = {
                "parallelism_config_dp_replicate_size": job.dp_replicate if sharded else 1,
                "parallelism_config_dp_shard_size": job.dp_shard if sharded else job.dp,
                "parallelism_config_tp_size": job.tp, "parallelism_config_cp_size": job.cp,
            }
        if job.precision == "fp8":
            cfg["fp8_config"] = {"backend": "AO", "enable_fsdp_float8_all_gather": dist == "FSDP"}
        if job.compile:
            cfg["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
        return cfg

    def command(self, job: StackJob, extra_args: Sequence[str] = ()) -> StackCommand:
        """``accelerate launch`` of your script (``extra_args``: the script and its arguments; ``train.py`` when
        none is given)."""
        self._check(job)
        script = tuple(str(a) for a in extra_args) or ("train.py",)
        notes = []
        if not extra_args:
            notes.append("accelerate runs your script: train.py unless you give one after the plan")
        if job.dp_shard > 1 and job.zero in (1, 2):
            notes.append(f"zero={job.zero} runs as FSDP2 without resharding after forward (ZeRO-2): gradients are "
                         "sharded too, so memory is below the plan's")
        if job.tp > 1:
            notes.append(f"tp={job.tp}: your script's Transformers model must have a tp_plan (Accelerate applies it)")
        if job.cp > 1:
            notes.append(f"cp={job.cp}: your loop must run under accelerator.maybe_context_parallel with SDPA attention")
        if job.finetune == "lora":
            notes.append(f"LoRA (rank {job.lora_rank}) is your script's (peft): cloudfit only passes the rank")
        files = {CONFIG_FILE: _yaml(self.config(job))}
        env = {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": str(job.grad_accum)}
        files.update(CUSTOM.command(job).files)  # the layout file a custom command gets (cloudfit_layout.json)
        env.update(environment(job))
        return StackCommand(argv=(*_WRAP, *script), launcher="accelerate", files=files, env=env, notes=tuple(notes),
                            checkpoint_on_sigterm=False, guarantee=self.guarantee)

    def validate(self, cmd: StackCommand) -> dict[str, Any]:
        """The configuration as Accelerate reads it: its config loader (``load_config_from_file``: unknown keys
        fail), its launch parser and ``_validate_launch_command`` (the YAML merged into the launch arguments;
        every ``fsdp_*`` / ``parallelism_config_*`` / ``fp8_*`` key must be one of its flags), the environment
        ``prepare_multi_gpu_env`` gives the ranks, and the ``FullyShardedDataParallelPlugin`` /
        ``ParallelismConfig`` the ranks build from it. Flat ``section.key`` → value."""
        try:
            from accelerate.commands.config.config_args import load_config_from_file
            from accelerate.commands.launch import _validate_launch_command, launch_command_parser
            from accelerate.utils.launch import prepare_multi_gpu_env, setup_fp8_env
        except ImportError:
            raise StackNotInstalled("accelerate is not installed here (pip install accelerate)") from None
        argv = launch_argv(cmd)
        with tempfile.TemporaryDirectory() as d:
            for rel, text in cmd.files.items():
                p = os.path.join(d, rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w", encoding="utf-8") as fh:
                    fh.write(text)
            argv = [os.path.join(d, a) if a in cmd.files else a for a in argv]
            try:
                loaded = load_config_from_file(argv[argv.index("--config_file") + 1])
            except ValueError as e:
                raise UsageError(f"accelerate rejects the configuration: {e}") from None
            parser = launch_command_parser()
            known = {a.dest for a in parser._actions}
            for section, prefix in (("fsdp_config", "fsdp_"), ("parallelism_config", ""), ("fp8_config", "fp8_"),
                                    ("dynamo_config", "dynamo_")):
                for key in (getattr(loaded, section) or {}):
                    dest = key if key.startswith(prefix) else prefix + key
                    if dest not in known:
                        raise UsageError(f"accelerate: {section}.{key} is not an accelerate launch option")
            try:
                args = parser.parse_args(argv[1:])
            except SystemExit:
                raise UsageError(f"accelerate launch rejects: {' '.join(argv)[:200]}") from None
            try:
                args, _defaults, _mp = _validate_launch_command(args)
            except ValueError as e:
                raise UsageError(f"accelerate launch rejects the configuration: {e}") from None
        out: dict[str, Any] = {"distributed_type": str(loaded.distributed_type.value),
                               "num_processes": args.num_processes, "num_machines": args.num_machines,
                               "machine_rank": int(args.machine_rank), "mixed_precision": args.mixed_precision,
                               "use_fsdp": bool(args.use_fsdp), "script": args.training_script,
                               "script_args": list(args.training_script_args)}
        if out["distributed_type"] == "NO":
            return out
        fp8 = args.mixed_precision == "fp8"
        if fp8:  # prepare_multi_gpu_env wants an fp8 library installed; check the rest, then fp8's own part
            args.mixed_precision = "bf16"
        args.main_process_port = int(args.main_process_port)
        env = prepare_multi_gpu_env(args)
        if fp8:
            env["ACCELERATE_MIXED_PRECISION"] = "fp8"
            env = setup_fp8_env(args, env)
        env.update(cmd.env)
        out.update({f"env.{k}": v for k, v in env.items()
                    if k.startswith(("FSDP_", "PARALLELISM_CONFIG_", "ACCELERATE_"))})
        out.update(_plugins(env))
        total = out.get("parallelism.total_size")
        if total is not None and total != out["num_processes"]:  # Accelerator._validate_accelerator's check
            raise UsageError(f"accelerate: ParallelismConfig covers {total} ranks but {out['num_processes']} "
                             "processes are launched")
        if total is not None and out["use_fsdp"] and out["parallelism.dp_shard"] == 1 and out["parallelism.cp"] == 1:
            raise UsageError("accelerate: FSDP2 with no dimension to shard over (dp_shard = cp = 1)")
        return out

    # ---------------------------------------------------------------- logs (the custom stack's progress line)
    def parse_line(self, line: str) -> Event | None:
        return parse_progress_line(line)

    def sample_log(self) -> tuple[str, ...]:
        return CUSTOM.sample_log()


class _View:
    """A StackJob seen as a Layout (``vp``, ``schedule``)."""

    def __init__(self, job: StackJob) -> None:
        self._j = job

    def __getattr__(self, k: str) -> Any:
        if k == "vp":
            return self._j.virtual_stages
        if k == "schedule":
            return self._j.pp_schedule or "1f1b"
        return getattr(self._j, k)


#: the node's rank and the head's address come from the environment the launcher exports (NODE_RANK, MASTER_ADDR,
#: MASTER_PORT): ``bash -c`` expands them, ``"$@"`` passes the script and its arguments through unchanged
_LAUNCH = ('exec accelerate launch --config_file ' + CONFIG_FILE + ' --machine_rank "$NODE_RANK" '
           '--main_process_ip "$MASTER_ADDR" --main_process_port "${MASTER_PORT:-' + str(DEFAULT_PORT) + '}" "$@"')
_WRAP = ("bash", "-c", _LAUNCH, "accelerate")
_SAMPLE_ENV = {"NODE_RANK": "0", "MASTER_ADDR": "10.0.0.2", "MASTER_PORT": str(DEFAULT_PORT)}


def launch_argv(cmd: StackCommand, env: Mapping[str, str] = _SAMPLE_ENV) -> list[str]:
    """``accelerate launch …`` as it runs on a node with ``env`` (the words after ``accelerate``)."""
    import shlex

    argv = tuple(cmd.argv)
    if argv[:2] != _WRAP[:2] or len(argv) < 4:
        raise UsageError("accelerate: not an `accelerate launch` command cloudfit made")
    words = shlex.split(argv[2])
    if words[:3] != ["exec", "accelerate", "launch"] or words[-1] != "$@":
        raise UsageError("accelerate: not an `accelerate launch` command cloudfit made")
    out = []
    for w in words[2:-1]:
        for k, v in env.items():
            w = w.replace("${%s:-%d}" % (k, DEFAULT_PORT), v).replace("$" + k, v)
        out.append(w)
    return out + list(argv[4:])


def _plugins(env: Mapping[str, str]) -> dict[str, Any]:
    """What a rank builds from ``env``: the FSDP plugin and the ParallelismConfig (their own checks run)."""
    out: dict[str, Any] = {}
    saved = dict(os.environ)
    try:
        os.environ.update({k: str(v) for k, v in env.items()})
        if env.get("ACCELERATE_USE_FSDP") == "true":
            from accelerate.utils import FullyShardedDataParallelPlugin

            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = FullyShardedDataParallelPlugin()
            out.update({"fsdp.version": p.fsdp_version, "fsdp.reshard_after_forward": p.reshard_after_forward,
                        "fsdp.activation_checkpointing": p.activation_checkpointing,
                        "fsdp.state_dict_type": str(getattr(p.state_dict_type, "name", p.state_dict_type))})
        if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
            from accelerate.parallelism_config import ParallelismConfig

            pc = ParallelismConfig()
            out.update({f"parallelism.{k}": v for k, v in pc._sizes.items()})
            out["parallelism.total_size"] = pc.total_size
    except ValueError as e:
        raise UsageError(f"accelerate rejects the configuration: {e}") from None
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


STACK = AccelerateStack()
