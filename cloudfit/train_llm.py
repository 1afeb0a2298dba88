"""cloudfit's LLM trainer: a Llama-style decoder trained with the plan's parallel layout.

    torchrun --nproc-per-node 4 -m cloudfit.train_llm --shape llama3-8b --shrink \\
        --dp-shard 2 --tp 2 --ac selective --micro-batch 2 --grad-accum 2 --seq-len 64 \\
        --steps 30 --checkpoint-dir ckpt

The ranks form a device mesh ``(pp, dp_replicate, dp_shard, cp, tp)`` (``init_device_mesh``). With
``--pp`` the model is cut into pipeline stages (``torch.distributed.pipelining``, 1F1B schedule over
the ``--grad-accum`` micro-batches; parameter names stay the full model's). Each block's attention
(q/k/v column-wise, o row-wise) and SwiGLU MLP (gate/up column-wise, down row-wise) are split over
``tp`` with DTensor ``parallelize_module``. With ``--cp`` each rank holds one chunk of the sequence
and attention all-gathers keys and values (Llama 3's all-gather context parallelism; the backward
reduce-scatters). Each block is wrapped with activation checkpointing (``--ac``: ``full`` recomputes
the block, ``selective`` keeps matmul/attention outputs and recomputes the element-wise ops) and
sharded with FSDP2 ``fully_shard`` over ``dp_shard × cp`` (HSDP: replicated over ``dp_replicate``
too), and so is the root (embeddings, final norm, output). Embeddings and the output layer are not
split over ``tp`` (no loss-parallel, no sequence-parallel norms).

Data is synthetic and learnable (a fixed cyclic order of the vocabulary, followed with 10% random
restarts: the loss falls from ln(vocab) toward ~0.9 nats at vocab 256), drawn deterministically from (seed, step, data-parallel rank,
micro-step), so a resumed run sees the batches it would have seen.

This module is the ``llm`` family of :mod:`cloudfit.runtime`: it builds the model and parallelises it
(:func:`device_mesh`, :func:`parallelize`) and runs a step; the runtime does the rest — checkpoints
(``torch.distributed.checkpoint`` folders of the sharded model and optimizer, signed, resumed whatever
layout or world size wrote them: DCP re-shards on load), the checkpoint cadence, progress and metrics
lines (``--metrics-file``: one JSON line per step), the stop requests and the exit codes.

Bad input prints one line to stderr and exits 2. This module imports torch only when a job is built.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from cloudfit.runtime import main as run_family
from cloudfit.runtime.checkpoint import MARKER, complete_checkpoints  # noqa: F401  (re-exported)
from cloudfit.runtime.checkpoint import prune as _prune  # noqa: F401
from cloudfit.runtime.control import add_shared_args, control_args
from cloudfit.runtime.family import BadInput, Job
from cloudfit.runtime.loop import Parser as _Parser
from cloudfit.runtime.progress import PROGRESS_SCHEMA, write_json_atomic  # noqa: F401

PROG = "cloudfit.train_llm"
AC_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class Layout:
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ac: str = "none"
    micro_batch: int = 1
    grad_accum: int = 1

    @property
    def world_size(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp * self.cp

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    def label(self) -> str:
        parts = []
        if self.dp_replicate > 1:
            parts.append(f"replicate={self.dp_replicate}")
        parts.append(f"fsdp={self.dp_shard}")
        parts += [f"tp={self.tp}", f"pp={self.pp}", f"cp={self.cp}", f"ac={self.ac}", f"mb={self.micro_batch}",
                  f"ga={self.grad_accum}"]
        return ",".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rehearsal_layout(layout: Layout, max_ranks: int, *, tied_embeddings: bool = False) -> tuple[Layout, list[str]]:
    """The nearest layout this trainer runs on ``max_ranks`` local ranks, and a note per change.

    Each parallel dimension the plan uses is kept at degree 2 while ranks are left, in the order
    FSDP shard, tensor, pipeline, context, replicate (so 4 ranks rehearse e.g. fsdp=2×tp=2 of a
    fsdp×tp×pp plan; the rest is noted as not rehearsed). Micro-batch and checkpointing mode are
    kept; gradient accumulation is raised to the pipeline degree when a pipeline is kept (1F1B
    needs at least as many micro-batches as stages). Pipeline parallelism is dropped for a model
    with tied embeddings (the two ends would sit on different stages)."""
    if max_ranks < 1:
        raise BadInput("max_ranks must be ≥ 1")
    notes: list[str] = []
    want = {"dp_shard": layout.dp_shard, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp,
            "dp_replicate": layout.dp_replicate}
    names = {"dp_shard": "fsdp", "tp": "tp", "pp": "pp", "cp": "cp", "dp_replicate": "replicate"}
    got = {k: 1 for k in want}
    room = max_ranks
    for k in ("dp_shard", "tp", "pp", "cp", "dp_replicate"):
        if want[k] > 1 and room >= 2:
            if k == "pp" and tied_embeddings:
                continue
            got[k] = 2
            room //= 2
    if room >= 2 and want["dp_shard"] > 2 and got["dp_shard"] == 2:  # spare ranks: more sharding
        got["dp_shard"] = min(want["dp_shard"], 2 * room)
    for k in want:
        if got[k] != want[k]:
            why = " (tied embeddings)" if k == "pp" and tied_embeddings and want[k] > 1 else ""
            notes.append(f"{names[k]}={want[k]} rehearsed as {names[k]}={got[k]} on {max_ranks} local rank(s){why}")
    ga = layout.grad_accum
    if got["pp"] > 1 and ga < got["pp"]:
        notes.append(f"gradient accumulation {ga} raised to {got['pp']} (pipeline micro-batches ≥ stages)")
        ga = got["pp"]
    out = Layout(dp_replicate=got["dp_replicate"], dp_shard=got["dp_shard"], tp=got["tp"], pp=got["pp"], cp=got["cp"],
                 ac=layout.ac, micro_batch=layout.micro_batch, grad_accum=ga)
    return out, notes


_LAYOUT_KEYS = {"fsdp": "dp_shard", "dp_shard": "dp_shard", "shard": "dp_shard", "replicate": "dp_replicate",
                "dp_replicate": "dp_replicate", "dp": "dp_replicate", "tp": "tp", "pp": "pp", "cp": "cp", "ac": "ac",
                "mb": "micro_batch", "micro_batch": "micro_batch", "ga": "grad_accum", "grad_accum": "grad_accum"}


def parse_layout(text: str) -> dict[str, Any]:
    """``"fsdp=4,tp=2,pp=1,cp=1,ac=selective"`` (the planner's layout string; also ``replicate``,
    ``mb``, ``ga``) → ``{"dp_shard": 4, "tp": 2, …}``. Unknown keys or values raise :class:`BadInput`."""
    out: dict[str, Any] = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or key not in _LAYOUT_KEYS:
            raise BadInput(f"--layout {text!r}: {part!r} is not KEY=VALUE with KEY one of "
                           "fsdp, replicate, tp, pp, cp, ac, mb, ga")
        field = _LAYOUT_KEYS[key]
        if field == "ac":
            out[field] = value.strip()
            continue
        try:
            out[field] = int(value)
        except ValueError:
            raise BadInput(f"--layout {text!r}: {key}={value!r} is not an integer") from None
    return out


def rehearsal_notes(planned: dict[str, Any], actual: Any) -> list[str]:
    """One line per layout field where this run (``actual``: a Layout or parsed arguments) differs
    from the plan's layout (``planned``, from :func:`parse_layout`)."""
    names = {"dp_shard": "fsdp", "dp_replicate": "replicate", "tp": "tp", "pp": "pp", "cp": "cp", "ac": "ac",
             "micro_batch": "mb", "grad_accum": "ga"}
    out = []
    for field, name in names.items():
        if field in planned and planned[field] != getattr(actual, field):
            out.append(f"{name}={planned[field]} rehearsed as {name}={getattr(actual, field)}")
    return out


