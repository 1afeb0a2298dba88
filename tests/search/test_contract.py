"""One contract for every Searcher: where exhaustive search is possible, all reach its optimum."""

from __future__ import annotations

import numpy as np
import pytest

from cloudfit import catalog
from cloudfit.search import Problem, get_searcher
from cloudfit.search.space import build_space
from cloudfit.workload import make_workload

SEARCHERS = [("exhaustive", {}), ("bayes", {"n_trials": 300, "seed": 0}), ("bayes", {"n_trials": 300, "seed": 1})]

CASES = [
    dict(model="resnet50", epochs=30, dataset_size=1_281_167, deadline="24h", accelerators=["V100", "T4", "L4"], max_nodes=8),
    dict(model="resnet50", epochs=30, dataset_size=1_281_167, budget="120", accelerators=["A100", "L4"], max_nodes=8),
    dict(model="resnet50", epochs=10, dataset_size=1_281_167, deadline="3h", regions=["us-central1"], max_nodes=6),
]


@pytest.fixture(scope="module")
def spaces():
    from cloudfit.profiling.io import load_profile, resolve_profile

    prof = load_profile(resolve_profile("resnet50"))
    cat = catalog.load()
    out = []
    for kw in CASES:
        w = make_workload(**kw)
        out.append((w, build_space(w, prof, cat)))
    return out


@pytest.mark.parametrize("name, options", SEARCHERS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_searcher_reaches_the_exhaustive_optimum(spaces, case, name, options):
    w, space = spaces[case]
    problem = Problem.of(w)
    oracle = get_searcher("exhaustive").search(space, problem)
    res = get_searcher(name, **options).search(space, problem)
    assert res.order.size > 0 and res.evaluations > 0
    a = space.assess(problem)
    key = np.asarray(a.cost_usd if w.objective == "cost" else a.hours)
    if name == "exhaustive":
        assert key[res.order[0]] == pytest.approx(key[oracle.order[0]], rel=1e-9)
    else:  # near-ties (8×8 vs 4×16 A100: 0.8% apart, start-up grows with nodes) may go either way in 150 trials
        assert key[res.order[0]] <= key[oracle.order[0]] * 1.01
    # whatever it returns is feasible
    assert set(res.order.tolist()) <= set(oracle.order.tolist())
