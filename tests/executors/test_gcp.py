"""The GCP executor against the fake Compute Engine server (real client, REST, anonymous credentials)."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from cloudfit.errors import LaunchError, UsageError
from cloudfit.executors import state as st
from cloudfit.executors.base import JobSpec, RunSpec
from cloudfit.executors.gcp import Retry, make_clients
from cloudfit.types import ClusterConfig
from tests.executors.conftest import PROJECT, FastClock
from tests.executors.plans import offering

CKPT = "gs://bucket/runs/x"


def spec(name, *configs, budget=50.0, steps=100, **kw) -> RunSpec:
    return RunSpec(name, tuple(configs), JobSpec(model="mlp", steps=steps, checkpoint_dir=CKPT), budget, **kw)


def t4(zone="us-central1-a", nodes=2, spot=True) -> ClusterConfig:
    return ClusterConfig(offering(zone), nodes, spot)


def a100(zone="us-east1-c", nodes=1, spot=False) -> ClusterConfig:
    return ClusterConfig(offering(zone, "a2-highgpu-2g", "A100", 2, 7.3, 2.2), nodes, spot)


def _meta(body, key):
    return next((i["value"] for i in body["metadata"]["items"] if i["key"] == key), None)


def _when(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_vms_carry_the_plan(fake, gcp):
    ex = gcp()
    r = ex.run(spec("shape", t4(nodes=2)))
    assert r.reason == "completed" and r.steps == 100 and fake.vms() == []
    n0, n1 = fake.inserted
    assert n0["name"] == "shape-0" and n0["machineType"] == "zones/us-central1-a/machineTypes/n1-highmem-8"
    assert n0["guestAcceleratorList" if False else "guestAccelerators"] == [
        {"acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 1}]
    sch = n0["scheduling"]
    assert sch["provisioningModel"] == "SPOT" and sch["onHostMaintenance"] == "TERMINATE"
    assert sch["instanceTerminationAction"] == "DELETE" and int(sch["maxRunDuration"]["seconds"]) > 3600
    launch = ex.store.cluster("shape").info["launch_id"]
    assert len(launch) == 32 and n1["labels"]["cloudfit-launch"] == launch
    assert n0["labels"] == {"cloudfit-cluster": "shape", "cloudfit-node": "0", "cloudfit-launch": launch}
    assert "deeplearning-platform-release" in n0["disks"][0]["initializeParams"]["sourceImage"]
    # node 1 rendezvouses at node 0's internal IP; node 0 hosts it
    ip0 = next(r.info["internal_ip"] for r in ex.store.resources("shape") if r.name == "shape-0")
    assert _meta(n0, "cloudfit-master-addr") == "self" and _meta(n1, "cloudfit-master-addr") == ip0
    script = _meta(n0, "startup-script")
    assert script == _meta(n1, "startup-script")
    assert "--rdzv-backend=c10d" in script and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in script
    assert "gs://" not in script.split("BUCKET=")[1].split("\n")[0] and "BUCKET=bucket" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid shell
    # every VM was written down before its insert call, and confirmed after
    rows = ex.store.resources("shape")
    assert [r.state for r in rows] == [st.DELETED, st.DELETED] and all(r.intent_at <= r.created_at for r in rows)
    rec = ex.store.cluster("shape")
    assert rec.reason == "completed" and 0 < rec.spend_usd <= 50.0


def test_accelerator_optimized_shapes_have_gpus_built_in(fake, gcp):
    gcp().run(spec("a2", a100()))
    [body] = fake.inserted
    assert "guestAccelerators" not in body and body["scheduling"]["provisioningModel"] == "STANDARD"


def test_stockout_on_a_later_node_deletes_the_partial_cluster_and_falls_back(fake, gcp):
    fake.stockout("us-central1-a", after=2)  # nodes 0 and 1 come up, node 2 hits the stockout
    ex = gcp()
    r = ex.run(spec("so", t4("us-central1-a", 3), t4("us-central1-b", 3)))
    assert r.reason == "completed" and r.config.offering.zone == "us-central1-b"
    assert "stockout" in r.fallbacks[0]
    zones = [b["name"] for b in fake.inserted]
    assert zones == ["so-0", "so-1", "so-0", "so-1", "so-2"]  # the refused insert is not recorded by the fake
    assert fake.count("DELETE", r"/zones/us-central1-a/instances/so-[01]$") == 2
    rows = ex.store.resources("so")
    assert [(r.zone[-1], r.state) for r in rows] == [("a", st.DELETED), ("a", st.DELETED), ("a", st.FAILED),
                                                     ("b", st.DELETED), ("b", st.DELETED), ("b", st.DELETED)]
    assert fake.vms() == []


@pytest.mark.parametrize("sync", [False, True], ids=["in-operation", "http-403"])
def test_quota_errors_fall_back_too(fake, gcp, sync):
    fake.quota("us-central1-a", sync=sync)
    r = gcp().run(spec("qu", t4("us-central1-a", 1), a100("us-east1-c")))
    assert r.reason == "completed" and r.config.offering.machine_type == "a2-highgpu-2g"
    assert "quota" in r.fallbacks[0].lower()


def test_no_capacity_anywhere_is_a_launch_error_with_nothing_left(fake, gcp):
    fake.stockout("us-central1-a")
    fake.stockout("us-central1-b")
    ex = gcp()
    with pytest.raises(LaunchError, match="no alternative"):
        ex.run(spec("none", t4("us-central1-a", 2), t4("us-central1-b", 2)))
    assert fake.vms() == [] and ex.store.cluster("none").reason == "no-capacity"


def test_429_and_503_are_retried_with_backoff(fake, gcp):
    fake.http_errors(429, 2, method="POST", path_re=r"/instances$")
    fake.http_errors(503, 3, method="GET")
    ex = gcp()
    r = ex.run(spec("retry", t4(nodes=1)))
    assert r.reason == "completed"
    assert sum(1 for _, _, code in fake.requests if code == 429) == 2
    assert sum(1 for _, _, code in fake.requests if code == 503) == 3
    assert ex.retry.retried == 5
    assert len(fake.inserted) == 1  # retried inserts did not create twins


def test_persistent_503_gives_up_with_a_clear_error(fake, gcp):
    fake.http_errors(503, 100, method="POST")
    ex = gcp(retry=Retry(attempts=3, base_s=0.001))
    with pytest.raises(LaunchError, match="gave up after 3 attempts"):
        ex.run(spec("flaky", t4(nodes=1)))
    assert fake.vms() == []


def test_a_preempted_node_is_recreated_with_its_address_and_the_job_completes(fake, gcp):
    fake.simulate_job_s = 1.5
    ex = gcp()
    box = {}

    def preempt_head():
        _when(lambda: fake.vms("pre", statuses=("RUNNING",)) == ["pre-0", "pre-1"])
        box["ip"] = next(r.info["internal_ip"] for r in ex.store.resources("pre") if r.name == "pre-0" and r.created_at)
        fake.preempt("pre-0")

    t = threading.Thread(target=preempt_head)
    t.start()
    r = ex.run(spec("pre", t4(nodes=2)))
    t.join()
    assert r.reason == "completed" and r.preemptions == 1
    again = [b for b in fake.inserted if b["name"] == "pre-0"]
    assert len(again) == 2 and again[1]["networkInterfaces"][0]["networkIP"] == box["ip"]
    assert _meta(again[1], "startup-script") == _meta(again[0], "startup-script")  # same job, same checkpoints
    ended = [x.info.get("ended") for x in ex.store.resources("pre") if x.name == "pre-0"]
    assert ended == ["preempted", "deleted"]
    assert fake.vms() == []


def test_budget_stop_asks_for_a_checkpoint_then_deletes_everything(fake, gcp):
    fake.simulate_job_s = 1e6  # the job would run for ever
    clock = FastClock(speed=40)  # guard seconds pass 40× faster than real ones
    ex = gcp(clock=clock, sleep=clock.sleep, interval_s=10, grace_s=20, teardown_s=100, provision_slack_s=0)
    budget = 4.0
    expensive = ClusterConfig(offering(price=72.0, spot=36.0), 2, True)  # $72/h: the budget lasts 200 s
    r = ex.run(spec("stop", expensive, budget=budget))
    assert r.reason == "budget" and 0.5 * budget < r.spend_usd <= budget, r
    assert fake.count("POST", r"/instances/stop-[01]/setMetadata$") == 2  # cloudfit-stop=1 on every node
    assert fake.vms() == []
    rec = ex.store.cluster("stop")
    assert rec.reason == "budget" and rec.spend_usd <= budget


def test_a_failed_job_ends_the_run(fake, gcp):
    fake.simulate_job_s = None
    threading.Thread(target=lambda: (_when(lambda: "fail-0" in fake.vms(statuses=("RUNNING",))),
                                     fake.set_guest("fail-0", "cloudfit/state", "failed"))).start()
    r = gcp().run(spec("fail", t4(nodes=1)))
    assert r.reason == "failed" and fake.vms() == []


def test_down_deletes_labelled_vms_missing_from_state_and_ignores_gone_ones(fake, gcp):
    from google.cloud import compute_v1

    ex = gcp()
    ex.store.create_cluster("orph", "gcp", 5.0, {"project": PROJECT, "launch_id": "l1"})
    ex.store.intend("orph", "vm", "orph-0", zone="us-central1-a", price_per_hour=1.0)  # never created
    c = ex.clients
    for name, launch in (("orph-9", "l1"), ("orph-8", "someone-else")):
        body = compute_v1.Instance(name=name, machine_type="zones/us-central1-b/machineTypes/n1-highmem-8",
                                   labels={"cloudfit-cluster": "orph", "cloudfit-launch": launch})
        c.instances.insert(project=PROJECT, zone="us-central1-b", instance_resource=body)
    _when(lambda: fake.vms("orph", statuses=("RUNNING",)) == ["orph-8", "orph-9"])
    res = ex.down("orph")
    assert res.untracked == ("orph-9",) and res.already_gone == ("orph-0",) and res.foreign == ("orph-8",)
    assert fake.vms() == ["orph-8"] and ex.store.cluster("orph").reason == "down"
    again = ex.down("orph")  # idempotent; another launch's VM is still left alone
    assert again.deleted == () and again.untracked == () and fake.vms() == ["orph-8"]
    forced = ex.down("orph", all_with_label=True)
    assert forced.untracked == ("orph-8",) and fake.vms() == []


def test_credentials_anonymous_only_for_loopback_http(fake):
    assert make_clients(PROJECT, fake.endpoint).instances._transport._credentials.__class__.__name__ == "AnonymousCredentials"
    with pytest.raises(UsageError, match="plain http"):
        make_clients(PROJECT, "http://compute.example.com:8080")


def test_gcp_launch_requires_a_bucket(fake, gcp):
    with pytest.raises(UsageError, match="gs://"):
        gcp().run(RunSpec("nob", (t4(),), JobSpec(model="mlp", steps=10, checkpoint_dir="/tmp/x"), 5.0))
    assert fake.requests == []


def test_down_from_another_process_ends_a_running_launch_without_recreating(fake, gcp):
    fake.simulate_job_s = 1e6
    ex, other = gcp(), gcp()  # two processes' worth of executors sharing the state store

    def down_when_running():
        _when(lambda: fake.vms("busy", statuses=("RUNNING",)) == ["busy-0", "busy-1"])
        other.down("busy")

    t = threading.Thread(target=down_when_running)
    t.start()
    r = ex.run(spec("busy", t4(nodes=2)))
    t.join()
    assert r.reason == "down" and len(fake.inserted) == 2 and fake.vms() == []
    assert ex.store.cluster("busy").reason == "down"


def test_no_capacity_to_replace_a_preempted_node_moves_the_whole_cluster(fake, gcp):
    fake.simulate_job_s = 1.5

    def preempt_into_a_stockout():
        _when(lambda: fake.vms("mv", statuses=("RUNNING",)) == ["mv-0", "mv-1"])
        fake.stockout("us-central1-a")
        fake.preempt("mv-1")

    t = threading.Thread(target=preempt_into_a_stockout)
    t.start()
    r = gcp().run(spec("mv", t4("us-central1-a", 2), t4("us-central1-b", 2)))
    t.join()
    assert r.reason == "completed" and r.preemptions == 1 and r.config.offering.zone == "us-central1-b"
    assert any("stockout" in f for f in r.fallbacks) and fake.vms() == []


def test_a_probe_run_measures_throughput_and_cleans_up(fake, gcp):
    from cloudfit.executors.base import probe_spec

    s = probe_spec(t4(nodes=1), model="mlp", steps=20, budget_usd=5.0, checkpoint_dir=CKPT, name="probe")
    r = gcp().run(s)
    assert r.reason == "completed" and r.samples_per_second == 1234.0  # what the (fake) VM reported
    assert fake.inserted[0]["labels"]["cloudfit-purpose"] == "probe" and fake.vms() == []


def test_node_0_preempted_before_its_address_is_known_is_replaced_during_creation(fake, gcp):
    fake.preempt_on_start = {"v-0"}
    r = gcp().run(spec("v", t4(nodes=2)))
    assert r.reason == "completed" and r.preemptions == 1
    v0 = [b for b in fake.inserted if b["name"] == "v-0"]
    v1 = next(b for b in fake.inserted if b["name"] == "v-1")
    assert len(v0) == 2 and _meta(v1, "cloudfit-master-addr").startswith("10.")
    assert fake.vms() == []


# ------------------------------------------------------------------------------ issue 14: capacity errors

@pytest.mark.parametrize("fault", ["stockout-503", "stockout-in-operation", "quota-403", "accelerator-not-found"])
def test_capacity_errors_fall_back_to_the_next_alternative_at_once(fake, gcp, fault):
    """Before: a synchronous HTTP 503 stockout was retried 7 times (~55 s) and then aborted the launch."""
    zone = "us-central1-a"
    {"stockout-503": lambda: fake.stockout(zone, sync=True), "stockout-in-operation": lambda: fake.stockout(zone),
     "quota-403": lambda: fake.quota(zone, sync=True), "accelerator-not-found": lambda: fake.not_offered(zone)}[fault]()
    ex = gcp(retry=Retry(base_s=1.0, cap_s=8.0))  # real backoff: a retried capacity error would take seconds
    t0 = time.monotonic()
    r = ex.run(spec("cap", t4(zone, 2), t4("us-central1-b", 2)))
    assert r.reason == "completed" and r.config.offering.zone == "us-central1-b", r
    assert ex.retry.retried == 0 and time.monotonic() - t0 < 8
    assert fake.count("POST", rf"/zones/{zone}/instances$") == 1  # asked once, not retried
    assert len(r.fallbacks) == 1 and fake.vms() == []
    [refused] = [x for x in ex.store.resources("cap") if x.zone == zone]
    assert refused.state == st.FAILED


def test_a_plain_503_is_still_retried_as_transient(fake, gcp):
    fake.http_errors(503, 2, method="POST", path_re=r"/instances$")
    ex = gcp()
    r = ex.run(spec("tr", t4(nodes=1), t4("us-central1-b", 1)))
    assert r.reason == "completed" and r.config.offering.zone == "us-central1-a" and ex.retry.retried == 2


def test_capacity_error_classification_reads_reasons_and_messages():
    from cloudfit.executors.gcp.clients import capacity_error

    assert capacity_error(["ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"], "") == "stockout"
    assert capacity_error([], "The zone 'z' does not have enough resources available") == "stockout"
    assert capacity_error(["QUOTA_EXCEEDED"], "") == "quota"
    assert capacity_error(["notFound"], "The resource 'projects/p/zones/z/acceleratorTypes/nvidia-h100' was not found",
                          status=404) == "not-offered"
    assert capacity_error(["backendError"], "injected HTTP 503", status=503) is None
    assert capacity_error(["notFound"], "The resource 'projects/p/zones/z/instances/x' was not found") is None


# ------------------------------------------------------------------------------ issue 14: launch identity

def test_a_second_launch_of_the_same_name_from_another_state_folder_never_adopts_or_deletes_the_first(
        fake, gcp, tmp_path):
    """Before: the second launch got a 409, saw the cloudfit-cluster label, adopted the first's VM and deleted it."""
    fake.simulate_job_s = 1e6
    first = gcp(store=st.StateStore(tmp_path / "laptop-a" / "state.db"))
    second = gcp(store=st.StateStore(tmp_path / "laptop-b" / "state.db"))
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", first.run(spec("twin", t4(nodes=1)))))
    t.start()
    _when(lambda: fake.vms("twin", statuses=("RUNNING",)) == ["twin-0"])
    with pytest.raises(LaunchError, match="already exists.*not this launch"):
        second.run(spec("twin", t4(nodes=1)))
    assert fake.vms("twin", statuses=("RUNNING",)) == ["twin-0"]  # untouched by the failed launch
    assert fake.count("DELETE", r"/instances/twin-0$") == 0
    res = second.down("twin")  # the second laptop's `down` leaves the first's VM alone
    assert res.foreign == ("twin-0",) and res.deleted == res.untracked == ()
    assert fake.vms("twin") == ["twin-0"] and fake.count("DELETE", r"/instances/twin-0$") == 0
    first_down = gcp(store=first.store).down("twin")  # the owner's `down` (another process, same folder) works
    t.join(timeout=30)
    assert box["r"].reason == "down" and first_down.deleted == ("twin-0",) and fake.vms() == []


