"""recommend for token workloads: the plan carries a layout; preemption of large jobs; bad input; start-up."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from cloudfit.errors import InfeasibleError
from cloudfit.llm import zoo
from cloudfit.plan.io import load_plan, save_plan
from cloudfit.plan.llm import LLMJob, build_llm_space, checkpoint_model, recommend_llm
from cloudfit.workload import make_workload

US = ("us-central1",)


def _plan(model="llama3-8b", tokens=1e11, deadline="7d", budget=None, regions=US, **kw):
    job = LLMJob(zoo.get(model), tokens, kw.pop("seq_len", 8192), **kw)
    w = make_workload(model=model, samples=tokens / job.seq_len, deadline=deadline, budget=budget,
                      regions=list(regions), precision="bf16")
    return recommend_llm(w, job)


@pytest.fixture(scope="module")
def plan8b():
    return _plan()


def test_plan_carries_a_layout_that_fits_the_chosen_cluster(plan8b):
    L, c = plan8b.layout, plan8b.chosen.config
    assert L["gpus"] == c.nodes * c.offering.accelerators_per_node == L["degrees"]["gpus"]
    assert 0 < L["memory_gib_per_device"] <= L["memory_capacity_gib"]
    assert 0 < L["mfu"] < 1
    # tokens/s of the plan = the layout's; samples/s = tokens/s ÷ sequence length
    assert plan8b.chosen.samples_per_second * 8192 == pytest.approx(L["tokens_per_second"])
    assert L["steps"] * L["global_batch"] * 8192 >= 1e11
    assert plan8b.chosen.p_on_time >= 0.9 and plan8b.chosen.hours <= 7 * 24
    # the ranking is best first and starts with the chosen layout
    tps = [r["tokens_per_second"] for r in L["ranking"]]
    assert tps == sorted(tps, reverse=True) and L["ranking"][0]["layout"] == L["text"]
    assert len(L["alternatives"]) == len(plan8b.alternatives)
    assert "FSDP" in L["why"] or "TP=" in L["why"] or "PP=" in L["why"]


def test_plan_json_and_skypilot_carry_the_layout(plan8b, tmp_path):
    from cloudfit.plan import skypilot_task

    p = tmp_path / "plan.json"
    save_plan(plan8b, p)
    back = load_plan(p)
    assert back.layout["text"] == plan8b.layout["text"] and back.layout["seq_len"] == 8192
    task = skypilot_task(back)
    run = task["run"]
    assert "-m cloudfit.train_llm" in run and f"--tp {plan8b.layout['degrees']['tp']}" in run
    assert f"--dp-shard {plan8b.layout['degrees']['dp_shard']}" in run and "--seq-len 8192" in run
    assert task["num_nodes"] == plan8b.chosen.config.nodes
    yaml.safe_dump(task)
    # launch needs the trainer arguments and a rehearsal
    assert "--steps" in back.layout["launch"]["args"] and back.layout["rehearsal"]["nproc"] <= 4


def test_a_plan_without_layout_still_loads(plan8b, tmp_path):
    from dataclasses import replace

    p = tmp_path / "plan.json"
    save_plan(replace(plan8b, layout=None), p)
    assert load_plan(p).layout is None
    d = json.loads(p.read_text())
    d["layout"] = {"no": "text"}
    p.write_text(json.dumps(d))
    from cloudfit.errors import PlanError

    with pytest.raises(PlanError, match="layout"):
        load_plan(p)


def test_checkpoint_and_restart_model():
    job = LLMJob(zoo.get("llama3-70b"), 1e9)
    ck = checkpoint_model(job, np.array([1, 8, 64]), np.array([8, 64, 512]))
    assert ck["checkpoint_bytes"] == pytest.approx(14 * 70.55e9, rel=0.01)  # bf16 + fp32 master + 2 moments
    assert (np.diff(ck["write_s"]) < 0).all()  # more writers (DCP shards) write faster
    # restart grows with nodes even though the restore gets faster
    ck2 = checkpoint_model(job, np.array([1, 64]), np.array([8, 8]))
    assert ck2["restart_s"][1] > ck2["restart_s"][0]
    lora = checkpoint_model(LLMJob(zoo.get("llama3-70b"), 1e9, finetune="lora", lora_rank=16), np.array([8]),
                            np.array([64]))
    assert lora["checkpoint_bytes"] < 0.01 * ck["checkpoint_bytes"]
    assert lora["restore_bytes"] > 2 * 70e9  # the frozen base is read back on restart


def test_multi_node_spot_pays_for_preemption():
    job = LLMJob(zoo.get("llama3-8b"), 1e11)
    w = make_workload(model="llama3-8b", samples=1e11 / 8192, deadline="30d", regions=list(US), precision="bf16",
                      accelerators=["H100"])
    from cloudfit import catalog

    sp = build_llm_space(w, job, catalog.load())
    a = sp.assess(w)
    W = sp.compute_hours
    # the same hardware at the same speed: spot costs extra hours, on-demand only start-up and the final save
    for n in (2, 16):
        on = np.flatnonzero((sp.nodes == n) & ~sp.spot)[0]
        spt = np.flatnonzero((sp.nodes == n) & sp.spot & (sp.shape == sp.shape[on]))[0]
        assert W[on] == pytest.approx(W[spt])
        assert a.hours[spt] > a.hours[on] and a.expected_preemptions[spt] > 0 == a.expected_preemptions[on]
    # a bigger spot cluster is revoked more often per compute hour (any node's loss stops all)
    # (a shape that has spot clusters of both sizes: a 1-GPU H100 VM holds no layout of 2 nodes within 95% of memory)
    s = next(x for x in np.unique(sp.shape[sp.spot])
             if all(((sp.nodes == n) & sp.spot & (sp.shape == x)).any() for n in (2, 16)))

    def per_compute_hour(n):
        i = np.flatnonzero((sp.nodes == n) & sp.spot & (sp.shape == s))[0]
        return a.expected_preemptions[i] / W[i]

    assert per_compute_hour(16) > 4 * per_compute_hour(2) > 0


def test_memory_infeasibility_says_what_would_fit():
    with pytest.raises(InfeasibleError, match=r"does not fit.*needs [\d,.]+ GiB per GPU.*would fit with"):
        job = LLMJob(zoo.get("llama3-405b"), 1e9)
        w = make_workload(model="llama3-405b", samples=1e9 / 8192, deadline="30d", regions=list(US),
                          accelerators=["L4"], max_nodes=2, precision="bf16")
        recommend_llm(w, job)


# ------------------------------------------------------------------------------------------
# CLI


def test_cli_example_lora_budget(cli):
    r = cli("recommend", "--model", "llama3-70b", "--finetune", "lora", "--tokens", "2e8", "--budget", "500",
            "--regions", "us-*", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["plan"]["layout"]["finetune"] == "lora" and d["plan"]["chosen"]["cost_p90_usd"] <= 500
    assert d["layouts"] and all({"layout", "tokens_per_second", "mfu", "memory_gib_per_device"} <= set(x)
                                for x in d["layouts"])
    assert all("layout" in c and 0 < c["mfu"] < 1 for c in d["candidates"])


def test_a_lora_table_with_no_stack_says_how_it_launches(cli):
    """No --stack: the title says so (not "stack cloudfit"), and a LoRA plan says torchtitan — the GPU default —
    cannot run it and how it launches instead; a full-training plan has no such line."""
    r = cli("recommend", "--model", "llama3-70b", "--finetune", "lora", "--tokens", "2e8", "--budget", "500",
            "--regions", "us-*")
    assert r.exit_code == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "no --stack" in out and "stack cloudfit" not in out
    assert "Launch: This plan names no stack and fine-tunes with LoRA" in out and "-- python finetune.py" in out
    full = cli("recommend", "--model", "llama3-8b", "--tokens", "1e9", "--deadline", "2d", "--regions", "us-central1")
    assert full.exit_code == 0 and "Launch:" not in full.stdout


def test_cli_table_has_layout_and_mfu(cli):
    r = cli("recommend", "--model", "llama3-8b", "--tokens", "1e11", "--seq-len", "8192", "--deadline", "7d",
            "--regions", "us-central1")
    assert r.exit_code == 0, r.stderr
    assert "layout" in r.stdout and "MFU" in r.stdout and "Why #1" in r.stdout and "Layout" in r.stdout


def test_cli_own_config(cli, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
                               "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "intermediate_size": 8192, "vocab_size": 128256}))
    r = cli("recommend", "--config", str(cfg), "--tokens", "1e10", "--deadline", "3d", "--regions", "us-central1",
            "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert "--layers" in d["plan"]["layout"]["launch"]["args"]


@pytest.mark.parametrize("extra,needle", [
    (["--model", "llama3-8b", "--tokens", "1e9", "--layout", "tp=3"], "tp=3"),
    (["--model", "llama3-8b", "--tokens", "1e9", "--layout", "pp=64"], "pp=64"),
    (["--model", "llama3-8b", "--tokens", "1e9", "--layout", "bogus=1"], "bogus"),
    (["--model", "llama3-70b", "--finetune", "lora", "--lora-rank", "0", "--tokens", "1e9"], "lora-rank"),
    (["--model", "llama3-8b", "--tokens", "0"], "tokens"),
    (["--model", "llama3-8b", "--tokens", "-5"], "tokens"),
    (["--model", "llama3-8b", "--tokens", "1e9", "--finetune", "qlora"], "finetune"),
])
def test_cli_bad_input_one_line_exit_2(cli, extra, needle):
    r = cli("recommend", *extra, "--deadline", "7d")
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_cli_config_not_a_decoder(cli, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 768,
                               "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 30522}))
    r = cli("recommend", "--config", str(cfg), "--tokens", "1e9", "--deadline", "7d")
    assert r.exit_code == 2 and "decoder" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_recommend_path_imports_no_torch():
    code = ("import sys; from typer.testing import CliRunner; from cloudfit.cli.main import app; "
            "r = CliRunner().invoke(app, ['recommend', '--model', 'llama3-8b', '--tokens', '1e10', '--deadline', '7d', "
            "'--regions', 'us-central1', '--json']); assert r.exit_code == 0, r.output; "
            "bad = [m for m in ('torch', 'transformers', 'xgboost', 'pandas', 'optuna') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_checkpoint_and_restart_times_enter_p90_and_p_on_time():
    from dataclasses import replace

    from cloudfit import catalog

    job = LLMJob(zoo.get("llama3-8b"), 1e11)
    w = make_workload(model="llama3-8b", samples=1e11 / 8192, deadline="4d", regions=list(US), precision="bf16",
                      accelerators=["H100"], max_nodes=16)
    sp = build_llm_space(w, job, catalog.load())
    slow = replace(sp, write_s=sp.write_s * 20, restart_s=sp.restart_s * 20, _cache={})
    a, b = sp.assess(w), slow.assess(w)
    s, o = sp.spot, ~sp.spot
    assert (b.hours_p90[s] > a.hours_p90[s]).all() and (b.cost_p90_usd[s] > a.cost_p90_usd[s]).all()
    assert (b.p_on_time[s] <= a.p_on_time[s] + 1e-12).all() and (b.p_on_time[s] < a.p_on_time[s]).any()
    # on-demand pays only the final save (scaled like the work by the band's mean factor), restarts nothing
    mean_factor = np.exp(0.5 * sp.log_sigma[o] ** 2)
    np.testing.assert_allclose(b.hours[o] - a.hours[o], 19 * sp.write_s[o] / 3600 * mean_factor, rtol=1e-6)


def test_cli_writes_plan_skypilot_and_plot(cli, tmp_path):
    out, sky, png = tmp_path / "plan.json", tmp_path / "task.yaml", tmp_path / "pareto.png"
    r = cli("recommend", "--model", "llama3-8b", "--tokens", "1e10", "--deadline", "3d", "--regions", "us-central1",
            "--out", str(out), "--emit-skypilot", str(sky), "--plot", str(png))
    assert r.exit_code == 0, r.stderr
    plan = load_plan(out)
    assert plan.layout["text"] in sky.read_text() or "cloudfit.train_llm" in sky.read_text()
    assert png.stat().st_size > 1000


def test_trainer_and_rehearsal_arguments_parse(plan8b):
    from cloudfit.train_llm import parse_args

    L = plan8b.layout
    assert L["launch"]["runnable"]  # llama3-8b's plan is FSDP/TP: the trainer runs it as is
    a = parse_args(L["launch"]["args"] + ["--checkpoint-dir", "ckpt"], world_size=L["gpus"])
    assert (a.tp, a.dp_shard, a.seq_len) == (L["degrees"]["tp"], L["degrees"]["dp_shard"], 8192)
    r = L["rehearsal"]
    b = parse_args(r["args"] + ["--steps", "30", "--checkpoint-dir", "ckpt"], world_size=r["nproc"])
    assert b.shrink and 1 <= r["nproc"] <= 4


def test_a_1f1b_pipeline_plan_runs_as_planned():
    from cloudfit.train_llm import parse_args

    p = _plan(model="llama3-70b", tokens=2e10, deadline="30d", layout="pp=2")
    L = p.layout
    assert L["degrees"]["pp"] == 2 and L["launch"]["runnable"] and not L["launch"]["note"]
    assert parse_args(L["launch"]["args"] + ["--checkpoint-dir", "c"], world_size=L["gpus"]).pp == 2
    assert "--pp" in L["rehearsal"]["args"]


def test_an_interleaved_pipeline_plan_carries_a_runnable_fallback():
    from cloudfit.plan import skypilot_task
    from cloudfit.train_llm import parse_args

    p = _plan(model="llama3-70b", tokens=2e10, deadline="30d", layout="pp=2,vp=2")
    L = p.layout
    assert L["degrees"]["vp"] == 2 and not L["launch"]["runnable"] and "vp=2" in L["launch"]["note"]
    ra = L["launch"]["runnable_args"]
    assert parse_args(ra + ["--checkpoint-dir", "c"], world_size=L["gpus"]).pp == 2  # 1F1B, not interleaved
    assert " ".join(ra) in skypilot_task(p)["run"]


def test_budget_picks_the_knee_not_the_last_second():
    """Under a budget (objective time) the LLM planner uses the same cost × time knee as recommend."""
    from cloudfit.plan.knee import knee_key
    from cloudfit.search import Problem

    job = LLMJob(zoo.get("llama3-8b"), 2e9, 8192)
    w = make_workload(model="llama3-8b", samples=2e9 / 8192, budget="300", regions=list(US), precision="bf16")
    space = build_llm_space(w, job, __import__("cloudfit").catalog.load())
    p = recommend_llm(w, job, space=space)
    assert p.provenance["objective_rule"].startswith("knee")
    from cloudfit.search.problem import score

    a = space.assess(Problem.of(w))
    ok, _, _ = score(a, Problem.of(w))
    key = knee_key(np.asarray(a.cost_usd)[ok], np.asarray(a.hours)[ok])
    c = p.chosen
    assert knee_key(np.array([c.cost_usd]), np.array([c.hours]))[0] <= key.min() + 1e-6
    assert "literal fastest" in p.sensitivity or "also the fastest" in p.sensitivity


def test_no_llm_shares_a_name_with_a_shipped_profile():
    """recommend tells a shipped single-model profile from an LLM without importing the zoo; that needs
    the two sets of names (with the zoo's aliases) to be disjoint."""
    from cloudfit.cli.recommend_llm import is_llm_request
    from cloudfit.profiling.io import shipped_profiles

    names = set(zoo.ZOO) | set(zoo._ALIASES)
    assert not names & set(shipped_profiles())
    assert is_llm_request(model="llama3-8b", profile=None, tokens=None, config=None, layout=None)
    assert not is_llm_request(model="resnet50", profile=None, tokens=None, config=None, layout=None)
