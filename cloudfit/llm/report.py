"""Markdown rendering of an LLM evaluation report (``cloudfit.llm.evaluate.run``)."""

from __future__ import annotations


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def markdown(rep: dict) -> str:
    out = []
    out.append("| scheme | rows | cloudfit MAPE / median APE | constant-MFU MAPE / median APE |")
    out.append("|---|---:|---:|---:|")
    for name, blk in rep["schemes"].items():
        m, b = blk["model"], blk["constant_mfu"]
        out.append(f"| {name} | {m['n']} | {_pct(m['mape'])} / {_pct(m['mdape'])} | "
                   f"{_pct(b['mape'])} / {_pct(b['mdape'])} |")
        for g, gb in blk["groups"].items():
            out.append(f"| &nbsp;&nbsp;held out: {g} | {gb['model']['n']} | {_pct(gb['model']['mape'])} | "
                       f"{_pct(gb['constant_mfu']['mape'])} |")
        for s, sb in blk.get("by_source", {}).items():
            out.append(f"| &nbsp;&nbsp;source: {s} | {sb['model']['n']} | {_pct(sb['model']['mape'])} | "
                       f"{_pct(sb['constant_mfu']['mape'])} |")
    out.append("")
    out.append("Layout ranking inside vTrain's model × GPU-count groups (leave-model-size-out predictions):")
    out.append("")
    out.append("| group | layouts | Spearman ρ | top-1 regret | measured best ÷ worst |")
    out.append("|---|---:|---:|---:|---:|")
    for g, r in rep["ranking"]["cross-validated"].items():
        out.append(f"| {g} | {r['n']} | {r['spearman']:.2f} | {_pct(r['top1_regret'])} | {r['best_vs_worst']:.2f}× |")
    mem = rep["memory"]
    out.append("")
    out.append(f"Memory: {mem['rows'] - mem['predicted_not_to_fit']} of {mem['rows']} published runs predicted to fit "
               f"(highest predicted use {_pct(mem['worst_fraction_of_capacity'])} of the GPU's memory).")
    ins = rep["in_sample"]
    out.append("In-sample MAPE (fit on every row): " + ", ".join(f"{s} {_pct(v['mape'])} (n={v['n']})"
                                                               for s, v in ins.items()) + ".")
    lo, hi = rep["band_log_quantiles"]
    out.append(f"Band (10–90% of cross-validated log(measured ÷ predicted)): ×{2.718281828 ** lo:.2f} … "
               f"×{2.718281828 ** hi:.2f}; coverage on the CV residuals {_pct(rep['band_coverage_cv'])}.")
    if "band_extrapolated_log_quantiles" in rep:
        lo, hi = rep["band_extrapolated_log_quantiles"]
        cov = rep["band_extrapolated_coverage_leave_one_hop_out"]
        out.append(f"Band of an accelerator or precision without public runs (the band above widened on both sides until "
                   f"it holds 80% of the leave-one-generation-out log(measured ÷ predicted)): ×{2.718281828 ** lo:.2f} … "
                   f"×{2.718281828 ** hi:.2f}; coverage of each generation by the margin calibrated on the other hop: "
                   + ", ".join(f"{g} {_pct(v)}" for g, v in cov.items()) + ".")
    if "seconds" in rep:
        out.append(f"Evaluation took {rep['seconds']} s.")
    return "\n".join(out)
