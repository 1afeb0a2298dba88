"""Grouped cross-validation of the LLM step model on the public runs, against a constant-MFU baseline.

Schemes (every held-out group gets constants fitted without it):
- ``leave-model-size-out``: each of vTrain's four multi-node GPT sizes held out in turn; scored on its rows.
- ``leave-accelerator-out``: each accelerator of Megatron-Bridge + llm-foundry held out (all its rows in
  every source leave the training set); scored on that accelerator's Megatron-Bridge + llm-foundry rows.
Metrics: tokens/s MAPE and median APE, for the model and for the constant-MFU baseline (one MFU per
accelerator × precision, the geometric mean over the training rows of the same source, else of all sources);
ranking inside each vTrain model × GPU-count group (Spearman ρ and top-1 regret: how much slower the
measured run of the predicted-best layout is than the measured best); memory: every published run must be
predicted to fit.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from cloudfit.llm import data
from cloudfit.llm import fit as fit_mod
from cloudfit.llm import memory as mem
from cloudfit.llm import hardware as lhw
from cloudfit.llm.stats import token_stats


def _mfu(t: data.Table) -> np.ndarray:
    return t.measured * t.flops_per_token / (t.gpus * t.peak * 1e12)


def baseline(train: data.Table, test: data.Table) -> np.ndarray:
    """Constant-MFU prediction of ``test`` from ``train``."""
    mfu = np.log(_mfu(train))
    src_tr, src_te = train.column("source"), test.column("source")
    keys_tr = np.array(train.keys)
    out = np.empty(len(test.rows))
    for i, (k, s) in enumerate(zip(test.keys, src_te)):
        m = (keys_tr == k) & (src_tr == s)
        if not m.any():
            m = keys_tr == k
        if not m.any():
            m = np.ones(len(keys_tr), bool)
        out[i] = math.exp(mfu[m].mean())
    return out * test.gpus * test.peak * 1e12 / test.flops_per_token


def _scores(pred: np.ndarray, meas: np.ndarray) -> dict:
    ape = np.abs(pred - meas) / meas
    return {"n": int(len(meas)), "mape": float(ape.mean()), "mdape": float(np.median(ape))}


def _spearman(a, b) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def ranking(t: data.Table, pred: np.ndarray) -> dict:
    """Spearman ρ and top-1 regret inside each vTrain model × GPU-count group."""
    out = {}
    models, gpus = t.column("model"), t.gpus
    for key in sorted({(m, int(g)) for m, g in zip(models, gpus)}):
        m = (models == key[0]) & (gpus == key[1])
        meas, p = t.measured[m], pred[m]
        best = meas.max()
        chosen = meas[int(np.argmax(p))]
        out[f"{key[0]}@{key[1]}"] = {"n": int(m.sum()), "spearman": _spearman(p, meas),
                                     "top1_regret": float((best - chosen) / best),
                                     "best_vs_worst": float(best / meas.min())}
    return out


def memory_check(t: data.Table) -> dict:
    """Predicted peak memory of every published run against its GPU's capacity."""
    worst, fails = 0.0, []
    for r in t.rows:
        st = token_stats(data.row_shape(r), int(r["seq_len"]))
        lay = data.row_layout(r)
        acc = lhw.get(r["accelerator"])
        e = mem.estimate(st, lay, capacity_gib=float(acc.memory_gib),
                         precision="bf16" if r["precision"] == "fp16" else r["precision"], finetune=r["finetune"],
                         framework=r["framework"])
        worst = max(worst, e.total_gib / e.capacity_gib)
        if not e.fits:
            fails.append(f"{r['source']} {r['model']} {r['accelerator']} {lay.describe()}: {e.total_gib:.1f} GiB")
    return {"rows": len(t.rows), "predicted_not_to_fit": len(fails), "worst_fraction_of_capacity": worst,
            "examples": fails[:10]}


def generation_hops(t: data.Table, progress: Callable[[str], None] | None = None) -> dict:
    """Leave-one-generation-out: every row of each GPU generation that has older ones in the table (Hopper,
    Blackwell) predicted from constants fitted on the older generations' rows only. Returns {generation: (training
    rows mask, held-out rows mask, predicted tokens/s of the held-out rows)}; their log(measured ÷ predicted) is the error of extrapolating to
    a GPU with no public run, what ``Constants.band_extrapolated`` is made of."""
    gen = np.array([lhw.generation(k.split("/")[0]) for k in t.keys])
    out = {}
    for g in sorted(set(gen)):
        if not (gen < g).any():
            continue
        name = lhw.get(t.keys[int(np.flatnonzero(gen == g)[0])].split("/")[0]).arch.replace(" Ultra", "")
        if progress:
            progress(f"leave-one-generation-out: {name} from older rows")
        c = fit_mod.fit(t.subset(gen < g))
        held = gen == g
        out[name] = (gen < g, held, data.predict_table(t.subset(held), c)["tokens_per_second"])
    return out


