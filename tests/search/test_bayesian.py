"""The Bayesian searcher beyond TPE: a repeated proposal prices a fresh point, and the incumbent's
neighbourhood is polished after the study."""

from __future__ import annotations

import numpy as np

from cloudfit.search.bayesian import _neighbours

GPUS = {"a3-highgpu-1g/1xH100": ("H100", 1), "a3-highgpu-2g/2xH100": ("H100", 2),
        "a3-highgpu-8g/8xH100": ("H100", 8), "g2-standard-8/1xL4": ("L4", 1)}


def _groups(keys):
    return {k: np.arange(1) for k in keys}


def test_neighbours_are_the_same_gpus_in_other_vm_sizes_and_adjacent_node_counts():
    offered = [(s, n, sp) for s in GPUS for n in range(1, 9) for sp in (False, True)]
    nb = _neighbours(("a3-highgpu-2g/2xH100", 2, True), _groups(offered), GPUS, 8, True)
    assert ("a3-highgpu-2g/2xH100", 1, True) in nb and ("a3-highgpu-2g/2xH100", 3, True) in nb
    assert ("a3-highgpu-2g/2xH100", 2, False) in nb  # the other pricing mode
    assert ("a3-highgpu-1g/1xH100", 4, True) in nb  # the same 4 GPUs in 1-GPU VMs
    assert ("a3-highgpu-8g/8xH100", 1, True) in nb  # and in one 8-GPU VM (nearest from above)
    assert all(GPUS[s][0] == "H100" for s, _, _ in nb)  # never another accelerator
    assert len(set(nb)) == len(nb)


def test_neighbours_of_an_odd_gpu_count_round_half_both_ways():
    """3 L4s in 3 × g2-standard-8: half is 1.5 GPUs, so the bigger 1-L4 VM at 1 *and* 2 nodes are
    neighbours (the ceiling was once taken of the truncated half, which dropped 2)."""
    gpus = {"g2-standard-8/1xL4": ("L4", 1), "g2-standard-16/1xL4": ("L4", 1)}
    offered = [(s, n, False) for s in gpus for n in range(1, 9)]
    nb = _neighbours(("g2-standard-8/1xL4", 3, False), _groups(offered), gpus, 8, False)
    assert [n for s, n, _ in nb if s == "g2-standard-16/1xL4"] == [1, 2, 3, 6]


def test_neighbours_stay_inside_the_offered_space():
    offered = [("a3-highgpu-8g/8xH100", 1, True), ("a3-highgpu-8g/8xH100", 2, True)]
    nb = _neighbours(("a3-highgpu-8g/8xH100", 1, True), _groups(offered), GPUS, 8, True)
    assert nb == [("a3-highgpu-8g/8xH100", 2, True)]
    assert _neighbours(("g2-standard-8/1xL4", 1, False), _groups([]), GPUS, 1, False) == []


def test_every_seed_reaches_the_optimum_where_the_vm_size_decides_it():
    """resnet50, 3 h deadline in us-central1: with TPE alone the seed-1 300-trial study once stopped at a 2×H100 VM
    while one 1×H100 VM was 12% cheaper (it priced 143 points: the other trials repeated points it had seen).
    Since the transition prior (issue 33) the optimum is one spot VM of 8 L4, 3 VMs of 4 T4 1.9% dearer and
    2 VMs of 4 L4 4% dearer: the VM size and a near-tie between two accelerators decide it, and seed 1 stopped
    at the T4s until the polish started from every accelerator's best point."""
    from cloudfit import catalog
    from cloudfit.profiling.io import load_profile, resolve_profile
    from cloudfit.search import Problem, get_searcher
    from cloudfit.search.space import build_space
    from cloudfit.workload import make_workload

    w = make_workload(model="resnet50", epochs=10, dataset_size=1_281_167, deadline="3h", regions=["us-central1"],
                      max_nodes=6)
    space = build_space(w, load_profile(resolve_profile("resnet50")), catalog.load())
    problem = Problem.of(w)
    cost = np.asarray(space.assess(problem).cost_usd)
    best = cost[get_searcher("exhaustive").search(space, problem).order[0]]
    for seed in range(6):
        res = get_searcher("bayes", n_trials=300, seed=seed).search(space, problem)
        assert cost[res.order[0]] <= best * 1.0 + 1e-9, seed
