"""``custom``: the user's own command (``cloudfit launch plan.json -- CMD``) with the plan's layout handed over.

Every rank's environment gets the layout (``ENV``: ``CLOUDFIT_DP_REPLICATE``, ``CLOUDFIT_DP_SHARD``, ``CLOUDFIT_TP``,
``CLOUDFIT_PP``, ``CLOUDFIT_CP``, ``CLOUDFIT_VP``, ``CLOUDFIT_PP_SCHEDULE``, ``CLOUDFIT_ZERO``, ``CLOUDFIT_MICRO_BATCH``,
``CLOUDFIT_GRAD_ACCUM``, ``CLOUDFIT_GLOBAL_BATCH``, ``CLOUDFIT_SEQ_LEN``, ``CLOUDFIT_STEPS``, ``CLOUDFIT_AC``,
``CLOUDFIT_PRECISION``, ``CLOUDFIT_COMPILE``, ``CLOUDFIT_MODEL``, ``CLOUDFIT_NODES``, ``CLOUDFIT_GPUS_PER_NODE``,
``CLOUDFIT_LAYOUT`` (cloudfit's ``--layout`` text), ``CLOUDFIT_CHECKPOINT_EVERY_STEPS`` and
``CLOUDFIT_CHECKPOINT_DIR`` where the plan has them, ``CLOUDFIT_LAYOUT_FILE``) and the run folder a JSON file
(``cloudfit_layout.json``: the whole ``StackJob``, the model shape included).

Progress, one line on stdout (rank 0), the same tag and JSON fields as cloudfit's own progress lines
(``cloudfit.executors.sky.PROGRESS_TAG``, ``cloudfit.runtime.progress``)::

    CLOUDFIT_PROGRESS {"step": 120, "tokens_per_second": 51234.5, "loss": 2.31, "memory_gib": 61.2, "mfu": 0.41}
    CLOUDFIT_PROGRESS {"checkpoint_step": 100, "checkpoint_path": "gs://bucket/run/step-100"}

``step`` (optimizer steps done) is required in a progress line; ``tokens_per_second`` is the whole job's
(``tokens_per_second_per_gpu`` is read too), ``mfu`` a fraction, ``memory_gib`` the peak per GPU — all optional. A
line with ``checkpoint_step`` and no tokens/s reports a checkpoint. ``progress_line(...)`` builds one.
"""

from __future__ import annotations

import json
from typing import Any

from cloudfit.stacks.base import CheckpointSaved, Event, Progress, Stack, StackCommand, StackJob

PROGRESS_TAG = "CLOUDFIT_PROGRESS "  # = cloudfit.executors.sky.PROGRESS_TAG (tests/stacks/test_custom.py checks)
LAYOUT_FILE = "cloudfit_layout.json"
_NUM = ("tokens_per_second", "tokens_per_second_per_gpu", "loss", "memory_gib", "mfu", "tflops")


def environment(job: StackJob, layout_file: str = LAYOUT_FILE) -> dict[str, str]:
    """The layout as environment variables (every value a string)."""
    env = {
        "CLOUDFIT_MODEL": job.model, "CLOUDFIT_NODES": str(job.nodes), "CLOUDFIT_GPUS_PER_NODE": str(job.gpus_per_node),
        "CLOUDFIT_DP_REPLICATE": str(job.dp_replicate), "CLOUDFIT_DP_SHARD": str(job.dp_shard),
        "CLOUDFIT_TP": str(job.tp), "CLOUDFIT_PP": str(job.pp), "CLOUDFIT_CP": str(job.cp),
        "CLOUDFIT_VP": str(job.virtual_stages), "CLOUDFIT_PP_SCHEDULE": job.pp_schedule or "",
        "CLOUDFIT_ZERO": str(job.zero), "CLOUDFIT_MICRO_BATCH": str(job.micro_batch),
        "CLOUDFIT_GRAD_ACCUM": str(job.grad_accum), "CLOUDFIT_GLOBAL_BATCH": str(job.global_batch),
        "CLOUDFIT_SEQ_LEN": str(job.seq_len), "CLOUDFIT_STEPS": str(job.steps), "CLOUDFIT_AC": job.ac,
        "CLOUDFIT_PRECISION": job.precision, "CLOUDFIT_COMPILE": "1" if job.compile else "0",
        "CLOUDFIT_FINETUNE": job.finetune, "CLOUDFIT_LAYOUT": job.layout_text(), "CLOUDFIT_LAYOUT_FILE": layout_file,
    }
    if job.lora_rank:
        env["CLOUDFIT_LORA_RANK"] = str(job.lora_rank)
    if job.checkpoint_every_steps:
        env["CLOUDFIT_CHECKPOINT_EVERY_STEPS"] = str(job.checkpoint_every_steps)
    if job.checkpoint_dir:
        env["CLOUDFIT_CHECKPOINT_DIR"] = job.checkpoint_dir
    return env


