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

Checkpoints are ``torch.distributed.checkpoint`` (DCP) folders of the sharded model and optimizer
(``get_state_dict``/``set_state_dict``): ``CKPT/step-<9 digits>/`` gets ``COMPLETE.json`` only after
every rank finished writing; the two newest complete ones are kept. At start every rank resumes from
the newest complete one, whatever layout or world size wrote it (DCP re-shards on load). A checkpoint
is taken every ``--checkpoint-every`` steps and/or ``--checkpoint-interval-s`` seconds (rank 0's
clock; the ranks agree each step), at a stop request and at the end.

Stopping early: when ``--stop-file`` appears or ``--stop-at`` (a Unix time) passes, the ranks agree at
the next step, checkpoint, and exit 0 with state ``stopped``. Rank 0 writes ``--progress-file`` (JSON,
atomically, at most every ``--progress-interval-s``): step, tokens/s, loss, restarts, world size,
layout; ``--metrics-file`` (JSON lines) gets one line per step.

Bad input prints one line to stderr and exits 2. This module imports torch only in :func:`main`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cloudfit.atomic import atomic_open

PROG = "cloudfit.train_llm"
PROGRESS_SCHEMA = 1
MARKER = "COMPLETE.json"
_STEP_DIR = re.compile(r"^step-(\d{9})$")
AC_MODES = ("none", "selective", "full")


class BadInput(Exception):
    """A usage error: reported as one line on stderr, exit status 2."""


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
    from cloudfit.train import control_args

    a += control_args(progress_file, stop_file, stop_at)
    if rehearsal_of:
        a += ["--rehearsal-of", rehearsal_of]
    return a + list(extra or [])


# ------------------------------------------------------------------------------ arguments

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the usage too)
        raise BadInput(message)


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
    t.add_argument("--steps", type=int, required=True, help="total optimizer steps (across restarts)")
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--warmup-steps", type=int, default=5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--precision", default="auto", help="fp32 | bf16 (FSDP2 mixed precision) | auto: bf16 on GPUs, fp32 on CPUs")
    t.add_argument("--init", default="auto", help="full | meta (build on the meta device, initialise after sharding) | auto")
    c = p.add_argument_group("checkpoints and progress")
    c.add_argument("--checkpoint-dir", default=os.environ.get("CLOUDFIT_CHECKPOINT_DIR"),
                   required="CLOUDFIT_CHECKPOINT_DIR" not in os.environ,
                   help="shared by all ranks (default: $CLOUDFIT_CHECKPOINT_DIR)")
    c.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints")
    c.add_argument("--checkpoint-interval-s", type=float, default=None, help="seconds between checkpoints")
    c.add_argument("--keep", type=int, default=2, help="complete checkpoints kept")
    c.add_argument("--progress-file", default=os.environ.get("CLOUDFIT_PROGRESS_FILE"),
                   help="default: $CLOUDFIT_PROGRESS_FILE, else CHECKPOINT_DIR/progress.json")
    c.add_argument("--progress-interval-s", type=float, default=1.0)
    c.add_argument("--metrics-file", default=None, help="JSON lines, one per step (rank 0)")
    c.add_argument("--stop-file", default=os.environ.get("CLOUDFIT_STOP_FILE"))
    c.add_argument("--stop-at", type=float, default=None, help="stop gracefully at this Unix time")
    return p


def _shape_names() -> list[str]:
    from cloudfit.llm_model import SHAPES

    return sorted(SHAPES)


