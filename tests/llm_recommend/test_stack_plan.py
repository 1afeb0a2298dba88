"""Plans name their stack: `recommend --stack` prices the layout search with the stack's constants, keeps only
layouts the stack runs, and the plan, --json and the table say which stack the numbers are for."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cloudfit import stacks
from cloudfit.errors import UsageError
from cloudfit.llm import space as lsp
from cloudfit.plan.io import PlanError, load_plan, plan_from_dict, plan_to_dict
from tests.conftest import run_cloudfit

# one H100 region keeps the search small; a budget leaves room for multi-node layouts
BASE = ("recommend", "--model", "llama3-8b", "--tokens", "1e10", "--seq-len", "8192", "--deadline", "3d",
        "--accelerators", "H100", "--regions", "us-central1")


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("stackplans")
    out = {}
    for st in ("torchtitan", "megatron", None):
        path = d / f"{st or 'none'}.json"
        r = run_cloudfit(*BASE, *(("--stack", st) if st else ()), "--json", "--out", str(path))
        assert r.returncode == 0, r.stderr
        out[st] = (load_plan(path), json.loads(r.stdout), path)
    return out


def test_the_plan_and_json_name_the_stack(plans):
    for st in ("torchtitan", "megatron"):
        plan, js, _ = plans[st]
        assert plan.layout["stack"] == st and js["stack"] == st and js["plan"]["layout"]["stack"] == st
    plan, js, _ = plans[None]
    assert "stack" not in plan.layout and js["stack"] == "cloudfit"  # no --stack: cloudfit's trainer's constants


def test_the_table_header_says_which_stack(tmp_path):
    r = run_cloudfit(*BASE, "--stack", "megatron", "--top", "1")
    assert r.returncode == 0, r.stderr
    assert "stack megatron" in r.stdout.splitlines()[0]


def test_every_layout_of_the_plan_is_one_the_stack_runs(plans):
    for st in ("torchtitan", "megatron"):
        plan, _, _ = plans[st]
        stack, shape = stacks.get(st), plan.layout["shape"]
        from cloudfit.llm.layout import parse

        for text in [plan.layout["text"]] + [r["layout"] for r in plan.layout["ranking"]]:
            assert stack.layout_ok(parse(text, gpus=plan.layout["gpus"]), shape) is None, (st, text)


def test_the_plans_speed_is_the_stacks_constants(plans):
    """The plan's tokens/s is the step model's for that layout under the stack's framework constants — and the
    same layout under another stack's constants is priced differently (megatron ≠ fsdp)."""
    from cloudfit.llm.predict import predict_layouts
    from cloudfit.llm.layout import parse
    from cloudfit.llm.zoo import resolve

    for st in ("torchtitan", "megatron"):
        plan, _, _ = plans[st]
        L = plan.layout
        lay = parse(L["text"], gpus=L["gpus"])
        kw = dict(seq_len=L["seq_len"], gpus_per_node=L["gpus_per_node"], network_gbps=L["node_network_gbps"])
        mine = predict_layouts(resolve("llama3-8b"), "H100", [lay], framework=stacks.get(st).framework, **kw)
        assert mine["tokens_per_second"][0] == pytest.approx(L["tokens_per_second"], rel=1e-6)
    lt = parse(plans["megatron"][0].layout["text"], gpus=plans["megatron"][0].layout["gpus"])
    kw = dict(seq_len=8192, gpus_per_node=8, network_gbps=plans["megatron"][0].layout["node_network_gbps"])
    a = predict_layouts(resolve("llama3-8b"), "H100", [lt], framework="megatron", **kw)["tokens_per_second"][0]
    b = predict_layouts(resolve("llama3-8b"), "H100", [lt], framework="fsdp", **kw)["tokens_per_second"][0]
    assert a != pytest.approx(b, rel=1e-3)


def test_stack_mask_asks_the_stack_once_per_distinct_layout_shape():
    g, _ = lsp.layout_grids([8, 16, 32, 64, 128, 256], [8] * 6, heads=32, kv_heads=8, layers=32, seq_len=8192,
                            global_batch=512)
    assert (g.pp > 1).any() and (g.vp > 1).any()
    calls = []

    def no_pipeline(lay):
        calls.append(lay)
        return "no pipeline" if lay.pp > 1 else None

    keep = lsp.stack_mask(g, no_pipeline)
    assert np.array_equal(keep, g.pp == 1)
    assert len(calls) < len(g) / 5  # once per distinct (tp, pp, cp, vp, zero, ac, …), not once per row
    acc = stacks.get("accelerate")
    keep = lsp.stack_mask(g, lambda lay: acc.layout_ok(lay, {"layers": 32}))
    assert keep.any() and not (g.pp[keep] > 1).any()  # Accelerate FSDP has no pipeline