def test_down_without_a_record_needs_all_with_label(fake, gcp):
    from google.cloud import compute_v1

    ex = gcp()
    body = compute_v1.Instance(name="lost-0", machine_type="zones/us-central1-b/machineTypes/n1-highmem-8",
                               labels={"cloudfit-cluster": "lost", "cloudfit-launch": "x"})
    ex.clients.instances.insert(project=PROJECT, zone="us-central1-b", instance_resource=body)
    _when(lambda: fake.vms("lost", statuses=("RUNNING",)) == ["lost-0"])
    with pytest.raises(UsageError, match="--all-with-label"):
        ex.down("lost")
    assert fake.vms() == ["lost-0"]
    assert ex.down("lost", all_with_label=True).untracked == ("lost-0",) and fake.vms() == []


# ------------------------------------------------------------------------------ issue 14: what the VMs install

def test_the_vms_get_this_very_cloudfit_as_a_wheel_in_metadata(fake, gcp, tmp_path, monkeypatch):
    """Before: the startup script ran `pip install cloudfit==0.1.0`, a package the index does not have."""
    import base64
    import hashlib
    import sys

    from cloudfit import __version__

    monkeypatch.delenv("CLOUDFIT_PIP_SPEC", raising=False)
    r = gcp().run(spec("whl", t4(nodes=1)))
    assert r.reason == "completed"
    [body] = fake.inserted
    chunks = sorted((k, v) for k, v in ((i["key"], i["value"]) for i in body["metadata"]["items"])
                    if k.startswith("cloudfit-wheel-"))
    assert chunks and all(len(v) <= 256 * 1024 for _, v in chunks)
    data = base64.b64decode("".join(v for _, v in sorted(chunks, key=lambda kv: int(kv[0].rsplit("-", 1)[1]))))
    script = _meta(body, "startup-script")
    assert f"WHEEL_SHA={hashlib.sha256(data).hexdigest()}" in script and "cloudfit==" not in script.split("PIP_ARGS=")[1][:40]
    wheel = tmp_path / f"cloudfit-{__version__}-py3-none-any.whl"
    wheel.write_bytes(data)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=120)
    out = subprocess.run([sys.executable, "-c", "import cloudfit, cloudfit.train, cloudfit.spot.checkpointing as c; "
                          "print(cloudfit.__version__, cloudfit.__file__)"],
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target)}, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    version, where = out.stdout.split()
    assert version == __version__ and where.startswith(str(target))


