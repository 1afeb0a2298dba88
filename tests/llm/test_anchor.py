"""Anchored LLM prediction (issue 24): LLM profiles, `profile add`/`profile run` for LLMs, `predict --profile`."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from cloudfit.llm import anchor as A
from cloudfit.llm.predict import constants, predict
from cloudfit.llm.zoo import get
from cloudfit.profiling import io
from cloudfit.types import LLMMeasurement

ADD = ("--model", "llama3-8b", "--accelerator", "H100", "--count", "8", "--nodes", "1", "--precision", "bf16",
       "--seq-len", "8192", "--batch-size", "2", "--framework", "fsdp")


def _add(cli, path, *extra, layout="fsdp=8,ac=selective", tps="41000"):
    return cli("profile", "add", str(path), *ADD, "--layout", layout, "--tokens-per-second", tps, *extra)


def test_profile_add_creates_an_llm_profile_that_reads_back(cli, tmp_path):
    f = tmp_path / "mine.json"
    r = _add(cli, f, "--memory-gib", "71.5", "--note", "my cluster")
    assert r.exit_code == 0, r.stderr
    p = io.load_profile(f, llm_ok=True)
    (m,) = p.measurements
    assert p.model == "llama3-8b" and p.origin == "zoo" and json.loads(f.read_text())["schema_version"] == 2
    assert (m.accelerator, m.gpus, m.tokens_per_second, m.memory_gib, m.note) == ("H100", 8, 41000, 71.5, "my cluster")
    assert m.layout.startswith("fsdp=8,")
    assert _add(cli, f, layout="fsdp=4").exit_code == 0  # appends (HSDP 2 × 4)
    assert len(io.load_profile(f, llm_ok=True).measurements) == 2


@pytest.mark.parametrize("extra, layout, tps, words", [
    ((), "fsdp=8,tp=2", "41000", "does not divide"),  # degrees that do not multiply to the 8 GPUs
    ((), "tp=3", "41000", "does not divide the 8 GPUs"),
    ((), "fsdp=8", "4100000", "above the H100's 989 TFLOP/s bf16 peak"),
    (("--memory-gib", "90"), "fsdp=8", "41000", "not within the H100's 80 GiB"),
])
def test_bad_llm_measurements_exit_2_and_leave_the_file(cli, tmp_path, extra, layout, tps, words):
    f = tmp_path / "p.json"
    assert _add(cli, f).exit_code == 0
    before = f.read_bytes()
    r = _add(cli, f, *extra, layout=layout, tps=tps)
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f.read_bytes() == before


def test_llm_measurement_on_a_cnn_profile_is_refused(cli, tmp_path):
    f = tmp_path / "resnet18.json"
    f.write_bytes(io.shipped_profiles()["resnet18"].read_bytes())
    before = f.read_bytes()
    r = _add(cli, f)
    assert r.exit_code == 2 and "not a large model" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert f.read_bytes() == before


def test_old_cnn_profiles_still_load_and_llm_profiles_are_kept_off_the_cnn_path(tmp_path):
    old = json.loads(io.shipped_profiles()["resnet50"].read_text())
    assert old["schema_version"] == 1 and io.profile_from_dict(old).model == "resnet50"
    assert io.profile_to_dict(io.profile_from_dict(old))["schema_version"] == 2  # written at the new version
    llm = io.llm_profile_to_dict(io.new_llm_profile(get("llama3-8b"), "zoo"))
    with pytest.raises(Exception, match="large-model"):
        io.profile_from_dict(llm)
    tampered = dict(llm, stats=dict(llm["stats"], parameters=1))
    with pytest.raises(Exception, match="does not match the shape"):
        io.profile_from_dict(tampered, llm_ok=True)


def test_anchor_reproduces_its_own_run_and_names_the_hops(cli, tmp_path):
    f = tmp_path / "p.json"
    assert _add(cli, f).exit_code == 0
    same = json.loads(cli("predict", "--profile", str(f), "--accelerator", "H100", "--count", "8", "--seq-len",
                          "8192", "--batch-size", "2", "--layout", "fsdp=8,ac=selective", "--json").stdout)
    assert same["tokens_per_second"] == pytest.approx(41000, rel=1e-3)
    assert same["anchor"]["trust"] == "same"
    r = cli("predict", "--profile", str(f), "--accelerator", "H100", "--count", "8", "--nodes", "4", "--seq-len",
            "8192", "--batch-size", "2", "--layout", "fsdp=32,ac=selective", "--json")
    far = json.loads(r.stdout)
    assert far["anchor"]["basis"] == "anchored on your reported 8×H100 fsdp=8 run, 1 hop: other node count"
    gpu = json.loads(cli("predict", "--profile", str(f), "--accelerator", "B200", "--count", "8", "--seq-len", "8192",
                         "--batch-size", "2", "--layout", "fsdp=8,ac=selective", "--json").stdout)
    assert gpu["anchor"]["trust"] == "gpu" and gpu["tokens_per_second"] > same["tokens_per_second"]
    width = lambda d: d["high"] / d["low"]  # noqa: E731
    generic = json.loads(cli("predict", "--model", "llama3-8b", "--accelerator", "H100", "--count", "8", "--seq-len",
                             "8192", "--batch-size", "2", "--layout", "fsdp=8,ac=selective", "--json").stdout)
    assert generic["anchor"]["trust"] == "stack-generic" and "stack-generic" in generic["prediction_basis"]
    assert width(same) < width(far) <= width(generic) and width(gpu) < width(generic)
    human = cli("predict", "--profile", str(f), "--accelerator", "H100", "--count", "8", "--nodes", "4", "--seq-len",
                "8192", "--batch-size", "2", "--layout", "fsdp=32,ac=selective").stdout
    assert "anchored on your reported 8×H100 fsdp=8 run, 1 hop: other node count" in human


def test_a_slower_stack_slows_every_prediction_made_from_it(tmp_path):
    shape = get("llama3-8b")
    s = A.Setup("H100", 8, 1, "bf16", 8192, 2, "fsdp=8,ac=selective", "fsdp")
    fast, slow = (A.run_anchor(shape, s, v) for v in (41000, 30000))
    q = A.Setup("H100", 8, 8, "bf16", 8192, 2, "fsdp=64,ac=selective", "fsdp")
    a, b = (A.predict_anchored(shape, q, [x]).prediction.tokens_per_second for x in (fast, slow))
    assert b < a
    more = A.Setup("H100", 8, 16, "bf16", 8192, 2, "fsdp=128,ac=selective", "fsdp")
    per_gpu = [A.predict_anchored(shape, x, [fast]).prediction.tokens_per_second / x.gpus for x in (q, more)]
    assert per_gpu[1] <= per_gpu[0] * (1 + 1e-9)  # more nodes never raise per-GPU throughput


def _layer_measurement(seconds: float, shape) -> LLMMeasurement:
    run = dataclasses.replace(shape, layers=4)
    return LLMMeasurement("H100", 1, 1, "bf16", 8192, 1, "mb=1,ac=selective", "fsdp", 1000.0, source="measured",
                          layers={"layers_run": 4, "steps": 5, "warmup": 2, "forward_backward_s": seconds,
                                  "embedding_head_s": 0.01, "optimizer_s": 0.01, "step_s": 4 * seconds,
                                  "shape": run.to_dict()})


@pytest.mark.slow
def test_cpu_profile_run_is_a_valid_llm_profile_and_its_numbers_anchor_predict(cli, tmp_path):
    f = tmp_path / "run.json"
    t0 = time.perf_counter()
    r = cli("profile", "run", "--model", "llama3-8b", "--device", "cpu", "--out", str(f), "--json")
    assert r.exit_code == 0, r.stderr
    assert time.perf_counter() - t0 < 60
    p = io.load_profile(f, llm_ok=True)
    (m,) = p.measurements
    lay = m.layers
    assert m.accelerator == "cpu" and lay["layers_run"] == 2 and lay["shrunk"] and lay["shape"]["hidden"] < 4096
    assert lay["forward_backward_s"] > 0 and lay["optimizer_s"] > 0 and m.tokens_per_second > 0
    # a CPU run anchors no GPU: stack-generic, said so
    d = json.loads(cli("predict", "--profile", str(f), "--accelerator", "H100", "--count", "8", "--seq-len", "8192",
                       "--batch-size", "1", "--layout", "fsdp=8", "--json").stdout)
    assert d["anchor"]["trust"] == "stack-generic" and "anchors no GPU" in d["anchor"]["notes"][0]
    # the same record on an H100, measured at 2× the modelled speed, doubles the prediction
    shape = get("llama3-8b")
    s = A.setup_of(_layer_measurement(1.0, shape))
    modelled = A.layer_seconds(dataclasses.replace(shape, layers=4), s, constants())
    twice = _layer_measurement(modelled / 2, shape)
    prof = dataclasses.replace(p, measurements=(io.validate_llm_measurement(twice, shape),))
    io.save_profile(prof, f)
    # on the full model over a node (compute-bound): compute halves exactly, tokens/s double (the optimizer and
    # the fixed per-step overhead are not layer work and keep their modelled time)
    q = ("--accelerator", "H100", "--count", "8", "--seq-len", "8192", "--batch-size", "2", "--layout",
         "fsdp=8,ac=selective", "--json")
    anchored = json.loads(cli("predict", "--profile", str(f), *q).stdout)
    plain = json.loads(cli("predict", "--model", "llama3-8b", "--framework", "fsdp", *q).stdout)
    assert anchored["anchor"]["stack_speed"] == pytest.approx(2.0, rel=1e-6)
    assert anchored["breakdown"]["compute_s"] == pytest.approx(plain["breakdown"]["compute_s"] / 2, rel=1e-6)
    assert anchored["tokens_per_second"] / plain["tokens_per_second"] == pytest.approx(2.0, rel=0.03)


def test_predict_answers_a_hardware_point_no_vm_offers(cli):
    r = cli("predict", "--model", "llama3-8b", "--accelerator", "B200", "--count", "1", "--seq-len", "4096", "--json")
    assert r.exit_code == 0, r.stderr
    assert "no GCP VM offers 1× B200" in json.loads(r.stdout)["offering_note"]
    r = cli("predict", "--profile", "resnet50", "--accelerator", "B200", "--count", "1", "--json")
    assert r.exit_code == 0 and "no GCP VM offers 1× B200" in json.loads(r.stdout)["offering_note"]
    assert "no GCP VM offers 1× B200" in cli("predict", "--profile", "resnet50", "--accelerator", "B200", "--count",
                                              "1").stdout


@pytest.mark.cuda
def test_cuda_profile_run_maps_the_device_and_anchors(cli, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    f = tmp_path / "gpu.json"
    r = cli("profile", "run", "--model", "llama3-8b", "--device", "cuda", "--layers", "2", "--seq-len", "2048",
            "--out", str(f), "--json")
    assert r.exit_code == 0, r.stderr
    (m,) = io.load_profile(f, llm_ok=True).measurements
    assert m.accelerator != "cpu" and m.layers["memory_per_layer_gib"] is not None
    d = json.loads(cli("predict", "--profile", str(f), "--accelerator", m.accelerator, "--count", "1", "--seq-len",
                       "2048", "--batch-size", "1", "--layout", "mb=1,ac=selective", "--json").stdout)
    assert d["anchor"]["trust"] in ("same", "scale")


def test_recommend_with_an_llm_profile_plans_with_the_anchored_speed(cli, tmp_path):
    f = tmp_path / "p.json"
    args = ("--tokens", "1e10", "--seq-len", "8192", "--deadline", "7d", "--accelerators", "H100", "--json")
    assert _add(cli, f, tps="30000").exit_code == 0  # a slow stack: 3,750 tokens/s per GPU
    slow = json.loads(cli("recommend", "--profile", str(f), *args).stdout)["plan"]
    generic = json.loads(cli("recommend", "--model", "llama3-8b", *args).stdout)["plan"]
    basis = lambda p: json.dumps(p, ensure_ascii=False)  # noqa: E731
    assert "anchored on your reported 8×H100 fsdp=8 run" in basis(slow) and "layout band" in basis(slow)
    assert "stack-generic" in basis(generic)
    rate = lambda p: p["chosen"]["samples_per_second"] / p["chosen"]["config"]["nodes"]  # noqa: E731
    assert rate(slow) < rate(generic)
    r = cli("recommend", "--profile", "resnet50", *args)
    assert r.exit_code == 2 and "not of a large model" in r.stderr


def test_profile_add_from_a_config_json(cli, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
                               "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True}))
    f = tmp_path / "mine.json"
    r = cli("profile", "add", str(f), "--config", str(cfg), "--accelerator", "A100-80GB", "--count", "8",
            "--precision", "bf16", "--seq-len", "4096", "--batch-size", "4", "--layout", "fsdp=8",
            "--tokens-per-second", "90000", "--framework", "fsdp")
    assert r.exit_code == 0, r.stderr
    p = io.load_profile(f, llm_ok=True)
    assert p.origin == "config" and p.shape["hidden"] == 2048 and p.measurements[0].accelerator == "A100-80GB"
    d = json.loads(cli("predict", "--profile", str(f), "--accelerator", "A100-80GB", "--count", "8", "--nodes", "2",
                       "--seq-len", "4096", "--batch-size", "4", "--layout", "fsdp=16", "--json").stdout)
    assert d["anchor"]["trust"] == "scale" and d["tokens_per_second"] < 2 * 90000


def test_a_gpu_the_tables_do_not_know_is_refused_before_the_run():
    from cloudfit.errors import UsageError
    from cloudfit.profiling.llm_run import gpu_accelerator

    assert gpu_accelerator("NVIDIA H100 80GB HBM3") == "H100"
    with pytest.raises(UsageError, match="not in cloudfit's GPU tables"):
        gpu_accelerator("NVIDIA GeForce RTX 4090")


def test_shipped_bands_were_made_from_the_shipped_data_and_calibration():
    """`bench/llm_anchor.py --write` must be rerun when the LLM table or its calibration changes."""
    import hashlib

    from cloudfit.llm.data import MEASUREMENTS
    from cloudfit.llm.predict import calibration_version

    doc = json.loads(A.BANDS_PATH.read_text())
    assert doc["measurements_sha256"] == hashlib.sha256(MEASUREMENTS.read_bytes()).hexdigest()
    assert doc["calibration_version"] == calibration_version()
    b = doc["bands"]
    assert all(b[k][0] < 0 < b[k][1] for k in A.TRUST_ORDER)
    assert b["same"][1] - b["same"][0] < b["scale"][1] - b["scale"][0] < b["stack"][1] - b["stack"][0]


@pytest.mark.slow
def test_profile_run_times_fsdp_collectives_over_local_ranks_and_they_set_the_link(cli, tmp_path):
    f = tmp_path / "c.json"
    r = cli("profile", "run", "--model", "llama3-1b", "--device", "cpu", "--ranks", "2", "--out", str(f), "--json")
    assert r.exit_code == 0, r.stderr
    (m,) = io.load_profile(f, llm_ok=True).measurements
    coll = m.layers["collectives_gbs"]
    from cloudfit.llm.stats import token_stats
    from cloudfit.llm.zoo import LLMShape

    layer_bytes = 4 * token_stats(LLMShape(**m.layers["shape"]), 256).layer_parameters
    assert coll["ranks"] == 2 and coll["all_gather"] > 0 and coll["reduce_scatter"] > 0
    assert coll["bytes"] == pytest.approx(layer_bytes, rel=0.01)  # one layer's fp32 weights on gloo
    # the same record on H100s: a board at a quarter of NVLink's bus figure slows a tensor-parallel run
    from cloudfit.llm import hardware as lhw

    shape = get("llama3-8b")
    slow = dataclasses.replace(_layer_measurement(A.layer_seconds(dataclasses.replace(shape, layers=4),
                                                                  A.setup_of(_layer_measurement(1.0, shape)),
                                                                  constants()), shape))
    slow = dataclasses.replace(slow, layers={**slow.layers, "collectives_gbs": {
        "all_gather": lhw.intra_gbps("H100") / 4, "reduce_scatter": lhw.intra_gbps("H100") / 4, "ranks": 8}})
    a = A.anchors_from_profile(io.new_llm_profile(shape, "zoo").with_measurement(slow), shape)[0][0]
    assert a.nvlink_eff == pytest.approx(0.25)
    tp = A.Setup("H100", 8, 1, "bf16", 8192, 8, "tp=8,ac=selective", "fsdp")
    fast_link = dataclasses.replace(a, nvlink_eff=None)
    assert (A.predict_anchored(shape, tp, [a]).prediction.tokens_per_second
            < 0.9 * A.predict_anchored(shape, tp, [fast_link]).prediction.tokens_per_second)


def test_profile_frameworks_are_the_predictors():  # a profile may name every stack the step model prices
    from cloudfit.llm.predict import FRAMEWORKS
    from cloudfit.profiling.io import LLM_FRAMEWORKS

    assert set(LLM_FRAMEWORKS) == set(FRAMEWORKS)

def test_megatron_fsdp_and_distributed_optimizer_are_other_stacks_not_layouts():
    """Megatron-FSDP (zero 3) ↔ Megatron-Core 3D parallelism with the distributed optimizer is a stack hop
    (bench/llm_anchor_misses.py: 54-295% off when carried as a layout hop); an FSDP stack's zero 2 ↔ 3 stays a layout."""
    mfsdp = A.Setup("GB200", 4, 16, "fp8", 8192, 1, "fsdp=64,zero=3,ac=selective", "megatron")
    three_d = A.Setup("GB200", 4, 16, "fp8", 8192, 1, "tp=2,pp=4,dp=8,zero=1,ac=selective", "megatron")
    assert A.trust(A.hops(mfsdp, three_d)) == "stack"
    assert A.trust(A.hops(three_d, mfsdp)) == "stack"
    z2 = A.Setup("H100", 8, 1, "bf16", 2048, 4, "fsdp=8,zero=2", "fsdp")
    z3 = A.Setup("H100", 8, 1, "bf16", 2048, 4, "fsdp=8,zero=3", "fsdp")
    assert A.trust(A.hops(z2, z3)) == "layout"


