"""Layout search over a whole catalog: for every hardware shape × node count, every layout the model can
take, its memory (does it fit?) and its step time — as numpy columns, in one pass.

``cloudfit.llm.predict.candidate_layouts`` / ``predict_layouts`` price a list of ``Layout`` records (µs
each, a Python loop for memory). A catalog search needs ~10⁵–10⁶ layouts, so this module builds the same
candidates as integer columns (``layout_grid``), evaluates the same memory rule vectorised
(``memory_gib``, checked against ``cloudfit.llm.memory.estimate`` in tests; anchored on a profile's measured
peaks per GPU with ``anchored_memory_gib``, checked against ``cloudfit.llm.anchor.apply_memory``) and calls the
predictor's vectorised ``cloudfit.llm.step.step_time`` once for every (shape, nodes, layout) row that fits.

Global batch: ``exact`` (a ``--global-batch`` the user fixed) keeps layouts whose data-parallel degree
divides it; otherwise the batch is a target in sequences and each layout trains ``round(target ÷ dp)``
sequences per data-parallel rank, kept when that lands within −20%…+25% of the target (so 3, 5 or 7 nodes are
not ruled out by a power-of-two batch, and no layout inflates the batch with more ranks than sequences).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cloudfit.llm import hardware as lhw
from cloudfit.llm import memory as mem
from cloudfit.llm.layout import AC_CODE, Layout
from cloudfit.llm.stats import TokenStats
from cloudfit.llm.step import PIPELINE_ZERO, TRAINER
from cloudfit.llm.zoo import LLMShape

AC_NAMES = tuple(AC_CODE)  # index = code
MAX_PP = 64
MAX_CP = 16
MAX_MICRO_BATCH = 8
#: Default global batch in tokens: ~4M for (pre-)training, as Llama 3 began its pre-training
#: (Llama 3 paper, §3.4.1: 4M tokens at 4,096), ~1M for LoRA fine-tuning.
DEFAULT_BATCH_TOKENS = {"full": 2 ** 22, "lora": 2 ** 20}


#: A target global batch (no ``--global-batch``) may be met within this ratio: each layout trains the nearest
#: whole number of sequences per data-parallel rank, and layouts with more ranks than that allows are left out.
BATCH_TOLERANCE = (0.8, 1.25)


def default_global_batch(seq_len: int, finetune: str = "full") -> int:
    """Sequences per optimizer step when the user gives none: a power of two near the default tokens."""
    target = DEFAULT_BATCH_TOKENS.get(finetune, 2 ** 22) / seq_len
    return int(2 ** max(0, round(math.log2(max(target, 1.0)))))


def _divisors(n: int) -> np.ndarray:
    d = np.arange(1, n + 1)
    return d[n % d == 0]


@dataclass(frozen=True)
class Grid:
    """Layouts of one GPU count as columns (same length each)."""

    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    vp: np.ndarray
    dp_replicate: np.ndarray
    dp_shard: np.ndarray
    zero: np.ndarray
    micro_batch: np.ndarray
    grad_accum: np.ndarray
    ac: np.ndarray  # code: 0 none, 1 selective, 2 full

    def __len__(self) -> int:
        return int(self.tp.size)

    @property
    def dp(self) -> np.ndarray:
        return self.dp_replicate * self.dp_shard

    def take(self, idx) -> "Grid":
        return Grid(**{k: getattr(self, k)[idx] for k in self.__dataclass_fields__})

    def layout(self, i: int) -> Layout:
        """Row ``i`` as the predictor's ``Layout`` record."""
        vp = int(self.vp[i])
        return Layout(int(self.dp_replicate[i]), int(self.dp_shard[i]), int(self.zero[i]), int(self.tp[i]),
                      int(self.pp[i]), int(self.cp[i]), vp, int(self.micro_batch[i]), int(self.grad_accum[i]),
                      AC_NAMES[int(self.ac[i])], "interleaved" if vp > 1 else "1f1b")

    @staticmethod
    def concat(grids: list["Grid"]) -> "Grid":
        keys = Grid.__dataclass_fields__
        if not grids:
            return Grid(**{k: np.zeros(0, dtype=np.int64) for k in keys})
        return Grid(**{k: np.concatenate([getattr(g, k) for g in grids]) for k in keys})


