"""Data-parallel predictions never scale superlinearly (per node or per device)."""

from __future__ import annotations

import numpy as np
import pytest

from cloudfit.perf import HardwareQuery, predict_many
from cloudfit.profiling.io import load_profile, resolve_profile


@pytest.mark.parametrize("model", ["bert-large", "resnet50", "gpt2"])
@pytest.mark.parametrize("acc, count, net", [("H100", 8, 200.0), ("A100", 8, 100.0), ("T4", 4, 32.0)])
def test_throughput_per_node_and_per_device_never_grows(model, acc, count, net):
    prof = load_profile(resolve_profile(model))
    qs = [HardwareQuery(acc, count, n, network_gbps=net, precision="fp16") for n in range(1, 17)]
    one = predict_many(prof, [HardwareQuery(acc, 1, 1, precision="fp16")])
    t = predict_many(prof, qs)
    if not t.fits[0]:
        pytest.skip(f"{model} does not fit {acc}")
    per_node = t.samples_per_second / np.arange(1, 17)
    assert np.all(per_node <= per_node[0] * (1 + 1e-9))
    assert np.all(t.samples_per_second <= one.samples_per_second[0] * count * np.arange(1, 17) * (1 + 1e-9))
    assert np.all(t.low <= t.samples_per_second) and np.all(t.samples_per_second <= t.high)
