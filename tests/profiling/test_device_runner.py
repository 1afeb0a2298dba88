"""Device selection and naming (no GPU needed), and real timed runs of the tiny model."""

from __future__ import annotations

import pytest
import torch

from cloudfit.catalog import hardware
from cloudfit.errors import ProfileError
from cloudfit.profiling import device as dev
from cloudfit.profiling import zoo
from cloudfit.profiling.runner import profile_run, resolve_batch_size
from cloudfit.types import OP_CLASSES

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("raw, name", [
    ("NVIDIA A100-SXM4-40GB", "A100"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"),
    ("NVIDIA A100-PCIE-80GB", "A100-80GB-PCIe"), ("Tesla P100-SXM2-16GB", "P100-SXM2"),
    ("Tesla T4", "T4"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA L4", "L4"),
    ("Tesla V100-SXM2-16GB", "V100"), ("Tesla P100-PCIE-16GB", "P100"), ("Tesla P4", "P4"), ("Tesla K80", "K80"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA A10", "A10"), ("NVIDIA H200", "H200"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA B200", "B200"), ("cpu", "cpu"), ("CPU AMD EPYC 7B13", "cpu"),
    ("NVIDIA GeForce RTX 4090", "GeForce-RTX-4090"),
])
def test_canonical_device_name(raw, name):
    assert dev.canonical_device_name(raw) == name


def test_canonical_names_are_the_hardware_tables():
    for raw in ("NVIDIA A100-SXM4-40GB", "Tesla T4", "NVIDIA H100 80GB HBM3", "NVIDIA L4", "Tesla V100-SXM2-16GB"):
        assert dev.canonical_device_name(raw) in hardware.ACCELERATORS


def test_select_device_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dev.select_device("auto").type == "cpu"
    assert dev.select_device("CPU").type == "cpu"
    with pytest.raises(ProfileError, match="--device cuda requested but"):
        dev.select_device("cuda")
    with pytest.raises(ProfileError, match="unknown device 'tpu'"):
        dev.select_device("tpu")


def test_select_device_with_gpus_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert dev.select_device("auto") == torch.device("cuda", 0)
    assert dev.select_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ProfileError, match="only 2 CUDA device"):
        dev.select_device("cuda:3")


def test_cpu_device_name():
    assert dev.device_name(torch.device("cpu")).startswith("CPU ")


def test_batch_size_defaults():
    zm = zoo.build("resnet50", device="meta")
    assert resolve_batch_size(zm, "cpu", None) == zm.cpu_batch_size == 8
    assert resolve_batch_size(zm, "cuda", None) == 256
    assert resolve_batch_size(zm, "cpu", 3) == 3


def test_profile_run_measures_the_tiny_model():
    calls = []
    p = profile_run(zoo.build("mlp"), steps=3, warmup=1, device="cpu", progress=lambda d, t: calls.append((d, t)))
    assert p.model == "mlp" and p.stats.batch_size == 64
    (m,) = p.measurements
    assert (m.accelerator, m.count, m.nodes, m.batch_size_per_device, m.precision, m.source) == ("cpu", 1, 1, 64, "fp32", "measured")
    assert m.step_time_s.median > 0 and m.step_time_s.p90 >= m.step_time_s.median
    assert m.samples_per_second == pytest.approx(64 / m.step_time_s.median)
    assert m.peak_memory_bytes > 10e6  # the process's resident set
    assert set(m.op_time_share) == set(OP_CLASSES) and sum(m.op_time_share.values()) == pytest.approx(1.0)
    assert m.op_time_share["matmul"] > 0
    assert m.torch_version == torch.__version__ and m.host and m.device_name.startswith("CPU") and m.measured_at
    assert calls[-1] == (5, 5) and [d for d, _ in calls] == [1, 2, 3, 4, 5]  # warm-up + timed + op split


def _cpu_runs_bf16() -> bool:
    # Some oneDNN builds cannot create bf16 matmul primitives on some CPUs ("could not create a
    # primitive"), seen on this machine's AMX Xeon with torch 2.13.0: the profiler must then fail cleanly.
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.Linear(784, 256)(torch.randn(16, 784))
        return True
    except RuntimeError:
        return False


def test_profile_run_bf16_on_cpu():
    run = lambda: profile_run(zoo.build("mlp"), batch_size=16, steps=2, warmup=1, device="cpu",  # noqa: E731
                              precision="bf16", op_breakdown=False)
    if not _cpu_runs_bf16():
        with pytest.raises(ProfileError, match=r"mlp failed on .* at batch 16: RuntimeError"):
            run()
        return
    p = run()
    m = p.measurements[0]
    assert (m.precision, m.batch_size_per_device, m.op_time_share) == ("bf16", 16, None)


@pytest.mark.parametrize("kwargs, message", [
    ({"steps": 0}, "steps must be a positive integer"),
    ({"warmup": -1}, "warm-up steps must be a non-negative integer"),
    ({"precision": "fp8"}, "precision must be one of fp32, fp16, bf16"),
    ({"batch_size": 0}, "batch size must be a positive integer"),
    ({"device": "gpu0"}, "unknown device"),
])
def test_profile_run_rejects_bad_options(kwargs, message):
    with pytest.raises(ProfileError, match=message):
        profile_run(zoo.build("mlp", device="meta"), **kwargs)


@pytest.mark.cuda
@cuda
def test_profile_run_on_cuda():  # pragma: no cover - needs a GPU
    p = profile_run(zoo.build("resnet18"), batch_size=32, steps=3, warmup=2, device="cuda", precision="fp16")
    m = p.measurements[0]
    assert m.accelerator in hardware.ACCELERATORS or m.accelerator == dev.canonical_device_name(m.device_name)
    assert m.peak_memory_bytes > 0 and m.op_time_share and m.op_time_share["conv"] > 0.3