def trainer_args(layout: Layout, *, steps: int, checkpoint_dir: str, shape: str | None = "llama3-8b",
                 shrink: bool = True, seq_len: int = 64, checkpoint_every: int | None = None,
                 checkpoint_interval_s: float | None = None, progress_file: str | None = None,
                 stop_file: str | None = None, stop_at: float | None = None, rehearsal_of: str | None = None,
                 extra: list[str] | None = None) -> list[str]:
    """Arguments of ``python -m cloudfit.train_llm`` for ``layout`` (for a launcher's torchrun line)."""
    a = ["--dp-replicate", str(layout.dp_replicate), "--dp-shard", str(layout.dp_shard), "--tp", str(layout.tp),
         "--pp", str(layout.pp), "--cp", str(layout.cp), "--ac", layout.ac, "--micro-batch", str(layout.micro_batch),
         "--grad-accum", str(layout.grad_accum), "--seq-len", str(seq_len), "--steps", str(steps),
         "--checkpoint-dir", checkpoint_dir]
    if shape:
        a += ["--shape", shape] + (["--shrink"] if shrink else [])
    if checkpoint_every:
        a += ["--checkpoint-every", str(checkpoint_every)]
    if checkpoint_interval_s:
        a += ["--checkpoint-interval-s", f"{checkpoint_interval_s:g}"]
    a += control_args(progress_file, stop_file, stop_at)
    if rehearsal_of:
        a += ["--rehearsal-of", rehearsal_of]
    return a + list(extra or [])



