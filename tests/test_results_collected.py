"""bench/RESULTS.md is assembled from the per-benchmark parts by bench/collect.py: a section written into
RESULTS.md alone is lost at the next assembly (three of this project's sections were, once), so the file must be
exactly what the parts give."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO


def test_results_md_is_what_the_parts_assemble():
    spec = importlib.util.spec_from_file_location("bench_collect", REPO / "bench" / "collect.py")
    collect = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect)
    assert (REPO / "bench" / "RESULTS.md").read_text() == collect.assemble(), (
        "bench/RESULTS.md differs from its parts: write the section into the bench/RESULTS_*.md part its script "
        "owns, then run `python bench/collect.py`")
