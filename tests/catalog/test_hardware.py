"""The accelerator table: names, precision fallbacks, links."""

from __future__ import annotations

import pytest

from cloudfit import catalog
from cloudfit.catalog import hardware
from cloudfit.errors import UnknownAcceleratorError, UsageError


def test_every_catalog_accelerator_has_specs():
    for acc in catalog.load().accelerators:
        spec = hardware.get(acc)
        assert spec.memory_gib > 0 and spec.memory_bandwidth_gbps > 0 and spec.fp32_tflops > 0


@pytest.mark.parametrize("raw, canon", [("a100", "A100"), ("A100-40GB", "A100"), ("nvidia-tesla-v100", "V100"),
                                        ("H100_MEGA", "H100-MEGA"), ("nvidia l4", "L4"), ("b200", "B200")])
def test_canonical_names(raw, canon):
    assert hardware.canonical_name(raw) == canon


def test_unknown_accelerator_is_a_usage_error():
    with pytest.raises(UnknownAcceleratorError) as e:
        hardware.get("TPU-v9")
    assert isinstance(e.value, UsageError) and "unknown accelerator 'TPU-v9'" in str(e.value)


def test_precision_fallbacks():
    v100, p4, a100, h100 = (hardware.get(n) for n in ("V100", "P4", "A100", "H100"))
    assert v100.peak_tflops("fp16") == 125 and v100.peak_tflops("bf16") == v100.fp32_tflops
    assert p4.peak_tflops("fp16") == p4.fp32_tflops
    assert a100.peak_tflops("fp8") == 312 and h100.peak_tflops("fp8") == 1979
    assert a100.peak_tflops("tf32") == 156
    with pytest.raises(ValueError):
        a100.peak_tflops("int4")


def test_links():
    assert hardware.intra_node_gbps("A100", 1) == float("inf")
    assert hardware.intra_node_gbps("A100", 8) == pytest.approx(240)
    assert hardware.intra_node_gbps("T4", 4) < hardware.intra_node_gbps("L4", 4) < hardware.intra_node_gbps("V100", 4)
    assert hardware.vm_network_gbps("a3-megagpu-8g", "H100-MEGA", 8, 208) == 1800
    assert hardware.vm_network_gbps("a2-highgpu-1g", "A100", 1, 12) == 24
    assert hardware.vm_network_gbps("a2-highgpu-8g", "A100", 8, 96) == 100
    assert hardware.vm_network_gbps("n1-highmem-8", "P100", 1, 8) == 16
    assert hardware.vm_network_gbps("n1-highmem-64", "V100", 8, 64) == 100
    assert hardware.vm_network_gbps("n1-highmem-64", "P4", 4, 64) == 32


def test_chip_structure_is_known_for_every_accelerator():
    for a in hardware.ACCELERATORS.values():
        assert a.sms > 0 and a.clock_mhz > 0 and a.l2_mib > 0, a.name
        # the fp32 rate is SMs × FP32 lanes × 2 × clock with 64 or 128 lanes per SM (K80 dies: 192)
        lanes = a.fp32_tflops * 1e6 / (2 * a.sms * a.clock_mhz)
        assert 50 <= lanes <= 200, (a.name, lanes)


def test_fp32_on_tf32_hardware_gets_a_precision_note():
    assert "TF32" in hardware.precision_note("A100", "fp32")
    assert "TF32" in hardware.precision_note("nvidia-h100-80gb", "FP32")
    assert hardware.precision_note("V100", "fp32") == ""
    assert hardware.precision_note("A100", "tf32") == ""
    assert hardware.precision_note("A100", "fp16") == ""


def test_inline_ecc_costs_bandwidth_only_where_check_bits_share_the_bus():
    """Kepler's GDDR5 ECC (K80) carries its check bits inline: less sustained bandwidth than the datasheet.
    HBM parts (P100 onwards) keep ECC side-band at no bandwidth cost, and parts whose kernel tables were
    measured in the cloud (ECC included) are not derated a second time."""
    k80 = hardware.get("K80")
    assert 0.7 <= k80.sustained_bandwidth_gbps / k80.memory_bandwidth_gbps < 1.0
    for name in ("P100", "V100", "A100", "H100", "T4", "L4", "P4"):
        spec = hardware.get(name)
        assert spec.sustained_bandwidth_gbps == spec.memory_bandwidth_gbps


def test_the_prior_runs_memory_bound_work_at_the_sustained_bandwidth():
    from cloudfit.perf import features

    hw = features.hardware_arrays(["K80", "P100"], "fp32")
    assert hw.mem_bw_gbps[0] == pytest.approx(hardware.get("K80").sustained_bandwidth_gbps)
    assert hw.mem_bw_gbps[0] < hardware.get("K80").memory_bandwidth_gbps
    assert hw.mem_bw_gbps[1] == hardware.get("P100").memory_bandwidth_gbps


def test_board_variants_carry_their_own_datasheet_specs():
    """Training rows keep the board they ran on (bench/RESULTS_perf.md, issue 15): the DGX-1's P100 is the SXM2
    module (NVIDIA Tesla P100 datasheet: 10.6 / 21.2 TFLOPS at 1480 MHz, 300 W, against the PCIe card's 9.3 /
    18.7 at 250 W) and Lambda's A100 80GB PCIe moves 1,935 GB/s at 300 W (A100 datasheet; SXM4: 2,039 GB/s,
    400 W) with the same peaks. Each is a board of the catalog accelerator, not an accelerator of its own."""
    p100, sxm2 = hardware.get("P100"), hardware.get("P100-SXM2")
    assert sxm2.fp32_tflops == 10.6 and sxm2.fp16_tflops == 21.2 and sxm2.clock_mhz == 1480
    assert sxm2.fp32_tflops == pytest.approx(sxm2.sms * 64 * 2 * sxm2.clock_mhz / 1e6, rel=0.01)  # 64 lanes/SM
    assert sxm2.fp32_tflops > p100.fp32_tflops
    assert sxm2.memory_bandwidth_gbps == p100.memory_bandwidth_gbps and sxm2.sms == p100.sms
    sxm4, pcie = hardware.get("A100-80GB"), hardware.get("A100-80GB-PCIe")
    assert pcie.memory_bandwidth_gbps == 1935 < sxm4.memory_bandwidth_gbps == 2039
    assert pcie.tdp_w == 300 < sxm4.tdp_w
    for prec in ("fp32", "tf32", "fp16", "bf16"):
        assert pcie.peak_tflops(prec) == sxm4.peak_tflops(prec)
    assert hardware.accelerator_of("P100-SXM2") == "P100" and hardware.accelerator_of("A100-80GB-PCIe") == "A100-80GB"
    assert hardware.accelerator_of("H100-PCIe") == "H100-PCIe"  # another chip configuration (114 SMs), not a board
    assert hardware.canonical_name("A100-PCIE-80GB") == "A100-80GB-PCIe"