def layout_grids(gpus, nvlink_domain, *, heads: int, kv_heads: int, layers: int, seq_len: int, global_batch: int,
                 exact: bool = False, ac_modes: tuple[str, ...] = AC_NAMES,
                 pipeline_zero: int | None = None) -> tuple[Grid, np.ndarray]:
    """Every layout the model can take on each cluster ``k`` of ``gpus[k]`` GPUs with NVLink domains of
    ``nvlink_domain[k]`` GPUs — the rules of ``predict.candidate_layouts``, in its order: tp inside the
    NVLink domain dividing the heads (and splitting the KV heads), pp ≤ layers (≤ 64), cp ≤ 16 dividing
    half the sequence, FSDP (zero 3) without a pipeline and ``pipeline_zero`` with one (default: the stage the
    trainer runs, ``step.PIPELINE_ZERO``: FSDP; Megatron's distributed optimizer is 1),
    micro-batches ≤ 8 dividing the batch per rank, ga ≥ pp with a pipeline, vp ∈ {1, 2}.

    Returns (layouts as columns, cluster index ``k`` of each row); rows of one cluster are contiguous.
    Vectorised over every cluster at once (no Python loop per layout)."""
    G = np.asarray(gpus, dtype=np.int64).reshape(-1)
    D = np.broadcast_to(np.asarray(nvlink_domain, dtype=np.int64), G.shape)
    T = np.array([t for t in range(1, int(D.max(initial=1)) + 1)
                  if heads % t == 0 and (t <= kv_heads or t % kv_heads == 0)], dtype=np.int64)
    P = np.arange(1, min(layers, MAX_PP) + 1, dtype=np.int64)
    C = np.array([c for c in range(1, MAX_CP + 1) if c == 1 or seq_len % (2 * c) == 0], dtype=np.int64)
    prod = T[:, None, None] * P[None, :, None] * C[None, None, :]
    ok = (G[:, None, None, None] % prod[None] == 0) & (T[None, :, None, None] <= D[:, None, None, None])
    k, ti, pi, ci = np.nonzero(ok)
    tp, pp, cp = T[ti], P[pi], C[ci]
    dp = G[k] // (tp * pp * cp)
    if exact:
        good = global_batch % dp == 0
        k, tp, pp, cp, dp = k[good], tp[good], pp[good], cp[good], dp[good]
        per_rank = global_batch // dp
    else:  # a target: the nearest whole number of sequences per rank, within -20%..+25% of it
        per_rank = np.maximum(1, np.floor(global_batch / dp + 0.5).astype(np.int64))
        ratio = per_rank * dp / global_batch
        good = (ratio >= BATCH_TOLERANCE[0]) & (ratio <= BATCH_TOLERANCE[1])
        k, tp, pp, cp, dp, per_rank = k[good], tp[good], pp[good], cp[good], dp[good], per_rank[good]
    M = np.arange(1, MAX_MICRO_BATCH + 1, dtype=np.int64)
    A = np.array([AC_CODE[a] for a in ac_modes], dtype=np.int64)
    V = np.array([1, 2], dtype=np.int64)
    ga = per_rank[:, None] // M[None, :]
    m_ok = (per_rank[:, None] % M[None, :] == 0) & ((pp[:, None] == 1) | (ga >= pp[:, None]))
    v_ok = (V[None, :] == 1) | ((pp[:, None] > 1) & (layers % (2 * pp[:, None]) == 0))
    full = m_ok[:, :, None, None] & v_ok[:, None, None, :] & np.ones(A.size, dtype=bool)[None, None, :, None]
    j, mi, ai, vi = np.nonzero(full)
    dpj, ppj = dp[j], pp[j]
    pz = PIPELINE_ZERO[TRAINER] if pipeline_zero is None else pipeline_zero
    zero = np.where(dpj == 1, 0, np.where(ppj == 1, 3, pz))
    shard = np.where(dpj == 1, 1, dpj)
    grid = Grid(tp=tp[j], pp=ppj, cp=cp[j], vp=V[vi], dp_replicate=np.ones_like(dpj), dp_shard=shard, zero=zero,
                micro_batch=M[mi], grad_accum=ga[j, mi], ac=A[ai])
    return grid, k[j]


