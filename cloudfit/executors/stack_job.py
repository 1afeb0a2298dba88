"""A plan's job run by another training stack: the stack's command for each cluster config, the parser that
reads its log, what a stop guarantees.

``StackRun`` is what ``JobSpec.stack`` holds. The executors ask it for ``command(config, checkpoint_dir)`` (a
``cloudfit.stacks.StackCommand``: argv, launcher, files, env) when they start the job on ``config`` — the plan's
own cluster or an alternative of another size (the degrees re-computed by ``StackJob.from_plan``) — and
``entry(cmd)``: the words after ``torchrun …``. The log parser (``parser``) is the stack's own, or for a user's
command (``custom``) the one ``--stack`` names, else custom's documented one-line format.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StackRun:
    name: str  # the stack that runs: torchtitan | megatron | accelerate | custom
    parser: str  # the stack whose parse_line reads the job's log
    plan: Any = dataclasses.field(repr=False, compare=False, default=None)
    user_command: tuple[str, ...] = ()  # custom: the user's command; a stack taking extra_args: its arguments
    steps: int | None = None  # None = the plan's
    checkpoint_every: int | None = None  # None = the plan's interval in steps (StackJob.from_plan)
    seq_len: int | None = None

    @property
    def stack(self):
        from cloudfit import stacks

        return stacks.get(self.name)

    def job(self, config=None, checkpoint_dir: str | None = None):
        """The ``StackJob`` on ``config`` (None: the plan's own cluster)."""
        from cloudfit.stacks import StackJob

        j = StackJob.from_plan(self.plan, config)
        kw: dict[str, Any] = {"checkpoint_dir": checkpoint_dir}
        if self.steps:
            kw["steps"] = int(self.steps)
        if self.checkpoint_every:
            kw["checkpoint_every_steps"] = int(self.checkpoint_every)
        return j.replace(**kw)

    def command(self, config=None, checkpoint_dir: str | None = None):
        """The stack's ``StackCommand`` for the job on ``config`` (a refusal: ``UsageError``, one line).

        A config other than the plan's own cluster (a deadline switch, a stock-out fallback) whose config files
        differ from the plan's (``cloudfit_layout.json``'s degrees, Accelerate's YAML) gets them under names of
        its own (``cloudfit_layout.n2x8.json``), its argv and environment pointing at them: every config's files
        ship together in one workdir archive, and a node of each config reads its own layout."""
        cmd = self._command(config, checkpoint_dir)
        if config is None or not cmd.files:
            return cmd
        own = self._command(None, checkpoint_dir).files
        changed = {k for k, v in cmd.files.items() if own.get(k) != v}
        if not changed:
            return cmd
        tag = f"n{int(config.nodes)}x{int(config.offering.accelerators_per_node)}"

        def renamed(name: str) -> str:
            stem, dot, ext = name.rpartition(".")
            return f"{stem}.{tag}.{ext}" if dot else f"{name}.{tag}"

        names = {k: renamed(k) for k in changed}
        return dataclasses.replace(
            cmd, files={names.get(k, k): v for k, v in cmd.files.items()},
            argv=tuple(names.get(a, a) for a in cmd.argv),
            env={k: names.get(v, v) if isinstance(v, str) else v for k, v in cmd.env.items()})

    def _command(self, config, checkpoint_dir):
        job = self.job(config, checkpoint_dir)
        if self.name == "custom":
            return custom_command(job, self.user_command)
        if self.user_command:  # accelerate: your script and its arguments; megatron: flags appended
            return self.stack.command(job, extra_args=tuple(self.user_command))
        return self.stack.command(job)

    @staticmethod
    def entry(cmd) -> tuple[str, ...]:
        """``cmd.argv`` as torchrun's entry: a module or a .py script runs under torchrun's python; any other
        program (``bash run.sh``, ``python train.py``) with ``--no-python``."""
        argv = tuple(cmd.argv)
        if argv and (argv[0] == "-m" or argv[0].endswith(".py")):
            return argv
        return ("--no-python", *argv)

    def guarantee(self) -> str:
        return self.command_guarantee(self.command())

    @staticmethod
    def command_guarantee(cmd) -> str:
        return cmd.guarantee or ("a stop sends SIGTERM; what is kept is the newest checkpoint the log reported"
                                 if cmd.checkpoint_on_sigterm else
                                 "a stop sends SIGTERM; work since the newest checkpoint the log reported is lost")


def entry_module(argv) -> str | None:
    """The module a torchrun entry ``-m MODULE …`` runs (``torchtitan.train``), which every backend imports once
    before torchrun so that an import that cannot succeed is one line, not torchrun restarting it on billed GPUs
    (local: ``executors.local``; GCP: ``startup.sh``; SkyPilot: ``sky.run_script``); None for any other entry."""
    argv = tuple(argv)
    if len(argv) > 1 and argv[0] == "-m" and re.fullmatch(r"[A-Za-z_][\w.]*", str(argv[1])):
        return str(argv[1])
    return None


#: Programs that start their own ranks: a command beginning with one runs once per node (``direct``), not under
#: cloudfit's torchrun.
SELF_LAUNCHING = ("torchrun", "accelerate", "deepspeed", "mpirun", "srun")


def custom_command(job, user_command: tuple[str, ...]):
    """The user's command as the ``custom`` stack runs it (``cloudfit.stacks.custom``: the plan's layout as
    ``CLOUDFIT_*`` environment variables and ``cloudfit_layout.json``): under torchrun, one process per GPU, as
    ``cloudfit launch plan.json -- CMD`` always ran it — unless it starts its own ranks (``torchrun …``,
    ``accelerate launch …``, ``python -m torch.distributed.run …``: once per node)."""
    from cloudfit import stacks

    cmd = stacks.get("custom").command(job, extra_args=tuple(user_command))
    argv = tuple(user_command)
    prog = argv[0].rsplit("/", 1)[-1] if argv else ""
    own = prog in SELF_LAUNCHING or "torch.distributed.run" in argv or "torch.distributed.launch" in argv
    return dataclasses.replace(cmd, launcher="none" if own else "torchrun")


def takes_arguments(stack, command) -> bool:
    """The words after ``--`` are the stack's own arguments (``Stack.command(job, extra_args=…)``) rather than a
    command of their own: flags (``-- --data-path …`` for Megatron or torchtitan), or the script Accelerate
    launches (``-- train.py …``). ``-- python train.py`` is a command: it runs as the custom stack."""
    import inspect

    try:
        if "extra_args" not in inspect.signature(stack.command).parameters:
            return False
    except (TypeError, ValueError):
        return False
    first = str(command[0]) if command else ""
    return first.startswith("-") or (getattr(stack, "launcher", "") == "accelerate" and first.endswith(".py"))


@dataclass(frozen=True)
class NodeJob:
    """What one node runs for a job of another stack, backend-neutral (the gcp startup script renders it; the
    SkyPilot task builder can too): ``mode`` torchrun (``argv`` after ``torchrun …``) or direct (``argv`` is the
    whole command, once per node, with NNODES/NPROC/NODE_RANK/MASTER_ADDR/MASTER_PORT in its environment),
    ``env`` for every rank, the log parser and the progress follower's arguments, and the workdir archive
    (``cloudfit.executors.workdir.Packed``: unpack it, check its sha256, run from it)."""

    mode: str
    argv: tuple[str, ...]
    env: dict
    log_parser: str
    follower: tuple[str, ...]  # python -m cloudfit.runtime.logprogress <follower> --log LOG --progress FILE
    workdir: Any = None


def node_job(spec, config, checkpoint_dir: str | None) -> NodeJob | None:
    """``spec``'s job on a node of ``config`` when another stack runs it (None: cloudfit's trainer or a plain
    command). ``checkpoint_dir``: the folder as the node sees it (a mounted bucket)."""
    run = spec.job.stack
    if run is None:
        return None
    sc = run.command(config, checkpoint_dir)
    mode = "torchrun" if sc.launcher == "torchrun" else "direct"
    argv = run.entry(sc) if mode == "torchrun" else tuple(sc.argv)
    gpus = config.nodes * config.offering.accelerators_per_node
    follower = ("--stack", run.parser, "--total-steps", str(int(spec.job.steps)), "--gpus", str(gpus),
                *(("--seq-len", str(int(run.seq_len))) if run.seq_len else ()))
    return NodeJob(mode, tuple(argv), dict(sc.env), run.parser, follower, spec.job.workdir)