def test_the_runtime_wheel_is_reproducible():
    from cloudfit.executors.gcp.wheel import runtime_wheel

    assert runtime_wheel() == runtime_wheel()


def _insert_raw(ex, name, zone, cluster, launch):
    from google.cloud import compute_v1

    body = compute_v1.Instance(name=name, machine_type=f"zones/{zone}/machineTypes/n1-highmem-8",
                               labels={"cloudfit-cluster": cluster, "cloudfit-launch": launch})
    ex.clients.instances.insert(project=PROJECT, zone=zone, instance_resource=body)


def test_down_deletes_the_same_name_in_two_zones(fake, gcp):
    """VMs are (zone, name): one name in two zones is two VMs (it shadowed one before)."""
    ex = gcp()
    ex.store.create_cluster("twin", "gcp", 5.0, {"project": PROJECT, "launch_id": "l1"})
    for zone in ("us-central1-a", "us-central1-b"):
        ex.store.intend("twin", "vm", "twin-0", zone=zone, price_per_hour=1.0)
        _insert_raw(ex, "twin-0", zone, "twin", "l1")
    _when(lambda: len(fake.vms("twin", statuses=("RUNNING",))) == 2)
    ex.down("twin")
    assert fake.vms() == [] and ex.store.resources("twin", live_only=True) == []