def parse_args(argv: list[str] | None = None, world_size: int | None = None) -> argparse.Namespace:
    """Parse and check everything that can be checked before a process group exists."""
    from cloudfit.llm_model import SHAPES, LlamaConfig, llama_ffn_dim, shrink

    p = _parser()
    a = p.parse_args(argv)
    if a.layout is not None:  # fill what the flags left at their defaults; a disagreement is an error
        for field, value in parse_layout(a.layout).items():
            current = getattr(a, field)
            if current != p.get_default(field) and current != value:
                raise BadInput(f"--layout says {field.replace('_', '-')}={value} but "
                               f"--{field.replace('_', '-')} {current}")
            setattr(a, field, value)
    world = world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", 1))
    if a.ac not in AC_MODES:
        raise BadInput(f"--ac {a.ac!r}: choose none, selective or full")
    if a.precision not in ("auto", "fp32", "bf16"):
        raise BadInput(f"--precision {a.precision!r}: choose fp32, bf16 or auto")
    if a.init not in ("auto", "full", "meta"):
        raise BadInput(f"--init {a.init!r}: choose full, meta or auto")
    for k in ("dp_replicate", "tp", "pp", "cp", "micro_batch", "grad_accum", "seq_len", "steps", "keep"):
        if getattr(a, k) < 1:
            raise BadInput(f"--{k.replace('_', '-')} must be ≥ 1 (got {getattr(a, k)})")
    if a.dp_shard is not None and a.dp_shard < 1:
        raise BadInput(f"--dp-shard must be ≥ 1 (got {a.dp_shard})")
    if a.checkpoint_every is not None and a.checkpoint_every < 1:
        raise BadInput(f"--checkpoint-every must be ≥ 1 (got {a.checkpoint_every})")
    if a.checkpoint_interval_s is not None and a.checkpoint_interval_s <= 0:
        raise BadInput(f"--checkpoint-interval-s must be > 0 (got {a.checkpoint_interval_s})")
    if a.lr <= 0 or a.warmup_steps < 0 or a.progress_interval_s < 0:
        raise BadInput("--lr must be > 0, --warmup-steps and --progress-interval-s ≥ 0")
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

    # model shape
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
        from dataclasses import replace

        cfg = replace(cfg, tie_embeddings=True)
    problems = cfg.problems(tp=a.tp)
    if problems:
        raise BadInput(f"model {cfg.name}: {problems[0]}")
    if a.pp > cfg.layers:
        raise BadInput(f"pipeline parallel {a.pp} is more stages than the model's {cfg.layers} layers")
    if a.pp > 1 and cfg.tie_embeddings:
        raise BadInput(f"pipeline parallel with tied embeddings ({cfg.name}) is not supported: the embedding and "
                       "the output layer would sit on different stages")
    if cfg.vocab < 4:
        raise BadInput(f"--vocab must be ≥ 4 (got {cfg.vocab})")
    a.model_config = cfg
    a.rehearsal_notes = rehearsal_notes(parse_layout(a.rehearsal_of), a) if a.rehearsal_of else []
    a.layout = Layout(dp_replicate=a.dp_replicate, dp_shard=a.dp_shard, tp=a.tp, pp=a.pp, cp=a.cp, ac=a.ac,
                      micro_batch=a.micro_batch, grad_accum=a.grad_accum)
    return a


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


# ------------------------------------------------------------------------------ checkpoints

