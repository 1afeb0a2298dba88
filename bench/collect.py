"""Assemble bench/RESULTS.md from the per-benchmark result files (each written by its own script).

    python bench/collect.py
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = [  # (file, the script that writes it)
    ("RESULTS_profiling.md", "bench/profiling.py"),
    ("RESULTS_perf.md", "bench/perf_eval.py"),
    ("RESULTS_floor.md", "bench/data_floor.py"),
    ("RESULTS_spot.md", "bench/spot_validation.py"),
    ("RESULTS_recommend.md", "bench/recommend_regret.py, bench/startup.py, bench/search_evals.py"),
    ("RESULTS_active.md", "bench/active_search.py"),
    ("RESULTS_executors.md", "bench/budget_sim.py, bench/stockout_fallback.py, bench/plan_fuzz.py"),
    ("RESULTS_llm.md", "bench/llm_eval.py, bench/llm_speed.py"),
    ("RESULTS_sailor_gh200.md", "bench/sailor_gh200.py"),
    ("RESULTS_llm_recommend.md", "bench/llm_recommend_time.py, bench/llm_regret.py"),
    ("RESULTS_llm_anchor.md", "bench/llm_anchor.py, bench/llm_anchor_misses.py"),
    ("RESULTS_recommend_speed.md", "bench/recommend_speed.py, bench/recommend_equivalence.py"),
    ("RESULTS_multicloud.md", "bench/multicloud.py"),
    ("RESULTS_multinode.md", "bench/multinode.py"),
    ("RESULTS_checkpoint.md", "bench/dcp_async_save.py"),
    ("RESULTS_gpu.md", "bench/device/gpu_session.sh, bench/h100_zoo.py"),
    ("RESULTS_generation.md", "bench/generation.py, bench/generation_variants.py, bench/h100_zoo.py"),
    ("RESULTS_llm_generation.md", "bench/llm_generation.py, scripts/fit_llm.py"),
    ("RESULTS_zoo.md", "bench/h100_zoo.py, bench/perf_eval.py"),
]

HEADER = """# Benchmark results

Every number here is written by a script in `bench/` (named in each section with its command, date and
machine); `python bench/collect.py` reassembles this file from the sections. Tests check correctness;
these benchmarks measure speed and accuracy.
"""


def assemble() -> str:
    """RESULTS.md's text from the parts (what ``main`` writes)."""
    out = [HEADER]
    for name, script in PARTS:
        p = HERE / name
        if not p.exists():
            out.append(f"\n(missing: run `python {script}`)\n")
            continue
        text = p.read_text().strip()
        # demote the parts' top headings one level under this file's title
        lines = [("#" + ln) if ln.startswith("#") else ln for ln in text.splitlines()]
        out.append("\n" + "\n".join(lines) + "\n")
    return "\n".join(out)


def main() -> None:
    (HERE / "RESULTS.md").write_text(assemble())
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
