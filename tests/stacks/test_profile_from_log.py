"""``cloudfit profile add FILE --from-log run.log --stack torchtitan``: real torchtitan log excerpts
(tests/stacks/logs/PROVENANCE.md) become measured runs whose tokens/s and memory are the ones the excerpt states,
and ``predict --profile`` anchors on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloudfit.profiling import io
from cloudfit.profiling.from_log import measurement_from_log
from cloudfit.stacks import get

LOGS = Path(__file__).parent / "logs"
DEBUG_CONFIG = LOGS / "titan_debugmodel_config.json"


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


#: file, cluster (accelerator, GPUs per node, nodes), model flags, layout flags, the excerpt's own numbers after
#: its first logged interval: tokens/s per GPU (``tps``) and peak GiB
EXCERPTS = [
    ("torchtitan_pr1287_llama3_8b.log", ("H100", 8, 1), ("--model", "llama3-8b"),
     ("--layout", "fsdp=8,ac=selective", "--seq-len", "8192"), [5917, 5892, 5881], 49.66),
    ("torchtitan_pr3393_debugmodel.log", ("T4", 1, 1), ("--config", str(DEBUG_CONFIG)),
     ("--layout", "fsdp=1,ac=selective", "--seq-len", "2048"), [7334, 7313, 7282, 7322, 7309, 7272, 7304], 9.46),
    ("torchtitan_pr1349_debugmodel_fsdp8.log", ("H100", 8, 1), ("--config", str(DEBUG_CONFIG)),
     ("--seq-len", "2048"), [168877, 175100], 2.66),  # the layout is the log's own mesh line
]


@pytest.mark.parametrize("name,cluster,model,lay,tps,mem", EXCERPTS, ids=[e[0] for e in EXCERPTS])
def test_profile_add_from_log_reproduces_the_excerpt(cli, tmp_path, name, cluster, model, lay, tps, mem):
    acc, per_node, nodes = cluster
    gpus = per_node * nodes
    f = tmp_path / "p.json"
    r = cli("profile", "add", str(f), "--from-log", str(LOGS / name), "--stack", "torchtitan", "--accelerator", acc,
            "--count", str(per_node), "--nodes", str(nodes), *model, *lay)
    assert r.exit_code == 0, r.stderr
    (m,) = io.load_profile(f, llm_ok=True).measurements
    # tps is per GPU: × the cluster's GPUs (the profile keeps 6 significant digits)
    assert m.tokens_per_second == pytest.approx(_median(tps) * gpus, rel=1e-5)
    assert m.memory_gib == pytest.approx(mem)
    assert m.source == "measured" and m.framework == "fsdp" and m.gpus == gpus
    assert "torchtitan log" in m.note and "MFU" in m.note
    assert m.layout.startswith(f"fsdp={gpus},") and m.precision == "bf16"


def test_the_log_states_the_layout_and_predict_anchors_on_it(cli, tmp_path):
    f = tmp_path / "p.json"
    r = cli("profile", "add", str(f), "--from-log", str(LOGS / "torchtitan_pr1287_llama3_8b.log"), "--stack",
            "torchtitan", "--accelerator", "H100", "--count", "8", "--model", "llama3-8b", "--layout",
            "fsdp=8,ac=selective", "--seq-len", "8192", "--batch-size", "2")
    assert r.exit_code == 0, r.stderr
    (m,) = io.load_profile(f, llm_ok=True).measurements
    same = json.loads(cli("predict", "--profile", str(f), "--accelerator", "H100", "--count", "8", "--seq-len",
                          "8192", "--batch-size", "2", "--layout", "fsdp=8,ac=selective", "--json").stdout)
    assert same["tokens_per_second"] == pytest.approx(m.tokens_per_second, rel=1e-3) == pytest.approx(5892 * 8)
    assert same["anchor"]["trust"] == "same" and "8×H100 fsdp=8 run" in same["anchor"]["basis"]
    far = json.loads(cli("predict", "--profile", str(f), "--accelerator", "H100", "--count", "8", "--nodes", "4",
                         "--seq-len", "8192", "--batch-size", "2", "--layout", "fsdp=32,ac=selective",
                         "--json").stdout)
    assert far["anchor"]["trust"] != "stack-generic" and far["tokens_per_second"] > same["tokens_per_second"]


def test_the_mesh_line_gives_the_layout():
    r = measurement_from_log("torchtitan", LOGS / "torchtitan_pr1349_debugmodel_fsdp8.log", gpus=8, seq_len=2048)
    assert r["layout"].startswith("dp=1,fsdp=8,tp=1,pp=1,cp=1") and r["steps"] == [2, 3]
    assert r["tokens_per_second"] == (168877 + 175100) / 2 * 8
    with pytest.raises(Exception, match="1 GPUs|covers|multiply|ranks|GPUs"):
        measurement_from_log("torchtitan", LOGS / "torchtitan_pr1349_debugmodel_fsdp8.log", gpus=16, seq_len=2048,
                             layout=None)


def test_every_rank_printing_the_same_step_counts_once():
    evs = list(get("torchtitan").parse_log((LOGS / "torchtitan_pr2389_b200_moe_multirank.log").read_text().splitlines()))
    assert [e.step for e in evs] == [4, 5]
    assert evs[0].tokens_per_second_per_gpu == 10050 and evs[0].memory_gib == 66.91 and evs[0].mfu == 0.1399


def test_the_run_configuration_fills_what_the_log_does_not_print(tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_text('[training]\nbatch_size = 2\nseq_len = 8192\n[parallelism]\ndata_parallel_shard_degree = 8\n'
                   '[activation_checkpoint]\nmode = "full"\n')
    r = measurement_from_log("torchtitan", LOGS / "torchtitan_pr1287_llama3_8b.log", gpus=8, stack_config=cfg)
    assert r["layout"] == "dp=1,fsdp=8,tp=1,pp=1,cp=1,mb=2,ac=full" and r["seq_len"] == 8192 and r["batch_size"] == 2


@pytest.mark.parametrize("text,why", [
    ("no step lines here\njust noise\n", "no torchtitan step lines"),
    ("[rank0]:[titan] step: 10  loss: 2.0  memory: 1.0GiB(1.0%)  tps: 1,000\n", "no parallel layout"),
])
def test_a_bad_log_is_one_line_and_exit_2(cli, tmp_path, text, why):
    log = tmp_path / "run.log"
    log.write_text(text)
    f = tmp_path / "p.json"
    r = cli("profile", "add", str(f), "--from-log", str(log), "--stack", "torchtitan", "--accelerator", "H100",
            "--count", "8", "--model", "llama3-8b", "--seq-len", "8192")
    assert r.exit_code == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not f.exists()  # nothing half-written


def test_a_missing_log_and_an_unknown_stack_are_one_line(cli, tmp_path):
    for extra, why in ((("--from-log", str(tmp_path / "nope.log")), "cannot read the log"),
                       (("--from-log", str(LOGS / "torchtitan_pr1287_llama3_8b.log"), "--stack", "jax"),
                        "unknown stack")):
        r = cli("profile", "add", str(tmp_path / "p.json"), *extra, "--accelerator", "H100", "--count", "8",
                "--model", "llama3-8b", "--seq-len", "8192", "--layout", "fsdp=8")
        assert r.exit_code == 2 and why in r.stderr, r.stderr


def test_a_custom_commands_progress_lines_are_a_profile_too(cli, tmp_path):
    from cloudfit.stacks.custom import progress_line

    log = tmp_path / "mine.log"
    log.write_text("\n".join([progress_line(1, tokens_per_second=9000.0), "my own log line",
                              progress_line(50, tokens_per_second=40000.0, memory_gib=61.0),
                              progress_line(checkpoint_step=50),
                              progress_line(100, tokens_per_second=42000.0, memory_gib=60.0)]) + "\n")
    f = tmp_path / "p.json"
    r = cli("profile", "add", str(f), "--from-log", str(log), "--stack", "custom", "--accelerator", "H100",
            "--count", "8", "--model", "llama3-8b", "--seq-len", "8192", "--layout", "fsdp=8,mb=2,ga=1")
    assert r.exit_code == 0, r.stderr
    (m,) = io.load_profile(f, llm_ok=True).measurements
    assert m.tokens_per_second == 41000.0 and m.memory_gib == 61.0 and m.batch_size == 2  # whole-job tokens/s as given