def layout_grid(gpus: int, *, nvlink_domain: int, heads: int, kv_heads: int, layers: int, seq_len: int,
                global_batch: int, exact: bool = False, ac_modes: tuple[str, ...] = AC_NAMES,
                pipeline_zero: int | None = None) -> Grid:
    """``layout_grids`` for one cluster of ``gpus`` GPUs."""
    return layout_grids([gpus], [nvlink_domain], heads=heads, kv_heads=kv_heads, layers=layers, seq_len=seq_len,
                        global_batch=global_batch, exact=exact, ac_modes=ac_modes, pipeline_zero=pipeline_zero)[0]


# --------------------------------------------------------------------------------------------
# memory (vectorised twin of cloudfit.llm.memory.estimate)


def memory_gib(st: TokenStats, g: Grid, *, precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
               grad_bytes: int = 2, framework: str | None = None) -> np.ndarray:
    """Peak GiB per GPU of every layout of ``g``: ``cloudfit.llm.memory.total_gib_many`` (the rule of
    ``memory.estimate``, kept in one place)."""
    return mem.total_gib_many(st, tp=g.tp, pp=g.pp, cp=g.cp, vp=g.vp, zero=g.zero, dp_shard=g.dp_shard,
                              micro_batch=g.micro_batch, grad_accum=g.grad_accum, ac_code=g.ac,
                              precision=precision, finetune=finetune, lora_rank=lora_rank, grad_bytes=grad_bytes,
                              framework=framework or TRAINER)


def memory_parts(st: TokenStats, g: Grid, *, precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
                 grad_bytes: int = 2, framework: str | None = None) -> dict:
    """Every memory part (GiB per GPU) of every layout of ``g``: ``cloudfit.llm.memory.parts_gib_many``."""
    return mem.parts_gib_many(st, tp=g.tp, pp=g.pp, cp=g.cp, vp=g.vp, zero=g.zero, dp_shard=g.dp_shard,
                              micro_batch=g.micro_batch, grad_accum=g.grad_accum, ac_code=g.ac,
                              precision=precision, finetune=finetune, lora_rank=lora_rank, grad_bytes=grad_bytes,
                              framework=framework or TRAINER)


def anchored_memory_gib(st: TokenStats, g: Grid, fit=None, **kw) -> np.ndarray:
    """``memory_gib`` with a ``cloudfit.llm.anchor.MemoryFit`` (the stack's measured peaks) applied to every
    layout: ``anchor.anchored_total_gib`` on the parts — what ``anchor.apply_memory`` gives each layout's
    ``memory.estimate``. ``fit`` None: ``memory_gib`` itself."""
    if fit is None or fit.kind == "none":
        return memory_gib(st, g, **kw)
    from cloudfit.llm.anchor import anchored_total_gib

    return np.asarray(anchored_total_gib(memory_parts(st, g, **kw), fit), dtype=float)


# --------------------------------------------------------------------------------------------
# step time over many (hardware, layout) rows


@dataclass(frozen=True)
class HardwareShape:
    """What the step model needs of one VM shape (machine types that agree on it share one)."""

    accelerator: str  # the predictor's canonical name
    gpus_per_node: int
    node_gbps: float
    nvlink_domain: int
    capacity_gib: float
    node_transport: str | None = None  # NCCL's fabric between nodes (catalog.network.FABRICS; None: RDMA-class)


def node_network_gbps(machine_type: str, accelerator: str, gpus_per_node: int, vcpus: float) -> float:
    """GPU-to-GPU Gbit/s of one VM: the machine family's GPU network (A3/A4 NICs), capped by the VM's own
    bandwidth (a 1-GPU a3-highgpu gets 25 Gbps, not the 8-GPU shape's 1,000)."""
    from cloudfit.catalog import hardware as hw

    try:
        fam = lhw.node_gbps(accelerator, machine_type)
    except Exception:  # an unknown family: the VM's own cap
        fam = math.inf
    return float(min(fam, hw.vm_network_gbps(machine_type, accelerator, gpus_per_node, vcpus)))


