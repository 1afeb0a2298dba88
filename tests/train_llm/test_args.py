"""Bad input to ``python -m cloudfit.train_llm``: one line on stderr, exit status 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BASE = ["--steps", "3", "--checkpoint-dir", "CKPT"]


def _run(args, tmp_path, world=None):
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):  # in-process runs of this session set the
        env.pop(k, None)  # port of their own group: a trainer inheriting it would find it taken (EADDRINUSE)
    env.pop("CLOUDFIT_CHECKPOINT_DIR", None)
    if world is not None:  # what torchrun would set for a rank: the layout check runs before any group
        env.update(RANK="0", WORLD_SIZE=str(world), LOCAL_RANK="0")
    args = [str(tmp_path / "ckpt") if a == "CKPT" else a for a in args]
    return subprocess.run([sys.executable, "-m", "cloudfit.train_llm", *args], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.mark.parametrize("args, world, needle", [
    (["--pp", "2", *BASE], 2, "pipeline parallel 2 needs --grad-accum ≥ 2"),
    (["--pp", "3", "--grad-accum", "3", *BASE], 3, "pipeline parallel 3 is more stages than the model's 2 layers"),
    (["--pp", "2", "--grad-accum", "2", "--shape", "llama3-1b", "--shrink", *BASE], 2,
     "pipeline parallel with tied embeddings (llama3-1b (shrunk)) is not supported"),
    (["--cp", "3", *BASE], 3, "context parallel 3 does not divide --seq-len 64"),
    (["--cp", "0", *BASE], None, "--cp must be ≥ 1"),
    (["--ac", "sometimes", *BASE], None, "--ac 'sometimes'"),
    (["--tp", "2", "--dp-shard", "4", *BASE], 4, "tp 2 = 8 ranks, but the world size is 4"),
    (["--tp", "3", *BASE], 3, "tensor parallel 3 does not divide heads"),
    (["--shape", "llama3-8b", "--shrink", "--tp", "4", *BASE], 4, "tensor parallel 4 does not divide kv-heads 2"),
    (["--shape", "gpt-17", *BASE], None, "--shape 'gpt-17': known shapes are"),
    (["--shape", "llama3-8b", "--layers", "2", *BASE], None, "add --shrink"),
    (["--micro-batch", "0", *BASE], None, "--micro-batch must be ≥ 1"),
    (["--lr", "0", *BASE], None, "--lr must be > 0"),
    (["--lr", "nan", *BASE], None, "--lr must be > 0"),
    (["--steps", "0", "--checkpoint-dir", "CKPT"], None, "--steps must be ≥ 1"),
    (["--steps", "3"], None, "the following arguments are required: --checkpoint-dir"),
    (["--steps", "three", "--checkpoint-dir", "CKPT"], None, "invalid int value"),
    (["--dim", "60", "--heads", "8", *BASE], None, "dim 60 is not a multiple of heads 8"),
    (["--heads", "4", "--kv-heads", "3", *BASE], None, "heads 4 is not a multiple of kv-heads 3"),
    (["--checkpoint-interval-s", "0", *BASE], None, "--checkpoint-interval-s must be > 0"),
])
def test_bad_input_is_one_line_and_exit_2(args, world, needle, tmp_path):
    r = _run(args, tmp_path, world)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("cloudfit.train_llm: ") and needle in lines[0], lines[0]
    assert r.stdout == ""
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.slow
def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    """Resuming with different model arguments: one line, exit 2 (not a DCP shape traceback)."""
    ck = tmp_path / "ckpt"
    ok = _run(["--steps", "2", "--checkpoint-dir", str(ck), "--dim", "32"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    r = _run(["--steps", "4", "--checkpoint-dir", str(ck), "--dim", "64"], tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds a different model (dim 32→64" in lines[0], r.stderr


def test_help_mentions_the_layout_flags():
    r = subprocess.run([sys.executable, "-m", "cloudfit.train_llm", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for flag in ("--dp-replicate", "--dp-shard", "--tp", "--ac", "--checkpoint-interval-s", "--shrink"):
        assert flag in r.stdout


@pytest.mark.parametrize("args, lr", [(["--shape", "llama3-8b"], 3e-4), (["--shape", "llama3-70b"], 1.5e-4),
                                      (["--shape", "llama3-405b"], 7.5e-5), (["--shape", "llama3-8b", "--shrink"], 3e-3),
                                      ([], 3e-3), (["--shape", "llama3-8b", "--lr", "1e-5"], 1e-5)])
def test_the_default_learning_rate_falls_with_the_width(args, lr):
    """A fixed 3e-3 made the loss rise at real width; the default follows the Llama-3 recipes' rates."""
    from cloudfit.train_llm import parse_args

    a = parse_args([*args, "--steps", "1", "--checkpoint-dir", "/nonexistent"], world_size=1)
    assert a.lr == pytest.approx(lr)
