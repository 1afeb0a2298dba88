"""Launching a large-model plan: the layout reaches torchrun on the VMs, the deadline is kept at run time.

Against the fake Compute Engine server with the real google-cloud-compute client. The fake plays the
trainer (``simulate_job_s``: node 0 reports progress that grows with time, from 0 on a fresh VM).
"""

from __future__ import annotations

import re
import shlex
import threading
import time

import pytest

from cloudfit.executors.base import JobSpec, RunSpec, plan_configs
from cloudfit.executors.deadline import DeadlineSpec, DeadlineWatch, on_demand_config
from cloudfit.executors.llm_job import LlmJob
from cloudfit.plan.io import load_plan
from tests.conftest import run_cloudfit
from tests.executors.conftest import PROJECT

CKPT = "gs://ckpt-bucket/llm"


@pytest.fixture(scope="module")
def llm_plan_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("llmplan")
    # H100 VMs (80 GiB: llama3-8b's states need more than one node), no context parallel, and the catalog's
    # outlier spot price (on-demand 8× spot there), so that the scenarios below (lose one of several nodes,
    # re-shard FSDP over the rest; a switch the budget cannot pay) stay the ones they test
    r = run_cloudfit("recommend", "--model", "llama3-8b", "--tokens", "1e11", "--seq-len", "8192", "--deadline", "7d",
                     "--accelerators", "H100", "--layout", "cp=1,pp=1", "--allow-outlier-prices",
                     "--out", str(d / "plan.json"), cwd=str(d))
    assert r.returncode == 0, r.stderr
    return d / "plan.json"


@pytest.fixture
def llm_plan(llm_plan_path):
    return load_plan(llm_plan_path)


def _meta(body, key):
    return next((i["value"] for i in body["metadata"]["items"] if i["key"] == key), None)


def _trainer_argv(script: str) -> list[str]:
    line = next(l for l in script.splitlines() if "-m cloudfit.train_llm" in l)
    return shlex.split(line.split("-m cloudfit.train_llm", 1)[1])