def evaluate(st: TokenStats, hw: HardwareShape, g: Grid, *, precision: str = "bf16", finetune: str = "full",
             c=None, framework: str | None = None) -> dict:
    """Tokens/s, step seconds, MFU and the breakdown of every layout in ``g`` on ``hw`` (numpy arrays)."""
    return evaluate_rows(st, [hw], np.zeros(len(g), dtype=np.int64), g, precision=precision, finetune=finetune,
                         c=c, framework=framework)


@dataclass
class CatalogSearch:
    """The best layout of every (hardware shape, node count) pair: index [h, n − 1]."""

    hws: list
    tokens_per_second: np.ndarray  # 0 where nothing fits
    mfu: np.ndarray
    memory_gib: np.ndarray  # of the best layout (nan where nothing fits)
    n_layouts: np.ndarray  # candidate layouts
    n_fit: np.ndarray  # layouts that fit in memory
    min_memory_gib: np.ndarray  # smallest per-GPU need among the candidates (inf: no candidate)
    best: dict  # layout columns of the best layout, each [h, n − 1]
    breakdown: dict  # compute_s, tp_s, fsdp_s, dp_s, pp_p2p_s, cp_s, bubble_s, other_s, step_s, each [h, n − 1]
    rows_evaluated: int = 0
    memory_fits: list | None = None  # the MemoryFit (or None) memory was anchored with, per hardware shape

    def layout(self, h: int, nodes: int) -> Layout:
        i = nodes - 1
        return Grid(**{k: v[h, i:i + 1] for k, v in self.best.items()}).layout(0)


_BREAKDOWN = ("compute_s", "tp_s", "fsdp_s", "dp_s", "pp_p2p_s", "cp_s", "bubble_s", "other_s", "step_s")


def constrain(g: Grid, constraints: dict | None) -> np.ndarray:
    """Rows of ``g`` that agree with the degrees a user pinned (``--layout tp=8,ac=full``)."""
    keep = np.ones(len(g), dtype=bool)
    for k, v in (constraints or {}).items():
        if k == "ac":
            keep &= g.ac == AC_CODE[v]
        elif k == "dp":
            keep &= g.dp == v
        elif k == "fsdp":
            keep &= (g.dp_shard == v) & (g.zero >= 1)
        elif k == "zero":
            keep &= g.zero == v
        else:
            keep &= getattr(g, {"mb": "micro_batch", "ga": "grad_accum"}.get(k, k)) == v
    return keep


#: The columns a stack's layout check sees as distinct (the data-parallel sizes, micro-batch and accumulation only
#: as "is there replication / sharding": every stack expresses any size of them).
_STACK_KEYS = ("tp", "pp", "cp", "vp", "zero", "ac")


def stack_mask(g: Grid, layout_ok) -> np.ndarray:
    """Rows of ``g`` a stack runs: ``layout_ok`` (a ``Layout`` → None or why not) is asked once per distinct
    (tp, pp, cp, vp, zero, ac, replicated?, sharded?) combination, on the first row of it — a few hundred
    Python calls for a catalog's ~10⁵–10⁶ rows, the rest is numpy."""
    if not len(g):
        return np.ones(0, dtype=bool)
    key = np.zeros(len(g), dtype=np.int64)  # the combination as one mixed-radix integer: a 1-D unique is fast
    for col in [getattr(g, k) for k in _STACK_KEYS] + [g.dp_replicate > 1, g.dp_shard > 1]:
        c = np.asarray(col, dtype=np.int64)
        key = key * (int(c.max()) + 1) + c
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    sub = {k: getattr(g, k)[first].tolist() for k in Grid.__dataclass_fields__}
    ok = np.array([layout_ok(_RowView(*(sub[k][j] for k in _ROW_FIELDS))) is None for j in range(first.size)],
                  dtype=bool)
    return ok[np.asarray(inv).reshape(-1)]


_ROW_FIELDS = ("dp_replicate", "dp_shard", "zero", "tp", "pp", "cp", "vp", "micro_batch", "grad_accum", "ac")