# ------------------------------------------------------------------------------ arguments

def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    g = p.add_argument_group("layout")
    g.add_argument("--layout", default=None, metavar="fsdp=N,tp=N,…",
                   help="the plan's layout string (fsdp, replicate, tp, pp, cp, ac, mb, ga); the flags below "
                        "must agree with it")
    g.add_argument("--rehearsal-of", default=None, metavar="fsdp=N,tp=N,…",
                   help="the plan's own layout, when this run rehearses it smaller: recorded in the progress "
                        "file, and what differs is printed once")
    g.add_argument("--dp-replicate", type=int, default=1, help="data-parallel replicas (HSDP when > 1)")
    g.add_argument("--dp-shard", type=int, default=None, help="FSDP shard degree (default: world ÷ the others)")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    g.add_argument("--pp", type=int, default=1, help="pipeline-parallel stages (1F1B schedule; micro-batches = --grad-accum)")
    g.add_argument("--cp", type=int, default=1, help="context-parallel degree (all-gather of keys and values)")
    g.add_argument("--ac", default="none", help="activation checkpointing: none | selective | full")
    g.add_argument("--micro-batch", type=int, default=2, help="sequences per data-parallel rank per micro-step")
    g.add_argument("--grad-accum", type=int, default=1, help="micro-steps per optimizer step")
    g.add_argument("--seq-len", type=int, default=64)
    m = p.add_argument_group("model")
    m.add_argument("--shape", default=None, help="a real shape: " + ", ".join(_shape_names()))
    m.add_argument("--shrink", action="store_true", help="the shape's layer types at a tiny size")
    m.add_argument("--layers", type=int, default=None)
    m.add_argument("--dim", type=int, default=None)
    m.add_argument("--heads", type=int, default=None)
    m.add_argument("--kv-heads", type=int, default=None)
    m.add_argument("--head-dim", type=int, default=None, help="with --shrink: size of a head (default 16)")
    m.add_argument("--ffn-dim", type=int, default=None)
    m.add_argument("--vocab", type=int, default=None)
    m.add_argument("--tie-embeddings", action="store_true")
    t = p.add_argument_group("training")
    t.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (default: min(3e-3, 3e-4 × 4096 / dim), the Llama-3 recipes' rates: "
                        "3e-4 at 8B, 1.5e-4 at 70B, 8e-5 at 405B)")
    t.add_argument("--warmup-steps", type=int, default=5)
    t.add_argument("--precision", default="auto", help="fp32 | bf16 (FSDP2 mixed precision) | auto: bf16 on GPUs, fp32 on CPUs")
    t.add_argument("--compile", nargs="?", const="on", default="off", choices=("on", "off", "auto"),
                   help="each transformer block under torch.compile before FSDP2 wraps it (as torchtitan does): "
                        "1.44x the eager step for llama3-1b on one H200 (bench/RESULTS_gpu.md); first steps pay the "
                        "compilation. auto: on GPUs, not on a CPU rehearsal (what a plan that does not say runs)")
    t.add_argument("--init", default="auto", help="full | meta (build on the meta device, initialise after sharding) | auto")
    add_shared_args(p, interval_s=None, progress_every_s=1.0)
    return p


