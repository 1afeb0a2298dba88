"""Kernel-level efficiency model on NeuSight's per-kernel measurements (cloudfit/perf/kernels.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("xgboost")

from cloudfit.perf import kernels  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return kernels.load()


@pytest.fixture(scope="module")
def report(data):
    return kernels.leave_gpu_out(data)


def test_shipped_kernel_data_covers_every_op_class_and_gpu(data):
    assert set(data.op_class) == set(kernels.OP_CLASSES)
    assert set(kernels.TRAIN_GPUS + kernels.TEST_GPUS) <= set(data.accelerator)
    assert (data.latency_us > 0).all() and (data.flops > 0).all() and (data.bytes > 0).all()


def test_features_are_specs_and_shapes_never_names(data):
    # the same kernel on two GPUs with identical specs gets identical features: rename a GPU's rows
    sub = data.take(np.flatnonzero(data.accelerator == "A100")[:50])
    renamed = kernels.Kernels(*(getattr(sub, f) if f != "accelerator" else np.full(len(sub), "A100-SXM4-40GB")
                                for f in sub.__dataclass_fields__))
    assert np.array_equal(kernels.features(sub), kernels.features(renamed))


def test_leave_gpu_out_beats_the_roofline_in_every_class(report):
    for cls, blk in report["classes"].items():
        assert blk["mape"] < blk["roofline_mape"], cls


def test_memory_bound_ops_meet_the_issue_target(report):
    # issue 15: memory-bound ops ≤ 15% MAPE on held-out GPUs (measured 8.3%)
    assert report["classes"]["memory"]["mape"] <= 0.15


def test_an_unseen_gpu_gets_a_prediction_from_its_specs(data):
    forests = kernels.fit(data.take(np.flatnonzero(np.isin(data.accelerator, kernels.TRAIN_GPUS))))
    big = data.take(np.flatnonzero((data.accelerator == "A100") & (data.op == "linear") & (data.flops > 1e11))[:20])
    on_b200 = kernels.Kernels(*(getattr(big, f) if f != "accelerator" else np.full(len(big), "B200")
                                for f in big.__dataclass_fields__))
    t_a100, t_b200 = kernels.predict_us(forests, big), kernels.predict_us(forests, on_b200)
    assert np.isfinite(t_b200).all() and (t_b200 > 0).all()
    # B200 has 4.1× A100's fp32 peak and 5.1× its bandwidth: large fp32 GEMMs run faster, but not faster
    # than the peak ratio allows
    assert (np.median(t_a100 / t_b200) > 1.5) and (np.median(t_a100 / t_b200) < 80 / 19.5 * 1.2)


def test_gemm_leave_gpu_out_holds_its_measured_level(report):
    # issue 15 asks ≤ 10% (missed: 16.4% measured; H100/L4 bmm's per-shape scatter the largest part); a guard
    # on what was measured so a change that loses the power ceiling's or the shape features' transfer fails here
    blk = report["classes"]["gemm"]
    assert blk["mape"] <= 0.19
    assert blk["gpus"]["A100-80GB"]["mape"] <= 0.12 and blk["gpus"]["H100"]["mape"] <= 0.23
    # the L4 (72 W, 30 TFLOPS) was 30.8% when the trees put it at a T4's fraction of its datasheet peak
    assert blk["gpus"]["L4"]["mape"] <= 0.24


def test_the_power_ceiling_binds_on_low_power_boards_only():
    from cloudfit.catalog import hardware

    names = np.array(list(hardware.ACCELERATORS))
    s = kernels.specs(names, boards=False)
    share = dict(zip(names, kernels.sustained_fp32_tflops(s) / s["fp32_tflops"]))
    assert all(0.0 < v <= 1.0 for v in share.values())
    for low in ("T4", "L4", "P4"):  # 70-75 W cards
        assert share[low] < 0.75, low
    for big in ("V100", "A100", "A100-80GB", "H100", "H200", "B200", "P100", "K80"):
        assert share[big] == 1.0, big
    # more board power never lowers the sustained peak; a finer process never lowers it either
    one = kernels.specs(np.array(["L4"]), boards=False)
    for key, scale in (("tdp_w", 2.0), ("node_nm", 0.5)):
        more = dict(one, **{key: one[key] * scale})
        assert kernels.sustained_fp32_tflops(more)[0] > kernels.sustained_fp32_tflops(one)[0]
    # an architecture without a known node gets no ceiling (the datasheet peak), not a crash
    unknown = dict(one, node_nm=np.array([np.nan]))
    assert kernels.sustained_fp32_tflops(unknown)[0] == one["fp32_tflops"][0]


def test_the_l4_runs_slower_than_its_peak_says_but_faster_than_a_t4(data):
    # the ceiling moves the L4 below the fraction the training GPUs reach, not below the T4 it outruns
    forests = kernels.fit(data.take(np.flatnonzero(np.isin(data.accelerator, kernels.TRAIN_GPUS))))
    big = data.take(np.flatnonzero((data.accelerator == "T4") & (data.op == "linear") & (data.flops > 1e11))[:40])
    on = {g: kernels.predict_us(forests, kernels.Kernels(*(getattr(big, f) if f != "accelerator" else np.full(len(big), g)
                                                            for f in big.__dataclass_fields__)), boards=False)
          for g in ("T4", "L4")}
    speedup = np.median(on["T4"] / on["L4"])
    assert 1.2 < speedup < 30.3 / 8.1  # measured 2.3× on large linear shapes, predicted 2.8× (fp32 peaks: 3.7×)


def test_a_held_out_gpu_is_not_recognised_by_its_clock(data):
    # with eight GPUs, raw SM count and clock features put a held-out H100 (1.98 GHz) among the L4's leaves
    # (2.04 GHz, a 72 W card at 27% of its fp32 peak): MAPE 118%. Spec features must transfer, not name a GPU.
    others = tuple(g for g in kernels.TRAIN_GPUS + kernels.TEST_GPUS if g != "H100")
    rep = kernels.leave_gpu_out(data, train_gpus=others, test_gpus=("H100",))
    assert rep["classes"]["gemm"]["mape"] < 0.30
    assert abs(rep["classes"]["gemm"]["log_bias"]) < 0.15