def test_a_pinned_layout_the_stack_cannot_run_is_refused_in_one_line():
    r = run_cloudfit(*BASE, "--stack", "accelerate", "--layout", "pp=2")
    assert r.returncode != 0
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr


def test_framework_is_the_hidden_old_word_for_stack(plans):
    r = run_cloudfit(*BASE, "--framework", "torchtitan", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stack"] == "torchtitan"
    h = run_cloudfit("recommend", "--help")
    assert "--stack" in h.stdout and "--framework" not in h.stdout
    both = run_cloudfit(*BASE, "--framework", "megatron", "--stack", "torchtitan")
    assert both.returncode == 2 and "not both" in both.stderr


def test_unknown_and_custom_stacks_are_refused():
    r = run_cloudfit(*BASE, "--stack", "deepspeed-chat")
    assert r.returncode == 2 and "unknown stack" in r.stderr and "Traceback" not in r.stderr
    r = run_cloudfit(*BASE, "--stack", "custom")
    assert r.returncode == 2 and "custom" in r.stderr
    r = run_cloudfit("recommend", "--model", "resnet50", "--samples", "1e6", "--deadline", "1d", "--stack", "torchtitan")
    assert r.returncode == 2 and "large-model" in r.stderr


def test_old_plans_load_as_cloudfit_and_a_bad_stack_is_refused(plans):
    plan, _, path = plans["torchtitan"]
    d = json.loads(path.read_text())
    del d["layout"]["stack"]  # a plan.json written before stacks
    old = plan_from_dict(d, source="old.json")
    from cloudfit.cli.recommend_llm import stack_of

    assert stack_of(old) == "cloudfit" and stack_of(plan) == "torchtitan"
    assert plan_from_dict(plan_to_dict(plan)).layout["stack"] == "torchtitan"
    d["layout"]["stack"] = "deepspeed"
    with pytest.raises(PlanError, match="layout.stack"):
        plan_from_dict(d, source="bad.json")


def test_predict_takes_stack_too():
    a = run_cloudfit("predict", "--model", "llama3-8b", "--accelerator", "H100", "--count", "8", "--seq-len", "8192",
                     "--stack", "megatron", "--json")
    b = run_cloudfit("predict", "--model", "llama3-8b", "--accelerator", "H100", "--count", "8", "--seq-len", "8192",
                     "--framework", "megatron", "--json")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert json.loads(a.stdout)["tokens_per_second"] == json.loads(b.stdout)["tokens_per_second"]


def test_token_workload_rejects_custom_in_the_library():
    from cloudfit.plan.llm import token_workload

    with pytest.raises(UsageError):
        token_workload(tokens=1e9, model="llama3-8b", stack="custom", deadline="1d")


def test_a_stack_that_cannot_train_the_job_at_all_is_refused_before_any_plan(cli, tmp_path):
    """A plan is a promise: LoRA on torchtitan / Megatron / cloudfit's trainer, or a model that is no torchtitan
    flavour, is refused by recommend (one line, exit 2, no plan written), not planned and refused at launch."""
    out = tmp_path / "plan.json"
    for stack in ("torchtitan", "megatron", "cloudfit"):
        r = cli("recommend", "--model", "llama3-8b", "--finetune", "lora", "--tokens", "5e8", "--seq-len", "4096",
                "--budget", "200", "--stack", stack, "--out", str(out))
        assert r.exit_code == 2 and "LoRA" in r.output and len(r.output.strip().splitlines()) == 1, r.output
        assert not out.exists()
    r = cli("recommend", "--model", "llama3-8b", "--finetune", "lora", "--tokens", "5e8", "--seq-len", "4096",
            "--budget", "200", "--stack", "accelerate", "--out", str(out))  # your script's peft: it runs LoRA
    assert r.exit_code == 0 and out.exists(), r.output
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "examples" / "my_model" / "config.json"
    r = cli("recommend", "--config", str(config), "--tokens", "2e9", "--deadline", "3d",
            "--stack", "torchtitan")
    assert r.exit_code == 2 and "flavours" in r.output, r.output