def _shape_names() -> list[str]:
    from cloudfit.llm_model import SHAPES

    return sorted(SHAPES)


def parse_args(argv: list[str] | None = None, world_size: int | None = None) -> argparse.Namespace:
    """Parse and check everything that can be checked before a process group exists."""
    from cloudfit.runtime.control import check_shared_args

    a = _parser().parse_args(argv)
    check_shared_args(a)
    return _check(a, world_size)


def _check(a: argparse.Namespace, world_size: int | None = None) -> argparse.Namespace:
    """The parsed arguments with the layout filled and the model shape built (:class:`BadInput` if wrong)."""
    if a.layout is not None:  # fill what the flags left at their defaults; a disagreement is an error
        p = _parser()
        for field, value in parse_layout(a.layout).items():
            current = getattr(a, field)
            if current != p.get_default(field) and current != value:
                raise BadInput(f"--layout says {field.replace('_', '-')}={value} but "
                               f"--{field.replace('_', '-')} {current}")
            setattr(a, field, value)
    if a.ac not in AC_MODES:
        raise BadInput(f"--ac {a.ac!r}: choose none, selective or full")
    if a.precision not in ("auto", "fp32", "bf16"):
        raise BadInput(f"--precision {a.precision!r}: choose fp32, bf16 or auto")
    if a.init not in ("auto", "full", "meta"):
        raise BadInput(f"--init {a.init!r}: choose full, meta or auto")
    if (a.lr is not None and not a.lr > 0) or a.warmup_steps < 0:
        raise BadInput("--lr must be > 0, --warmup-steps ≥ 0")
    _check_layout(a, world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", 1)))
    a.model_config = cfg = _model_config(a)
    if a.pp > cfg.layers:
        raise BadInput(f"pipeline parallel {a.pp} is more stages than the model's {cfg.layers} layers")
    if a.pp > 1 and cfg.tie_embeddings:
        raise BadInput(f"pipeline parallel with tied embeddings ({cfg.name}) is not supported: the embedding and "
                       "the output layer would sit on different stages")
    if a.lr is None:
        a.lr = default_lr(cfg.dim)
    a.rehearsal_notes = rehearsal_notes(parse_layout(a.rehearsal_of), a) if a.rehearsal_of else []
    a.layout = Layout(dp_replicate=a.dp_replicate, dp_shard=a.dp_shard, tp=a.tp, pp=a.pp, cp=a.cp, ac=a.ac,
                      micro_batch=a.micro_batch, grad_accum=a.grad_accum)
    return a


def default_lr(dim: int) -> float:
    """The peak learning rate for a model ``dim`` wide: inversely with the width, as the Llama-3 recipes go
    (3e-4 at 4,096, 1.5e-4 at 8,192, 8e-5 at 16,384), capped at 3e-3 for the small shapes of rehearsals and
    tests. A fixed 3e-3 diverged at real width (on the H100 with llama3-1b, and on CPU: ``--layers 2 --dim 2048
    --heads 32 --kv-heads 8 --ffn-dim 8192 --vocab 4096 --seq-len 64 --micro-batch 4 --steps 40``, the mean
    loss of the last 10 steps 10.0 against 8.2 for the first 5; at 4e-4: 3.4 against 8.3)."""
    return min(3e-3, 3e-4 * 4096 / dim)


def _check_layout(a: argparse.Namespace, world: int) -> None:
    for k in ("dp_replicate", "tp", "pp", "cp", "micro_batch", "grad_accum", "seq_len"):
        if getattr(a, k) < 1:
            raise BadInput(f"--{k.replace('_', '-')} must be ≥ 1 (got {getattr(a, k)})")
    if a.dp_shard is not None and a.dp_shard < 1:
        raise BadInput(f"--dp-shard must be ≥ 1 (got {a.dp_shard})")
    others = a.pp * a.dp_replicate * a.cp * a.tp
    if a.dp_shard is None:
        if world % others:
            raise BadInput(f"world size {world} is not a multiple of pp {a.pp} × dp-replicate {a.dp_replicate} × "
                           f"cp {a.cp} × tp {a.tp}")
        a.dp_shard = world // others
    if others * a.dp_shard != world:
        raise BadInput(f"layout pp {a.pp} × dp-replicate {a.dp_replicate} × dp-shard {a.dp_shard} × cp {a.cp} × "
                       f"tp {a.tp} = {others * a.dp_shard} ranks, but the world size is {world}")
    if a.seq_len % a.cp:
        raise BadInput(f"context parallel {a.cp} does not divide --seq-len {a.seq_len}")
    if a.pp > 1 and a.grad_accum < a.pp:
        raise BadInput(f"pipeline parallel {a.pp} needs --grad-accum ≥ {a.pp} (the 1F1B schedule's micro-batches "
                       f"per step), got {a.grad_accum}")


def _model_config(a: argparse.Namespace):
    from dataclasses import replace

    from cloudfit.llm_model import SHAPES, LlamaConfig, llama_ffn_dim, shrink

    if a.shape is not None:
        if a.shape not in SHAPES:
            raise BadInput(f"--shape {a.shape!r}: known shapes are {', '.join(sorted(SHAPES))}")
        cfg = SHAPES[a.shape]
        if a.shrink:
            cfg = shrink(cfg, layers=a.layers or 2, kv_heads=a.kv_heads or 2, head_dim=a.head_dim or 16,
                         vocab=a.vocab or 256)
        elif any(v is not None for v in (a.layers, a.dim, a.heads, a.kv_heads, a.head_dim, a.ffn_dim, a.vocab)):
            raise BadInput("--shape without --shrink takes the real size: drop --layers/--dim/--heads/--kv-heads/"
                           "--head-dim/--ffn-dim/--vocab, or add --shrink")
    else:
        if a.shrink:
            raise BadInput("--shrink needs --shape")
        dim = a.dim or 64
        cfg = LlamaConfig(dim=dim, layers=a.layers or 2, heads=a.heads or 4, kv_heads=a.kv_heads or 2,
                          vocab=a.vocab or 256, ffn_dim=a.ffn_dim or llama_ffn_dim(dim),
                          tie_embeddings=a.tie_embeddings)
    if a.tie_embeddings and not cfg.tie_embeddings:
        cfg = replace(cfg, tie_embeddings=True)
    problems = cfg.problems(tp=a.tp)
    if problems:
        raise BadInput(f"model {cfg.name}: {problems[0]}")
    if cfg.vocab < 4:
        raise BadInput(f"--vocab must be ≥ 4 (got {cfg.vocab})")
    return cfg


# ------------------------------------------------------------------------------ data

RESTART_P = 0.1  # chance that a token starts afresh instead of following the chain


def markov_tables(vocab: int, seed: int = 1234) -> dict[str, Any]:
    """A fixed random order of the whole vocabulary read as one cycle: token ``flat[i]`` is followed
    by ``flat[i+1]`` (``next``), so ``next^k(t) = flat[(pos[t] + k) % vocab]`` is one lookup.
    Independent of the layout."""
    import torch

    flat = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))
    pos = torch.empty_like(flat)
    pos[flat] = torch.arange(vocab)
    nxt = torch.empty_like(flat)
    nxt[flat] = flat.roll(-1)
    return {"next": nxt, "flat": flat, "pos": pos}


