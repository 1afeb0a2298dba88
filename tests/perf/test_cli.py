"""`cloudfit predict` and `cloudfit model …` from the command line."""

from __future__ import annotations

import json

import pytest

from cloudfit.profiling import io as pio
from tests.conftest import run_cloudfit


def _shipped_name() -> str:
    names = sorted(pio.shipped_profiles())
    assert names, "no shipped profiles"
    return "resnet50" if "resnet50" in names else names[0]


def test_predict_json_keys(cli):
    r = cli("predict", "--profile", _shipped_name(), "--accelerator", "H100", "--count", "8", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for k in ("samples_per_second", "low", "high", "step_time_s", "breakdown", "basis", "fits"):
        assert k in d
    assert set(d["breakdown"]) == {"compute_s", "communication_s"}
    assert d["fits"] is True and d["low"] <= d["samples_per_second"] <= d["high"]
    assert d["step_time_s"] == pytest.approx(d["breakdown"]["compute_s"] + d["breakdown"]["communication_s"])


def test_predict_human_and_multi_node(cli):
    r = cli("predict", "-p", _shipped_name(), "-a", "a100", "-c", "8", "-n", "4", "--machine-type", "a2-highgpu-8g")
    assert r.exit_code == 0, r.output
    assert "samples/s" in r.stdout and "communication" in r.stdout


def test_predict_accepts_a_profile_path(cli, tmp_path):
    src = pio.resolve_profile(_shipped_name())
    dst = tmp_path / "mine.json"
    dst.write_text(src.read_text())
    r = cli("predict", "--profile", str(dst), "--accelerator", "L4", "--json")
    assert r.exit_code == 0, r.output


def test_does_not_fit_is_reported_not_predicted(cli):
    r = cli("predict", "-p", _shipped_name(), "-a", "T4", "--batch-size", "100000", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["fits"] is False and "GiB" in d["reason"] and d["samples_per_second"] == 0
    r = cli("predict", "-p", _shipped_name(), "-a", "T4", "--batch-size", "100000")
    assert r.exit_code == 0 and "does not fit" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (("--accelerator", "Z9000"), "unknown accelerator"),
    (("--accelerator", "A100", "--count", "0"), "--count must be between 1 and"),
    (("--accelerator", "A100", "--nodes", "0"), "--nodes must be between 1 and"),
    (("--accelerator", "A100", "--precision", "fp4"), "precision"),
    (("--accelerator", "A100", "--batch-size", "0"), "batch size"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    r = run_cloudfit("predict", "--profile", _shipped_name(), *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_profile_without_stats_exits_2(tmp_path):
    bad = tmp_path / "nostats.json"
    bad.write_text(json.dumps({"schema_version": 1, "model": "x", "measurements": []}))
    r = run_cloudfit("predict", "--profile", str(bad), "--accelerator", "A100")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = run_cloudfit("predict", "--profile", str(tmp_path / "missing.json"), "--accelerator", "A100")
    assert r.returncode == 2 and "not found" in r.stderr


def test_model_fit_writes_where_told_and_reports(cli_fitted_model):
    r, out = cli_fitted_model, cli_fitted_model.path  # one fit shared with test_model's determinism test
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["path"] == str(out) and out.is_file() and d["trees"] > 0 and d["model_version"].startswith("sha256:")


def test_model_fit_rejects_missing_inputs(tmp_path):
    r = run_cloudfit("model", "fit", "--out", str(tmp_path / "m.json"), "--measurements", str(tmp_path / "nope.csv"))
    assert r.returncode == 2 and "not found" in r.stderr


def test_profile_add_fp32_on_an_ampere_gpu_warns_about_tf32(cli, tmp_path):
    from pathlib import Path

    path = tmp_path / "r50.json"
    path.write_text((Path(__file__).resolve().parents[2] / "profiles" / "resnet50.json").read_text())
    r = cli("profile", "add", str(path), "--accelerator", "A100", "--batch-size", "256", "--precision", "fp32",
            "--samples-per-second", "800")
    assert r.exit_code == 0, r.stderr
    assert "ran TF32" in r.stderr and "--precision tf32" in r.stderr
    r = cli("profile", "add", str(path), "--accelerator", "V100", "--batch-size", "256", "--precision", "fp32",
            "--samples-per-second", "400")
    assert r.exit_code == 0 and "TF32" not in r.stderr  # no TF32 units on a V100: nothing to confuse


def test_model_eval_kernels_only_reports_every_op_class(cli):
    r = cli("model", "eval", "--kernels-only", "--json")
    assert r.exit_code == 0, r.output
    k = json.loads(r.stdout)["kernels"]
    assert set(k["classes"]) == {"gemm", "conv", "memory"}
    assert set(k["test"]) == {"A100-80GB", "H100", "L4"} and not set(k["train"]) & set(k["test"])
    for blk in k["classes"].values():
        assert 0 < blk["mape"] < blk["roofline_mape"]