def run(progress: Callable[[str], None] | None = None) -> dict:
    """The full grouped evaluation (≈ 10 fits; a minute or two on 2 cores)."""
    say = progress or (lambda s: None)
    t = data.table()
    src = t.column("source")
    models = t.column("model")
    accs = np.array([k.split("/")[0] for k in t.keys])
    report: dict = {"rows": len(t.rows), "schemes": {}, "flops_convention":
                    "6 x matmul params (LM head in, input embedding out) + causal-half attention"}
    log_ratios = []

    # leave-model-size-out on vTrain multi-node
    vt = src == "vtrain-multi"
    pred_loso = np.full(len(t.rows), np.nan)
    base_loso = np.full(len(t.rows), np.nan)
    groups = {}
    for g in sorted(set(models[vt])):
        say(f"leave-model-size-out: {g}")
        test = vt & (models == g)
        tr = t.subset(~test)
        c = fit_mod.fit(tr)
        te = t.subset(test)
        p = data.predict_table(te, c)["tokens_per_second"]
        b = baseline(tr, te)
        pred_loso[test], base_loso[test] = p, b
        groups[g] = {"model": _scores(p, te.measured), "constant_mfu": _scores(b, te.measured)}
        log_ratios += list(np.log(te.measured / p))
    m = vt
    report["schemes"]["leave-model-size-out (vTrain multi-node)"] = {
        "model": _scores(pred_loso[m], t.measured[m]), "constant_mfu": _scores(base_loso[m], t.measured[m]),
        "groups": groups}
    report["ranking"] = {"cross-validated": ranking(t.subset(m), pred_loso[m])}

    # leave-accelerator-out on Megatron-Bridge + llm-foundry
    pub = (src == "megatron-bridge") | (src == "llm-foundry")
    pred_lao = np.full(len(t.rows), np.nan)
    base_lao = np.full(len(t.rows), np.nan)
    groups = {}
    for a in sorted(set(accs[pub])):
        say(f"leave-accelerator-out: {a}")
        test = pub & (accs == a)
        tr = t.subset(accs != a)
        c = fit_mod.fit(tr)
        te = t.subset(test)
        p = data.predict_table(te, c)["tokens_per_second"]
        b = baseline(tr, te)
        pred_lao[test], base_lao[test] = p, b
        groups[a] = {"model": _scores(p, te.measured), "constant_mfu": _scores(b, te.measured)}
        log_ratios += list(np.log(te.measured / p))
    report["schemes"]["leave-accelerator-out (Megatron-Bridge + llm-foundry)"] = {
        "model": _scores(pred_lao[pub], t.measured[pub]), "constant_mfu": _scores(base_lao[pub], t.measured[pub]),
        "by_source": {s: {"model": _scores(pred_lao[pub & (src == s)], t.measured[pub & (src == s)]),
                          "constant_mfu": _scores(base_lao[pub & (src == s)], t.measured[pub & (src == s)])}
                      for s in ("megatron-bridge", "llm-foundry")},
        "groups": groups}

    say("in-sample fit on every row")
    c_all = fit_mod.fit(t)
    p_all = data.predict_table(t, c_all)["tokens_per_second"]
    report["in_sample"] = {str(s): _scores(p_all[src == s], t.measured[src == s]) for s in sorted(set(src))}
    report["ranking"]["in-sample"] = ranking(t.subset(vt), p_all[vt])
    report["memory"] = memory_check(t)
    report["band_log_quantiles"] = list(fit_mod.band_from_residuals(np.array(log_ratios)))
    lo, hi = report["band_log_quantiles"]
    lr = np.array(log_ratios)
    report["band_coverage_cv"] = float(((lr >= lo) & (lr <= hi)).mean())

    # the band of an accelerator or precision without public runs: the generation hops' residuals
    hops = generation_hops(t, say)
    hop_res = {g: np.log(t.measured[m] / p) for g, (_, m, p) in hops.items()}
    base = {g: baseline(t.subset(tr), t.subset(m)) for g, (tr, m, _) in hops.items()}
    meas = np.concatenate([t.measured[m] for _, m, _ in hops.values()])
    report["schemes"]["leave-one-generation-out (Hopper from Ampere, Blackwell from ≤ Hopper)"] = {
        "model": _scores(np.concatenate([p for _, _, p in hops.values()]), meas),
        "constant_mfu": _scores(np.concatenate(list(base.values())), meas),
        "groups": {g: {"model": _scores(p, t.measured[m]), "constant_mfu": _scores(base[g], t.measured[m])}
                   for g, (_, m, p) in hops.items()}}
    # the measured band widened on both sides by the margin that holds 80% of the hops' residuals; its check:
    # each generation's coverage by the margin calibrated on the other hop alone
    band = (lo, hi)
    w = fit_mod.widen_to_cover(band, np.concatenate(list(hop_res.values())))
    report["band_extrapolated_log_quantiles"] = [lo - w, hi + w]
    report["band_extrapolated_coverage_leave_one_hop_out"] = {
        g: float(np.mean((r >= lo - wo) & (r <= hi + wo)))
        for g, r in hop_res.items()
        for wo in [fit_mod.widen_to_cover(band, np.concatenate([v for h, v in hop_res.items() if h != g]))]}
    return report
