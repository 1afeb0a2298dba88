"""Anchoring memory on measured peaks (issue 24): states exact, activations scaled, the fixed part fitted from two."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cloudfit.llm import anchor as A
from cloudfit.llm import layout as L
from cloudfit.llm import memory as mem
from cloudfit.llm.predict import constants
from cloudfit.llm.stats import token_stats
from cloudfit.llm.zoo import get

ROOT = Path(__file__).resolve().parents[2]


def _est(mb: int = 1, pp: int = 1, ga: int = 8, cap: float = 80.0, model: str = "llama3-8b", gpus: int = 8):
    st = token_stats(get(model), 4096)
    dp = gpus // pp
    lay = L.parse(f"dp={dp},pp={pp},mb={mb},ga={ga},ac=selective", gpus=gpus, sequences_per_replica=mb * ga)
    return mem.estimate(st, lay, capacity_gib=cap, framework="megatron")


def _truth(e, a: float, c: float) -> float:
    """A peak of a stack whose activations are ``a`` × the model's and whose fixed part is ``c`` GiB."""
    return c + (1 + mem.OVERHEAD_FRACTION) * (e.states_gib + e.buffers_gib + a * (e.activations_gib + e.logits_gib))


@pytest.mark.parametrize("ratio", [0.3, 0.8, 0.95, 1.0, 1.1, 1.4, 3.0, 10.0])
def test_a_measured_peak_anchors_its_own_setup_exactly(ratio):
    e = _est(mb=2)
    measured = e.total_gib * ratio
    got = A.apply_memory(e, A.fit_memory([A.memory_point(e, measured)]))
    assert got.total_gib == pytest.approx(measured, rel=1e-9)
    assert got.fits == (measured <= e.capacity_gib)


def test_one_peak_scales_the_activations_and_keeps_the_states_exact():
    e = _est(mb=2)
    fit = A.fit_memory([A.memory_point(e, _truth(e, 1.5, mem.OVERHEAD_GIB))])
    assert fit.kind == "activations" and fit.activation_scale == pytest.approx(1.5)
    q = _est(mb=4)
    got = A.apply_memory(q, fit)
    assert (got.weights_gib, got.gradients_gib, got.optimizer_gib) == (q.weights_gib, q.gradients_gib, q.optimizer_gib)
    assert got.activations_gib == pytest.approx(1.5 * q.activations_gib)
    assert got.total_gib == pytest.approx(_truth(q, 1.5, mem.OVERHEAD_GIB))


def test_two_peaks_at_different_activation_loads_fit_the_fixed_part_too():
    a, c = 1.3, 1.1
    e1, e2, q = _est(mb=1), _est(mb=4), _est(mb=2, pp=2)
    fit = A.fit_memory([A.memory_point(e, _truth(e, a, c)) for e in (e1, e2)])
    assert fit.kind == "activations+fixed"
    assert (fit.activation_scale, fit.fixed_gib) == (pytest.approx(a), pytest.approx(c))
    assert A.apply_memory(q, fit).total_gib == pytest.approx(_truth(q, a, c))
    same = A.fit_memory([A.memory_point(e1, _truth(e1, a, c))] * 2)  # no spread: the fixed part is not identified
    assert same.kind == "activations" and same.fixed_gib == mem.OVERHEAD_GIB


def test_a_peak_below_the_states_falls_back_to_one_factor_and_still_reproduces_itself():
    e = _est(mb=1)
    measured = 0.5 * e.states_gib
    fit = A.fit_memory([A.memory_point(e, measured)])
    assert fit.kind == "factor"
    assert A.apply_memory(e, fit).total_gib == pytest.approx(measured)


@pytest.mark.parametrize("ratio", [0.5, 0.9, 1.2, 2.5])
def test_more_micro_batch_never_less_anchored_memory(ratio):
    fits = [A.fit_memory([A.memory_point(_est(mb=2), _est(mb=2).total_gib * ratio)]),
            A.fit_memory([A.memory_point(_est(mb=m), _truth(_est(mb=m), 1.4 * ratio, 1.0)) for m in (1, 4)])]
    for fit in fits:
        for pp in (1, 2):
            totals = [A.apply_memory(_est(mb=m, pp=pp), fit).total_gib for m in (1, 2, 3, 4, 6, 8)]
            assert totals == sorted(totals)


def test_anchoring_never_refuses_a_run_that_fit():
    """Every Sailor run fit its GH200; anchored on any other run's peak (one peak, or two), it is still predicted to
    fit — and so is the anchor itself at its own peak, even one right at the GPU's capacity."""
    sys.path.insert(0, str(ROOT / "bench"))
    import llm_memory_anchor as B

    cs = B.cases()
    for q in cs:
        for o in cs:
            if o is q or o["model"] != q["model"]:
                continue
            fit = A.fit_memory([o["point"]])
            assert A.apply_memory(q["estimate"], fit).fits
            assert A.apply_memory(o["estimate"], fit).total_gib == pytest.approx(o["published_gib"])
    e = _est(mb=1)
    assert A.apply_memory(e, A.fit_memory([A.memory_point(e, e.capacity_gib)])).fits


def test_leave_one_out_on_sailor_anchored_beats_unanchored():
    sys.path.insert(0, str(ROOT / "bench"))
    import llm_memory_anchor as B

    rep = B.run()
    s = B.summary(rep["OPT-350 / nearest"])
    assert s["two peaks"]["within_10"] >= 12 and s["two peaks"]["mape"] < s["unanchored"]["mape"]
    assert B.summary(rep["OPT-350 / other layout"])["two peaks"]["within_10"] > s["unanchored"]["within_10"]


