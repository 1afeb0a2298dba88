"""The shipped performance model: API, every profile × accelerator, monotonicity, determinism."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cloudfit import catalog
from cloudfit.catalog import hardware
from cloudfit.errors import ProfileError, UnknownAcceleratorError, UsageError
from cloudfit.perf import HardwareQuery, fit, memory_fits, model_version, predict, predict_many
from cloudfit.perf.data import load_table
from cloudfit.profiling import io as pio
from cloudfit.types import Measurement, Profile

REPO = Path(__file__).resolve().parents[2]


def _profiles() -> dict[str, Profile]:
    shipped = pio.shipped_profiles()
    assert shipped, "no shipped profiles under profiles/"
    return {name: pio.load_profile(path) for name, path in sorted(shipped.items())}


@pytest.fixture(scope="module")
def profiles() -> dict[str, Profile]:
    return _profiles()


@pytest.fixture(scope="module")
def stats_profiles() -> dict[str, Profile]:
    """Profiles from the training workloads' stats (no measurements: stats-only predictions)."""
    t = load_table()
    return {k: Profile(k.split("@")[0], s) for k, s in t.stats.items()
            if k in ("resnet50@256", "bert-large@16", "vgg16@64", "megatron-gpt-opt350m@4", "ncf@2560000")}


def _catalog_shapes():
    cat = catalog.load()
    return sorted({(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus) for o in cat.offerings})


def test_every_shipped_profile_on_every_catalog_shape(profiles):
    shapes = _catalog_shapes()
    queries = []
    for mt, acc, count, vcpus in shapes:
        net = hardware.vm_network_gbps(mt, acc, count, vcpus)
        for nodes in (1, 2, 16):
            for prec in ("fp16", "fp32"):
                queries.append(HardwareQuery(acc, count, nodes, net, prec))
    for name, prof in profiles.items():
        t = predict_many(prof, queries)
        assert len(t) == len(queries)
        ok = t.fits
        assert ok.any(), f"{name} fits nowhere"
        for col in (t.samples_per_second, t.low, t.high, t.step_time_s):
            assert np.all(np.isfinite(col))
        assert np.all(t.samples_per_second[ok] > 0)
        assert np.all(t.low[ok] <= t.samples_per_second[ok]) and np.all(t.samples_per_second[ok] <= t.high[ok])
        assert np.allclose(t.compute_s[ok] + t.communication_s[ok], t.step_time_s[ok], rtol=1e-9)
        assert all(r for r, f in zip(t.reason, ok) if not f)  # every "does not fit" says why
        assert all(b for b in t.basis)


def test_predict_matches_predict_many_and_defaults(profiles):
    prof = profiles.get("resnet50") or next(iter(profiles.values()))
    p = predict(prof, "a100", 8)  # canonicalises names; fp16 and the profile's batch by default
    t = predict_many(prof, [HardwareQuery("A100", 8, 1, 0.0, "fp16", prof.stats.batch_size)])
    assert p.samples_per_second == pytest.approx(float(t.samples_per_second[0]))
    assert p.fits and p.low <= p.samples_per_second <= p.high
    # Across nodes the network comes from the catalog's largest VM of that shape, or is given.
    p4 = predict(prof, "A100", 8, nodes=4)
    p4_slow = predict(prof, "A100", 8, nodes=4, network_gbps=1.0)
    assert p4_slow.samples_per_second <= p4.samples_per_second
    assert p4_slow.communication_s >= p4.communication_s


def test_duplicate_queries_are_evaluated_once_and_kept_in_order(profiles):
    prof = next(iter(profiles.values()))
    qs = [HardwareQuery("T4"), HardwareQuery("H100", 8), HardwareQuery("T4")]
    t = predict_many(prof, qs)
    assert t.samples_per_second[0] == t.samples_per_second[2]
    assert t.samples_per_second[1] > t.samples_per_second[0]


