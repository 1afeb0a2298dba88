"""Physical common sense of the shipped model on every shipped profile × catalog shape (issue 15).

Each bound below states the evidence it rests on."""

from __future__ import annotations

import numpy as np
import pytest

from cloudfit import catalog
from cloudfit.catalog import hardware
from cloudfit.perf import HardwareQuery, predict_many
from cloudfit.perf import prior
from cloudfit.profiling import io as pio

NODES = np.arange(1, 17)


@pytest.fixture(scope="module")
def profiles():
    return {name: pio.load_profile(p) for name, p in sorted(pio.shipped_profiles().items())}


@pytest.fixture(scope="module")
def shapes():
    cat = catalog.load()
    return sorted({(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus) for o in cat.offerings})


def _query(shape, nodes, precision="fp16", batch=None):
    mt, acc, count, vcpus = shape
    return HardwareQuery(acc, count, int(nodes), hardware.vm_network_gbps(mt, acc, count, vcpus), precision, batch,
                         vcpus=vcpus)


def test_more_nodes_of_one_shape_never_raise_per_gpu_throughput(profiles, shapes):
    # Data parallelism at a fixed per-device batch: each added node adds ring hops over the VM network and
    # nothing that speeds up a device, so per-GPU samples/s cannot rise with the node count.
    for name, prof in profiles.items():
        for precision in ("fp16", "fp32"):
            qs = [_query(s, n, precision) for s in shapes for n in NODES]
            t = predict_many(prof, qs)
            sps = t.samples_per_second.reshape(len(shapes), len(NODES))
            fits = t.fits.reshape(len(shapes), len(NODES))
            per_gpu = sps / NODES[None, :]
            for i, s in enumerate(shapes):
                if not fits[i, 0]:
                    continue
                d = np.diff(per_gpu[i])
                assert np.all(d <= 1e-9 * per_gpu[i, :-1]), f"{name} {precision} on {s}: per-GPU {per_gpu[i]}"


def test_n_one_gpu_vms_never_beat_one_n_gpu_vm(profiles, shapes):
    # N one-GPU VMs all-reduce over the VM network (≤ 100 Gbit/s here); one N-GPU VM over PCIe/NVLink
    # (≥ 12 GB/s), with the same compute: the single VM is never slower.
    by_acc: dict[str, dict[int, tuple]] = {}
    for s in shapes:  # the largest VM (most vCPUs) of each accelerator count
        cur = by_acc.setdefault(s[1], {}).get(s[2])
        if cur is None or s[3] > cur[3]:
            by_acc[s[1]][s[2]] = s
    pairs = [(v[1], v[n]) for v in by_acc.values() if 1 in v for n in v if n > 1]
    assert len(pairs) >= 5
    for name, prof in profiles.items():
        for one, big in pairs:
            n = big[2]
            # the same vCPUs in total, so the input pipeline does not decide
            q_spread = HardwareQuery(one[1], 1, n, hardware.vm_network_gbps(*one), "fp16", vcpus=big[3] / n)
            q_single = HardwareQuery(big[1], n, 1, 0.0, "fp16", vcpus=big[3])
            t = predict_many(prof, [q_spread, q_single])
            if t.fits[1]:
                assert t.samples_per_second[0] <= t.samples_per_second[1] * (1 + 1e-9), (name, one, big)


def _sps(prof, acc, precision="fp16"):
    t = predict_many(prof, [HardwareQuery(acc, 1, 1, 0.0, precision)])
    return float(t.samples_per_second[0]), bool(t.fits[0])


