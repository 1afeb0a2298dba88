"""``cloudfit``: cloudfit's own trainer (``python -m cloudfit.train_llm``) — the CPU rehearsal, the CNN zoo's LLM
sibling, and the fallback when no other stack is installed.

It runs FSDP2/HSDP, TP (with sequence parallelism), 1F1B pipelines and all-gather context parallelism in bf16 or
fp32; no interleaved stages, no other schedule, no pipeline over tied embeddings, no float8 (the planner's
``cloudfit.plan.llm.runnable_gaps`` says the same for its plans). Its progress is its own progress file, echoed on
the cloud backends as ``CLOUDFIT_PROGRESS {json}`` lines (``cloudfit.stacks.custom``'s format); it checkpoints on
SIGTERM at the next step boundary (``cloudfit.runtime.loop``).
"""

from __future__ import annotations

from typing import Any, Mapping

from cloudfit.stacks.base import Event, Stack, StackCommand, StackJob
from cloudfit.stacks.custom import parse_progress_line, progress_line

TRAINER = "cloudfit.train_llm"


def model_args(job: StackJob) -> tuple[str, ...]:
    """The plan's model for the trainer: its own arguments when the plan carries them, else the shape's dimensions."""
    if job.trainer_model_args:
        return tuple(job.trainer_model_args)
    s = job.shape
    out = ("--layers", str(s["layers"]), "--dim", str(s["hidden"]), "--heads", str(s["heads"]), "--kv-heads",
           str(s.get("kv_heads", s["heads"])), "--ffn-dim", str(s["ffn_hidden"]), "--vocab", str(s["vocab"]))
    return out + (("--tie-embeddings",) if s.get("tied_embeddings") else ())


class Own(Stack):
    name = "cloudfit"
    framework = "cloudfit"
    extra = "profile"  # torch
    launcher = "torchrun"
    description = "cloudfit's own trainer (FSDP2/HSDP, TP, 1F1B PP, CP; bf16/fp32)"
    schedules = ("1f1b",)
    checkpoint_on_sigterm = True
    guarantee = ("cloudfit's trainer checkpoints when it is asked to stop (stop file, --stop-at or SIGTERM) at the "
                 "next step boundary: a budget or deadline stop loses at most one step")

    def pins(self, shape: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {"vp": 1, **({"pp": 1} if shape and shape.get("tied_embeddings") else {})}

    def layout_ok(self, layout: Any, shape: Mapping[str, Any] | None = None) -> str | None:
        vp, pp = int(getattr(layout, "vp", 1)), int(getattr(layout, "pp", 1))
        if vp > 1:
            return f"{TRAINER} does not run interleaved pipeline stages (vp={vp})"
        if pp > 1 and shape is not None and shape.get("tied_embeddings"):
            return f"{TRAINER} does not run a pipeline over tied embeddings"
        if pp > 1 and str(getattr(layout, "schedule", "1f1b")) != "1f1b":
            return f"{TRAINER} runs only the 1f1b pipeline schedule, not {getattr(layout, 'schedule')}"
        if int(getattr(layout, "zero", 3)) in (1, 2) and int(getattr(layout, "dp_shard", 1)) > 1:
            return f"{TRAINER} shards with FSDP (ZeRO-3), not ZeRO-{int(getattr(layout, 'zero'))}"
        return None

    def refuse_workload(self, shape, *, finetune="full", precision="bf16", model="") -> str | None:
        if precision == "fp8":
            return f"{TRAINER} trains in bf16 or fp32, not fp8: plan with --precision bf16 or use --stack torchtitan"
        if finetune == "lora":
            return f"{TRAINER} has no LoRA: use --stack custom with your fine-tuning script"
        return None

    def refuse(self, job: StackJob) -> str | None:
        why = self.refuse_workload(job.shape, finetune=job.finetune, precision=job.precision, model=job.model)
        if why:
            return why
        if job.pp > 1 and job.pp_schedule not in (None, "1f1b"):
            return f"{TRAINER} runs only the 1f1b pipeline schedule, not {job.pp_schedule}"
        return super().refuse(job)

    def command(self, job: StackJob, extra_args: tuple[str, ...] | list[str] = ()) -> StackCommand:
        self._check(job)
        argv = ["-m", TRAINER, *model_args(job),
                "--dp-replicate", str(job.dp_replicate), "--dp-shard", str(job.dp_shard), "--tp", str(job.tp),
                "--pp", str(job.pp), "--cp", str(job.cp), "--ac", job.ac, "--micro-batch", str(job.micro_batch),
                "--grad-accum", str(job.grad_accum), "--seq-len", str(job.seq_len), "--steps", str(job.steps),
                "--precision", job.precision]
        # a plan that does not say compiles on GPUs (as torchtitan's command does): its speed is priced on public
        # runs' fused kernels, and this trainer's eager step ran 1.44x slower than compiled on an H200
        # (bench/RESULTS_gpu.md); a CPU rehearsal stays eager
        notes = ()
        if job.compile is None:
            argv += ["--compile", "auto"]
            notes = ("torch.compile on GPUs (the plan's speed assumes fused kernels; this trainer's eager step ran "
                     "1.44x slower on an H200, bench/RESULTS_gpu.md): the first steps pay the compilation — "
                     "`-- --compile off` turns it off",)
        elif job.compile:
            argv += ["--compile", "on"]
        if job.checkpoint_every_steps:
            argv += ["--checkpoint-every", str(job.checkpoint_every_steps)]
        if job.checkpoint_dir:
            argv += ["--checkpoint-dir", job.checkpoint_dir]
        argv += [str(a) for a in extra_args]
        return StackCommand(argv=tuple(argv), launcher="torchrun", env={}, files={}, notes=notes,
                            checkpoint_on_sigterm=True, guarantee=self.guarantee)

    def parse_line(self, line: str) -> Event | None:
        return parse_progress_line(line)

    def sample_log(self) -> tuple[str, ...]:
        return (progress_line(2, tokens_per_second=9000.0, samples_per_second=2.2, loss=11.0, checkpoint_step=None),
                progress_line(12, tokens_per_second=11700.0, samples_per_second=2.86, loss=6.4),
                progress_line(checkpoint_step=12))


STACK = Own()