class _RowView:
    """A grid row with ``Layout``'s attributes (ac and schedule as names), without Layout's validation: what
    ``stack_mask`` hands a stack's ``layout_ok`` (thousands of times per search)."""

    __slots__ = _ROW_FIELDS + ("schedule",)

    def __init__(self, dp_replicate, dp_shard, zero, tp, pp, cp, vp, micro_batch, grad_accum, ac) -> None:
        self.dp_replicate, self.dp_shard, self.zero, self.tp, self.pp, self.cp = dp_replicate, dp_shard, zero, tp, pp, cp
        self.vp, self.micro_batch, self.grad_accum, self.ac = vp, micro_batch, grad_accum, AC_NAMES[ac]
        self.schedule = "interleaved" if vp > 1 else "1f1b"

    def describe(self) -> str:
        return (f"fsdp={self.dp_shard},zero={self.zero},tp={self.tp},pp={self.pp},cp={self.cp},vp={self.vp},"
                f"mb={self.micro_batch},ga={self.grad_accum},ac={self.ac}")


def search_catalog(st: TokenStats, shape: LLMShape, hws: list, max_nodes: int, *, global_batch: int,
                   exact: bool = False, precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
                   constraints: dict | None = None, c=None, framework: str | None = None,
                   memory_fits: list | None = None, memory_limit: float = 1.0,
                   layout_ok=None) -> CatalogSearch:
    """Fastest layout that fits for every hardware shape in ``hws`` × nodes 1..max_nodes, in one pass:
    layouts are enumerated once per distinct (GPU count, NVLink domain), memory once per layout, and the
    step model once over every (shape, nodes, layout) row that fits.

    ``memory_fits``: per hardware shape, the ``cloudfit.llm.anchor.MemoryFit`` its memory is anchored with (the
    stack's measured peaks: ``anchor.memory_fit_for``) or None; memory is then evaluated once per layout and
    distinct fit (``anchored_memory_gib``), and fitting, the best layout's memory and the smallest need all use
    the anchored peak.

    ``layout_ok``: the stack's check (``cloudfit.stacks.base.Stack.layout_ok``, a ``Layout`` → None or why not):
    only layouts it runs are searched (``stack_mask``)."""
    H, N = len(hws), max_nodes
    key_of: dict[tuple[int, int], int] = {}
    pair_key = np.empty(H * N, dtype=np.int64)
    for h, hw in enumerate(hws):
        for n in range(1, N + 1):
            kk = (n * hw.gpus_per_node, hw.nvlink_domain)
            pair_key[h * N + n - 1] = key_of.setdefault(kk, len(key_of))
    keys = np.array(list(key_of), dtype=np.int64).reshape(-1, 2)
    grid, kidx = layout_grids(keys[:, 0], keys[:, 1], heads=shape.heads, kv_heads=shape.kv_heads,
                              layers=shape.layers, seq_len=st.seq_len, global_batch=global_batch, exact=exact,
                              pipeline_zero=PIPELINE_ZERO[framework or TRAINER])
    m = constrain(grid, constraints) if constraints else None
    if layout_ok is not None:
        ok = stack_mask(grid, layout_ok)
        m = ok if m is None else m & ok
    if not (constraints and "ac" in constraints) and _none_is_dominated(st, hws, grid, precision, finetune, c,
                                                                         framework):
        m = (grid.ac != AC_CODE["none"]) if m is None else m & (grid.ac != AC_CODE["none"])
    if m is not None:
        grid, kidx = grid.take(m), kidx[m]
    memg = memory_gib(st, grid, precision=precision, finetune=finetune, lora_rank=lora_rank, framework=framework)
    K = len(key_of)
    counts = np.bincount(kidx, minlength=K)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    kmin = np.full(K, np.inf)
    np.minimum.at(kmin, kidx, memg)
    # expand: every pair gets the rows of its key
    pc = counts[pair_key]
    pair_of_row = np.repeat(np.arange(H * N), pc)
    offs = np.concatenate(([0], np.cumsum(pc)[:-1]))
    row = np.repeat(starts[pair_key] - offs, pc) + np.arange(int(pc.sum()))
    cap = np.array([hw.capacity_gib for hw in hws])
    h_of_row = pair_of_row // N
    anchored = memory_fits is not None and any(f is not None and f.kind != "none" for f in memory_fits)
    if anchored:
        mrow, pmin = _anchored_rows(st, grid, memory_fits, row, h_of_row, pc, offs, memg.shape,
                                    precision=precision, finetune=finetune, lora_rank=lora_rank, framework=framework)
    else:
        mrow = memg[row]
    fits = mrow <= cap[h_of_row] * memory_limit  # memory_limit < 1: layouts must leave that much free
    timed = fits
    if not (constraints and "ac" in constraints):
        timed = _without_full_twins(st, hws, grid, row, pair_of_row, fits, precision, finetune, c, framework)
    n_fit = np.bincount(pair_of_row[fits], minlength=H * N)
    sel = np.flatnonzero(timed)
    r_row, r_pair, r_h = row[sel], pair_of_row[sel], h_of_row[sel]
    tps = np.zeros(H * N)
    mfu = np.zeros(H * N)
    memo = np.full(H * N, np.nan)
    best_row = np.zeros(H * N, dtype=np.int64)
    brk = {k: np.zeros(H * N) for k in _BREAKDOWN}
    if sel.size:
        r = evaluate_rows(st, [hws[i] for i in range(H)], r_h, grid.take(r_row), precision=precision,
                          finetune=finetune, c=c, framework=framework)
        t = r["tokens_per_second"]
        demoted = mem.crowded(t, mrow[sel], cap[r_h], r_pair)  # headroom: see memory.ROOMY_FRACTION
        order = np.lexsort((np.arange(t.size), -t, demoted, r_pair))
        first = order[np.concatenate(([True], r_pair[order][1:] != r_pair[order][:-1]))]
        p = r_pair[first]
        tps[p], mfu[p], memo[p], best_row[p] = t[first], r["mfu"][first], mrow[sel[first]], r_row[first]
        for k in _BREAKDOWN:
            brk[k][p] = np.broadcast_to(r[k], t.shape)[first]
    shape2 = (H, N)
    best = {k: getattr(grid, k)[best_row].reshape(shape2) if len(grid) else np.ones(shape2, dtype=np.int64)
            for k in Grid.__dataclass_fields__}
    need = pmin.reshape(shape2) if anchored else kmin[pair_key].reshape(shape2)
    return CatalogSearch(list(hws), tps.reshape(shape2), mfu.reshape(shape2), memo.reshape(shape2),
                         pc.reshape(shape2), n_fit.reshape(shape2), need, best,
                         {k: v.reshape(shape2) for k, v in brk.items()}, int(sel.size),
                         list(memory_fits) if anchored else None)