def test_a_one_layer_run_times_the_embedding_and_head_apart(cli, tmp_path):
    """With --layers 1 the run also times the model without layers: the layer's time is not the LM head's too."""
    f = tmp_path / "one.json"
    r = cli("profile", "run", "--model", "llama3-8b", "--device", "cpu", "--layers", "1", "--out", str(f), "--json")
    assert r.exit_code == 0, r.stderr
    (m,) = io.load_profile(f, llm_ok=True).measurements
    lay = m.layers
    assert lay["layers_run"] == 1 and lay["embedding_head_s"] > 0
    assert lay["forward_backward_s"] + lay["embedding_head_s"] == pytest.approx(lay["step_s"] - lay["optimizer_s"],
                                                                                rel=0.3)


SHIPPED_H100 = Path(__file__).resolve().parents[2] / "profiles" / "llm" / "llama3-8b-h100.json"


def test_the_shipped_h100_profile_anchors_and_a_one_layer_profile_without_the_split_anchors_its_whole_step(
        cli, tmp_path):
    q = ("--accelerator", "H100", "--count", "8", "--seq-len", "8192", "--batch-size", "1", "--layout",
         "fsdp=8,ac=selective", "--json")
    d = json.loads(cli("predict", "--profile", str(SHIPPED_H100), *q).stdout)
    assert d["anchor"]["anchored_on"][0].startswith("your per-layer profile on H100"), d["anchor"]
    # the same run recorded the old way (one layer, the embedding and head inside the "layer" time)
    doc = json.loads(SHIPPED_H100.read_text())
    m = doc["measurements"][0]
    m["layers"].update(layers_run=1, embedding_head_s=0.0, forward_backward_s=m["layers"]["forward_backward_s"]
                       + m["layers"]["embedding_head_s"], memory_per_layer_gib=None, fixed_memory_gib=None)
    m["layers"]["shape"]["layers"] = 1
    lay, shape = m["layers"], get("llama3-8b")
    h = shape.hidden
    block = 2 * h * h + 2 * h * shape.kv_dim + 3 * h * shape.ffn_hidden  # attention (GQA) + SwiGLU
    rest = 2 * shape.vocab * h  # embedding + LM head (untied)
    optimizer = lay["optimizer_s"] * (rest + block) / (rest + 4 * block)  # AdamW's time goes with the parameters
    m["tokens_per_second"] = m["seq_len"] / (lay["forward_backward_s"] + optimizer)
    doc["measurements"] = [m]
    f = tmp_path / "old.json"
    f.write_text(json.dumps(doc))
    old = json.loads(cli("predict", "--profile", str(f), *q).stdout)
    assert "one-layer profile run on H100 (whole step)" in old["anchor"]["anchored_on"][0]
    # read as a layer, the head's time would have counted 32 times over: far slower than the 4-layer anchor
    assert old["tokens_per_second"] == pytest.approx(d["tokens_per_second"], rel=0.35)