def complete_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint folder that has its completion marker, newest first."""
    if not folder.is_dir():
        return []
    out = []
    for n in os.listdir(folder):
        m = _STEP_DIR.match(n)
        if m and (folder / n / MARKER).is_file():
            out.append((int(m.group(1)), folder / n))
    return sorted(out, reverse=True)


def read_marker(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def _prune(folder: Path, keep: int) -> None:
    """Keep the ``keep`` newest complete checkpoints; remove older ones and stale incomplete folders."""
    done = complete_checkpoints(folder)
    if not done:
        return
    for _, path in done[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    newest = done[0][0]
    for n in os.listdir(folder):
        m = _STEP_DIR.match(n)
        if m and int(m.group(1)) < newest and not (folder / n / MARKER).is_file():
            shutil.rmtree(folder / n, ignore_errors=True)


def write_json_atomic(path: Path, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh)


# ------------------------------------------------------------------------------ training

def _fail(msg: str, rank: int = 0) -> int:
    if rank == 0:
        print(f"{PROG}: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    import faulthandler

    faulthandler.enable()  # a rank that dies of a signal (e.g. SIGSEGV in a collective) leaves its Python stacks in the log
    rank = int(os.environ.get("RANK", 0))
    try:
        args = parse_args(argv)
    except BadInput as e:
        return _fail(str(e), rank)
    try:
        return _train(args)
    except BadInput as e:
        return _fail(str(e), rank)


def _train(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    from cloudfit import llm_model

    layout: Layout = args.layout
    cfg = args.model_config
    from cloudfit.train import torchrun_env

    distributed, rank, world, local_rank, restart = torchrun_env()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"  # on GPUs, CPU-side collectives still go over gloo
    if not distributed:  # one process: a private single-rank group, so the same code path runs
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        dist.init_process_group(backend, rank=0, world_size=1)
    else:
        dist.init_process_group(backend)
    precision = args.precision if args.precision != "auto" else ("bf16" if cuda else "fp32")
    init = args.init if args.init != "auto" else ("meta" if cuda else "full")

    mesh = init_device_mesh(device.type, (layout.pp, layout.dp_replicate, layout.dp_shard, layout.cp, layout.tp),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "cp", "tp"))
    # FSDP shards over dp_shard × cp (context-parallel peers hold the same weights and their
    # gradients must be averaged too); HSDP replicates that over dp_replicate
    shard_cp = mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
    fsdp_mesh = mesh["dp_replicate", "dp_shard_cp"] if layout.dp_replicate > 1 else shard_cp
    dp_rank = mesh["dp_replicate"].get_local_rank() * layout.dp_shard + mesh["dp_shard"].get_local_rank()
    cp_rank = mesh["cp"].get_local_rank()
    pp_rank = mesh["pp"].get_local_rank()
    first_stage, last_stage = pp_rank == 0, pp_rank == layout.pp - 1

    # ---- model: build, pipeline stage, tensor-parallel, context-parallel, checkpointing, FSDP2
    model = llm_model.build(cfg, max_seq_len=args.seq_len, seed=args.seed, device="meta" if init == "meta" else device)
    if layout.pp > 1:
        model.keep_stage(pp_rank, layout.pp)
    if layout.cp > 1:
        model.enable_context_parallel(mesh["cp"].get_group())
    for blk in model.layers.values():
        blk.ac = layout.ac
        if layout.tp > 1:
            parallelize_module(blk, mesh["tp"], llm_model.tp_plan())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision == "bf16" else MixedPrecisionPolicy()
    blocks = list(model.layers.values())
    for i, blk in enumerate(blocks):
        # the last block's parameters are gathered again at once by the backward: keep them; a
        # pipeline runs several micro-batches through a stage: keep them all (as torchtitan does)
        fully_shard(blk, mesh=fsdp_mesh, mp_policy=mp, reshard_after_forward=layout.pp == 1 and i < len(blocks) - 1)
    fully_shard(model, mesh=fsdp_mesh, mp_policy=mp, reshard_after_forward=layout.pp == 1)
    if init == "meta":
        model.to_empty(device=device)
        model.init_weights(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8)

    def loss_fn(logits, targets):
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, cfg.vocab), targets.reshape(-1))

    schedule = None
    if layout.pp > 1:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        stage = PipelineStage(model, pp_rank, layout.pp, device, group=mesh["pp"].get_group())
        # scale_grads: each micro-batch's loss is a mean, the step's gradient their mean
        schedule = Schedule1F1B(stage, n_microbatches=layout.grad_accum, loss_fn=loss_fn, scale_grads=True)

    ckpt_dir = Path(args.checkpoint_dir)
    progress_path = Path(args.progress_file) if args.progress_file else ckpt_dir / "progress.json"
    metrics_path = Path(args.metrics_file) if args.metrics_file else None
    stop_file = Path(args.stop_file) if args.stop_file else None
    if rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)

    tables = markov_tables(cfg.vocab)
    chunk = args.seq_len // layout.cp

    def local(t):
        """This rank's part of a batch: its context-parallel chunk of the sequence."""
        return t[:, cp_rank * chunk:(cp_rank + 1) * chunk].to(device)

    def mean_over_ranks(value: float, flags: list[float] | None = None):
        """All-reduce [value, *flags] (sum). ``value`` is a loss only the last pipeline stage knows,
        the same on tensor-parallel peers: its mean over data- and context-parallel ranks."""
        t = torch.tensor([value if last_stage else 0.0, *(flags or [])], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return float(t[0]) / (world // layout.pp), [float(f) for f in t[1:]]

    def eval_loss() -> float:
        """Loss on 4 fixed sequences, the same whatever the rank and layout: equal before a save and
        after the resume that loads it, whatever the re-sharding (a check that the weights came back)."""
        x, y = synthetic_batch(tables, vocab=cfg.vocab, batch=4, seq_len=args.seq_len, seed=args.seed + 1,
                               step=0, dp_rank=0, micro=0)
        total = 0.0
        with torch.no_grad():
            if schedule is None:
                total = float(loss_fn(model(local(x)), local(y)))
            else:  # one sequence at a time, repeated over the schedule's micro-batches
                for i in range(x.shape[0]):
                    xi, yi = (local(t[i:i + 1]).repeat(layout.grad_accum, 1) for t in (x, y))
                    losses: list = []
                    schedule.eval(xi if first_stage else None, target=yi if last_stage else None, losses=losses) \
                        if first_stage or last_stage else schedule.eval()
                    if last_stage:
                        total += float(torch.stack([torch.as_tensor(v) for v in losses]).mean()) / x.shape[0]
        return mean_over_ranks(total)[0]

    # ---- resume: rank 0 picks the newest complete checkpoint, every rank loads it (re-sharded)
    start, prior = 0, {}
    choice = [None]
    if rank == 0:
        done = complete_checkpoints(ckpt_dir)
        if done:
            choice = [{"step": done[0][0], "path": str(done[0][1]), "marker": read_marker(done[0][1])}]
    dist.broadcast_object_list(choice, src=0)
    resumed_layout = None
    t_restore = None
    if choice[0] is not None:
        t0 = time.perf_counter()
        path = Path(choice[0]["path"])
        if not (path / MARKER).is_file():
            raise BadInput(f"rank {rank} cannot see {path}: the checkpoint folder must be shared by all ranks")
        saved_cfg = choice[0]["marker"].get("model_config")
        if saved_cfg is not None and saved_cfg != cfg.to_dict():
            diff = ", ".join(f"{k} {saved_cfg.get(k)}→{v}" for k, v in cfg.to_dict().items() if saved_cfg.get(k) != v)
            raise BadInput(f"{path} holds a different model ({diff}): resume with the same model arguments "
                           "or use another --checkpoint-dir")
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(choice[0]["step"])
        prior = choice[0]["marker"]
        resumed_layout = prior.get("layout")
        t_restore = time.perf_counter() - t0
        progress_eval = {"eval_loss_at_save": prior.get("eval_loss"), "eval_loss_at_resume": eval_loss()}
    else:
        progress_eval = {}
    resumes = int(prior.get("resumes", -1)) + 1 if choice[0] is not None else 0
    tokens_seen = int(prior.get("tokens_seen", 0))
    tokens_per_step = layout.micro_batch * layout.grad_accum * args.seq_len * layout.dp

    notes = list(args.rehearsal_notes)
    if rank == 0 and args.rehearsal_of:
        print(f"{PROG}: rehearsing the plan's layout {args.rehearsal_of} as {layout.label()} on {world} rank(s)"
              + (": " + "; ".join(args.rehearsal_notes) if args.rehearsal_notes else ""), file=sys.stderr, flush=True)
    if resumed_layout and resumed_layout.get("world_size") != world:
        notes.append(f"re-sharded from {resumed_layout.get('world_size')} ranks ({resumed_layout.get('label')}) "
                     f"to {world} ({layout.label()})")
    elif resumed_layout and resumed_layout.get("label") != layout.label():
        notes.append(f"re-sharded from {resumed_layout.get('label')} to {layout.label()}")
    progress: dict[str, Any] = {
        "schema_version": PROGRESS_SCHEMA, "trainer": PROG, "state": "running", "model": cfg.name,
        "model_config": cfg.to_dict(), "parameters": cfg.parameters(), "step": start, "total_steps": args.steps,
        "world_size": world, "layout": {**layout.to_dict(), "label": layout.label()}, "seq_len": args.seq_len,
        "precision": precision, "device": str(device), "restart": restart, "resumes": resumes,
        "resumed_from_step": start, "resumed_from_layout": resumed_layout, "restore_seconds": t_restore,
        "checkpoint_step": start if choice[0] is not None else None, "checkpoint_seconds": None,
        "checkpoint_bytes": None,
        "tokens_per_second": None, "samples_per_second": None, "loss": None, "tokens_seen": tokens_seen,
        "batch_size_per_rank": layout.micro_batch * layout.grad_accum, "rehearsal_of": args.rehearsal_of,
        "notes": notes, **progress_eval,
    }
    last_progress = [0.0]

    def report(force: bool = False, **kw: Any) -> None:
        progress.update(kw)
        if rank != 0:
            return
        now = time.monotonic()
        if force or now - last_progress[0] >= args.progress_interval_s:
            last_progress[0] = now
            progress["updated_at"] = time.time()
            write_json_atomic(progress_path, progress)

    def checkpoint(step: int) -> None:
        t0 = time.perf_counter()
        path = ckpt_dir / f"step-{step:09d}"
        if rank == 0 and path.exists():  # a torn earlier attempt at the same step
            shutil.rmtree(path, ignore_errors=True)
        dist.barrier()
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(path))
        dist.barrier()  # every rank's shard is on disk before the marker says so
        ev = eval_loss()
        if rank == 0:
            write_json_atomic(path / MARKER, {
                "step": step, "tokens_seen": tokens_seen, "resumes": resumes, "time": time.time(), "eval_loss": ev,
                "model_config": cfg.to_dict(), "layout": {**layout.to_dict(), "label": layout.label(), "world_size": world},
            })
            _prune(ckpt_dir, args.keep)
            size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
            progress["checkpoint_bytes"] = size
        report(force=True, checkpoint_step=step, checkpoint_seconds=time.perf_counter() - t0)

    report(force=True)
    step = start
    stopped = False
    last_ckpt = time.monotonic()
    warm_steps, t_warm = 2, None
    metrics = open(metrics_path, "a") if (metrics_path is not None and rank == 0) else None
    try:
        while step < args.steps:
            lr = args.lr * min(1.0, (step + 1) / max(1, args.warmup_steps))
            for gp in opt.param_groups:
                gp["lr"] = lr
            loss_sum = 0.0
            batches = [synthetic_batch(tables, vocab=cfg.vocab, batch=layout.micro_batch, seq_len=args.seq_len,
                                       seed=args.seed, step=step, dp_rank=dp_rank, micro=micro)
                       for micro in range(layout.grad_accum)]
            if schedule is not None:  # 1F1B over the step's micro-batches (the schedule splits dim 0)
                x = torch.cat([local(b[0]) for b in batches])
                y = torch.cat([local(b[1]) for b in batches])
                losses: list = []
                if first_stage:
                    schedule.step(x, target=y if last_stage else None, losses=losses if last_stage else None)
                elif last_stage:
                    schedule.step(target=y, losses=losses)
                else:
                    schedule.step()
                if last_stage:
                    loss_sum = float(torch.stack([torch.as_tensor(v).detach().float() for v in losses]).mean())
            else:
                for micro, (x, y) in enumerate(batches):
                    model.set_requires_gradient_sync(micro == layout.grad_accum - 1)  # reduce-scatter once a step
                    loss = loss_fn(model(local(x)), local(y))
                    (loss / layout.grad_accum).backward()
                    loss_sum += float(loss.detach()) / layout.grad_accum
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            tokens_seen += tokens_per_step
            if step - start == warm_steps:
                t_warm = time.perf_counter()
            # one small all-reduce per step: the mean loss, and the ranks agree on stop / checkpoint
            want_stop = (stop_file is not None and stop_file.exists()) or (args.stop_at is not None and time.time() >= args.stop_at)
            want_ckpt = rank == 0 and args.checkpoint_interval_s is not None and time.monotonic() - last_ckpt >= args.checkpoint_interval_s
            mean_loss, (n_stop, n_ckpt) = mean_over_ranks(loss_sum, [float(want_stop), float(want_ckpt)])
            want_stop, want_ckpt = n_stop > 0, n_ckpt > 0
            now = time.perf_counter()
            tps = None
            if t_warm is not None and step - start > warm_steps and now > t_warm:
                tps = (step - start - warm_steps) * tokens_per_step / (now - t_warm)
            if metrics is not None:
                metrics.write(json.dumps({"step": step, "loss": mean_loss, "lr": lr, "world_size": world,
                                          "layout": layout.label(), "restart": restart, "resumes": resumes,
                                          "time": time.time()}) + "\n")
                metrics.flush()
            report(step=step, loss=mean_loss, tokens_per_second=tps, tokens_seen=tokens_seen,
                   samples_per_second=None if tps is None else tps / args.seq_len)
            if want_stop and step < args.steps:
                stopped = True
                break
            if step < args.steps and (want_ckpt or (args.checkpoint_every and step % args.checkpoint_every == 0)):
                checkpoint(step)
                last_ckpt = time.monotonic()
        if progress.get("checkpoint_step") != step:
            checkpoint(step)
        report(force=True, step=step, state="stopped" if stopped else "completed")
    finally:
        if metrics is not None:
            metrics.close()
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    if distributed:
        # gloo's threads sometimes abort during interpreter teardown, which torchrun would count as
        # a failed rank and restart; the work is saved, so leave without the C++ static destructors.
        os._exit(0)
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