def test_down_during_an_unanswered_insert_deletes_the_vm_that_then_appears(fake, gcp):
    """A launcher killed inside an insert call leaves an intent row and a request the cloud still honours:
    `down` used to mark the row deleted at once and forget the VM that appeared a moment later."""
    ex = gcp(insert_settle_s=20.0)
    ex.store.create_cluster("late", "gcp", 5.0, {"project": PROJECT, "launch_id": "l1"})
    ex.store.intend("late", "vm", "late-0", zone="us-central1-b", price_per_hour=1.0)
    fake.insert_delay_s = 1.5
    t = threading.Thread(target=_insert_raw, args=(gcp(), "late-0", "us-central1-b", "late", "l1"))
    t.start()
    time.sleep(0.3)  # the call is in flight, unanswered
    res = ex.down("late")
    t.join()
    assert fake.vms() == [] and res.pending == ()
    assert ex.store.resources("late", live_only=True) == [] and ex.store.cluster("late").ended


def test_every_vm_gets_the_plans_checkpoint_key_out_of_band_and_a_relaunch_continues_the_budget(fake, gcp):
    """The key is the plan's (a relaunch resumes its checkpoints), drawn once, kept in the state store,
    sent as instance metadata — never in the startup script, the preview, the labels or the cluster's info.
    The relaunch's guard starts from what the first launch spent."""
    ex = gcp()
    s = spec("keyed", t4(), record={"plan_id": "p-1"})
    pv = ex.preview(s)
    r = ex.run(s)
    assert r.reason == "completed"
    key = ex.store.checkpoint_key("p-1")
    assert len(key) == 64 and int(key, 16) >= 0
    keys = {_meta(b, "cloudfit-checkpoint-key") for b in fake.inserted}
    assert keys == {key}
    assert all(key not in _meta(b, "startup-script") and key not in str(b["labels"]) for b in fake.inserted)
    assert key not in repr(pv) and key not in str(ex.store.cluster("keyed").info)
    first = ex.store.cluster("keyed").spend_usd
    assert first > 0
    again = ex.run(spec("keyed2", t4(), record={"plan_id": "p-1"}))
    assert again.reason == "completed"
    assert ex.store.cluster("keyed2").info["spent_before_usd"] == pytest.approx(first)
    assert {_meta(b, "cloudfit-checkpoint-key") for b in fake.inserted} == {key}  # the same plan: the same key
    ex.run(spec("other", t4(), record={"plan_id": "p-2"}))
    assert len({_meta(b, "cloudfit-checkpoint-key") for b in fake.inserted}) == 2  # another plan: another key