def test_no_batch_means_the_profiles_batch(profiles):
    """A query without a batch runs the profile's; the same query with that batch written out predicts the
    same, on one node and on many (where the scaling cap's one-node and one-device variants come in)."""
    prof = profiles["resnet50"]
    b = int(prof.stats.batch_size)
    qs = [HardwareQuery("V100", 8, n, 100.0, "fp16") for n in (1, 2, 4)]
    qb = [dataclasses.replace(q, batch_size=b) for q in qs]
    t, tb = predict_many(prof, qs + qb), predict_many(prof, qb + qs)
    assert np.array_equal(t.samples_per_second[:3], t.samples_per_second[3:])
    assert np.array_equal(t.samples_per_second, tb.samples_per_second)
    assert not np.array_equal(predict_many(prof, [dataclasses.replace(qs[0], batch_size=2 * b)]).samples_per_second,
                              t.samples_per_second[:1])


def test_anchored_prediction_reproduces_its_anchor(stats_profiles):
    base = stats_profiles["resnet50@256"]
    stats_only = predict(base, "A100", batch_size=256, precision="fp32")
    assert stats_only.basis == "stats-only"
    prof = base.with_measurement(Measurement("A100", 1, 1, 256, "fp32", 400.0))
    prof = prof.with_measurement(Measurement("cpu", 1, 1, 8, "fp32", 5.0))  # ignored: CPUs anchor nothing
    p = predict(prof, "A100", batch_size=256, precision="fp32")
    assert p.samples_per_second == pytest.approx(400.0, rel=1e-6)
    assert p.basis.startswith("anchored on A100")
    # Another accelerator keeps the same profile-specific factor (single device: λ of the correction).
    a = predict(prof, "H100", batch_size=256, precision="fp32")
    assert a.basis.startswith("anchored on A100")
    assert a.samples_per_second > p.samples_per_second


def _dominates(b: str, a: str, precision: str) -> bool:
    A, B = hardware.get(a), hardware.get(b)
    specs = lambda x, n: (x.peak_tflops(precision), x.fp32_tflops, x.memory_bandwidth_gbps, x.memory_gib,  # noqa: E731
                          hardware.intra_node_gbps(x.name, n))
    sa, sb = specs(A, 8), specs(B, 8)
    return all(y >= x for x, y in zip(sa, sb)) and any(y > x for x, y in zip(sa, sb))


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_better_accelerator_never_predicts_slower(stats_profiles, precision):
    accs = sorted(hardware.ACCELERATORS)
    pairs = [(a, b) for a, b in itertools.permutations(accs, 2) if _dominates(b, a, precision)]
    assert len(pairs) > 20
    anchored = dataclasses.replace(stats_profiles["resnet50@256"],
                                   measurements=(Measurement("A100", 1, 1, 256, "fp32", 380.0),))
    for prof in list(stats_profiles.values()) + [anchored]:
        for count, nodes in ((1, 1), (8, 1), (8, 4)):
            qs = [HardwareQuery(acc, count, nodes, 100.0, precision, prof.stats.batch_size) for acc in accs]
            t = predict_many(prof, qs)
            sps = dict(zip(accs, t.samples_per_second))
            for a, b in pairs:
                assert sps[b] >= sps[a] * (1 - 1e-9), f"{prof.model}: {b} predicted slower than {a} ({count}×{nodes})"


def test_more_bandwidth_never_predicts_slower(stats_profiles):
    nets = [1, 2, 5, 10, 16, 25, 32, 50, 100, 200, 400, 1000, 1800, 3600]
    intras = [4, 8, 16, 32, 64, 120, 240, 360, 720]
    for prof in stats_profiles.values():
        for acc in ("T4", "A100", "H100"):
            t = predict_many(prof, [HardwareQuery(acc, 8, 8, n, "fp16") for n in nets])
            assert np.all(np.diff(t.samples_per_second) >= -1e-9 * t.samples_per_second[:-1])
            t = predict_many(prof, [HardwareQuery(acc, 8, 1, 0.0, "fp16", intra_gbps=i) for i in intras])
            assert np.all(np.diff(t.samples_per_second) >= -1e-9 * t.samples_per_second[:-1])


def test_memory_fits(stats_profiles):
    prof = stats_profiles["bert-large@16"]
    ok, why = memory_fits(prof, "H100", 16, "fp16")
    assert ok and why == ""
    ok, why = memory_fits(prof, "T4", 4096, "fp32")
    assert not ok and "GiB" in why and "T4" in why
    p = predict(prof, "T4", batch_size=4096)
    assert not p.fits and p.samples_per_second == 0.0 and p.reason


