"""The stop's checkpoint against each cloud's preemption notice (issue 34): a checkpoint that cannot finish
before the kill saves nothing, so each preemption loses the work since the last interval checkpoint — the
price counts it and the plan says so; one that fits is said to fit (and the price still counts the loss:
notices are best effort)."""

from __future__ import annotations

import pytest

from cloudfit.catalog.clouds import get
from cloudfit.llm import zoo
from cloudfit.plan.llm import LLMJob, recommend_llm
from cloudfit.spot import DEFAULT_OVERHEADS, assess_one
from cloudfit.spot.checkpointing import preemption_notice
from cloudfit.workload import make_workload

LAM = 0.168  # 16 nodes × 0.0105 per node-hour (the pooled GPU rate)


def _priced(write_s: float, hours: float = 100.0):
    """A 16-node spot run whose checkpoint takes ``write_s``: the model's row and the notice check."""
    gb = (write_s - DEFAULT_OVERHEADS.checkpoint_base_s) / DEFAULT_OVERHEADS.checkpoint_s_per_gb
    row = assess_one(hours, nodes=16, spot=True, hazard_per_node_hour=LAM / 16, checkpoint_bytes=gb * 1e9)
    return row, preemption_notice("gcp", spot=True, write_s=write_s, interval_h=row.checkpoint_interval_h,
                                  hazard_per_hour=LAM, preemptions=row.expected_preemptions)


def test_the_notices_are_the_providers_documented_ones():
    assert get("gcp").preemption_notice_s == 30.0  # Spot VMs: ACPI G2 soft off → G3 mechanical off
    assert get("aws").preemption_notice_s == 120.0  # EC2 Spot interruption notice: two minutes
    assert get("nebius").preemption_notice_s is None  # none published: never counted on


def test_a_checkpoint_longer_than_the_notice_loses_more_work_per_preemption_and_the_price_counts_it():
    slow_row, slow = _priced(143.6)  # the README's LLM plan: 112 GB from 16 writers
    fast_row, fast = _priced(10.0)
    assert not slow["fits"] and fast["fits"] and slow["notice_s"] == fast["notice_s"] == 30.0
    # Young/Daly: the interval grows as √C, so the work at stake per preemption (≈ half an interval) does too
    assert slow["lost_per_preemption_h"] > fast["lost_per_preemption_h"] > 0
    assert slow["lost_per_preemption_h"] == pytest.approx(0.5 * (slow_row.checkpoint_interval_h + 143.6 / 3600), rel=0.1)
    assert slow["expected_lost_h"] > fast["expected_lost_h"]
    # the price counts it: the overhead over pure compute holds the lost work (and more: writes, restarts)
    for row, n in ((slow_row, slow), (fast_row, fast)):
        assert n["lost_work_priced"] and row.overhead_hours > n["expected_lost_h"] > 0
    assert slow_row.hours > fast_row.hours
    assert "cannot finish in GCP's 30 s preemption notice" in slow["note"]
    assert "fits GCP's 30 s preemption notice" in fast["note"]


def test_the_step_in_progress_counts_and_on_demand_has_no_notice():
    n = preemption_notice("aws", spot=True, write_s=100.0, step_s=30.0, interval_h=1.0, hazard_per_hour=0.2,
                          preemptions=1.0)
    assert n["save_s"] == 130.0 and not n["fits"]  # 100 s alone would fit AWS's 120 s; the step first
    assert preemption_notice("gcp", spot=False, write_s=1.0, interval_h=1.0, hazard_per_hour=0.0,
                             preemptions=0.0) is None
    unknown = preemption_notice("nebius", spot=True, write_s=1.0, interval_h=1.0, hazard_per_hour=0.2, preemptions=1.0)
    assert not unknown["fits"] and "publishes no preemption notice" in unknown["note"]


def test_the_readme_llm_plan_says_its_checkpoint_cannot_finish_in_gcps_notice():
    job = LLMJob(zoo.get("llama3-8b"), 1e11, 8192)
    w = make_workload(model="llama3-8b", samples=1e11 / 8192, deadline="7d", regions=["us-central1"],
                      precision="bf16")
    plan = recommend_llm(w, job)
    n = plan.provenance["preemption_notice"]
    assert plan.chosen.config.spot and plan.chosen.config.offering.cloud == "gcp"
    assert n["write_s"] == pytest.approx(plan.layout["checkpoint"]["write_s"], abs=1e-3) and n["write_s"] > 100
    assert not n["fits"] and n["save_s"] > n["write_s"] > n["notice_s"] == 30.0 and n["expected_lost_h"] > 0
    assert n["note"] in plan.explanation
