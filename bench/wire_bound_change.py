"""How many shipped CNN/transformer predictions the wire bound's new latency count moves (issue 33, item 2).

    git show 0365856:cloudfit/perf/network.py > /tmp/network_base.py
    python bench/wire_bound_change.py /tmp/network_base.py

Every GCP catalog shape × resnet50, vgg16, bert-large, gpt2, transformer-base × 2/4/8/16 VMs through
``perf.predict_many``, once with this tree's ``network.wire_bound_sps`` and once with the given module's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloudfit import catalog  # noqa: E402
from cloudfit.catalog import hardware, network  # noqa: E402
from cloudfit.perf import HardwareQuery, predict_many  # noqa: E402
from cloudfit.perf import model as perf_model  # noqa: E402
from cloudfit.profiling import io as pio  # noqa: E402


def main() -> None:
    spec = importlib.util.spec_from_file_location("network_before", sys.argv[1])
    before = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    shapes = sorted({(o.machine_type, o.accelerator, o.accelerators_per_node, o.vcpus)
                     for o in catalog.load(clouds=("gcp",)).offerings})
    total = changed = 0
    worst, lowest = (1.0, ""), 1.0
    for name in ("bert-large", "vgg16", "resnet50", "gpt2", "transformer-base"):
        prof = pio.load_profile(pio.shipped_profiles()[name])
        qs = [HardwareQuery(acc, c, n, hardware.vm_network_gbps(mt, acc, c, v), "fp16", None, vcpus=v,
                            transport=network.fabric_of(mt))
              for mt, acc, c, v in shapes for n in (2, 4, 8, 16)]
        after = predict_many(prof, qs)
        now = perf_model.network.wire_bound_sps
        perf_model.network.wire_bound_sps = (lambda g, c, n, b, link, intra, ps=0.0, transport=None:
                                             before.wire_bound_sps(g, c, n, b, link, intra, ps))
        try:
            old = predict_many(prof, qs)
        finally:
            perf_model.network.wire_bound_sps = now
        ok = after.fits
        ratio = after.samples_per_second[ok] / old.samples_per_second[ok]
        total += int(ok.sum())
        changed += int((np.abs(ratio - 1) > 1e-9).sum())
        lowest = min(lowest, float(ratio.min()))
        i = int(np.argmax(ratio))
        q = [q for q, f in zip(qs, ok) if f][i]
        if ratio[i] > worst[0]:
            worst = (float(ratio[i]), f"{name} on {q.nodes} × {q.count} {q.accelerator} at {q.network_gbps:g} Gbit/s")
    print(f"{changed} of {total} predictions change; after/before lowest ×{lowest:.4f}, "
          f"largest ×{worst[0]:.2f}: {worst[1]}")


if __name__ == "__main__":
    main()