def _anchored_rows(st, grid, memory_fits, row, h_of_row, pc, offs, shape, *, precision, finetune, lora_rank,
                   framework):
    """(each row's anchored peak, each pair's smallest): one memory column per distinct fit of
    ``memory_fits`` (per hardware shape), each row read from its shape's."""
    distinct: dict = {}
    fit_of_h = np.array([distinct.setdefault(f, len(distinct)) for f in memory_fits], dtype=np.int64)
    parts = memory_parts(st, grid, precision=precision, finetune=finetune, lora_rank=lora_rank, framework=framework)
    from cloudfit.llm.anchor import anchored_total_gib

    cols = np.stack([np.broadcast_to(np.asarray(anchored_total_gib(parts, f), dtype=float), shape)
                     for f in distinct])
    mrow = cols[fit_of_h[h_of_row], row]
    pmin = np.full(pc.size, np.inf)
    nz = pc > 0
    if nz.any():
        pmin[nz] = np.minimum.reduceat(mrow, offs[nz])
    return mrow, pmin


def _without_full_twins(st, hws, grid, row, pair_of_row, fits, precision, finetune, c, framework):
    """``fits`` less the ``ac=full`` rows whose ``selective`` twin fits: full recomputes the forward, so where
    the step model prices it no faster (probed), such a row cannot win and is not timed."""
    full = fits & (grid.ac[row] == AC_CODE["full"])
    if not full.any() or not _never_faster(st, hws, grid, "full", "selective", precision, finetune, c, framework):
        return fits
    key = _twin_key(grid, np.zeros(len(grid), dtype=np.int64))[row] + pair_of_row * _TWIN_SPAN
    sel_fit = fits & (grid.ac[row] == AC_CODE["selective"])
    fi = np.flatnonzero(full)
    timed = fits.copy()
    ref = np.sort(key[sel_fit])  # (np.isin would import numpy.ma through np.unique: ~30 ms at start-up)
    at = np.minimum(np.searchsorted(ref, key[fi]), max(ref.size - 1, 0))
    if ref.size:
        timed[fi[ref[at] == key[fi]]] = False
    return timed


