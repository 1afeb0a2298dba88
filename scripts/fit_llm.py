"""Fit cloudfit/llm/calibration.json from data/llm/measurements.csv (deterministic), with the prediction band
from the grouped cross-validation residuals, and the band of an accelerator or precision without public runs from
the leave-one-generation-out residuals (Hopper from ≤ Ampere, Blackwell from ≤ Hopper).

    python scripts/fit_llm.py                      # ~2 minutes on 2 cores (10 CV fits + the final one)
    python scripts/fit_llm.py --report eval.json   # also keep the evaluation report (bench/llm_eval.py format)
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cloudfit.llm import data, evaluate, fit  # noqa: E402
from cloudfit.llm.predict import CALIBRATION_PATH  # noqa: E402


def main() -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser()
    ap.add_argument("--report", type=Path)
    args = ap.parse_args()
    rep = evaluate.run(progress=lambda s: sys.stderr.write(f"  {s}\n"))
    t = data.table()
    c = fit.fit(t)
    c = replace(c, band=tuple(rep["band_log_quantiles"]), band_extrapolated=tuple(rep["band_extrapolated_log_quantiles"]))
    digest = hashlib.sha256(data.MEASUREMENTS.read_bytes()).hexdigest()
    cv = {name: {"mape": blk["model"]["mape"], "constant_mfu_mape": blk["constant_mfu"]["mape"]}
          for name, blk in rep["schemes"].items()}
    cv["band_extrapolated_coverage_leave_one_hop_out"] = rep["band_extrapolated_coverage_leave_one_hop_out"]
    if args.report:
        args.report.write_text(json.dumps(rep, indent=1, default=str) + "\n", encoding="utf-8")
    p = fit.write(c, CALIBRATION_PATH, rows=len(t.rows), source_digest=digest, cv=cv)
    sys.stderr.write(f"wrote {p.relative_to(ROOT)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
