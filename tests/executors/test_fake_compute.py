"""The fake Compute Engine server, driven by the real google-cloud-compute client (REST transport)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gex
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from tests.executors.conftest import PROJECT

ZONE = "us-central1-a"


@pytest.fixture
def clients(fake):
    kw = dict(transport="rest", credentials=AnonymousCredentials(), client_options=ClientOptions(api_endpoint=fake.endpoint))
    return compute_v1.InstancesClient(**kw), compute_v1.ZoneOperationsClient(**kw)


def _vm(name: str, cluster: str, spot: bool = True, mrd: int | None = None) -> compute_v1.Instance:
    sched = compute_v1.Scheduling(provisioning_model="SPOT" if spot else "STANDARD", instance_termination_action="DELETE")
    if mrd is not None:
        sched.max_run_duration = compute_v1.Duration(seconds=mrd)
    return compute_v1.Instance(name=name, machine_type=f"zones/{ZONE}/machineTypes/n1-highmem-8",
                               labels={"cloudfit-cluster": cluster}, scheduling=sched)


def _wait(ops, op_name):
    op = ops.wait(project=PROJECT, zone=ZONE, operation=op_name)
    assert op.status == compute_v1.Operation.Status.DONE
    return op


def test_insert_get_list_filter_delete(fake, clients):
    inst, ops = clients
    for name, cluster in (("a-0", "a"), ("a-1", "a"), ("b-0", "b")):
        _wait(ops, inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm(name, cluster)).name)
    got = inst.get(project=PROJECT, zone=ZONE, instance="a-0")
    assert got.status == "RUNNING" and got.network_interfaces[0].network_i_p.startswith("10.")
    assert got.scheduling.max_run_duration.seconds == 0
    req = compute_v1.ListInstancesRequest(project=PROJECT, zone=ZONE, filter="labels.cloudfit-cluster = a")
    assert sorted(i.name for i in inst.list(request=req)) == ["a-0", "a-1"]
    agg = compute_v1.AggregatedListInstancesRequest(project=PROJECT, filter="labels.cloudfit-cluster = b")
    assert [(scope, [i.name for i in s.instances]) for scope, s in inst.aggregated_list(request=agg)] == [(f"zones/{ZONE}", ["b-0"])]
    _wait(ops, inst.delete(project=PROJECT, zone=ZONE, instance="a-0").name)
    with pytest.raises(gex.NotFound):
        inst.get(project=PROJECT, zone=ZONE, instance="a-0")
    with pytest.raises(gex.Conflict):
        inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm("a-1", "a"))
    assert fake.vms() == ["a-1", "b-0"]


def test_stockout_and_quota_arrive_inside_the_operation(fake, clients):
    inst, ops = clients
    fake.stockout(ZONE)
    op = _wait(ops, inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm("s-0", "s")).name)
    assert op.error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    fake.faults.clear()
    fake.quota(ZONE)
    op = _wait(ops, inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm("q-0", "q")).name)
    assert op.error.errors[0].code == "QUOTA_EXCEEDED"
    fake.faults.clear()
    fake.quota(ZONE, sync=True)
    with pytest.raises(gex.Forbidden, match="Quota"):
        inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm("q-1", "q"))
    assert fake.vms() == []


def test_http_errors_are_google_json_errors(fake, clients):
    inst, _ = clients
    fake.http_errors(429, 1)
    fake.http_errors(503, 1)
    with pytest.raises(gex.TooManyRequests):
        inst.get(project=PROJECT, zone=ZONE, instance="x", retry=None)
    with pytest.raises(gex.ServiceUnavailable):
        inst.get(project=PROJECT, zone=ZONE, instance="x", retry=None)
    with pytest.raises(gex.NotFound):
        inst.get(project=PROJECT, zone=ZONE, instance="x", retry=None)


def test_preemption_deletes_the_vm_and_leaves_a_zone_operation(fake, clients):
    inst, ops = clients
    _wait(ops, inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm("p-0", "p")).name)
    fake.preempt("p-0")
    with pytest.raises(gex.NotFound):  # termination action DELETE
        inst.get(project=PROJECT, zone=ZONE, instance="p-0")
    req = compute_v1.ListZoneOperationsRequest(project=PROJECT, zone=ZONE,
                                               filter="operationType = compute.instances.preempted")
    [op] = list(ops.list(request=req))
    assert op.target_link.endswith("/instances/p-0")


def test_max_run_duration_is_enforced_and_validated(fake, clients):
    inst, ops = clients
    with pytest.raises(gex.BadRequest):
        inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm("m-0", "m", mrd=5))  # below 30 s
    _wait(ops, inst.insert(project=PROJECT, zone=ZONE, instance_resource=_vm("m-1", "m", mrd=30)).name)
    assert fake.vms("m") == ["m-1"]


def test_regions_get_answers_quotas_and_404_and_refuses_on_request(fake):
    """regions.get through the real RegionsClient: the quotas set on the fake, 404 for an unknown region,
    and an injected 403 (what `recommend --quota gcp` reads)."""
    kw = dict(transport="rest", credentials=AnonymousCredentials(), client_options=ClientOptions(api_endpoint=fake.endpoint))
    regions = compute_v1.RegionsClient(**kw)
    fake.region_quotas["us-central1"] = {"NVIDIA_H100_GPUS": (16.0, 4.0), "PREEMPTIBLE_NVIDIA_H100_GPUS": (64.0, 0.0)}
    r = regions.get(project=PROJECT, region="us-central1")
    got = {q.metric: (q.limit, q.usage) for q in r.quotas}
    assert got == {"NVIDIA_H100_GPUS": (16.0, 4.0), "PREEMPTIBLE_NVIDIA_H100_GPUS": (64.0, 0.0)}
    with pytest.raises(gex.NotFound):
        regions.get(project=PROJECT, region="mars-north1")
    fake.http_errors(403, 1, path_re=r"/regions/")
    with pytest.raises(gex.Forbidden):
        regions.get(project=PROJECT, region="us-central1")