def synthetic_batch(tables, *, vocab: int, batch: int, seq_len: int, seed: int, step: int, dp_rank: int, micro: int):
    """``(inputs, targets)`` of shape (batch, seq_len): each token follows the chain (``next``) with
    probability 0.9, else it is drawn uniformly (a restart): learnable, with a loss floor of about
    H(0.9) + 0.1·ln(vocab) nats. Deterministic in (seed, step, dp_rank, micro); built without a
    per-position loop, so long sequences cost little."""
    import torch

    g = torch.Generator().manual_seed(((seed * 1_000_003 + step) * 10_007 + dp_rank) * 101 + micro)
    n = seq_len + 1
    restart = torch.rand(batch, n, generator=g) < RESTART_P
    restart[:, 0] = True
    fresh = torch.randint(0, vocab, (batch, n), generator=g)
    idx = torch.arange(n).expand(batch, n)
    last = torch.cummax(torch.where(restart, idx, torch.zeros_like(idx)), dim=1).values  # latest restart
    begin = torch.gather(fresh, 1, last)
    toks = tables["flat"][(tables["pos"][begin] + (idx - last)) % vocab]
    return toks[:, :-1], toks[:, 1:]




# ------------------------------------------------------------------------------ checkpoints (the runtime's)

def read_marker(path: Path) -> dict[str, Any]:
    """A checkpoint folder's completion marker, unverified (JSON: nothing runs); {} when unreadable.
    The runtime verifies its signature before it trusts it (``cloudfit.runtime.integrity``)."""
    import json

    try:
        return json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return {}