def test_predict_anchored_applies_the_peak_of_the_run_it_measured():
    shape = get("llama3-8b")
    s = A.Setup("H100", 8, 1, "bf16", 8192, 2, "fsdp=8,ac=selective", "fsdp")
    a = A.run_anchor(shape, s, 41000, memory_gib=60.0)
    same = A.predict_anchored(shape, s, [a]).prediction.memory
    assert same.total_gib == pytest.approx(60.0) and same.fits
    more = A.Setup("H100", 8, 1, "bf16", 8192, 4, "fsdp=8,mb=4,ac=selective", "fsdp")
    bigger = A.predict_anchored(shape, more, [a]).prediction.memory
    assert bigger.total_gib > same.total_gib
    assert bigger.optimizer_gib == pytest.approx(same.optimizer_gib)  # states are exact: the peak moves activations


def test_with_several_peaks_each_measured_setup_is_reproduced_and_two_fit_the_fixed_part():
    shape = get("llama3-8b")
    setups = [A.Setup("H100", 8, 1, "bf16", 8192, b, f"fsdp=8,mb={b},ac=selective", "fsdp") for b in (1, 2, 4)]
    peaks = (30.0, 41.0, 66.0)
    anchors = [A.run_anchor(shape, s, 41000, memory_gib=m) for s, m in zip(setups, peaks)]
    for s, m in zip(setups, peaks):
        assert A.predict_anchored(shape, s, anchors).prediction.memory.total_gib == pytest.approx(m)
    q = A.Setup("H100", 8, 1, "bf16", 8192, 3, "fsdp=8,mb=3,ac=selective", "fsdp")
    mid = A.predict_anchored(shape, q, anchors).prediction.memory.total_gib
    assert peaks[1] < mid < peaks[2]  # between its neighbours in micro-batch


def _grid(gpus: int = 16):
    from cloudfit.llm import space as lsp

    sh = get("llama3-8b")
    return token_stats(sh, 8192), lsp.layout_grid(gpus, nvlink_domain=8, heads=sh.heads, kv_heads=sh.kv_heads,
                                                  layers=sh.layers, seq_len=8192, global_batch=128)


def test_the_memory_parts_as_columns_are_estimate_to_the_bit():
    from cloudfit.llm import space as lsp

    st, g = _grid()
    parts = lsp.memory_parts(st, g, framework="fsdp")
    total = lsp.memory_gib(st, g, framework="fsdp")
    for i in range(0, len(g), max(1, len(g) // 60)):
        e = mem.estimate(st, g.layout(i), capacity_gib=80.0, framework="fsdp")
        got = {k: float(parts[k][i]) for k in ("weights", "gradients", "optimizer", "activations", "logits",
                                                "buffers", "overhead", "total")}
        assert got == {"weights": e.weights_gib, "gradients": e.gradients_gib, "optimizer": e.optimizer_gib,
                       "activations": e.activations_gib, "logits": e.logits_gib, "buffers": e.buffers_gib,
                       "overhead": e.overhead_gib, "total": e.total_gib}
        assert total[i] == pytest.approx(e.total_gib, rel=1e-12)


@pytest.mark.parametrize("fit", [A.MemoryFit(1.3, 2.5, None, "activations", 1),
                                 A.MemoryFit(0.8, 1.2, None, "activations+fixed", 2),
                                 A.MemoryFit(1.0, None, 0.7, "factor", 1)])
def test_the_search_anchors_every_layout_as_apply_memory_anchors_one(fit):
    """The vectorised anchored memory of the cluster search is, row by row, ``apply_memory`` of ``estimate``."""
    from cloudfit.llm import space as lsp

    st, g = _grid()
    got = lsp.anchored_memory_gib(st, g, fit)
    for i in range(0, len(g), max(1, len(g) // 60)):
        e = mem.estimate(st, g.layout(i), capacity_gib=80.0, framework="cloudfit")
        want = A.apply_memory(e, fit).total_gib
        assert got[i] == want if not fit.factor else got[i] == pytest.approx(want, rel=1e-12)
    assert (lsp.anchored_memory_gib(st, g, None) == lsp.memory_gib(st, g)).all()


def test_the_activation_scale_carries_to_other_gpus_and_the_fixed_part_stays_theirs():
    shape = get("llama3-8b")
    setups = [A.Setup("H100", 8, 1, "bf16", 8192, b, f"fsdp=8,mb={b},ac=selective", "fsdp") for b in (1, 4)]
    anchors = [A.run_anchor(shape, s, 41000, memory_gib=m) for s, m in zip(setups, (30.0, 66.0))]
    on = A.memory_fit_for(anchors, A.Setup("H100", 8, 2, "bf16", 8192, 2, "fsdp=16,mb=2,ac=selective", "fsdp"))
    assert on.kind == "activations+fixed" and on.fixed_gib != pytest.approx(mem.OVERHEAD_GIB)
    b200 = A.Setup("B200", 8, 1, "bf16", 8192, 2, "fsdp=8,mb=2,ac=selective", "fsdp")
    off = A.memory_fit_for(anchors, b200)
    assert off.activation_scale == on.activation_scale and off.fixed_gib == mem.OVERHEAD_GIB
    p = A.predict_anchored(shape, b200, anchors).prediction.memory  # predict --profile follows the same rule
    e = A._predict(shape, b200, constants()).memory
    assert p.total_gib == A.apply_memory(e, off).total_gib
    assert A.memory_fit_for([A.run_anchor(shape, setups[0], 41000)], b200) is None  # no peak: nothing to anchor