def progress_line(step: int | None = None, **fields: Any) -> str:
    """One progress (or, with ``checkpoint_step``, checkpoint) line in the documented format."""
    body = ({"step": int(step)} if step is not None else {}) | {k: v for k, v in fields.items() if v is not None}
    return PROGRESS_TAG + json.dumps(body, separators=(", ", ": "))


def parse_progress_line(line: str) -> Event | None:
    i = line.find(PROGRESS_TAG)
    if i < 0:
        return None
    try:
        d = json.loads(line[i + len(PROGRESS_TAG):])
    except ValueError:
        return None
    if not isinstance(d, dict):
        return None

    def num(k: str) -> float | None:
        v = d.get(k)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    has_speed = num("tokens_per_second") is not None or num("tokens_per_second_per_gpu") is not None
    if d.get("checkpoint_step") is not None and not has_speed:
        try:
            return CheckpointSaved(step=int(d["checkpoint_step"]), path=d.get("checkpoint_path"))
        except (TypeError, ValueError):
            return None
    if not isinstance(d.get("step"), int) or isinstance(d.get("step"), bool):
        return None
    return Progress(step=int(d["step"]), **{k: num(k) for k in _NUM})


class Custom(Stack):
    name = "custom"
    framework = "fsdp"  # a user's PyTorch job: priced with the FSDP constants unless the plan names another stack
    extra = None
    launcher = "none"
    description = "your own command: the layout as CLOUDFIT_* variables and cloudfit_layout.json"
    schedules = ("1f1b", "interleaved", "gpipe", "looped-bfs", "interleaved-zb", "zbv")
    checkpoint_on_sigterm = False
    guarantee = ("a custom command is stopped with SIGTERM and, after a grace period, killed: its work since the "
                 "last checkpoint it reported (CLOUDFIT_PROGRESS {\"checkpoint_step\": …}) is lost; the stop lands "
                 "after a reported checkpoint when the command reports them")

    def refuse(self, job: StackJob) -> str | None:
        return None  # the command reads the layout itself

    def command(self, job: StackJob, extra_args: tuple[str, ...] | list[str] = ()) -> StackCommand:
        """``extra_args``: the user's whole command (run as given, once per node)."""
        files = {LAYOUT_FILE: json.dumps(job.to_dict(), indent=1, sort_keys=True) + "\n"}
        notes = () if extra_args else ("no command given: `cloudfit launch plan.json --stack custom -- CMD …`",)
        return StackCommand(argv=tuple(str(a) for a in extra_args), launcher="none", files=files,
                            env=environment(job), notes=notes, checkpoint_on_sigterm=False, guarantee=self.guarantee)

    def parse_line(self, line: str) -> Event | None:
        return parse_progress_line(line)

    def sample_log(self) -> tuple[str, ...]:
        return (progress_line(1, tokens_per_second=20000.0, loss=10.5),
                "an ordinary line of the user's own log",
                progress_line(20, tokens_per_second=51234.5, loss=2.31, memory_gib=61.2, mfu=0.41),
                progress_line(checkpoint_step=20, checkpoint_path="gs://bucket/run/step-20"))


STACK = Custom()