# ------------------------------------------------------------------------------ parallelising

@dataclass
class Mesh:
    """The device mesh ``(pp, dp_replicate, dp_shard, cp, tp)``, FSDP's part of it, and this rank's place."""

    mesh: Any
    fsdp: Any  # FSDP shards over dp_shard × cp; HSDP replicates that over dp_replicate
    dp_rank: int
    cp_rank: int
    pp_rank: int
    pp: int

    @property
    def first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1


def device_mesh(layout: Layout, device_type: str) -> Mesh:
    """The ranks as a 5-D mesh (needs the process group)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, (layout.pp, layout.dp_replicate, layout.dp_shard, layout.cp, layout.tp),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "cp", "tp"))
    # context-parallel peers hold the same weights and their gradients must be averaged too
    shard_cp = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    fsdp = mesh["dp_replicate", "dp_shard_cp"] if layout.dp_replicate > 1 else shard_cp
    dp_rank = mesh["dp_replicate"].get_local_rank() * layout.dp_shard + mesh["dp_shard"].get_local_rank()
    return Mesh(mesh, fsdp, dp_rank, mesh["cp"].get_local_rank(), mesh["pp"].get_local_rank(), layout.pp)


def parallelize(model, layout: Layout, m: Mesh, precision: str = "fp32") -> None:
    """In place: keep this rank's pipeline stage, split attention and MLP over ``tp``, let attention
    all-gather keys and values over ``cp``, set each block's activation checkpointing, and shard the
    blocks and the root with FSDP2 ``fully_shard`` (bf16 parameters with fp32 reductions for ``bf16``)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    from cloudfit import llm_model

    if layout.pp > 1:
        model.keep_stage(m.pp_rank, layout.pp)
    if layout.cp > 1:
        model.enable_context_parallel(m.mesh["cp"].get_group())
    for blk in model.layers.values():
        blk.ac = layout.ac
        if layout.tp > 1:
            parallelize_module(blk, m.mesh["tp"], llm_model.tp_plan())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision == "bf16" \
        else MixedPrecisionPolicy()
    blocks = list(model.layers.values())
    for i, blk in enumerate(blocks):
        # the last block's parameters are gathered again at once by the backward: keep them; a
        # pipeline runs several micro-batches through a stage: keep them all (as torchtitan does)
        fully_shard(blk, mesh=m.fsdp, mp_policy=mp, reshard_after_forward=layout.pp == 1 and i < len(blocks) - 1)
    fully_shard(model, mesh=m.fsdp, mp_policy=mp, reshard_after_forward=layout.pp == 1)


# ------------------------------------------------------------------------------ steps

