"""Launch runs the plan's stack: torchtitan's command (the default on a cloud) or the user's command as the custom
stack with the layout; the workdir ships to the nodes and the node runs from it; --dry-run shows the command per
node, what ships, the config files, where checkpoints go and what a stop guarantees; the budget guard and the
deadline rule read the stack's progress from its log (a real torchtitan excerpt replayed)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloudfit import stacks
from cloudfit.plan.io import load_plan
from tests.conftest import run_cloudfit
from tests.executors.conftest import PROJECT

LOGS = Path(__file__).resolve().parents[1] / "stacks" / "logs"
CKPT = "gs://ckpt-bucket/titan"


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    """llama3-1b on L4s in us-central1 (one VM), priced for torchtitan."""
    d = tmp_path_factory.mktemp("stackplan")
    r = run_cloudfit("recommend", "--model", "llama3-1b", "--tokens", "1e8", "--seq-len", "2048", "--deadline", "2d",
                     "--accelerators", "L4", "--regions", "us-central1", "--stack", "torchtitan", "--max-nodes", "1",
                     "--out", str(d / "plan.json"), cwd=str(d))
    assert r.returncode == 0, r.stderr
    return d / "plan.json"


def _project(tmp_path: Path) -> Path:
    d = tmp_path / "laptop" / "proj"
    (d / "lib").mkdir(parents=True)
    (d / "lib" / "__init__.py").write_text("")
    (d / "lib" / "steps.py").write_text("N = 3\n")
    (d / "train.py").write_text(
        "import json, os, pathlib, sys, time\nsys.path.insert(0, os.getcwd())\nfrom lib.steps import N\n"
        "lay = json.load(open(os.environ['CLOUDFIT_LAYOUT_FILE']))\n"
        "if os.environ.get('RANK', '0') == '0':\n"
        "    pathlib.Path(os.environ['SEEN_FILE']).write_text(json.dumps({'cwd': os.getcwd(), 'layout': lay['layout'],"
        " 'dp_shard': os.environ['CLOUDFIT_DP_SHARD'], 'argv': sys.argv[1:]}))\n"
        "    for s in range(1, N + 1):\n"
        "        print('CLOUDFIT_PROGRESS ' + json.dumps({'step': s, 'tokens_per_second': 4000.0, 'loss': 3.0}),"
        " flush=True)\n"
        "    print('CLOUDFIT_PROGRESS ' + json.dumps({'checkpoint_step': N}), flush=True)\n")
    return d


def _gcp(fake, *extra):
    return ["--backend", "gcp", "--project", PROJECT, "--compute-endpoint", fake.endpoint, *extra]


# ----------------------------------------------------------------------------- dry runs

def test_torchtitan_dry_run_prints_the_command_what_ships_and_where_checkpoints_go(cli, fake, plan_path):
    plan = load_plan(plan_path)
    d = plan.layout["degrees"]
    r = cli("launch", str(plan_path), "--dry-run", "--name", "titan", *_gcp(fake, "--checkpoint-dir", CKPT))
    assert r.exit_code == 0, r.output
    out = r.output
    [cmd] = [l for l in out.splitlines() if l.strip().startswith("command on ")]
    argv = shlex.split(cmd.split(": ", 1)[1])
    c = plan.chosen.config  # the node's torchrun runs the plan's cluster: its nodes, its GPUs per node
    assert argv[0] == "torchrun" and f"--nnodes={c.nodes}" in argv
    assert f"--nproc-per-node={c.offering.accelerators_per_node}" in argv
    assert argv[argv.index("-m") + 1] == "torchtitan.train"
    assert argv[argv.index("--parallelism.data_parallel_shard_degree") + 1] == str(d["dp_shard"])
    assert argv[argv.index("--checkpoint.folder") + 1] == "/mnt/cloudfit/ckpt-bucket/titan"  # the bucket, mounted
    assert "stack: torchtitan" in out and "no stack named" not in out  # the plan named it
    assert "ships: workdir" in out and "cloudfit_titan.py (" in out  # the config file travels, with its size
    assert "config file cloudfit_titan.py" in out and "def cloudfit_job" in out
    assert f"checkpoints: {CKPT}" in out and "at a budget or deadline stop: torchtitan saves" in out
    assert fake.requests == []  # nothing created
    j = cli("launch", str(plan_path), "--dry-run", "--json", "--name", "titan", *_gcp(fake, "--checkpoint-dir", CKPT))
    job = json.loads(j.output)["preview"]["job"]
    assert job["stack"] == "torchtitan" and job["commands"][0]["command"] == cmd.split(": ", 1)[1]
    [w] = [s for s in job["ships"] if s["what"] == "workdir archive"]
    assert [f["path"] for f in w["files"]] == ["cloudfit_titan.py"] and w["bytes"] > 0 and len(w["sha256"]) == 64
    assert "cloudfit_titan.py" in job["config_files"] and job["checkpoints"] == CKPT
    assert job["checkpoint_on_sigterm"] is False and "checkpoint" in job["guarantee"]


def test_an_llm_plan_with_no_stack_named_runs_torchtitan_on_a_cloud_and_says_why(cli, fake, plan_path, tmp_path):
    d = json.loads(plan_path.read_text())
    del d["layout"]["stack"]  # an old plan (or one made without --stack)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(d))
    r = cli("launch", str(old), "--dry-run", *_gcp(fake, "--checkpoint-dir", CKPT))
    assert r.exit_code == 0, r.output
    assert "-m torchtitan.train" in r.output and "no stack named: torchtitan runs this plan" in r.output
    assert "the plan's numbers are for cloudfit" in r.output
    r = cli("launch", str(old), "--dry-run", "--stack", "cloudfit", *_gcp(fake, "--checkpoint-dir", CKPT))
    assert "-m cloudfit.train_llm" in r.output  # asked for by name
    loc = cli("launch", str(plan_path), "--dry-run")  # local: cloudfit's trainer rehearses it, and says so
    assert loc.exit_code == 0, loc.output
    assert "cloudfit.train_llm" in loc.output and "torchtitan needs the plan's GPUs" in loc.output


def test_a_lora_plan_with_no_stack_is_not_handed_to_torchtitan_it_asks_for_the_users_script(cli, fake, plan_path,
                                                                                             tmp_path):
    """torchtitan (the GPU default) has no LoRA recipe: a LoRA plan that names no stack gets one line saying how to
    run it (your script after --), exit 2 — not torchtitan's refusal of a plan cloudfit itself recommended."""
    d = json.loads(plan_path.read_text())
    del d["layout"]["stack"]
    d["layout"]["finetune"], d["layout"]["lora_rank"] = "lora", 16
    lora = tmp_path / "lora.json"
    lora.write_text(json.dumps(d))
    r = cli("launch", str(lora), "--dry-run", *_gcp(fake, "--checkpoint-dir", CKPT))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "names no stack and fine-tunes with LoRA" in r.output and "-- python finetune.py" in r.output
    # Accelerate is offered only for a layout it runs: no selective activation checkpointing in Accelerate
    for ac, offered in (("selective", False), ("full", True)):
        d["layout"]["degrees"]["ac"] = ac
        lora.write_text(json.dumps(d))
        a = cli("launch", str(lora), "--dry-run", *_gcp(fake, "--checkpoint-dir", CKPT))
        assert a.exit_code == 2 and ("--stack accelerate -- finetune.py" in a.output) == offered, a.output
        if offered:
            s = cli("launch", str(lora), "--dry-run", "--stack", "accelerate", *_gcp(fake, "--checkpoint-dir", CKPT),
                    "--", str(_project(tmp_path / ac) / "train.py"))
            assert s.exit_code == 0, s.output  # the way out it names works
    d["layout"]["degrees"]["ac"] = "selective"
    lora.write_text(json.dumps(d))
    proj = _project(tmp_path)
    g = cli("launch", str(lora), "--dry-run", *_gcp(fake, "--checkpoint-dir", CKPT), "--", "python",
            str(proj / "train.py"))
    assert g.exit_code == 0, g.output  # the way out it names works
    loc = cli("launch", str(lora), "--dry-run")  # locally cloudfit's trainer rehearses it as full training, and says so
    assert loc.exit_code == 0, loc.output
    assert "LoRA rehearsed as full training" in " ".join(loc.output.split())


