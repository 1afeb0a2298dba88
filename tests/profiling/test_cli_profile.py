"""`cloudfit profile run|add|show` and `cloudfit models` end to end (in-process and one real subprocess)."""

from __future__ import annotations

import json
import textwrap

import pytest
from tests.conftest import REPO, run_cloudfit

from cloudfit.profiling import io, zoo

FAST = ("--steps", "2", "--warmup", "1")


def _err(r) -> str:
    return r.stderr.strip()


def test_profile_run_writes_a_profile(cli, tmp_path):
    out = tmp_path / "mlp.json"
    r = cli("profile", "run", "mlp", *FAST, "--out", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    printed = json.loads(r.stdout)  # stdout is JSON alone
    assert printed == io.profile_to_dict(io.load_profile(out))
    (m,) = printed["measurements"]
    assert m["accelerator"] == "cpu" and m["batch_size_per_device"] == 64 and m["samples_per_second"] > 0
    assert printed["stats"]["parameters"] == 269_322


def test_profile_run_human_output_and_merge(cli, tmp_path):
    out = tmp_path / "p.json"
    io.save_profile(io.profile_from_dict(json.loads(cli("profile", "run", "mlp", "--stats-only", "--json").stdout)), out)
    cli("profile", "add", str(out), "--accelerator", "T4", "--batch-size", "64", "--precision", "fp16",
        "--samples-per-second", "50000")
    r = cli("profile", "run", "mlp", *FAST, "--batch-size", "32", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    assert "FLOPs per sample, forward + backward" in r.stdout and f"wrote {out} (kept 1 earlier measurement)" in r.stdout
    p = io.load_profile(out)
    assert [(m.accelerator, m.batch_size_per_device) for m in p.measurements] == [("T4", 64), ("cpu", 32)]


def test_profile_run_in_a_real_subprocess_defaults_to_cwd(tmp_path):
    r = run_cloudfit("profile", "run", "mlp", *FAST, cwd=str(tmp_path), env={"PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    p = io.load_profile(tmp_path / "mlp.json")
    assert p.model == "mlp" and p.measurements[0].source == "measured"
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("name", zoo.names())
def test_stats_only_on_every_zoo_model(cli, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    r = cli("profile", "run", name, "--stats-only", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    s = d["stats"]
    assert d["model"] == name and d["measurements"] == []
    assert s["parameters"] > 0 and s["flops_per_sample"] >= s["forward_flops_per_sample"] > 0
    assert s["batch_size"] == zoo.info(name)["default_batch_size"]
    assert list(tmp_path.iterdir()) == []  # --stats-only writes nothing without --out


def test_model_file(cli, tmp_path):
    f = tmp_path / "net.py"
    f.write_text(textwrap.dedent("""
        import torch
        def factory():
            model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
            def make_batch(batch_size, device):
                return torch.randn(batch_size, 32, device=device), torch.randint(0, 8, (batch_size,), device=device)
            return model, make_batch
    """))
    out = tmp_path / "mine.json"
    r = cli("profile", "run", "mine", "--model-file", f"{f}:factory", *FAST, "--batch-size", "16", "--out", str(out))
    assert r.exit_code == 0, r.stderr
    p = io.load_profile(out)
    assert p.model == "mine" and p.stats.parameters == 32 * 64 + 64 + 64 * 8 + 8
    assert p.stats.forward_flops_per_sample == 2 * (32 * 64 + 64 * 8) and p.measurements[0].batch_size_per_device == 16
    r = cli("profile", "run", "mine", "--model-file", f"{f}:nothere", "--stats-only")
    assert r.exit_code == 2 and "has no function nothere()" in _err(r)


def test_model_file_alone_names_the_profile_after_the_file(cli, tmp_path, monkeypatch):
    """`cloudfit profile run --model-file path/to/file.py:factory`, as the docs write it, needs no MODEL."""
    f = tmp_path / "mynet.py"
    f.write_text(textwrap.dedent("""
        import torch
        def factory():
            model = torch.nn.Sequential(torch.nn.Linear(16, 4))
            def make_batch(batch_size):  # wrong: make_batch takes (batch_size, device)
                return torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,))
            def good_batch(batch_size, device):
                return make_batch(batch_size)
            return model, (good_batch if GOOD else make_batch)
        GOOD = True
    """))
    monkeypatch.chdir(tmp_path)
    r = cli("profile", "run", "--model-file", f"{f}:factory", "--stats-only", "--out", "p.json")
    assert r.exit_code == 0, r.stderr
    assert io.load_profile(tmp_path / "p.json").model == "mynet"
    f.write_text(f.read_text().replace("GOOD = True", "GOOD = False"))
    r = cli("profile", "run", "--model-file", f"{f}:factory", "--stats-only")
    assert r.exit_code == 2 and "mynet: make_batch(batch_size, device) failed (TypeError" in _err(r)
    r = cli("profile", "run")
    assert r.exit_code == 2 and "give a zoo MODEL" in _err(r)


@pytest.mark.parametrize("args, message", [
    (("profile", "run", "nosuch"), "cloudfit: error: unknown model 'nosuch' (zoo: resnet18, resnet50"),
    (("profile", "run", "mlp", "--batch-size", "0"), "cloudfit: error: batch size must be a positive integer, got 0"),
    (("profile", "run", "mlp", "--batch-size", "-3", "--stats-only"), "batch size must be a positive integer, got -3"),
    (("profile", "run", "mlp", "--steps", "0"), "steps must be a positive integer, got 0"),
    (("profile", "run", "mlp", "--precision", "fp64"), "precision must be one of fp32, fp16, bf16"),
    (("profile", "run", "mlp", "--device", "cuda"), "--device cuda requested but"),
    (("profile", "run", "mlp", "--model-file", "/no/such/file.py:f"), "model file /no/such/file.py not found"),
    (("profile", "show", "no-such-profile"), "no shipped profile of that name (shipped:"),
])
def test_bad_input_exits_2_with_one_line(cli, args, message):
    r = cli(*args)
    assert r.exit_code == 2
    assert message in _err(r) and len(_err(r).splitlines()) == 1 and "Traceback" not in r.output


def test_corrupt_and_unknown_version_profiles(cli, tmp_path):
    bad = tmp_path / "corrupt.json"
    bad.write_text('{"schema_version": 1, "model": "x",')
    r = cli("profile", "show", str(bad))
    assert r.exit_code == 2 and _err(r) == f"cloudfit: error: {bad}: not valid JSON (Expecting property name enclosed in double quotes at line 1 column 36)"
    v2 = tmp_path / "v2.json"
    d = io.profile_to_dict(io.load_profile(REPO / "profiles" / "mlp.json"))
    d["schema_version"] = 3
    v2.write_text(json.dumps(d))
    r = cli("profile", "show", str(v2))
    assert r.exit_code == 2 and _err(r) == f"cloudfit: error: {v2}: unsupported schema_version 3 (this cloudfit reads 1 and 2)"
    r = cli("profile", "run", "mlp", "--stats-only", "--out", str(bad))
    assert r.exit_code == 2 and "exists and is not a profile this version can read" in _err(r)


def test_profile_add_and_show(cli, tmp_path):
    path = tmp_path / "r50.json"
    path.write_text((REPO / "profiles" / "resnet50.json").read_text())
    r = cli("profile", "add", str(path), "--accelerator", "nvidia-tesla-a100", "--count", "8", "--nodes", "2",
            "--batch-size", "256", "--precision", "fp16", "--samples-per-second", "41000", "--note", "NVIDIA DLE")
    assert r.exit_code == 0, r.stderr
    assert "added 8× A100 × 2 node(s), batch 256, fp16: 41000 samples/s" in r.stdout
    shown = json.loads(cli("profile", "show", str(path), "--json").stdout)
    last = shown["measurements"][-1]
    assert (last["accelerator"], last["count"], last["nodes"], last["source"], last["note"]) == ("A100", 8, 2, "reported", "NVIDIA DLE")
    r = cli("profile", "add", str(path), "--accelerator", "Z100", "--batch-size", "1", "--precision", "fp16",
            "--samples-per-second", "1")
    assert r.exit_code == 2 and "unknown accelerator 'Z100'" in _err(r)
    r = cli("profile", "add", str(path), "--accelerator", "A100", "--batch-size", "1", "--precision", "fp16",
            "--samples-per-second", "-1")
    assert r.exit_code == 2 and "samples per second must be a positive number" in _err(r)
    assert json.loads(cli("profile", "show", str(path), "--json").stdout) == shown  # failed adds change nothing
    r = cli("profile", "show", "resnet50")  # a shipped name
    assert r.exit_code == 0 and "resnet50 — image classification" in r.stdout and "25.56 M" in r.stdout


def test_refuses_to_merge_into_another_models_profile(cli, tmp_path):
    out = tmp_path / "x.json"
    assert cli("profile", "run", "mlp", "--stats-only", "--out", str(out)).exit_code == 0
    r = cli("profile", "run", "resnet32", "--stats-only", "--out", str(out))
    assert r.exit_code == 2 and "holds a profile of 'mlp', not 'resnet32'" in _err(r)
    assert cli("profile", "run", "resnet32", "--stats-only", "--out", str(out), "--replace").exit_code == 0
    assert io.load_profile(out).model == "resnet32"


def test_models_lists_the_zoo(cli):
    r = cli("models", "--json")
    assert r.exit_code == 0
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert list(rows) == zoo.names()
    assert rows["resnet50"]["parameters"] == 25_557_032 and rows["resnet50"]["definition"] == "hand-written"
    assert rows["bert-large"]["options"] == {"seq_len": 384}
    human = cli("models")
    assert human.exit_code == 0 and "gpt2-medium" in human.stdout and "1024 tokens" in human.stdout


def test_every_zoo_model_ships_a_profile():
    shipped = io.shipped_profiles()
    for name in zoo.names():
        p = io.load_profile(shipped[name])
        assert p.model == name
        assert p.stats.parameters == sum(x.numel() for x in zoo.build(name, device="meta").model.parameters())
        assert p.stats.batch_size == zoo.info(name)["default_batch_size"]
        assert any(m.accelerator == "cpu" and m.source == "measured" for m in p.measurements)
