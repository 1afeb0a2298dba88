"""A large-model plan's job for the launcher: the layout ``cloudfit.train_llm`` runs on a given cluster.

``LlmJob.from_plan(plan)`` reads ``plan.layout`` (the planner's trainer arguments for the chosen
config; for layouts the trainer cannot run — interleaved stages, a pipeline over tied embeddings —
the nearest runnable layout's ``runnable_args``). ``layout_for(config)`` is the plan's layout on the chosen config and a
re-computed one on any other cluster (a fallback alternative, or fewer nodes after a loss): tensor
parallel kept inside a node, FSDP over the remaining GPUs, gradient accumulation raised so that the
global batch (sequences per optimizer step) stays the plan's — the optimizer sees the same steps.
DCP checkpoints re-shard on load, so a job resumes on either.

``rehearsal(max_ranks)`` is the local backend's version: the nearest layout the trainer runs on this
machine's gloo ranks (``cloudfit.train_llm.rehearsal_layout``), the shape shrunk to tiny width
(same layer types), 64-token sequences, micro-batch and accumulation at most 2 — with one note per
thing that differs from the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from cloudfit.errors import UsageError

TRAINER = "cloudfit.train_llm"
_DEGREES = ("dp_replicate", "dp_shard", "tp", "pp", "cp", "micro_batch", "grad_accum")
#: Arguments the launcher sets itself (per run and per node), never taken from the plan.
_OWN = {"--steps", "--checkpoint-dir", "--progress-file", "--stop-file", "--stop-at", "--checkpoint-interval-s",
        "--checkpoint-every", "--progress-interval-s", "--metrics-file"}


@dataclass(frozen=True)
class LlmJob:
    model_args: tuple[str, ...]  # --shape NAME, or the dimensions of a --config model
    shape: str  # the plan's model name (for notes)
    seq_len: int
    steps: int  # the plan's optimizer steps (tokens ÷ global batch ÷ seq_len)
    degrees: Mapping[str, Any]  # the layout the trainer runs on ``gpus`` GPUs (pp = cp = 1)
    gpus: int
    global_batch: int  # sequences per optimizer step
    checkpoint_interval_s: float | None
    planned_text: str = ""  # the plan's layout, as the planner wrote it
    notes: tuple[str, ...] = field(default_factory=tuple)  # what differs from the plan already (pp/cp → runnable)
    shape_spec: Mapping[str, Any] = field(default_factory=dict)  # the plan's model shape (for the memory check)
    capacity_gib: float | None = None  # memory per GPU of the plan's accelerator
    finetune: str = "full"  # full | lora (the trainer trains every weight: a LoRA plan is rehearsed as full)

    @classmethod
    def from_plan(cls, plan) -> "LlmJob":
        lay = plan.layout
        try:
            launch = lay["launch"]
            runnable = bool(launch.get("runnable", True))
            args = list(launch["args"] if runnable or not launch.get("runnable_args") else launch["runnable_args"])
            opts = _options(args)
            degrees = {k: int(opts[f"--{k.replace('_', '-')}"]) for k in _DEGREES}
            degrees["ac"] = str(opts.get("--ac", "none"))
            seq_len = int(opts["--seq-len"])
            steps = int(opts["--steps"])
            gpus = int(lay["gpus"])
            interval_h = (lay.get("checkpoint") or {}).get("interval_h")
        except (KeyError, TypeError, ValueError) as e:
            raise UsageError(f"the plan's layout block is malformed ({e!s:.80}): re-run `cloudfit recommend`") from None
        if any(v < 1 for k, v in degrees.items() if k != "ac") or seq_len < 1 or steps < 1 or gpus < 1:
            raise UsageError("the plan's layout has a degree, sequence length, step count or GPU count below 1")
        from cloudfit.executors.base import MAX_STEPS

        if steps > MAX_STEPS or seq_len > 10**8 or gpus > 10**6:
            raise UsageError(f"the plan's layout asks for {steps:.3g} steps of {seq_len:.3g} tokens on {gpus:.3g} GPUs: "
                             "not a training run (re-run `cloudfit recommend`)")
        world = world_of(degrees)
        if world != gpus:
            raise UsageError(f"the plan's layout covers {world} ranks but its cluster has {gpus} GPUs")
        model_args = _model_args(args)
        notes = () if runnable else (f"the plan's layout {lay.get('text')}: {launch.get('note') or 'not runnable'}; "
                                     f"{TRAINER} runs the nearest layout it can: {_label(degrees)}",)
        gb = degrees["micro_batch"] * degrees["grad_accum"] * degrees["dp_replicate"] * degrees["dp_shard"]
        cap = lay.get("memory_capacity_gib")
        return cls(tuple(model_args), str(lay.get("model") or ""), seq_len, steps, degrees, gpus, gb,
                   float(interval_h) * 3600.0 if interval_h else None, str(lay.get("text", "")), notes,
                   dict(lay.get("shape") or {}), float(cap) if isinstance(cap, (int, float)) else None,
                   "lora" if lay.get("finetune") == "lora" else "full")

    def fits(self, config) -> tuple[bool, str]:
        """Does the layout for ``config`` fit the GPU's memory (the planner's memory model)? Unknown → True."""
        if not self.shape_spec or not self.capacity_gib:
            return True, "memory not checked (the plan carries no shape)"
        try:
            from cloudfit.llm.layout import parse
            from cloudfit.llm.memory import estimate
            from cloudfit.llm.stats import token_stats
            from cloudfit.llm.zoo import LLMShape

            d = self.layout_for(config)
            text = (f"dp={d['dp_replicate']},fsdp={d['dp_shard']},zero=3,tp={d['tp']},pp={d['pp']},cp={d['cp']},"
                    f"mb={d['micro_batch']},ga={d['grad_accum']},ac={d['ac']}")
            e = estimate(token_stats(LLMShape(**self.shape_spec), self.seq_len), parse(text, gpus=config.accelerators),
                         capacity_gib=self.capacity_gib)
        except Exception as ex:  # a shape this version cannot rebuild: do not block on it
            return True, f"memory not checked ({ex!s:.60})"
        return e.fits, f"{e.total_gib:,.1f} of {self.capacity_gib:,.0f} GiB per GPU"

    # ---------------------------------------------------------------- layouts

    def layout_for(self, config) -> dict[str, Any]:
        """The trainer's degrees on ``config`` (the plan's on its own GPU count, else re-computed)."""
        gpus = config.accelerators
        return self.layout_on(gpus, config.offering.accelerators_per_node)

    def layout_on(self, gpus: int, per_node: int) -> dict[str, Any]:
        """The layout on ``gpus`` GPUs, ``per_node`` per node: the plan's, else ``cloudfit.stacks.base.relayout``'s."""
        from cloudfit.stacks.base import relayout

        d = dict(self.degrees)
        return d if gpus == self.gpus else relayout(d, self.global_batch, gpus, per_node)

    def args_for(self, degrees: Mapping[str, Any], *, shrink: bool = False, seq_len: int | None = None,
                 precision: str | None = None) -> list[str]:
        """Trainer arguments for ``degrees`` (without steps, checkpoint and progress arguments)."""
        model = list(self.model_args)
        if shrink:
            model = ["--shape", model[1] if model[:1] == ["--shape"] else "llama3-8b", "--shrink"]
        out = model + ["--dp-replicate", str(degrees["dp_replicate"]), "--dp-shard", str(degrees["dp_shard"]),
                       "--tp", str(degrees["tp"]), "--pp", str(degrees.get("pp", 1)), "--cp", str(degrees.get("cp", 1)),
                       "--ac", str(degrees["ac"]), "--micro-batch", str(degrees["micro_batch"]),
                       "--grad-accum", str(degrees["grad_accum"]), "--seq-len", str(seq_len or self.seq_len)]
        if precision:
            out += ["--precision", precision]
        return out

    def cluster_args(self, config) -> list[str]:
        return self.args_for(self.layout_for(config), precision="bf16")

    def rehearsal(self, max_ranks: int) -> tuple[dict[str, Any], list[str], list[str]]:
        """``(degrees, trainer args, notes)`` of the local rehearsal on at most ``max_ranks`` ranks."""
        from cloudfit.train_llm import Layout, rehearsal_layout

        d = self.degrees
        r, notes = rehearsal_layout(Layout(dp_replicate=d["dp_replicate"], dp_shard=d["dp_shard"], tp=d["tp"], pp=d["pp"],
                                           cp=d["cp"], ac=d["ac"], micro_batch=d["micro_batch"],
                                           grad_accum=d["grad_accum"]), max_ranks,
                                    tied_embeddings="--tie-embeddings" in self.model_args)
        notes = list(self.notes) + notes
        degrees = {"dp_replicate": r.dp_replicate, "dp_shard": r.dp_shard, "tp": r.tp, "pp": r.pp, "cp": r.cp, "ac": r.ac,
                   "micro_batch": min(r.micro_batch, 2), "grad_accum": max(r.pp, min(r.grad_accum, 2))}
        if (degrees["micro_batch"], degrees["grad_accum"]) != (d["micro_batch"], d["grad_accum"]):
            notes.append(f"micro-batch {d['micro_batch']}, accumulation {d['grad_accum']} rehearsed as "
                         f"{degrees['micro_batch']}, {degrees['grad_accum']}")
        shape = self.model_args[1] if self.model_args[:1] == ("--shape",) else "llama3-8b"
        notes.append(f"model {self.shape or shape} shrunk to {shape}'s layer types at tiny width (2 layers, vocab 256), "
                     f"sequences {self.seq_len:,} → 64 tokens, fp32 on CPU gloo")
        if self.finetune == "lora":
            notes.append("LoRA rehearsed as full training (cloudfit's trainer has no adapters): the rehearsal checks "
                         "the layout and the launch path, not the fine-tune")
        return degrees, self.args_for(degrees, shrink=True, seq_len=64, precision="fp32"), notes


def world_of(degrees: Mapping[str, Any]) -> int:
    return (int(degrees["dp_replicate"]) * int(degrees["dp_shard"]) * int(degrees["tp"]) * int(degrees.get("pp", 1))
            * int(degrees.get("cp", 1)))


def _label(d: Mapping[str, Any]) -> str:
    rep = f"replicate={d['dp_replicate']}," if d["dp_replicate"] > 1 else ""
    par = "".join(f",{k}={d[k]}" for k in ("pp", "cp") if int(d.get(k, 1)) > 1)
    return f"{rep}fsdp={d['dp_shard']},tp={d['tp']}{par},mb={d['micro_batch']},ga={d['grad_accum']},ac={d['ac']}"


def label(d: Mapping[str, Any]) -> str:
    return _label(d)


def _options(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, a in enumerate(args):
        if a.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[a] = args[i + 1]
    return out


def _model_args(args: list[str]) -> list[str]:
    """The model part of the planner's arguments (``--shape X`` or the dimensions): ``cloudfit.stacks.base``'s."""
    from cloudfit.stacks.base import _model_args as model_args

    out = list(model_args(args))
    if not out:
        raise UsageError("the plan's trainer arguments name no model (--shape or dimensions)")
    return out
