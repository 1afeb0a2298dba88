"""Questions no VM can answer get one line and exit 2, not a silent answer (issue 18)."""

from __future__ import annotations

import pytest

from tests.conftest import run_cloudfit


def test_predict_answers_a_shape_no_vm_has_with_a_note():  # issue 24: any hardware point gets its prediction
    r = run_cloudfit("predict", "--profile", "resnet50", "--accelerator", "T4", "--count", "3")
    assert r.returncode == 0 and "no GCP VM offers 3× T4 (the catalog has 1, 2, 4 per VM): this is a prediction for the hardware" in r.stdout, r.stderr


def test_predict_names_the_clouds_that_sell_a_shape_gcp_does_not():  # issue 26: single B200s elsewhere
    r = run_cloudfit("predict", "--model", "llama3-8b", "--accelerator", "B200", "--count", "1", "--seq-len", "4096",
                     "--batch-size", "1")
    assert r.returncode == 0 and "no GCP VM offers 1× B200 (the catalog has 8 per VM); " in r.stdout, r.stdout + r.stderr
    assert "runpod" in r.stdout, r.stdout


@pytest.mark.parametrize("args, says", [
    (["--accelerator", "A100", "--count", "8", "--precision", "fp8"], "A100 has no FP8 tensor cores"),
    (["--accelerator", "V100", "--precision", "fp8"], "V100 has no FP8 tensor cores"),
])
def test_predict_refuses_shapes_and_precisions_no_vm_has(args, says):
    r = run_cloudfit("predict", "--profile", "resnet50", *args)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_predict_takes_a_single_b200_some_cloud_sells():
    r = run_cloudfit("predict", "--profile", "resnet50", "--accelerator", "B200", "--count", "1")
    assert r.returncode == 0, r.stderr


def test_predict_takes_fp8_where_the_gpu_has_it():
    r = run_cloudfit("predict", "--profile", "bert-large", "--accelerator", "H100", "--count", "8",
                     "--precision", "fp8", "--json")
    assert r.returncode == 0, r.stderr


def test_recommend_in_fp8_leaves_out_gpus_without_fp8():
    import json

    r = run_cloudfit("recommend", "--model", "bert-large", "--samples", "5e7", "--deadline", "12h",
                     "--precision", "fp8", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {c["accelerator"] for c in out["candidates"]} <= {"H100", "H100-MEGA", "H200", "B200", "L4"}
    assert any("has no FP8 tensor cores" in k for k in out["plan"]["provenance"]["excluded"])


@pytest.mark.parametrize("acc, count, machine_type", [("T4", "4", "g4dn.12xlarge"), ("A10G", "8", "g5.48xlarge")])
def test_predict_takes_another_clouds_machine_type(acc, count, machine_type):  # issue 33: was "no catalog offering"
    import json

    r = run_cloudfit("predict", "--profile", "resnet50", "--accelerator", acc, "--count", count, "--nodes", "2",
                     "--machine-type", machine_type, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["accelerator"] == acc and out["breakdown"]["communication_s"] > 0, out
    assert "no measured rows" in out["basis"], out["basis"]


def test_predict_reads_model_as_recommend_does(cli, tmp_path, monkeypatch):
    """`predict --model resnet50` is the shipped profile (as `recommend --model resnet50` is), not "unknown LLM";
    an LLM name stays the large-model path; a name that is neither is one line naming both lists, exit 2."""
    import json

    args = ["-a", "T4", "--count", "4", "--nodes", "2", "--batch-size", "64", "--json"]
    by_model, by_profile = (cli("predict", flag, "resnet50", *args) for flag in ("--model", "--profile"))
    assert by_model.exit_code == 0, by_model.output
    assert json.loads(by_model.stdout) == json.loads(by_profile.stdout)
    assert cli("predict", "--model", "Llama3-8B", "-a", "H100", "--count", "8").exit_code == 0
    r = cli("predict", "--model", "resnet5", "-a", "T4")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "unknown model 'resnet5'" in r.stderr and "llama3-8b" in r.stderr and "resnet50" in r.stderr
    # ./NAME.json (what `cloudfit profile run NAME` writes) is found as --profile NAME finds it
    import shutil

    from tests.conftest import REPO

    shutil.copy(REPO / "profiles" / "resnet18.json", tmp_path / "mine.json")
    monkeypatch.chdir(tmp_path)
    assert cli("predict", "--model", "mine", "-a", "T4").exit_code == 0