class _Steps:
    """A step and the fixed-batch loss of the parallelised model on this rank."""

    def __init__(self, a: argparse.Namespace, r: Any, model, opt, m: Mesh) -> None:
        import torch

        self.a, self.r, self.model, self.opt, self.m = a, r, model, opt, m
        self.layout, self.cfg = a.layout, a.model_config
        self.tables = markov_tables(self.cfg.vocab)
        self.chunk = a.seq_len // self.layout.cp
        self.schedule = None
        if self.layout.pp > 1:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B

            stage = PipelineStage(model, m.pp_rank, self.layout.pp, r.device, group=m.mesh["pp"].get_group())
            # scale_grads: each micro-batch's loss is a mean, the step's gradient their mean
            self.schedule = Schedule1F1B(stage, n_microbatches=self.layout.grad_accum, loss_fn=self.loss_fn,
                                         scale_grads=True)
        self.torch = torch

    def loss_fn(self, logits, targets):
        return self.torch.nn.functional.cross_entropy(logits.float().reshape(-1, self.cfg.vocab), targets.reshape(-1))

    def local(self, t):
        """This rank's part of a batch: its context-parallel chunk of the sequence."""
        return t[:, self.m.cp_rank * self.chunk:(self.m.cp_rank + 1) * self.chunk].to(self.r.device)

    def share(self, loss: float) -> float:
        """This rank's share of the mean loss: only the last pipeline stage knows it (the same on
        tensor-parallel peers); the mean is over data- and context-parallel ranks."""
        return loss / (self.r.world // self.layout.pp) if self.m.last_stage else 0.0

    def step(self, i: int) -> float:
        a, lay = self.a, self.layout
        for gp in self.opt.param_groups:
            gp["lr"] = a.lr * min(1.0, (i + 1) / max(1, a.warmup_steps))
        batches = [synthetic_batch(self.tables, vocab=self.cfg.vocab, batch=lay.micro_batch, seq_len=a.seq_len,
                                   seed=a.seed, step=i, dp_rank=self.m.dp_rank, micro=micro)
                   for micro in range(lay.grad_accum)]
        loss = self._pipelined(batches) if self.schedule is not None else self._accumulated(batches)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return self.share(loss)

    def _accumulated(self, batches) -> float:
        total, n = 0.0, len(batches)
        for micro, (x, y) in enumerate(batches):
            self.model.set_requires_gradient_sync(micro == n - 1)  # reduce-scatter once a step
            loss = self.loss_fn(self.model(self.local(x)), self.local(y))
            (loss / n).backward()
            total += float(loss.detach()) / n
        return total

    def _pipelined(self, batches) -> float:
        """1F1B over the step's micro-batches (the schedule splits dim 0)."""
        x = self.torch.cat([self.local(b[0]) for b in batches])
        y = self.torch.cat([self.local(b[1]) for b in batches])
        return self._run_schedule(self.schedule.step, x, y)

    def _run_schedule(self, run, x, y) -> float:
        first, last = self.m.first_stage, self.m.last_stage
        losses: list = []
        if first:
            run(x, target=y if last else None, losses=losses if last else None)
        elif last:
            run(target=y, losses=losses)
        else:
            run()
        if not last:
            return 0.0
        return float(self.torch.stack([self.torch.as_tensor(v).detach().float() for v in losses]).mean())

    def eval_loss(self) -> float:
        """Loss on 4 fixed sequences, the same whatever the rank and layout: equal before a save and
        after the resume that loads it, whatever the re-sharding (a check that the weights came back)."""
        import torch.distributed as dist

        x, y = synthetic_batch(self.tables, vocab=self.cfg.vocab, batch=4, seq_len=self.a.seq_len,
                               seed=self.a.seed + 1, step=0, dp_rank=0, micro=0)
        total = 0.0
        with self.torch.no_grad():
            if self.schedule is None:
                total = float(self.loss_fn(self.model(self.local(x)), self.local(y)))
            else:  # one sequence at a time, repeated over the schedule's micro-batches
                for i in range(x.shape[0]):
                    xi, yi = (self.local(t[i:i + 1]).repeat(self.layout.grad_accum, 1) for t in (x, y))
                    total += self._run_schedule(self.schedule.eval, xi, yi) / x.shape[0]
        t = self.torch.tensor([self.share(total)], dtype=self.torch.float64, device=self.r.device)
        dist.all_reduce(t)
        return float(t[0])


# ------------------------------------------------------------------------------ the family

class LLM:
    """The ``llm`` family: a Llama-style decoder with the plan's FSDP2 / TP / PP / CP layout."""

    name, prog = "llm", PROG
    smoke_args = ["--dim", "32", "--heads", "4", "--kv-heads", "2", "--layers", "2", "--vocab", "64",
                  "--seq-len", "16", "--micro-batch", "4", "--lr", "1e-2", "--warmup-steps", "2",
                  "--progress-every-s", "0"]
    smoke_steps = 100

    def parser(self) -> argparse.ArgumentParser:
        return _parser()

    def check(self, a: argparse.Namespace) -> argparse.Namespace:
        return _check(a)

    def build(self, a: argparse.Namespace, r: Any) -> Job:
        import torch

        from cloudfit import llm_model

        layout, cfg = a.layout, a.model_config
        precision = a.precision if a.precision != "auto" else ("bf16" if r.cuda else "fp32")
        init = a.init if a.init != "auto" else ("meta" if r.cuda else "full")
        m = device_mesh(layout, r.device.type)
        model = llm_model.build(cfg, max_seq_len=a.seq_len, seed=a.seed, device="meta" if init == "meta" else r.device)
        compiled = a.compile == "on" or (a.compile == "auto" and bool(r.cuda))
        if compiled:  # per block, before sharding: FSDP2's hooks stay outside the compiled graphs
            for block in model.layers.values():
                block.compile()
        parallelize(model, layout, m, precision)
        if init == "meta":
            model.to_empty(device=r.device)
            model.init_weights(a.seed)
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8)
        steps = _Steps(a, r, model, opt, m)
        if r.rank == 0 and a.rehearsal_of:
            print(f"{PROG}: rehearsing the plan's layout {a.rehearsal_of} as {layout.label()} on {r.world} rank(s)"
                  + (": " + "; ".join(a.rehearsal_notes) if a.rehearsal_notes else ""), file=sys.stderr, flush=True)
        label, notes = layout.label(), list(a.rehearsal_notes)
        samples = layout.micro_batch * layout.grad_accum * layout.dp
        return Job(
            model=model, optimizer=opt, step=steps.step, samples_per_step=samples,
            tokens_per_step=samples * a.seq_len, eval_loss=steps.eval_loss, notes=notes, line={"layout": label},
            describe={"model": cfg.name, "model_config": cfg.to_dict(), "parameters": cfg.parameters(),
                      "layout": {**layout.to_dict(), "label": label}, "seq_len": a.seq_len, "precision": precision,
                      "compile": compiled,
                      "batch_size_per_rank": layout.micro_batch * layout.grad_accum, "rehearsal_of": a.rehearsal_of},
            marker={"model_config": cfg.to_dict(), "layout": {**layout.to_dict(), "label": label, "world_size": r.world}},
            check_resume=_resume_check(cfg, layout, r.world, notes))


def _resume_check(cfg, layout: Layout, world: int, notes: list[str]):
    def check(marker: dict[str, Any], path: Path) -> None:
        saved = marker.get("model_config")
        if saved is not None and saved != cfg.to_dict():
            diff = ", ".join(f"{k} {saved.get(k)}→{v}" for k, v in cfg.to_dict().items() if saved.get(k) != v)
            raise BadInput(f"{path} holds a different model ({diff}): resume with the same model arguments "
                           "or use another --checkpoint-dir")
        old = marker.get("layout") or {}
        if old and old.get("world_size") != world:
            notes.append(f"re-sharded from {old.get('world_size')} ranks ({old.get('label')}) to {world} ({layout.label()})")
        elif old and old.get("label") != layout.label():
            notes.append(f"re-sharded from {old.get('label')} to {layout.label()}")
    return check


FAMILY = LLM()
main = partial(run_family, FAMILY)  # main(argv=None) → exit code


if __name__ == "__main__":
    sys.exit(main())