def _none_is_dominated(st, hws, grid: Grid, precision: str, finetune: str, c, framework=None) -> bool:
    """Whether ``ac=none`` can never win: the step model prices it no faster than ``ac=selective`` (probed on
    every hardware shape with a sharded and a pipelined layout of the grid), and selective never needs more
    memory (``act_bytes`` per token: none ≥ selective). Then every ``none`` row is dominated by its
    ``selective`` twin and is dropped before the step model runs."""
    if st.act_bytes[0] < st.act_bytes[1]:
        return False
    return _never_faster(st, hws, grid, "none", "selective", precision, finetune, c, framework)


def _never_faster(st, hws, grid: Grid, slow: str, fast: str, precision: str, finetune: str, c,
                  framework=None) -> bool:
    """Whether layouts with ``ac=slow`` step no faster than their ``ac=fast`` twins (probed as above)."""
    if not hws or len(grid) == 0:
        return False
    probe = [int(i) for i in (np.flatnonzero(grid.pp == 1)[:1].tolist() + np.flatnonzero(grid.pp > 1)[:1].tolist())]
    H, m = len(hws), len(probe)
    g = grid.take(np.tile(np.array(probe * 2), H))  # per shape: the probes with ``slow``, then with ``fast``
    g = Grid(**{**{k: getattr(g, k) for k in Grid.__dataclass_fields__},
                "ac": np.tile(np.array([AC_CODE[slow]] * m + [AC_CODE[fast]] * m), H)})
    r = evaluate_rows(st, hws, np.repeat(np.arange(H), 2 * m), g, precision=precision, finetune=finetune, c=c,
                      framework=framework)
    t = np.asarray(r["step_s"]).reshape(H, 2, m)
    return bool((t[:, 0] >= t[:, 1]).all())


_TWIN_SPAN = 129 * (MAX_PP + 1) * (MAX_CP + 1) * 3 * (MAX_MICRO_BATCH + 1)


def _twin_key(g: Grid, owner: np.ndarray) -> np.ndarray:
    """One integer per (owner, layout without its ``ac``): equal for the ac twins of one layout."""
    k = owner.astype(np.int64)
    for col, size in ((g.tp, 129), (g.pp, MAX_PP + 1), (g.cp, MAX_CP + 1), (g.vp, 3), (g.micro_batch, MAX_MICRO_BATCH + 1)):
        k = k * size + col
    return k


