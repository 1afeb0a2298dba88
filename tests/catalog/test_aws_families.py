"""Issue 33, item 4: the AWS catalog holds every instance family that trains, and each of its instance types
has a sourced network figure and a fabric (EFA or sockets over ENA)."""

from __future__ import annotations

from cloudfit import catalog
from cloudfit.catalog import hardware
from cloudfit.catalog import network

FAMILIES = {"g4dn": "T4", "g5": "A10G", "g6": "L4", "g6e": "L40S", "p3": "V100", "p3dn": "V100-32GB", "p4d": "A100",
            "p4de": "A100-80GB", "p5": "H100", "p5en": "H200", "p6-b200": "B200"}


def test_every_aws_family_that_trains_is_in_the_catalog_with_one_and_several_gpus():
    offs = catalog.load(clouds=("aws",)).offerings
    by_family: dict[str, set[int]] = {}
    for o in offs:
        fam = o.machine_type.split(".")[0]
        assert FAMILIES.get(fam) == o.accelerator, (o.machine_type, o.accelerator)
        by_family.setdefault(fam, set()).add(o.accelerators_per_node)
    assert set(by_family) == set(FAMILIES)
    for fam in ("g4dn", "g5", "g6", "g6e", "p3"):  # a 1-GPU host and an 8-GPU one
        assert {1, 8} <= by_family[fam], (fam, by_family[fam])


def test_every_aws_instance_type_has_a_sourced_network_and_a_fabric():
    types = {o.machine_type for o in catalog.load(clouds=("aws",)).offerings}
    for mt in types:
        assert mt in hardware.OTHER_CLOUD_GBPS, mt  # not the 10 Gbit/s documented default
        gbps, src = hardware.OTHER_CLOUD_GBPS[mt]
        fabric = network.fabric_of(mt)
        assert fabric == ("efa" if "EFA" in src and "no EFA" not in src else "ena"), (mt, src, fabric)
    # the smallest 1-GPU host with EFA is 8xlarge; xlarge has none (eksctl's EFASupported)
    for fam in ("g4dn", "g5", "g6", "g6e"):
        assert network.fabric_of(f"{fam}.8xlarge") == "efa" and network.fabric_of(f"{fam}.xlarge") == "ena"
    # the 8-GPU shape of a family sells more than its 4-GPU one
    assert hardware.vm_network_gbps("g6e.48xlarge", "L40S", 8, 192) > hardware.vm_network_gbps("g6e.12xlarge", "L40S", 4, 48)