def test_l4_is_faster_than_t4_for_every_fp16_workload(profiles):
    # Both are 70 W PCIe cards on GDDR6 at ~300 GB/s; the L4 has 1.9× the T4's fp16 tensor throughput (121 vs
    # 65 TFLOPS dense), 3.7× its fp32 rate and 12× its L2 (48 vs 4 MB). NeuSight's kernels (same shapes, both
    # cards): fp32 GEMMs run ~2× faster on the L4, memory-bound ops at the same speed. So no workload is slower
    # on an L4. Exception: a step bound by kernel launches (the host, not the GPU) runs at the same speed on both.
    for name, prof in profiles.items():
        l4, ok_l4 = _sps(prof, "L4")
        t4, ok_t4 = _sps(prof, "T4")
        if not (ok_l4 and ok_t4):
            continue
        launch = float(prior.launch_bound_sps(prof.stats.kernels_per_step or np.nan, prof.stats.batch_size, 1))
        if t4 >= 0.99 * launch:
            continue
        assert l4 > t4, f"{name}: L4 {l4:.1f} vs T4 {t4:.1f} samples/s"


@pytest.mark.parametrize("name", ["bert-base", "bert-large", "gpt2", "gpt2-medium"])
def test_l4_beats_p100_on_tensor_core_bound_transformers(profiles, name):
    # BERT and GPT-2 spend most FLOPs in GEMMs: at fp16 the P100 (no tensor cores) peaks at 18.7 TFLOPS, the
    # L4's tensor cores at 121; the P100's 2.4× memory bandwidth cannot make up a 6.5× compute gap on
    # GEMM-bound work.
    prof = profiles[name]
    l4, ok = _sps(prof, "L4")
    p100, ok2 = _sps(prof, "P100")
    if not ok2:  # does not fit 16 GB: nothing to compare
        assert ok
        return
    assert l4 > p100, f"{name}: L4 {l4:.1f} vs P100 {p100:.1f}"


def test_h100_over_a100_for_bert_large_fp16_is_between_1_5_and_3_5(profiles):
    # Datasheets: H100 SXM 989 vs A100 312 dense fp16 TFLOPS (3.2×), 3.35 vs 1.55-2.0 TB/s (1.6-2.2×). Measured
    # maximum achievable bf16 matmul (stas00/ml-engineering MAMF, data/raw/gpus): 794.5 vs 271.2 TFLOPS (2.9×).
    # A mixed compute/memory-bound training step therefore lands between the bandwidth ratio and the MAMF
    # ratio: 1.5-3.5× leaves room on both sides.
    prof = profiles["bert-large"]
    h, _ = _sps(prof, "H100")
    a, _ = _sps(prof, "A100")
    assert 1.5 <= h / a <= 3.5, h / a


def test_image_decoding_bounds_samples_by_vcpus(profiles):
    # ResNet-50 fp16 on 64 VMs of 8 H100 with 64 vCPUs each: eight H100s train well over 10k images/s, more
    # than 64 vCPUs decode at ~120 images/s each (prior.DECODE_IMAGES_PER_VCPU_224): ~7.7k per VM.
    prof = profiles["resnet50"]
    q = HardwareQuery("H100", 8, 64, 1000.0, "fp16", vcpus=64)
    t = predict_many(prof, [q, HardwareQuery("H100", 8, 64, 1000.0, "fp16")])
    assert t.samples_per_second[0] <= 64 * 64 * prior.DECODE_IMAGES_PER_VCPU_224 * (1 + 1e-9)
    assert t.samples_per_second[1] > t.samples_per_second[0]
    # token inputs have no decode bound
    bert = profiles["bert-large"]
    t = predict_many(bert, [HardwareQuery("H100", 8, 1, 0.0, "fp16", vcpus=8), HardwareQuery("H100", 8, 1, 0.0, "fp16")])
    assert t.samples_per_second[0] == t.samples_per_second[1]


def test_unmeasured_accelerators_say_so_and_get_a_wider_band(profiles):
    prof = profiles["bert-large"]
    t = predict_many(prof, [HardwareQuery("L4", 1, 1, 0.0, "fp16"), HardwareQuery("A100", 1, 1, 0.0, "fp16")])
    assert "L4: no measured rows, spec-based" in t.basis[0]
    assert "no measured rows" not in t.basis[1]
    # its band is the one leave-one-generation-out residuals give its distance (stored by `model fit`; the L4 is two
    # generation hops from the V100 it is carried from), never narrower than one hop's, nor than the measured A100's
    from cloudfit.perf import model as perf_model

    m = perf_model.load_model()
    d = perf_model.extrapolation_distance(m, "L4", "fp16")
    assert d == 2
    (lo1, hi1), (lo, hi) = m.generation_quantiles["single-anchored"][:2]  # bert-large is anchored on its measurement
    assert t.low[0] == pytest.approx(t.samples_per_second[0] * np.exp(lo), rel=1e-9)
    assert lo <= lo1 <= 0 <= hi1 <= hi
    width = np.log(t.high / t.low)
    assert width[0] >= width[1] * (1 - 1e-9)


