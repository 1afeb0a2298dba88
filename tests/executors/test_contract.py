"""The Executor contract (see cloudfit/executors/base.py), run against every backend.

local: real torch.distributed processes (2 gloo ranks of the zoo's tiny mlp);
gcp: the real google-cloud-compute client against the fake Compute Engine server;
replay: a table of measurements (it keeps no state store: the store checks apply where there is one);
sky: SkyPilot's client functions faked at the API boundary (tests/fakes/sky_api.py), on an AWS spot config.
Every backend is built through the registry, ``get_executor``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cloudfit.errors import UsageError
from cloudfit.executors import state as st
from cloudfit.executors.base import Event, JobSpec, RunSpec
from cloudfit.types import ClusterConfig
from tests.executors.plans import offering


@dataclass
class Backend:
    name: str
    executor: object
    config: ClusterConfig
    job: JobSpec


@pytest.fixture(params=["local", "gcp", "replay", "sky"])
def backend(request, tmp_path):
    from cloudfit.executors import get_executor

    config = ClusterConfig(offering(price=1.8, spot=0.6), 2, True)
    if request.param == "local":
        return Backend("local", get_executor("local", max_ranks=2), config,
                       JobSpec(model="mlp", steps=150, checkpoint_every=50, checkpoint_dir=str(tmp_path / "ckpt")))
    if request.param == "replay":
        table = {("T4", 1, 2, 32, "fp32"): 1234.0}
        return Backend("replay", get_executor("replay", table=table, probe_seconds=60), config,
                       JobSpec(model="mlp", steps=150, batch_size_per_device=32))
    if request.param == "sky":
        from cloudfit.types import Offering
        from tests.fakes.sky_api import FakeSky

        FakeSky().install(request.getfixturevalue("monkeypatch"))
        aws = Offering("g6.12xlarge", "L4", 4, 48, 192, "us-east-1", "use1-az4", 1.8, 0.6, cloud="aws")
        return Backend("sky", get_executor("sky", interval_s=0.05, grace_s=0.5, teardown_s=1.0), ClusterConfig(aws, 2, True),
                       JobSpec(model="mlp", steps=150, checkpoint_every=50, checkpoint_dir="s3://ckpt-bucket/ckpt"))
    fake = request.getfixturevalue("fake")
    ex = request.getfixturevalue("gcp")()
    b = Backend("gcp", ex, config, JobSpec(model="mlp", steps=150, checkpoint_every=50, checkpoint_dir="gs://ckpt-bucket/ckpt"))
    b.fake = fake  # type: ignore[attr-defined]
    return b


def _spec(b: Backend, name: str, budget: float = 2.0) -> RunSpec:
    return RunSpec(name, (b.config,), b.job, budget)


def test_preview_creates_nothing(backend):
    pv = backend.executor.preview(_spec(backend, "pv"))
    assert pv.nodes and pv.backend == backend.name
    assert 0 < pv.cost_cap_usd <= pv.budget_usd
    assert all(n.labels["cloudfit-cluster"] == "pv" and n.max_run_duration_s > 0 for n in pv.nodes)
    assert backend.executor.backend == backend.name
    if hasattr(backend.executor, "store"):
        assert backend.executor.store.find_cluster("pv") is None
    assert backend.executor.live("pv") == []


def test_run_completes_within_budget_and_leaves_nothing(backend):
    events: list[Event] = []
    r = backend.executor.run(_spec(backend, "ok"), on_event=events.append)
    assert r.reason == "completed" and r.steps == r.total_steps == 150
    assert 0 < r.spend_usd <= 2.0 and r.samples_per_second
    assert any(e.kind == "progress" for e in events)
    assert backend.executor.live("ok") == [] and r.backend == backend.name
    if not hasattr(backend.executor, "store"):
        assert backend.executor.down("ok").deleted == ()
        return
    store = backend.executor.store
    rec = store.cluster("ok")
    assert rec.status == st.ENDED and rec.reason == "completed" and rec.spend_usd == pytest.approx(r.spend_usd)
    rows = store.resources("ok")
    assert rows and not any(x.live for x in rows)
    assert all(x.created_at is not None and x.intent_at <= x.created_at for x in rows)
    backend.executor.down("ok")  # harmless afterwards
    assert backend.executor.live("ok") == []


def test_budget_below_one_interval_creates_nothing(backend):
    if backend.name == "replay":  # a probe it cannot pay ends as a "budget" run with nothing spent
        r = backend.executor.run(_spec(backend, "tiny", budget=1e-6))
        assert r.reason == "budget" and r.spend_usd == 0 and backend.executor.live("tiny") == []
        return
    with pytest.raises(UsageError, match="below one guard interval"):
        backend.executor.run(_spec(backend, "tiny", budget=1e-6))
    assert backend.executor.store.find_cluster("tiny") is None
    assert backend.executor.live("tiny") == []


def test_interrupt_tears_everything_down(backend):
    def interrupt(e: Event) -> None:
        if e.kind == "created":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        backend.executor.run(_spec(backend, "intr"), on_event=interrupt)
    assert backend.executor.live("intr") == []
    if not hasattr(backend.executor, "store"):
        return
    rec = backend.executor.store.cluster("intr")
    assert rec.reason == "interrupted" and not any(x.live for x in backend.executor.store.resources("intr"))