def test_pip_spec_secrets_are_stripped_everywhere_and_its_words_stay_words(cli, fake, tmp_path, monkeypatch):
    """Issue 27: query-string secrets (a signed URL, ?token=) landed in metadata, --dry-run --json and
    state.db; a multi-word spec reached pip as one argument; `git+ssh://git@…` lost its user."""
    import json

    from cloudfit.executors.state import StateStore
    from tests.executors.plans import write_plan

    spec_text = ("cloudfit==1.2 --extra-index-url 'https://pypi.example.com/simple?token=SEKRET1' "
                 "'https://storage.googleapis.com/b/cloudfit.whl?X-Goog-Signature=SEKRET2&X-Goog-Credential=SEKRET3"
                 "&X-Goog-Date=20260101' git+ssh://git@github.com/org/cloudfit.git https://u:SEKRET4@h.example/x.whl")
    monkeypatch.setenv("CLOUDFIT_PIP_SPEC", spec_text)
    plan = write_plan(tmp_path / "plan.json", [ClusterConfig(offering("us-central1-a", price=None), 1, True)],
                      budget_usd=30)
    args = ["--backend", "gcp", "--project", PROJECT, "--compute-endpoint", fake.endpoint]
    r = cli("launch", str(plan), "--dry-run", "--json", "--name", "sek", *args)
    assert r.exit_code == 0, r.output
    assert "SEKRET" not in r.output and "git+ssh://git@github.com/org/cloudfit.git" in r.output
    assert "X-Goog-Date=20260101" in r.output  # harmless parameters stay
    r = cli("launch", str(plan), "--yes", "--name", "sek", "--steps", "20", "--check-interval", "0.1",
            *args, "--checkpoint-dir", "gs://ckpt-bucket/s")
    assert r.exit_code == 0, r.output
    sent = json.dumps(fake.inserted)
    assert "SEKRET" not in sent and "SEKRET" not in r.output
    assert b"SEKRET" not in b"".join(p.read_bytes() for p in StateStore().path.parent.glob("state.db*"))
    script = _meta(fake.inserted[0], "startup-script")
    line = next(l for l in script.splitlines() if l.startswith("PIP_ARGS="))
    words = subprocess.run(["bash", "-c", line + '\nprintf "%s\\n" "${PIP_ARGS[@]}"'], capture_output=True,
                           text=True).stdout.splitlines()
    assert words == ["cloudfit==1.2", "--extra-index-url", "https://pypi.example.com/simple",
                     "https://storage.googleapis.com/b/cloudfit.whl?X-Goog-Date=20260101",
                     "git+ssh://git@github.com/org/cloudfit.git", "https://h.example/x.whl"]
