"""Issue 34, "Bounds": inputs no catalog or physics allows are refused in one line with exit 2, before any
search, and the search stays memory-bounded whatever the flags."""

from __future__ import annotations

import shutil

import pytest

from cloudfit.errors import UsageError
from cloudfit.types import MAX_JOB_HOURS, MAX_NODES_LIMIT, Workload

SMALL = ("recommend", "--model", "resnet50", "--samples", "1e8")


def _refused(r, *words: str) -> str:
    """The one stderr line of a refusal with exit 2, containing every one of ``words``."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cloudfit: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_max_nodes_beyond_the_cap_is_refused_before_any_search(cli):
    # 100,000 nodes ran 566 s and was OOM-killed at 23 GB; the refusal comes from the Workload itself
    _refused(cli(*SMALL, "--deadline", "24h", "--max-nodes", "100000"), "--max-nodes", str(MAX_NODES_LIMIT))
    with pytest.raises(UsageError):
        Workload("resnet50", 1e8, deadline_hours=24, max_nodes=MAX_NODES_LIMIT + 1)
    Workload("resnet50", 1e8, deadline_hours=24, max_nodes=MAX_NODES_LIMIT)  # the cap itself is allowed


def test_the_search_at_the_node_cap_stays_memory_bounded():
    """At the cap, the whole LLM space (the larger of the two: layouts per cluster) stays well under a GB."""
    import os
    import subprocess
    import sys

    # the peak of this process's own memory: /proc's VmHWM starts afresh at exec, while ru_maxrss keeps the
    # high-water mark of the forked pytest process (over a GB late in the suite), which is not the search's
    code = ("import re, resource; from pathlib import Path; from cloudfit.plan.llm import token_workload;"
            "from cloudfit.plan import recommend;"
            f"recommend(token_workload(model='llama3-8b', tokens=1e11, deadline='7d', max_nodes={MAX_NODES_LIMIT}));"
            "st = Path('/proc/self/status');"
            "print(re.search(r'VmHWM:\\s*(\\d+)', st.read_text()).group(1) if st.exists() else "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "CLOUDFIT_CACHE": "0"})
    assert r.returncode == 0, r.stderr
    peak_mb = int(r.stdout.split()[-1]) / 1024
    assert peak_mb < 1024, peak_mb


@pytest.mark.parametrize("deadline, words", [("24", ("no unit", "24h")), ("1000000d", ("365d",)),
                                             ("400d", ("365d",))])
def test_deadlines_without_a_unit_or_beyond_a_year_are_refused(cli, deadline, words):
    _refused(cli(*SMALL, "--deadline", deadline), *words)


def test_a_year_is_the_longest_deadline():
    Workload("resnet50", 1e8, deadline_hours=MAX_JOB_HOURS)
    with pytest.raises(UsageError, match="365d"):
        Workload("resnet50", 1e8, deadline_hours=MAX_JOB_HOURS * 1.01)


@pytest.mark.parametrize("limit", [("--budget", "500"), ("--deadline", "24h")])
def test_samples_no_cluster_finishes_within_a_year_are_refused(cli, limit):
    # was "$1.16e27 expected" (exit 3 with 27-digit dollar amounts)
    line = _refused(cli("recommend", "--model", "resnet50", "--samples", "1e30", *limit), "years", "fastest")
    assert "e+27" not in line and len(line) < 300


def test_tokens_no_cluster_finishes_within_a_year_are_refused(cli):
    _refused(cli("recommend", "--model", "llama3-8b", "--tokens", "1e30", "--deadline", "7d"), "tokens", "years")


@pytest.mark.parametrize("args, words", [
    (("--profile", "resnet50", "-a", "H100", "--count", "1000000"), ("--count", "16")),
    (("--profile", "resnet50", "-a", "H100", "--nodes", "100000"), ("--nodes",)),
    (("--profile", "resnet50", "-a", "H100", "--network-gbps", "-1"), ("--network-gbps",)),
    (("--profile", "resnet50", "-a", "H100", "--network-gbps", "nan"), ("--network-gbps",)),
    (("--profile", "resnet50", "-a", "H100", "--machine-type", "n1-standard-8"), ("n1-standard-8", "H100")),
    (("--profile", "resnet50", "-a", "H100", "-c", "2", "--machine-type", "n1-highmem-16"),
     ("n1-highmem-16", "T4", "a3-highgpu")),
    (("--model", "llama3-8b", "-a", "H100", "--count", "1000000"), ("--count",)),
    (("--model", "llama3-8b", "-a", "H100", "--machine-type", "n1-highmem-8"), ("n1-highmem-8",)),
    (("--profile", "", "-a", "H100"), ("profile name is empty",)),
])
def test_predict_refuses_hardware_no_catalog_has(cli, args, words):
    _refused(cli("predict", *args), *words)


def test_predict_still_answers_shapes_no_vm_sells(cli):
    r = cli("predict", "--profile", "resnet50", "-a", "T4", "-c", "3", "--json")  # a note, not a refusal
    assert r.exit_code == 0, r.stderr
    r = cli("predict", "--profile", "resnet50", "-a", "A100", "-c", "8", "-n", "2", "--machine-type", "a2-highgpu-8g")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("args, words", [
    (("--model", "llama3-70b", "--finetune", "lora", "--lora-rank", "1000000"), ("--lora-rank", "8,192")),
    (("--model", "llama3-8b", "--finetune", "lora", "--lora-rank", "0"), ("--lora-rank",)),
    (("--model", "llama3-8b", "--lora-rank", "0"), ("--lora-rank",)),  # full fine-tuning: still no rank 0
])
def test_lora_ranks_beyond_the_hidden_size_or_zero_are_refused(cli, args, words):
    _refused(cli("recommend", *args, "--tokens", "2e8", "--budget", "500"), *words)
    _refused(cli("predict", *args, "-a", "H100", "-c", "8"), *words)


def test_a_rate_beyond_the_gpus_flop_peak_is_refused(cli, tmp_path):
    from cloudfit.profiling import io as pio

    path = tmp_path / "r50.json"
    shutil.copy(pio.resolve_profile("resnet50"), path)
    before = path.read_bytes()
    _refused(cli("profile", "add", str(path), "-a", "A100", "--count", "8", "--batch-size", "256", "--precision", "fp16",
                 "--samples-per-second", "1e12"), "TFLOP/s", "peak", "8× A100")
    assert path.read_bytes() == before  # nothing written
    # the README's own line (2,600 samples/s on 8 A100s) is far below the peak and is kept
    r = cli("profile", "add", str(path), "-a", "A100", "--count", "8", "--batch-size", "256", "--precision", "fp16",
            "--samples-per-second", "2600")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("flag", ["--out", "--plot", "--emit-skypilot"])
def test_outputs_into_a_missing_folder_are_refused_not_created(cli, tmp_path, flag):
    target = tmp_path / "no" / "such" / "file.json"
    _refused(cli(*SMALL, "--deadline", "24h", flag, str(target)), "does not exist")
    assert not (tmp_path / "no").exists()


def test_profile_run_out_into_a_missing_folder_is_refused(cli, tmp_path):
    _refused(cli("profile", "run", "resnet18", "--stats-only", "--out", str(tmp_path / "no" / "r.json")),
             "does not exist")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("args", [("--model", ""), ("--model", " "), ("--profile", "")])
def test_an_empty_model_name_is_refused(cli, args):
    _refused(cli("recommend", *args, "--samples", "1e8", "--deadline", "24h"), "empty")