def test_bad_input_raises_usage_errors(stats_profiles):
    prof = stats_profiles["resnet50@256"]
    with pytest.raises(UnknownAcceleratorError, match="unknown accelerator"):
        predict(prof, "Z9000")
    with pytest.raises(UsageError, match="count"):
        predict(prof, "A100", 0)
    with pytest.raises(UsageError, match="node"):
        predict_many(prof, [HardwareQuery("A100", 1, 0)])
    with pytest.raises(UsageError, match="precision"):
        predict(prof, "A100", precision="fp4")
    with pytest.raises(UsageError, match="network"):
        predict_many(prof, [HardwareQuery("A100", 8, 2, 0.0)])
    empty = dataclasses.replace(prof, stats=dataclasses.replace(prof.stats, op_classes={}, flops_per_sample=0.0))
    with pytest.raises(ProfileError, match="no model stats"):
        predict(empty, "A100")


def test_model_version_names_the_shipped_file():
    v = model_version()
    assert v.startswith("sha256:") and len(v) == len("sha256:") + 16


def test_predict_many_imports_only_numpy_and_stdlib(tmp_path):
    code = (
        "import sys, cloudfit\n"
        "from cloudfit.perf import predict_many, HardwareQuery\n"
        "from cloudfit.profiling import io\n"
        "p = io.load_profile(io.resolve_profile(sorted(io.shipped_profiles())[0]))\n"
        "t = predict_many(p, [HardwareQuery('H100', 8, n, 200.0) for n in range(1, 65)])\n"
        "assert len(t) == 64\n"
        "heavy = [m for m in ('xgboost', 'sklearn', 'scipy', 'pandas', 'torch', 'transformers') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


@pytest.mark.slow
def test_fit_is_deterministic_and_rebuilds_the_shipped_model(tmp_path, cli_fitted_model):
    """`cloudfit model fit` twice (the CLI's, shared with test_cli, and the library's) → byte-identical
    files, equal to the model cloudfit ships."""
    assert cli_fitted_model.exit_code == 0, cli_fitted_model.output
    a, b = cli_fitted_model.path, tmp_path / "b.json"
    fit.write_model(fit.fit_model(), b)
    assert a.read_bytes() == b.read_bytes()
    shipped = Path(fit.default_model_path())
    assert a.read_bytes() == shipped.read_bytes(), "shipped cloudfit/perf/model.json is stale: run `cloudfit model fit`"


def test_a_tiny_model_is_capped_by_kernel_launches(profiles):
    """However fast the GPU, the host launches a step's kernels one by one: the mlp cannot beat
    batch / (kernels × LAUNCH_S_PER_KERNEL) per device, and neither can its band."""
    import dataclasses

    from cloudfit.perf import prior

    mlp = profiles["mlp"]
    k, b = mlp.stats.kernels_per_step, mlp.stats.batch_size
    assert k and k > 0
    for acc, count in (("T4", 1), ("H100", 1), ("H100", 8)):
        r = predict(mlp, acc, count, precision="fp16")
        bound = count * b / (k * prior.LAUNCH_S_PER_KERNEL)
        assert r.samples_per_second <= bound * (1 + 1e-9) and r.high <= bound * (1 + 1e-9)
    # the H100 is ~15× a T4 on paper, but the mlp's kernels are tiny: per-kernel latency floors (NeuSight's
    # kernels: a few µs on every GPU) and the launch floor keep them within a small factor
    ratio = (predict(mlp, "H100", 1, precision="fp16").samples_per_second
             / predict(mlp, "T4", 1, precision="fp16").samples_per_second)
    assert 0.9 <= ratio <= 2.0
    # without a kernel count (an older profile) there is no such bound
    old = dataclasses.replace(mlp, stats=dataclasses.replace(mlp.stats, kernels_per_step=None))
    assert predict(old, "H100", 1, precision="fp16").samples_per_second > b / (k * prior.LAUNCH_S_PER_KERNEL)
