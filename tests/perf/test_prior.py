"""The physics prior against numbers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cloudfit.perf import prior
from cloudfit.types import OP_CLASSES

C = dict(prior.CONSTANTS)


def _work(*, matmul_flops=0.0, matmul_bytes=0.0, elem_bytes=0.0, params=0.0, grad=0.0, act=0.0) -> prior.Work:
    flops = np.zeros(len(OP_CLASSES))
    byts = np.zeros(len(OP_CLASSES))
    flops[OP_CLASSES.index("matmul")] = matmul_flops
    byts[OP_CLASSES.index("matmul")] = matmul_bytes
    byts[OP_CLASSES.index("elementwise")] = elem_bytes
    return prior.Work(flops, byts, np.float64(params), np.float64(grad), np.float64(act))


def _setup(*, peak=100.0, vector=10.0, bw=1000.0, batch=32, count=1, nodes=1, intra=100.0, net=100.0, ps=0.0,
           ps_count=1.0, ps_net=10.0, act_scale=1.0, memory=80.0) -> prior.Setup:
    a = lambda v: np.asarray(v, dtype=float)  # noqa: E731
    return prior.Setup(a(peak), a(vector), a(bw), a(memory), a(act_scale), a(0.0), a(batch), a(count), a(nodes),
                       a(intra), a(net), a(ps), a(ps_count), a(ps_net))


def test_roofline_compute_bound_matmul():
    # 1 GFLOP per sample, batch 32, 100 TFLOPS peak (10 vector) → usable vector + κ·(peak − vector).
    w = _work(matmul_flops=1e9, matmul_bytes=1.0)
    s = _setup(peak=100, vector=10, batch=32)
    usable = 10 + C["tensor_core_share"] * 90
    expected = 32 * 1e9 / (usable * 1e12 * C["eta_matmul"])
    total, tensor, memory = prior.compute_time(w, s)
    assert float(tensor) == pytest.approx(expected, rel=1e-12)
    assert float(memory) == pytest.approx(C["step_overhead_s"], abs=1e-15)
    assert float(total) == pytest.approx(expected + C["step_overhead_s"], rel=1e-12)


def test_roofline_memory_bound_and_optimizer_update():
    # 2 MB of elementwise traffic per sample at batch 8 on 500 GB/s; 1 M parameters updated per step.
    w = _work(elem_bytes=2e6, params=1e6)
    s = _setup(bw=500, batch=8)
    bw = 500e9 * C["eta_mem"]
    expected = 8 * 2e6 / bw + 1e6 * C["bytes_per_param_update"] / bw + C["step_overhead_s"]
    total, _, memory = prior.compute_time(w, s)
    assert float(memory) == pytest.approx(expected, rel=1e-12)
    # 16-bit activations halve the traffic but not the optimizer update.
    total16, _, _ = prior.compute_time(w, _setup(bw=500, batch=8, act_scale=0.5))
    assert float(total16) == pytest.approx(expected - 0.5 * 8 * 2e6 / bw, rel=1e-12)


def test_ring_all_reduce_across_nodes_hand_computed():
    # 4 nodes × 1 GPU, 100 MB of gradients, 25 Gbps VM network, compute 0.1 s per step.
    g = 100e6
    w = _work(matmul_flops=1.0, grad=g)
    s = _setup(count=1, nodes=4, net=25.0, intra=float("inf"))
    compute, _, _ = prior.compute_time(w, s)
    link = 25e9 / 8 * C["eta_net"]
    ring = 2 * 3 / 4 * g / link + 2 * 3 * C["latency_inter_s"]
    r = prior.prior(w, s)
    assert float(r.comm_total_s) == pytest.approx(ring, rel=1e-12)
    exposed = max(ring - C["backward_share"] * float(compute), C["tail"] * ring)
    assert float(r.step_time_s) == pytest.approx(float(compute) + exposed, rel=1e-12)
    assert float(r.samples_per_second) == pytest.approx(4 * 32 / (float(compute) + exposed), rel=1e-12)


def test_ring_inside_one_node_uses_intra_link():
    g = 50e6
    w = _work(matmul_flops=1.0, grad=g)
    r = prior.prior(w, _setup(count=8, nodes=1, intra=120.0, net=1.0))
    ring = 2 * 7 / 8 * g / 120e9 + 2 * 7 * C["latency_intra_s"]
    assert float(r.comm_total_s) == pytest.approx(ring, rel=1e-12)  # the slow VM network plays no part


def test_single_device_has_no_communication():
    r = prior.prior(_work(matmul_flops=1e9, grad=1e9), _setup(count=1, nodes=1))
    assert float(r.communication_s) == 0.0
    assert float(r.step_time_s) == pytest.approx(float(r.compute_s))


def test_parameter_server_saturates():
    # Each worker moves 2·G per step; one PS with a 10 Gbps link carries N workers' traffic:
    # 10 MB of gradients, ~0.2 s of compute per worker step → the PS saturates near 11 workers.
    g = 10e6
    w = _work(matmul_flops=1e11, grad=g)
    steps = []
    for n in (1, 2, 4, 8, 16, 32):
        r = prior.prior(w, _setup(count=1, nodes=n, net=16.0, ps=1.0, ps_count=1, ps_net=10.0, batch=128))
        steps.append(float(r.samples_per_second))
    ps_link = 10e9 / 8 * C["eta_net"]
    cap = 128 * ps_link / (2 * g)  # samples/s the parameter server can serve
    assert steps[-1] == pytest.approx(cap, rel=1e-9)
    assert steps[-1] == pytest.approx(steps[-2], rel=1e-9)  # saturated: more workers add nothing
    assert steps[2] == pytest.approx(2 * steps[1], rel=1e-9)  # below saturation workers add up


def test_more_bandwidth_never_slower_in_the_prior():
    w = _work(matmul_flops=5e9, elem_bytes=1e7, params=25e6, grad=100e6)
    nets = np.array([1, 2, 5, 10, 25, 50, 100, 200, 400, 1000, 3600], dtype=float)
    r = prior.prior(w, _setup(count=8, nodes=4, net=nets, intra=100.0))
    assert np.all(np.diff(r.samples_per_second) >= 0)
    intras = np.array([5, 10, 20, 50, 100, 240, 360], dtype=float)
    r = prior.prior(w, _setup(count=8, nodes=1, intra=intras))
    assert np.all(np.diff(r.samples_per_second) >= 0)


def test_memory_needed_hand_computed():
    w = _work(params=1e8, act=1e7)
    s = _setup(batch=16, act_scale=0.5)
    need = float(prior.memory_needed_bytes(w, s))
    expected = 1e8 * C["state_bytes_per_param"] + 1e7 * 16 * 0.5 + C["reserve_gib"] * 2**30
    assert need == pytest.approx(expected)
    assert math.isclose(float(prior.memory_capacity_bytes(s)), 80 * 2**30 * C["memory_usable"])


def test_per_step_overhead_scales_with_bandwidth_not_batch():
    # 20 ms per step at the reference bandwidth (1000 GB/s): 40 ms at 500 GB/s, whatever the batch;
    # under parameter servers another 30 ms (at 1000 GB/s) joins it.
    c = dict(C, step_overhead_s=0.02, ps_overhead_s=0.03)
    w = _work(matmul_flops=1e9, matmul_bytes=1.0)
    for bw, fixed in ((1000.0, 0.02), (500.0, 0.04)):
        for batch in (1, 64):
            total, tensor, memory = prior.compute_time(w, _setup(bw=bw, batch=batch), c)
            base, _, _ = prior.compute_time(w, _setup(bw=bw, batch=batch))
            assert float(total - base) == pytest.approx(fixed, rel=1e-12)
    total_ps, _, _ = prior.compute_time(w, _setup(bw=500.0, ps=1.0), c)
    total_ar, _, _ = prior.compute_time(w, _setup(bw=500.0, ps=0.0), c)
    assert float(total_ps - total_ar) == pytest.approx(0.06, rel=1e-12)
    # A small model gains little from a bigger batch once the fixed cost dominates.
    r = prior.prior(w, _setup(batch=np.array([1.0, 1024.0])), c)
    assert float(r.samples_per_second[1] / r.samples_per_second[0]) < 1024


def test_parameter_server_cpu_time_makes_throughput_plateau():
    # Tiny gradients (links never fill) but 10 ms of server CPU per worker step, 20 ms worker step:
    # one server tops out at 100 worker steps/s; two servers at 200.
    c_step = dict(C, ps_server_overhead_s=0.01, step_overhead_s=0.02)
    w = _work(matmul_flops=1.0, grad=1.0)
    for ps_count, cap in ((1, 100.0), (2, 200.0)):
        r = prior.prior(w, _setup(count=1, nodes=64, net=100.0, ps=1.0, ps_count=ps_count, ps_net=100.0, batch=1),
                        c_step)
        assert float(r.samples_per_second) == pytest.approx(cap, rel=1e-3)
    r2 = prior.prior(w, _setup(count=1, nodes=2, net=100.0, ps=1.0, ps_count=1, ps_net=100.0, batch=1), c_step)
    assert float(r2.samples_per_second) == pytest.approx(2 / 0.02, rel=1e-3)  # below the plateau: linear


def test_launch_bound_hand_computed():
    # 400 kernels × 10 µs = 4 ms a step; 8 devices × batch 32 per step → 64,000 samples/s at most
    assert prior.LAUNCH_S_PER_KERNEL == 10e-6
    assert float(prior.launch_bound_sps(400, 32, 8)) == pytest.approx(8 * 32 / (400 * 10e-6))
    bound = prior.launch_bound_sps(np.array([np.nan, 0.0, 20.0]), 64, 1)
    assert np.isinf(bound[:2]).all() and bound[2] == pytest.approx(64 / 200e-6)  # unknown count: no bound