def test_the_plain_dry_run_shows_the_users_command_on_every_backend(cli, fake, plan_path, tmp_path, monkeypatch):
    proj = _project(tmp_path)
    monkeypatch.chdir(proj.parent)
    g = cli("launch", str(plan_path), "--dry-run", *_gcp(fake, "--checkpoint-dir", CKPT), "--", "python",
            "proj/train.py", "--lr", "0.1")
    assert g.exit_code == 0, g.output
    assert "--no-python python train.py --lr 0.1" in g.output  # runs from the unpacked folder on the node
    assert "ships: workdir " + str(proj) in g.output
    for f in ("train.py", "lib/steps.py", "lib/__init__.py", "cloudfit_layout.json"):
        assert f"    {f} (" in g.output, f
    assert "environment: " in g.output and "CLOUDFIT_DP_SHARD=" in g.output
    loc = cli("launch", str(plan_path), "--dry-run", "--", "python", "proj/train.py", "--lr", "0.1")
    assert loc.exit_code == 0, loc.output
    # locally it runs from the run folder (its config files are there), the script by its absolute path
    assert f"--no-python python {proj / 'train.py'} --lr 0.1" in loc.output


def test_a_workdir_with_a_secret_is_refused_before_anything_exists(cli, fake, plan_path, tmp_path):
    proj = _project(tmp_path)
    (proj / ".env").write_text("HF_TOKEN=hf_x\n")
    r = cli("launch", str(plan_path), "--dry-run", *_gcp(fake, "--checkpoint-dir", CKPT), "--", "python",
            str(proj / "train.py"))
    assert r.exit_code == 2 and "refusing to ship .env" in r.output and fake.requests == []