def test_a_bigger_kernel_never_takes_less_time_in_the_shipped_tables():
    """The kernel trees once said a memory-bound kernel twice the size runs faster (every accelerator's
    table had such a step; T4 2.1×): along each grid the achieved fraction at most doubles per doubling of the
    size, so time = size / (peak × fraction) never falls (also between grid points: the prior interpolates
    log fractions linearly in log2 size). Tolerance: the tables' 4-significant-digit rounding."""
    from cloudfit.perf.model import load_model
    from cloudfit.perf.tables import BYTES_LOG2, FLOPS_LOG2

    t = load_model().tables
    for table, grid in ((t.memory, BYTES_LOG2), (t.gemm, FLOPS_LOG2)):
        step = np.diff(np.asarray(grid, dtype=float))
        for acc, row in table.items():
            e = np.asarray(row, dtype=float)
            assert np.all(e[1:] <= e[:-1] * 2.0**step * (1 + 2e-3)), acc


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_prior_never_grows_faster_than_the_batch(profiles, precision):
    """A step never gets shorter with more work, so doubling the batch at most doubles samples/s. The prior
    (the physics the learned correction multiplies) keeps it on every shipped profile and accelerator;
    before the tables' size rule above it broke it in 199 batch doublings (up to 1.39×)."""
    from cloudfit.perf import features
    from cloudfit.perf.model import _evaluate, _rows, load_model

    m = load_model()
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    for name, prof in profiles.items():
        work = features.work_from_stats(prof.stats)
        for acc in sorted(hardware.ACCELERATORS):
            r = _rows([HardwareQuery(acc, 1, 1, 100.0, precision, b) for b in batches], 1)
            sps = _evaluate(m, work, r)[1].samples_per_second
            growth = sps[1:] / sps[:-1] / 2.0
            assert growth.max() <= 1 + 1e-9, (name, acc, float(growth.max()))


def test_fp8_is_transformer_engine_on_the_linear_layers(profiles):
    """``fp8`` is Transformer Engine FP8: the Linear GEMMs run on the FP8 tensor cores with 1-byte inputs,
    convolutions and attention stay 16-bit, and the learned correction (no FP8 row among the training data)
    is the 16-bit one. So FP8 is never slower than bf16 on a GPU with FP8 units, never more than the 2× of its
    tensor peak, and a CNN gains nothing. Evidence for a gain on transformers: llm-foundry measured MPT-1B/3B
    at 1.31–1.35× bf16 on 8×H100 at sequence 512 (data/llm/measurements.csv)."""
    fp8_gpus = [a for a in sorted(hardware.ACCELERATORS) if hardware.get(a).fp8_tflops]
    for name, prof in profiles.items():
        for acc in fp8_gpus:
            qs = [HardwareQuery(acc, 1, 1, 100.0, p, b) for b in (1, 8, 32, None) for p in ("bf16", "fp8")]
            sps = np.asarray(predict_many(prof, qs).samples_per_second).reshape(-1, 2)
            ok = sps[:, 0] > 0
            ratio = sps[ok, 1] / sps[ok, 0]
            assert np.all(ratio >= 1 - 1e-12) and np.all(ratio <= 2.0), (name, acc, ratio)
            if name in ("resnet50", "vgg16", "densenet121"):
                assert np.all(ratio <= 1.01), (name, acc, ratio)
    q = [HardwareQuery("H100", 1, 1, 100.0, p) for p in ("bf16", "fp8")]
    bf16, fp8 = predict_many(profiles["bert-large"], q).samples_per_second
    assert fp8 > 1.02 * bf16