def evaluate_rows(st: TokenStats, hws: list, h: np.ndarray, g: Grid, *, precision: str = "bf16",
                  finetune: str = "full", c=None, framework: str | None = None) -> dict:
    """``evaluate`` for rows on different hardware shapes: row i runs layout ``g[i]`` on ``hws[h[i]]``. Every
    row is priced with the constants of ``framework`` (default: cloudfit's own trainer, the stack ``launch``
    runs), whatever its layout."""
    from cloudfit.llm import predict as pr
    from cloudfit.llm.step import stack_args, step_time

    c = c or pr.constants()
    fw = pr._framework(None, framework)
    accs = [lhw.get(hw.accelerator) for hw in hws]
    peak_h = np.array([lhw.peak_tflops(hw.accelerator, precision) for hw in hws])
    peak16_h = np.array([lhw.peak_tflops(hw.accelerator, "bf16") for hw in hws])
    eff = np.array([c.efficiency(a.name, precision, a.memory_bandwidth_gbps / pk, fw) for a, pk in zip(accs, peak_h)])
    eff16 = np.array([c.efficiency(a.name, "bf16", a.memory_bandwidth_gbps / pk, fw) for a, pk in zip(accs, peak16_h)])
    col = lambda vals: np.asarray(vals, dtype=float)[h]  # noqa: E731
    stack = {k: v[0] for k, v in stack_args(c, [fw], fp8=float(precision == "fp8")).items()}
    peak = peak_h[h]
    out = step_time(**pr._model_args(st), tp=g.tp, pp=g.pp, cp=g.cp, vp=g.vp, dp_replicate=g.dp_replicate,
                    dp_shard=g.dp_shard, zero=g.zero, micro_batch=g.micro_batch, grad_accum=g.grad_accum,
                    ac_code=g.ac, peak_tflops=peak, efficiency=eff[h], attn_peak_tflops=peak16_h[h],
                    attn_efficiency=eff16[h], memory_gbs=col([a.memory_bandwidth_gbps for a in accs]),
                    intra_gbs=col([lhw.intra_gbps(a.name) for a in accs]), node_gbps=col([hw.node_gbps for hw in hws]),
                    gpus_per_node=col([hw.gpus_per_node for hw in hws]),
                    nvlink_domain=col([hw.nvlink_domain for hw in hws]), **stack, c=c, lora=finetune == "lora",
                    node_transport=None if all(hw.node_transport is None for hw in hws) else
                    np.array([hw.node_transport or "rdma" for hw in hws], dtype=object)[h])
    gpus = (g.tp * g.pp * g.cp * g.dp).astype(float)
    tokens = (g.micro_batch * g.grad_accum * g.dp).astype(float) * st.seq_len
    out["tokens_per_second"] = tokens / out["step_s"]
    out["mfu"] = out["tokens_per_second"] * st.flops_per_token / (gpus * peak * 1e12)
    return out


def rank_layouts(st: TokenStats, shape: LLMShape, hw: HardwareShape, nodes: int, *, global_batch: int,
                 exact: bool = False, precision: str = "bf16", finetune: str = "full", lora_rank: int = 16,
                 top: int = 5, constraints: dict | None = None, c=None, framework: str | None = None,
                 memory_fit=None, layout_ok=None) -> list[dict]:
    """The ``top`` fastest layouts that fit on ``nodes`` × ``hw`` (predicted tokens/s, MFU, memory), best first;
    ``memory_fit``: the stack's measured peaks (``anchored_memory_gib``), as ``search_catalog`` applied them."""
    gpus = nodes * hw.gpus_per_node
    g = layout_grid(gpus, nvlink_domain=hw.nvlink_domain, heads=shape.heads, kv_heads=shape.kv_heads,
                    layers=shape.layers, seq_len=st.seq_len, global_batch=global_batch, exact=exact,
                    pipeline_zero=PIPELINE_ZERO[framework or TRAINER])
    memg = anchored_memory_gib(st, g, memory_fit, precision=precision, finetune=finetune, lora_rank=lora_rank,
                               framework=framework)
    ok = (memg <= hw.capacity_gib) & constrain(g, constraints)
    if layout_ok is not None:
        ok &= stack_mask(g, layout_ok)
    if _none_is_dominated(st, [hw], g, precision, finetune, c, framework):
        ok &= g.ac != AC_CODE["none"]
    keep = np.flatnonzero(ok)
    if not keep.size:
        return []
    sub = g.take(keep)
    r = evaluate(st, hw, sub, precision=precision, finetune=finetune, c=c, framework=framework)
    demoted = mem.crowded(r["tokens_per_second"], memg[keep], hw.capacity_gib)  # as search_catalog picks
    order = np.lexsort((memg[keep], -r["tokens_per_second"], demoted))[:top]
    out = []
    for i in order:
        lay = sub.layout(int(i))
        out.append({"layout": lay.describe(), "tokens_per_second": float(r["tokens_per_second"][i]),
                    "mfu": float(r["mfu"][i]), "memory_gib_per_device": float(memg[keep][i]),
                    "step_s": float(r["step_s"][i]), "global_batch": lay.global_batch})
    return out