def _when(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_gcp_startup_script_runs_torchrun_with_the_plans_layout(cli, fake, llm_plan_path, llm_plan):
    r = cli("launch", str(llm_plan_path), "--yes", "--backend", "gcp", "--project", PROJECT, "--compute-endpoint",
            fake.endpoint, "--checkpoint-dir", CKPT, "--check-interval", "0.1", "--steps", "40", "--name", "llm",
            "--stack", "cloudfit")  # cloudfit's own trainer on the VMs (the default on a cloud is torchtitan)
    assert r.exit_code == 0, r.output
    lay = llm_plan.layout
    nodes, per_node = lay["nodes"], lay["gpus_per_node"]
    assert len(fake.inserted) == nodes and fake.vms() == []
    for i, body in enumerate(fake.inserted):  # what each VM was created with, read back from the fake
        assert body["machineType"].endswith("/" + llm_plan.chosen.config.offering.machine_type)
        assert _meta(body, "cloudfit-node-rank") == str(i)
        script = _meta(body, "startup-script")
        assert f"NNODES={nodes}\n" in script and f"NPROC={per_node}\n" in script
        assert "cloudfit.runtime.torchrun" in script and "--rdzv-backend=c10d" in script
        argv = _trainer_argv(script)
        opts = dict(zip(argv[::2], argv[1::2]))
        d = lay["degrees"]
        for k in ("dp_shard", "tp", "micro_batch", "grad_accum"):
            assert opts["--" + k.replace("_", "-")] == str(d[k]), k
        assert opts["--shape"] == "llama3-8b" and opts["--seq-len"] == "8192" and opts["--ac"] == d["ac"]
        assert opts["--steps"] == "40" and opts["--checkpoint-dir"] == "/mnt/cloudfit/ckpt-bucket/llm"
        # the trainer accepts them on the cluster's world size
        from cloudfit.train_llm import parse_args

        a = parse_args(argv, world_size=nodes * per_node)
        assert a.layout.dp_shard == d["dp_shard"] and a.layout.tp == d["tp"]
    assert "runs layout fsdp=" in r.output


def _spec(plan, name, *, deadline_s, restart_s, steps=100, step_s=0.03, configs=None):
    configs = configs or plan_configs(plan)[:1]
    first = configs[0]
    dl = DeadlineSpec(deadline_s=deadline_s, planned_step_s=step_s, restart_s=restart_s,
                      on_demand=on_demand_config(configs, first), planned_gpus=first.accelerators)
    job = JobSpec(model="llama3-8b", steps=steps, checkpoint_dir=CKPT, llm=LlmJob.from_plan(plan), precision="bf16",
                  checkpoint_interval_s=600.0)
    return RunSpec(name, tuple(configs), job, 5000.0, deadline=dl)


def _provisioning(fake):
    return [(b["name"], b["scheduling"]["provisioningModel"]) for b in fake.inserted]


def test_a_spot_loss_that_puts_the_deadline_at_risk_switches_to_on_demand(fake, gcp, llm_plan):
    """Job 3 s on spot, deadline 10 s, restart 3 s. Losing a node at step ≥ 75 (t ≈ 2.3 s) throws the
    work back to the last checkpoint (none) and shows a hazard of one loss per ~2.3 s: staying on spot
    needs 3 s restart + 3 s of work + the expected further losses (~4 s) > the ~7.7 s left, while
    on-demand (3 s + 3 s + one check) keeps it — on-demand now, once."""
    fake.simulate_job_s = 3.0
    ex = gcp()

    def lose_a_node():
        _when(lambda: _step(fake) >= 75)
        fake.preempt("dl-1")

    t = threading.Thread(target=lose_a_node)
    t.start()
    r = ex.run(_spec(llm_plan, "dl", deadline_s=10.0, restart_s=3.0))
    t.join()
    assert r.reason == "completed" and r.config is not None and not r.config.spot, r
    prov = _provisioning(fake)
    nodes = llm_plan.chosen.config.nodes
    assert [p for _, p in prov[:nodes]] == ["SPOT"] * nodes and prov[-nodes:] == [
        (f"dl-{i}", "STANDARD") for i in range(nodes)]
    rec = ex.store.cluster("dl")
    [sw] = rec.info["switches"]
    assert sw["kind"] == "on-demand" and "behind the deadline" in sw["reason"] and "spot" in sw["from"]
    assert any(k == "switch" for _, k, _ in ex.store.events("dl"))
    assert rec.info["deadline"]["predicted_finish_at"] and rec.spend_usd <= 5000.0
    assert fake.vms() == []


def _step(fake):
    import json

    for g in list(fake.guest.values()):
        p = g.get("cloudfit/progress")
        if p:
            return json.loads(p).get("step", 0)
    return 0


def test_no_switch_while_the_spot_cluster_keeps_the_deadline(fake, gcp, llm_plan):
    fake.simulate_job_s = 1.5
    ex = gcp()
    r = ex.run(_spec(llm_plan, "keep", deadline_s=30.0, restart_s=3.0, step_s=0.015))
    assert r.reason == "completed" and r.config.spot
    assert "switches" not in ex.store.cluster("keep").info
    assert all(p == "SPOT" for _, p in _provisioning(fake))


def test_no_capacity_to_replace_a_lost_node_resumes_on_fewer_nodes_with_a_resharded_layout(fake, gcp, llm_plan):
    fake.simulate_job_s = 2.0
    c = llm_plan.chosen.config
    zone = c.offering.zone
    fake.stockout(zone, count=1, after=c.nodes)  # the replacement of a lost node meets a stockout, once
    ex = gcp()

    def lose_last():
        _when(lambda: len(fake.vms(statuses=("RUNNING",))) == c.nodes)
        time.sleep(0.3)
        fake.preempt(f"fewer-{c.nodes - 1}")

    t = threading.Thread(target=lose_last)
    t.start()
    r = ex.run(_spec(llm_plan, "fewer", deadline_s=60.0, restart_s=3.0, step_s=0.02))
    t.join()
    assert r.reason == "completed" and r.config.nodes == c.nodes - 1 and r.config.spot, r
    [sw] = ex.store.cluster("fewer").info["switches"]
    assert sw["kind"] == "fewer-nodes" and "re-sharded layout" in sw["reason"]
    # the survivors were kept (re-sharded in place and reset), not deleted and re-inserted into the zone
    # that had just refused capacity (issue 27)
    assert [b["name"] for b in fake.inserted] == [f"fewer-{i}" for i in range(c.nodes)]
    survivors = [f"fewer-{i}" for i in range(c.nodes - 1)]
    assert sorted(fake.count("POST", rf"/instances/{n}/reset") for n in survivors) == [1] * len(survivors)
    last = [{"metadata": body} for name, body in fake.metadata_sets if name in survivors
            and _meta({"metadata": body}, "startup-script") and not _meta({"metadata": body}, "cloudfit-stop")][-1:]
    assert {_meta(last[0], "cloudfit-checkpoint-key")} == {ex.store.checkpoint_key("fewer")}
    argv = _trainer_argv(_meta(last[0], "startup-script"))
    opts = dict(zip(argv[::2], argv[1::2]))
    per_node = c.offering.accelerators_per_node
    tp = int(opts["--tp"])
    assert int(opts["--dp-shard"]) * tp * int(opts.get("--pp", 1)) * int(opts.get("--cp", 1)) == (c.nodes - 1) * per_node
    assert re.search(rf"NNODES={c.nodes - 1}\n", _meta(last[0], "startup-script"))
    # the global batch (sequences per optimizer step) stays the plan's, rounded up
    gb = llm_plan.layout["global_batch"]
    assert gb <= int(opts["--micro-batch"]) * int(opts["--grad-accum"]) * int(opts["--dp-shard"]) < gb * 1.1
    assert fake.vms() == []


def test_deadline_watch_switches_only_when_staying_misses_and_on_demand_keeps():
    """The old rule switched when on-demand itself missed (and on the first step, boot counted as speed)."""
    from cloudfit.types import ClusterConfig
    from tests.executors.plans import offering

    spot = ClusterConfig(offering(), 2, True)
    od = ClusterConfig(offering(), 2, False)
    spec = DeadlineSpec(deadline_s=100.0, planned_step_s=1.0, restart_s=10.0, on_demand=od, planned_gpus=2)
    w = DeadlineWatch(spec, 50, margin_s=1.0, t0=0.0)
    assert w.observe(0.0, {"step": 0}, spot).action == "stay"  # 50 + 10 + 1 = 61 < 100
    assert w.observe(10.0, {"step": 10}, spot).action == "stay"  # planned 1 step/s: 40 < 90
    w.lost()  # the work since the checkpoint at step 5 is gone: on-demand needs 45 + 10 + 1 = 56 s > 55 left
    d = w.observe(45.0, {"step": 40, "checkpoint_step": 5}, spot, up=False)
    assert d.action == "stay" and "no alternative keeps it" in d.reason  # both miss: spot, the cheaper, stays
    w2 = DeadlineWatch(spec, 50, margin_s=1.0, t0=0.0)
    w2.observe(0.0, {"step": 0}, spot)
    w2.observe(5.0, {"step": 5}, spot)
    w2.lost()  # one loss in 35 s: staying needs 10 s restart + 45 s + the expected losses (13 s) > 65 s left
    d = w2.observe(35.0, {"step": 20, "checkpoint_step": 5}, spot, up=False)
    assert d.action == "on-demand" and d.to == od and "behind the deadline" in d.reason
    assert d.data["alternative_needs_s"] == pytest.approx(56.0) and d.data["stay_needs_s"] > 65.0
    assert w2.observe(46.0, {"step": 5}, od).action == "stay"  # never switches an on-demand cluster


def test_boot_and_warm_up_are_not_speed_and_a_slow_window_must_repeat():
    from cloudfit.types import ClusterConfig
    from tests.executors.plans import offering

    spot = ClusterConfig(offering(), 1, True)
    od = ClusterConfig(offering(), 1, False)
    spec = DeadlineSpec(deadline_s=840.0, planned_step_s=1.0, restart_s=5.0, on_demand=od, planned_gpus=1,
                        hazard_per_hour=3.6, checkpoint_interval_s=200.0, warmup_steps=2, window_steps=10)
    w = DeadlineWatch(spec, 600, margin_s=1.0, t0=0.0)
    w.observe(0.0, {"step": 0}, spot)
    d = w.observe(30.0, {"step": 1}, spot)  # a 30 s boot: not a speed of 1/30 steps/s (restarts now cost 30 s)
    assert d.action == "stay" and not d.data["measured"] and d.data["boot_s"] == 30.0
    w.observe(31.0, {"step": 3}, spot)  # warm-up over
    d = w.observe(41.0, {"step": 13}, spot)
    assert d.data["measured"] and d.data["steps_per_second"] == pytest.approx(1.0) and d.action == "stay"
    # slowed to 0.8 steps/s: staying needs 721 s + 94 s of expected preemptions > 786 s left; on-demand 752 s
    d = w.observe(53.5, {"step": 23}, spot)
    assert d.action == "stay" and "confirming" in d.reason  # hysteresis: one slow window is not enough
    d = w.observe(66.0, {"step": 33}, spot)
    assert d.action == "on-demand" and d.to == od and d.data["stay_needs_s"] > d.data["deadline_in_s"]
    assert d.data["alternative_needs_s"] < d.data["deadline_in_s"]
    slow = DeadlineWatch(spec, 600, margin_s=1.0, t0=0.0)
    for t, step in ((0.0, 0), (30.0, 1), (31.0, 3), (41.0, 13), (61.0, 23), (81.0, 33)):
        d = slow.observe(t, {"step": step}, spot)
    assert d.action == "stay" and "no alternative keeps it" in d.reason  # 0.5 steps/s: on-demand misses too


def test_status_shows_progress_predicted_finish_and_each_switch(cli, fake, gcp, llm_plan):
    fake.simulate_job_s = 3.0
    ex = gcp()
    threading.Thread(target=lambda: (_when(lambda: _step(fake) >= 75), fake.preempt("st-1"))).start()
    r = ex.run(_spec(llm_plan, "st", deadline_s=10.0, restart_s=3.0))
    assert r.reason == "completed" and not r.config.spot
    out = cli("status", "st")
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "Predicted finish" in text and "deadline" in text
    assert "(on-demand): behind the deadline" in text and "Progress step" in text
    j = cli("status", "st", "--json")
    import json

    row = json.loads(j.output)
    assert row["switches"][0]["kind"] == "on-demand" and row["deadline"]["predicted_finish_at"]


# ------------------------------------------------------------------------------ local: real FSDP2 ranks

def _metrics(ckpt):
    import json

    return [json.loads(l) for l in (ckpt / "metrics.jsonl").read_text().splitlines() if l.strip()]


@pytest.mark.slow
def test_local_launch_survives_a_killed_rank_then_resumes_resharded_on_fewer_ranks(llm_plan_path, tmp_path):
    """`cloudfit launch` of the LLM plan: 2 real FSDP2 gloo ranks of cloudfit.train_llm; one is killed
    (SIGKILL) mid-run and torch elastic resumes from the DCP checkpoint on the same world size; then
    the same plan relaunched on 1 rank resumes re-sharded from that checkpoint — the loss keeps falling."""
    import json
    import os
    import signal
    import subprocess
    import sys

    import psutil

    from cloudfit.train_llm import complete_checkpoints

    ckpt = tmp_path / "ckpt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "cloudfit", "launch", str(llm_plan_path), "--backend", "local", "--yes",
            "--checkpoint-dir", str(ckpt), "--checkpoint-every", "4", "--json"]
    proc = subprocess.Popen(base + ["--steps", "16", "--ranks", "2", "--name", "lk-a"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _when(lambda: complete_checkpoints(ckpt), timeout=240)
        killed_after = complete_checkpoints(ckpt)[0][0]
        workers = _when_value(lambda: [p for p in psutil.Process(proc.pid).children(recursive=True)
                                       if "cloudfit.train_llm" in " ".join(p.cmdline()) and "cloudfit.runtime.torchrun" not in
                                       " ".join(p.cmdline())])
        os.kill(workers[-1].pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    a = json.loads(out)
    assert a["reason"] == "completed" and a["steps"] == 16 and a["restarts"] >= 1, a
    assert "rehearsing the plan's layout" in err and "fsdp=2" in err
    m = _metrics(ckpt)
    restarted = [x for x in m if x["restart"] >= 1]
    assert restarted and restarted[0]["resumes"] >= 1 and restarted[0]["world_size"] == 2
    assert restarted[0]["step"] > killed_after  # resumed after the checkpoint, not from scratch
    # the same plan and checkpoints on 1 rank: DCP re-shards fsdp=2 → fsdp=1
    r = subprocess.run(base + ["--steps", "24", "--ranks", "1", "--name", "lk-b"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    b = json.loads(r.stdout)
    assert b["reason"] == "completed" and b["steps"] == 24
    m = _metrics(ckpt)
    one = [x for x in m if x["world_size"] == 1]
    assert one and one[0]["step"] == 17  # picked up right after run A's last step
    first = [x["loss"] for x in m[:3]]
    assert sum(x["loss"] for x in one[-3:]) / 3 < sum(first) / 3 - 0.3  # the loss keeps going down
    marker = json.loads((complete_checkpoints(ckpt)[0][1] / "COMPLETE.json").read_text())
    assert marker["layout"]["world_size"] == 1 and marker["step"] == 24


def _when_value(f, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = f()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.parametrize("edit, extra, needle", [
    (lambda d: d["layout"]["launch"]["args"].__setitem__(d["layout"]["launch"]["args"].index("--dp-shard") + 1, "0"),
     [], "below 1"),
    (lambda d: d["layout"]["launch"].pop("args"), [], "layout block is malformed"),
    (lambda d: None, ["--ranks", "0"], "--ranks must be at least 1"),
    (lambda d: None, ["--ranks", "2", "--backend", "gcp"], "--ranks is for --backend local"),
])
def test_bad_llm_launch_input_is_one_line_exit_2(cli, llm_plan_path, tmp_path, edit, extra, needle):
    import json

    d = json.loads(llm_plan_path.read_text())
    edit(d)
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(d))
    r = cli("launch", str(p), "--dry-run", *extra)
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, r.output


def test_a_switch_the_budget_cannot_pay_stops_the_run_within_the_budget(fake, gcp, llm_plan):
    """The deadline rule asks for on-demand (8× the spot price), but the budget left cannot pay one
    interval of it: the guard wins — the run stops, nothing on-demand is created, spend ≤ budget."""
    fake.simulate_job_s = 3.0
    ex = gcp()
    threading.Thread(target=lambda: (_when(lambda: _step(fake) >= 75), fake.preempt("poor-1"))).start()
    spec = _spec(llm_plan, "poor", deadline_s=10.0, restart_s=3.0)
    import dataclasses

    spec = dataclasses.replace(spec, budget_usd=5.0)
    r = ex.run(spec)
    assert r.reason == "budget" and r.spend_usd <= 5.0, r
    assert all(p == "SPOT" for _, p in _provisioning(fake)) and fake.vms() == []
    rec = ex.store.cluster("poor")
    assert rec.reason == "budget" and rec.spend_usd <= 5.0
    assert any("cannot pay" in m for _, _, m in ex.store.events("poor")) or "cannot pay" in r.detail


def test_recomputed_layouts_keep_the_global_batch_and_are_checked_against_memory(llm_plan):
    from cloudfit.types import ClusterConfig

    job = LlmJob.from_plan(llm_plan)
    c = llm_plan.chosen.config
    assert job.layout_for(c) == dict(job.degrees)  # the plan's own layout on the plan's own cluster
    three = ClusterConfig(c.offering, c.nodes - 1, c.spot)
    d = job.layout_for(three)
    assert d["dp_shard"] * d["tp"] * d["pp"] * d["cp"] == three.accelerators
    assert d["micro_batch"] * d["grad_accum"] * d["dp_shard"] >= job.global_batch
    ok, why = job.fits(three)
    assert ok and "GiB per GPU" in why
    one = ClusterConfig(c.offering, 1, c.spot)
    from dataclasses import replace

    big = replace(job, degrees={**job.degrees, "micro_batch": 4, "ac": "none"})  # 4 × 8K tokens, no recompute
    ok, why = big.fits(one)  # on one node: past 80 GiB
    assert not ok and "of 80 GiB" in why


def test_deadline_option_overrides_the_plans_and_is_shown(cli, fake, llm_plan_path, tmp_path):
    from tests.executors.plans import write_plan
    from cloudfit.types import ClusterConfig
    from tests.executors.plans import offering

    args = ["--backend", "gcp", "--project", PROJECT, "--compute-endpoint", fake.endpoint, "--checkpoint-dir", CKPT]
    r = cli("launch", str(llm_plan_path), "--dry-run", "--deadline", "36h", *args)
    assert r.exit_code == 0, r.output
    assert "deadline kept at run time: 36.0 h" in " ".join(r.output.split())
    zoo = write_plan(tmp_path / "zoo.json", [ClusterConfig(offering(price=None), 1, True)], budget_usd=5)
    r = cli("launch", str(zoo), "--dry-run", "--deadline", "36h", *args)  # a CNN plan keeps one too (was refused)
    assert r.exit_code == 0, r.output
    assert "deadline kept at run time: 36.0 h, switching to on-demand 1× n1-highmem-8" in " ".join(r.output.split())
    assert fake.requests == []


# ----------------------------------------------------------------------------- every launch is a profile (issue 32)

def test_a_launch_appends_its_measured_speed_to_the_plans_profile_and_status_compares(cli, tmp_path):
    """A plan made with `--profile P` records P; a launch of it (here a command on the local backend whose log
    reports half the planned speed) is compared with the plan by `status` (outside the band). This machine has no
    L4, so the local run is NOT appended to P: its speed is not the plan cluster's (a row from a cloud backend is,
    tests/profiling/test_measured.py::test_a_launch_becomes_a_measurement_that_the_next_plan_anchors_on)."""
    import json
    import os

    from cloudfit.llm import zoo
    from cloudfit.profiling import io as pio

    prof = tmp_path / "my-llama.json"
    pio.save_profile(pio.new_llm_profile(zoo.get("llama3-1b"), "zoo"), prof)
    r = run_cloudfit("recommend", "--profile", str(prof), "--tokens", "1e8", "--seq-len", "2048", "--deadline", "2d",
                     "--accelerators", "L4", "--regions", "us-central1", "--stack", "torchtitan",
                     "--out", str(tmp_path / "plan.json"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["layout"]["profile"] == str(prof.resolve())
    planned = plan["layout"]["tokens_per_second"]
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text(
        "import json, os\n"
        "if os.environ.get('RANK', '0') == '0':\n"
        "    for s in range(1, 7):\n"
        f"        print('CLOUDFIT_PROGRESS ' + json.dumps({{'step': s, 'tokens_per_second': {planned / 2!r},"
        " 'memory_gib': 12.5}), flush=True)\n")
    env = {"CLOUDFIT_HOME": os.environ["CLOUDFIT_HOME"]}
    r = run_cloudfit("launch", str(tmp_path / "plan.json"), "--steps", "6", "--name", "meas", "--budget", "5",
                     "--check-interval", "0.2", "--", "python", str(tmp_path / "proj" / "train.py"), env=env,
                     timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "not recorded in a profile: the local backend ran on this machine, which has no L4" in r.stderr, r.stderr
    assert pio.load_profile(prof, llm_ok=True).measurements == ()  # nothing planted in the user's profile
    s = cli("status", "meas")
    assert s.exit_code == 0 and "tokens/s measured vs" in s.output and "below its band" in s.output, s.output
    j = json.loads(cli("status", "meas", "--json").output)
    assert j["speed"]["outside_band"] and j["speed"]["measured_tokens_per_second"] == pytest.approx(planned / 2, rel=1e-4)
