"""The runtime contract every registered family passes (``cloudfit.runtime.FAMILIES``), on real gloo
ranks under torchrun: the loss goes down; a rank killed with SIGKILL brings the group back from the
newest checkpoint with no step lost or done twice; a stop request checkpoints and stops (exit 4 for
the budget's stop file in a plain process, 5 for ``--stop-at``; 0 under torchrun, which would restart
a rank that exits non-zero, with the reason in the progress file)."""

from __future__ import annotations

import time

import pytest

from cloudfit.runtime.checkpoint import MARKER, complete_checkpoints


def mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


@pytest.mark.slow
def test_kill_9_resumes_with_no_step_lost_or_doubled_and_the_loss_goes_down(trainer):
    n = trainer.family.smoke_steps
    every = n // 10
    p = trainer.torchrun("--steps", str(n), "--checkpoint-every", str(every), max_restarts=1)
    # a checkpoint, and steps after it: the kill loses work that must be redone
    trainer.wait_until(p, lambda: (done := complete_checkpoints(trainer.ckpt)) and any(
        m["step"] > done[0][0] + 2 for m in trainer.metrics()), "steps after a checkpoint")
    trainer.kill_one_rank(p)
    assert trainer.finish(p) == 0, trainer.logs()
    ms = trainer.metrics()
    first = {m["step"]: m["loss"] for m in ms if m["restart"] == 0}
    second = [m for m in ms if m["restart"] == 1]
    assert second, f"the kill came after the last step: raise {trainer.name}'s smoke_steps\n{trainer.logs()}"
    resumed_from = second[0]["step"] - 1
    assert resumed_from > 0 and resumed_from % every == 0 and resumed_from <= max(first), (resumed_from, max(first))
    # after the restart: every step from the checkpoint on, once each, in order
    assert [m["step"] for m in second] == list(range(resumed_from + 1, n + 1))
    # the steps redone are the same steps (same weights, optimizer state and data): the same losses
    redone = [(first[m["step"]], m["loss"]) for m in second if m["step"] in first]
    assert len(redone) == max(first) - resumed_from and all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in redone), redone
    prog = trainer.progress()
    assert prog["state"] == "completed" and prog["step"] == n and prog["restart"] == 1 and prog["resumes"] == 1
    assert prog["resumed_from_step"] == resumed_from
    assert prog["eval_loss_at_resume"] == pytest.approx(prog["eval_loss_at_save"], abs=1e-5)  # the weights came back
    per_step = second[-1].get("samples_per_step") or prog["samples_seen"] / n
    assert prog["samples_seen"] == n * per_step  # counted once per step, across the restart
    losses = [first[s] for s in sorted(first)] + [m["loss"] for m in second]
    assert mean(losses[-5:]) < 0.5 * mean(losses[:5]), losses[:5] + losses[-5:]
    assert [s for s, _ in complete_checkpoints(trainer.ckpt)] == [n, n - every]  # the two newest kept


def test_budget_stop_checkpoints_and_exits_4_in_a_plain_process(trainer):
    stop = trainer.tmp / "STOP"
    stop.touch()
    r = trainer.one_process("--steps", "50", "--stop-file", str(stop))
    assert r.returncode == 4, r.stderr[-2000:]
    prog = trainer.progress()
    assert prog["state"] == "stopped" and prog["stop_reason"] == "stop-file" and prog["step"] == 1
    assert complete_checkpoints(trainer.ckpt)[0][0] == 1 and prog["checkpoint_step"] == 1
    stop.unlink()
    r = trainer.one_process("--steps", "9", "--stop-at", f"{time.time() - 1:.0f}")  # the time limit passed
    assert r.returncode == 5, r.stderr[-2000:]
    prog = trainer.progress()
    assert prog["stop_reason"] == "stop-at" and prog["resumed_from_step"] == 1 and prog["step"] == 2
    assert [m["step"] for m in trainer.metrics()] == [1, 2]

def test_a_stop_under_torchrun_exits_0_with_the_reason(trainer):
    stop = trainer.tmp / "STOP"
    stop.touch()
    p = trainer.torchrun("--steps", "50", "--stop-file", str(stop))
    assert trainer.finish(p) == 0, trainer.logs()
    prog = trainer.progress()
    assert prog["state"] == "stopped" and prog["stop_reason"] == "stop-file" and prog["world_size"] == 2
    [(step, path)] = complete_checkpoints(trainer.ckpt)
    assert step == prog["step"] == 1 and (path / MARKER).is_file() and (path / ".metadata").is_file()


@pytest.mark.parametrize("name", ["cnn", "llm"])
def test_every_family_is_registered_with_a_runnable_module(name):
    from cloudfit import runtime

    fam = runtime.load_family(name)
    assert fam.name == name and fam.prog == runtime.FAMILIES[name] and fam.smoke_steps >= 20