# ----------------------------------------------------------------------------- on the fake Compute server

def test_the_vms_startup_unpacks_the_shipped_folder_and_runs_the_command_from_it(cli, fake, plan_path, tmp_path,
                                                                               monkeypatch):
    """`launch plan.json -- python train.py` on gcp: the VM is created with the workdir in its metadata; its real
    startup script (run here against a fake metadata server holding exactly what the VM got) rebuilds the folder,
    checks it, runs train.py from it with the layout in its environment, and reports the progress its log states."""
    from tests.fakes.compute_server import FakeMetadata

    proj = _project(tmp_path)
    r = cli("launch", str(plan_path), "--yes", *_gcp(fake, "--checkpoint-dir", CKPT, "--check-interval", "0.1",
                                                         "--steps", "3", "--name", "ship"),
            "--", "python", str(proj / "train.py"), "--lr", "0.1")
    assert r.exit_code == 0, r.output
    [body] = fake.inserted
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    script = items.pop("startup-script")
    import base64
    import hashlib

    chunks = sorted((k for k in items if k.startswith("cloudfit-workdir-")), key=lambda k: int(k.rsplit("-", 1)[1]))
    archive = base64.b64decode("".join(items[k] for k in chunks))
    assert f"WORKDIR_SHA={hashlib.sha256(archive).hexdigest()}" in script  # the checksum the node verifies
    assert str(proj) not in script  # no laptop path reaches the node
    seen = tmp_path / "seen.json"
    work = tmp_path / "node"
    md = FakeMetadata({**items, "cloudfit-master-addr": "self", "cloudfit-stop-at": f"{time.time() + 600:.0f}"})
    # the node's ckpt mount is a local folder here; the wheel is not reinstalled (same cloudfit version)
    script = script.replace("BUCKET=ckpt-bucket", "BUCKET=").replace("CKPT=/mnt/cloudfit/ckpt-bucket/titan",
                                                                     f"CKPT={tmp_path / 'ckpt'}")
    env = {**os.environ, "CLOUDFIT_METADATA_URL": md.url, "CLOUDFIT_WORK_DIR": str(work), "CLOUDFIT_LINGER_S": "0",
           "CLOUDFIT_NO_SHUTDOWN": "1", "CLOUDFIT_WATCH_S": "0.2", "SEEN_FILE": str(seen),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    try:
        p = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    finally:
        md.close()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ran = json.loads(seen.read_text())
    assert Path(ran["cwd"]) == work / "workdir" and ran["argv"] == ["--lr", "0.1"]
    plan = load_plan(plan_path)
    assert ran["dp_shard"] == str(plan.layout["degrees"]["dp_shard"]) and "fsdp=" in ran["layout"]
    progress = json.loads(md.guest["cloudfit/progress"])
    assert progress["step"] == 3 and progress["tokens_per_second"] == 4000.0 and progress["checkpoint_step"] == 3
    assert progress["source"] == "log:custom" and md.guest["cloudfit/state"] == "completed"


# ----------------------------------------------------------------------------- progress from a real log

def _titan_log(name: str) -> list[tuple[float, str]]:
    """(seconds since the log's first line, line) of a real torchtitan excerpt (tests/stacks/logs/PROVENANCE.md)."""
    import datetime as dt
    import re

    out, t0 = [], None
    for line in (LOGS / name).read_text().splitlines():
        m = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
        if not m:
            continue
        t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        t0 = t if t0 is None else t0
        out.append((t - t0, line))
    return out


def test_a_real_torchtitan_log_is_read_into_progress():
    from cloudfit.runtime.logprogress import LogProgress

    lp = LogProgress(stacks.get("torchtitan"), total_steps=100, gpus=8, seq_len=8192)
    p = lp.feed_lines(line for _, line in _titan_log("torchtitan_pr1287_llama3_8b.log"))
    assert p["step"] == 40 and p["tokens_per_second"] == 5881 * 8  # tps is per GPU in torchtitan's line
    assert p["samples_per_second"] == pytest.approx(5881 * 8 / 8192) and p["loss"] == pytest.approx(7.3309)
    assert p["memory_gib"] == pytest.approx(49.66) and p["mfu"] == pytest.approx(0.3444)


def test_the_deadline_rule_switches_on_the_speed_a_real_torchtitan_log_states():
    """The plan promised 2 steps/s; the log (steps 10…40, 13.9 s per 10 steps) runs at 0.72 steps/s. On a spot
    cluster that then cannot keep the deadline (175 s; step 40 is logged at 64.7 s), the rule moves to on-demand
    after confirming the miss once — and with the plan's own speed it would have stayed."""
    from cloudfit.executors.deadline import DeadlineSpec, DeadlineWatch
    from cloudfit.runtime.logprogress import LogProgress
    from cloudfit.types import ClusterConfig
    from tests.executors.plans import offering

    spot = ClusterConfig(offering(), 1, True)
    od = ClusterConfig(offering(), 1, False)
    spec = DeadlineSpec(deadline_s=175.0, planned_step_s=0.5, restart_s=5.0, on_demand=od, planned_gpus=spot.accelerators,
                        hazard_per_hour=360.0, checkpoint_interval_s=10.0, warmup_steps=3, window_steps=10)

    def run(lines):
        watch = DeadlineWatch(spec, 100, margin_s=1.0, t0=0.0)
        lp = LogProgress(stacks.get("torchtitan"), total_steps=100, gpus=8, seq_len=8192)
        out = []
        for t, line in lines:
            if lp.feed(line) is not None:
                out.append(watch.observe(t, lp.progress(), spot))
        return out

    real = run(_titan_log("torchtitan_pr1287_llama3_8b.log"))
    assert real[-1].action == "on-demand" and "behind the deadline" in real[-1].reason, [d.reason for d in real]
    assert real[-1].data["measured"] and real[-1].data["steps_per_second"] == pytest.approx(10 / 13.9, rel=0.02)
    # the same steps at the plan's speed (0.5 s each): the deadline holds, nobody moves
    planned = run([(0.5 * (i + 1) * 10, line) for i, (_, line) in enumerate(
        x for x in _titan_log("torchtitan_pr1287_llama3_8b.log") if "step:" in x[1])])
    assert all(d.action == "stay" for d in planned)


def test_a_budget_stop_lands_right_after_a_checkpoint_the_log_reports():
    """torchtitan saves nothing on SIGTERM: when its log reports a checkpoint and the next one (the log's own
    rhythm) would come after the budget, the job stops then — not an interval later, with the interval lost."""
    from cloudfit.executors.base import BUDGET, CheckpointStops
    from cloudfit.executors.budget import Guard, PriceSchedule
    from cloudfit.runtime.logprogress import LogProgress

    st = stacks.get("torchtitan")
    assert st.command  # the guarantee is the stack's own words
    guard = Guard(1.0, interval_s=1.0, teardown_s=1.0, min_billed_s=0.0, provision_slack_s=0.0, min_cap_s=1.0)
    guard.reserve(["n0"], [PriceSchedule.constant(36.0)], 0.0)  # $0.01/s: the budget lasts ~100 s
    stops = CheckpointStops(every_s=30.0)
    lp = LogProgress(st, total_steps=1000, gpus=8, seq_len=8192)
    sample = st.sample_log()
    saved = [l for l in sample if "Finished saving" in l][0]
    step = [l for l in sample if "step: 10" in l][0]
    decisions = []
    for t in (10.0, 40.0, 70.0):  # a checkpoint every 30 s
        lp.feed(step)
        lp.feed(saved)
        decisions.append(stops.check(t, lp.progress() | {"checkpoint_step": int(t)}, guard, 0.0, None))
    assert decisions[0] is None and decisions[1] is None  # the next checkpoint is still paid for
    assert decisions[2][0] == BUDGET and "right after this one" in decisions[2][1]  # t=100 would pass $1
    assert not guard.should_stop(70.0)  # the plain guard would have run on and lost the steps after 70 s


@pytest.mark.slow  # end to end, 10–16 s: CI's slow run (the README command stays under 10 minutes)
def test_a_local_command_read_by_torchtitans_parser_stops_at_the_budget(tmp_path):
    """`launch plan.json --stack torchtitan -- python replay.py`: a command printing a real torchtitan log (the
    pr3393 excerpt) is read by torchtitan's parser; the budget guard stops it (exit 4) with the log's step in the
    run's progress."""
    replay = tmp_path / "replay.py"
    lines = [l for _, l in _titan_log("torchtitan_pr3393_debugmodel.log")]
    replay.write_text("import os, sys, time\nlines = %r\nif os.environ.get('RANK', '0') == '0':\n"
                      "    for l in lines * 50:\n        print(l, flush=True)\n        time.sleep(0.3)\n" % lines)
    plan = tmp_path / "plan.json"
    r = run_cloudfit("recommend", "--model", "llama3-1b", "--tokens", "1e8", "--seq-len", "2048", "--deadline", "2d",
                     "--accelerators", "L4", "--regions", "us-central1", "--stack", "torchtitan", "--max-nodes", "1",
                     "--out", str(plan))
    assert r.returncode == 0, r.stderr
    r = run_cloudfit("launch", str(plan), "--yes", "--budget", "0.012", "--check-interval", "0.5", "--ranks", "1",
                     "--name", "replay", "--json", "--stack", "torchtitan", "--", sys.executable, str(replay),
                     timeout=120)
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["reason"] == "budget" and res["spend_usd"] <= 0.012 and res["steps"] >= 14
    st = run_cloudfit("status", "replay", "--json")
    prog = json.loads(st.stdout)["progress"]
    assert prog["source"] == "log:torchtitan" and prog["loss"] > 0 and prog["memory_gib"] == pytest.approx(9.46)


def test_words_after_dashes_are_the_stacks_own_arguments_or_a_command(cli, fake, tmp_path):
    """Accelerate launches your script (`-- train.py …`); flags (`-- --lr …`) go to the plan's stack; a program
    (`-- python train.py`) runs as the custom stack with the layout."""
    plan = tmp_path / "acc.json"
    r = run_cloudfit("recommend", "--model", "llama3-1b", "--tokens", "1e8", "--seq-len", "2048", "--deadline", "2d",
                     "--accelerators", "L4", "--regions", "us-central1", "--stack", "accelerate", "--out", str(plan))
    assert r.returncode == 0, r.stderr
    proj = _project(tmp_path)

    def job(*words):
        j = cli("launch", str(plan), "--dry-run", "--json", "--name", "acc", *_gcp(fake, "--checkpoint-dir", CKPT),
                "--", *words)
        assert j.exit_code == 0, j.output
        return json.loads(j.output)["preview"]["job"]

    acc = job(str(proj / "train.py"), "--lr", "3e-4")
    assert acc["stack"] == "accelerate" and "accelerate launch" in acc["commands"][0]["command"]
    assert acc["commands"][0]["command"].endswith("train.py --lr 3e-4")  # run from the shipped folder
    assert "NODE_RANK=0" in acc["commands"][0]["command"]  # it starts its own ranks: once per node
    [w] = [s for s in acc["ships"] if s["what"] == "workdir archive"]
    assert {"train.py", "lib/steps.py"} <= {f["path"] for f in w["files"]}
    assert any(name.endswith(".yaml") for name in acc["config_files"])
    custom = job("python", str(proj / "train.py"))
    assert custom["stack"] == "custom" and "--no-python python train.py" in custom["commands"][0]["command"]


def test_a_local_rehearsal_of_a_torchtitan_plan_leaves_torchtitans_files_in_the_run_folder(plan_path):
    """On CPU cloudfit's trainer rehearses the layout (torchtitan needs the GPUs); the run folder gets the files
    torchtitan would get, to read."""
    from cloudfit.executors.local import run_dir

    r = run_cloudfit("launch", str(plan_path), "--steps", "2", "--ranks", "1", "--yes", "--name", "reh", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "torchtitan needs the plan's GPUs" in r.stderr
    folder = run_dir("reh")
    assert "def cloudfit_job" in (folder / "cloudfit_titan.py").read_text()
    assert json.loads((folder / "progress.json").read_text())["step"] == 2  # the rehearsal itself ran


def test_a_switch_to_another_cluster_size_reads_its_own_layout_file_not_the_first_configs(plan_path):
    """Every config the run may start ships its own config files: a node of a 2-node alternative reads
    cloudfit_layout.n2x1.json (its degrees), the plan's own nodes cloudfit_layout.json — one archive for both."""
    import dataclasses
    import io
    import tarfile

    from cloudfit.executors.stack_job import StackRun
    from cloudfit.launcher import _with_stack_files

    plan = load_plan(plan_path)
    own = plan.chosen.config
    bigger = dataclasses.replace(own, nodes=own.nodes * 2)
    run = StackRun("custom", "custom", plan, ("python", "train.py"))
    a, b = run.command(own), run.command(bigger)
    assert a.files.keys() == {"cloudfit_layout.json"} and a.env["CLOUDFIT_LAYOUT_FILE"] == "cloudfit_layout.json"
    tag = f"n{bigger.nodes}x{bigger.offering.accelerators_per_node}"
    name = f"cloudfit_layout.{tag}.json"
    assert b.files.keys() == {name} and b.env["CLOUDFIT_LAYOUT_FILE"] == name
    assert json.loads(b.files[name])["dp_shard"] * json.loads(b.files[name]).get("dp_replicate", 1) == \
        2 * json.loads(a.files["cloudfit_layout.json"])["dp_shard"] * \
        json.loads(a.files["cloudfit_layout.json"]).get("dp_replicate", 1)
    job = dataclasses.make_dataclass("J", [("stack", object)])(run)
    packed = _with_stack_files(None, job, [own, bigger], None)
    with tarfile.open(fileobj=io.BytesIO(packed.tar_gz)) as t:
        shipped = {m.name.lstrip("./"): json.loads(t.extractfile(m).read()) for m in t.getmembers() if m.isfile()}
    assert shipped.keys() == {"cloudfit_layout.json", name}
    assert shipped[name] == json.loads(b.files[name])  # the alternative's degrees, not the first config's


def test_a_command_ending_on_its_own_is_not_a_budget_stop_and_its_own_layout_is_not_recorded_as_the_plans(
        cli, tmp_path, monkeypatch):
    """The H200 run of 2026-11-27 (tests/stacks/logs/PROVENANCE.md): the user's torchtitan command stopped after its
    own 20 steps (exit 0) — an end of its own, not "stopped at the budget" — and ran mb=1, ga=4 where the plan said
    mb=2, ga=2: its speed is not recorded as the plan's layout's (here the GPUs are taken to be the plan's)."""
    import cloudfit.launcher as launcher

    lines = (LOGS / "torchtitan_0.2.2_llama3_8b_h200.log").read_text().splitlines()
    replay = tmp_path / "replay.py"
    replay.write_text("import os, time\nlines = %r\nif os.environ.get('RANK', '0') == '0':\n"
                      "    for l in lines:\n        print(l, flush=True)\n        time.sleep(0.02)\n" % lines)
    plan = tmp_path / "plan.json"
    # the run's own plan (llama3-8b, mb=2, ga=2 on one H200) is no longer made: AMP's fp32 weights and their bf16
    # autocast copy leave no 8B layout within one H200's headroom (cloudfit/llm/memory.py); a 1B plan with the same
    # micro-batch and accumulation stands in for it — what is tested is how the launch reads the log
    r = cli("recommend", "--model", "llama3-1b", "--tokens", "1e8", "--seq-len", "2048", "--deadline", "7d",
            "--accelerators", "H200", "--clouds", "nebius", "--stack", "torchtitan", "--max-gpus", "1",
            "--global-batch", "4", "--layout", "mb=2,ac=full", "--out", str(plan))
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(launcher, "_local_gpus_are", lambda accelerator: accelerator == "H200")
    r = cli("launch", str(plan), "--yes", "--check-interval", "0.2", "--name", "own-end", "--stack", "torchtitan",
            "--", sys.executable, str(replay))
    out = r.output
    assert r.exit_code == 0, out[-3000:]
    assert "ended on its own before the plan's steps" in out and "stopped at the budget" not in out
    assert "step 20/" in out
    assert "not recorded in a profile: the job's log says it ran micro_batch 2→1, grad_accum 2→4" in out
    assert "its 6,354 tokens/s" in out  # the median of steps 4–20 in the log, not its last line's 6,215
    st = json.loads(cli("status", "own-end", "--json").output)
    assert st["reason"] == "exited" and st["progress"]["step"] == 20
    assert st["progress"]["memory_gib"] == pytest.approx(137.27)


def test_a_stack_that_does_not_import_here_is_one_line_and_nothing_is_launched(plan_path, tmp_path):
    """torchtitan 0.3.0 on the H200's torch 2.11 failed at import and torchrun restarted it three times (75 s): the
    local backend imports the stack's entry module once first. A torchtitan whose train module fails the same way
    (a real package on PYTHONPATH raising that ImportError) is refused in one line, with no cluster made."""
    import os

    pkg = tmp_path / "site" / "torchtitan"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("raise ImportError(\"cannot import name 'DataParallelMeshDims' from "
                                  "'torch.distributed.fsdp'\")\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    r = run_cloudfit("launch", str(plan_path), "--yes", "--name", "noimport", "--ranks", "1", "--", "--hf_assets_path",
                     str(tmp_path), env=env, timeout=300)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("Note: ")]  # the launch's notes first
    assert len(lines) == 1 and "torchtitan.train does not import" in lines[0] and "DataParallelMeshDims" in lines[0]
    assert "nothing launched" in lines[0] and "Traceback" not in r.stderr
    st = run_cloudfit("status", "noimport")
    assert st.returncode != 0 or "noimport" not in st.stdout


def test_a_node_whose_stack_does_not_import_fails_in_one_line_before_torchrun(cli, fake, plan_path, tmp_path):
    """`launch plan.json --stack torchtitan -- --flags` on gcp: the node's real startup script imports torchtitan's
    entry module once before torchrun; a torchtitan that cannot import there (a real package raising the H200
    session's ImportError) fails the node with that line as its guest error — not torchrun restarting it attempt after
    attempt on billed GPUs."""
    from tests.executors.conftest import run_startup

    r = cli("launch", str(plan_path), "--yes", *_gcp(fake, "--checkpoint-dir", CKPT, "--check-interval", "0.1",
                                                         "--steps", "3", "--name", "noimp"),
            "--", "--hf_assets_path", "/assets")
    assert "Traceback" not in r.output  # the fake VMs report nothing; the node below is what is under test
    body = fake.inserted[-1]
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    script = items.pop("startup-script")
    assert "ENTRY_MODULE=torchtitan.train" in script
    site = tmp_path / "site" / "torchtitan"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "train.py").write_text("raise ImportError(\"cannot import name 'DataParallelMeshDims' from "
                                   "'torch.distributed.fsdp'\")\n")
    script = script.replace("BUCKET=ckpt-bucket", "BUCKET=").replace("CKPT=/mnt/cloudfit/ckpt-bucket/titan",
                                                                     f"CKPT={tmp_path / 'ckpt'}")
    p, md = run_startup(script, {**items, "cloudfit-master-addr": "self", "cloudfit-stop-at": f"{time.time() + 600:.0f}"},
                        tmp_path / "node", tmp_path,
                        {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])})
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert md.guest["cloudfit/state"] == "failed"
    err = md.guest["cloudfit/error"]
    assert "torchtitan.train does not import on this VM" in err and "DataParallelMeshDims" in err
    assert not (tmp_path / "node" / "job.log").exists()  # the job (and torchrun) never started
