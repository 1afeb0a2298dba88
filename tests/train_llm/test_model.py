"""The Llama-style decoder and the layout helpers, in one process (no process group)."""

from __future__ import annotations

import pytest

from cloudfit.llm_model import SHAPES, LlamaConfig, build, shrink
from cloudfit.train_llm import BadInput, Layout, markov_tables, rehearsal_layout, synthetic_batch, trainer_args


def test_shrink_keeps_the_layer_types_and_ratios():
    for name, real in SHAPES.items():
        s = shrink(real, layers=3, kv_heads=2, head_dim=16, vocab=128)
        assert s.heads // s.kv_heads == real.heads // real.kv_heads, name  # GQA ratio (1 for Llama-2 MHA)
        assert s.tie_embeddings == real.tie_embeddings, name
        assert abs(s.ffn_dim / s.dim - real.ffn_dim / real.dim) < 0.1, name
        assert (s.layers, s.head_dim, s.vocab) == (3, 16, 128)
        assert s.problems(tp=2) == [], name
    assert SHAPES["llama3-8b"].parameters() == pytest.approx(8.03e9, rel=0.01)
    assert SHAPES["llama3-70b"].parameters() == pytest.approx(70.6e9, rel=0.01)


def test_problems_name_what_does_not_divide():
    c = LlamaConfig(dim=96, layers=2, heads=6, kv_heads=2, vocab=64, ffn_dim=256)
    assert c.problems() == []
    assert any("tensor parallel 4 does not divide heads 6" in p for p in c.problems(tp=4))
    assert LlamaConfig(dim=96, layers=2, heads=6, kv_heads=4, vocab=64, ffn_dim=256).problems()[0].startswith("heads 6")


def test_forward_shapes_tied_embeddings_and_checkpointing_modes_agree():
    import torch

    cfg = shrink(SHAPES["llama3-1b"], layers=2, kv_heads=2, head_dim=8, vocab=64)
    m = build(cfg, max_seq_len=16, seed=0)
    assert m.output.weight is m.tok_embeddings.weight
    assert sum(p.numel() for p in m.parameters()) == cfg.parameters()
    x = torch.randint(0, 64, (2, 16))
    grads = {}
    for ac in ("none", "selective", "full"):
        for b in m.layers.values():
            b.ac = ac
        m.zero_grad()
        out = m(x)
        assert out.shape == (2, 16, 64)
        torch.nn.functional.cross_entropy(out.reshape(-1, 64), x.roll(-1, 1).reshape(-1)).backward()
        grads[ac] = m.layers["0"].attention.wk.weight.grad.clone()
    assert torch.allclose(grads["none"], grads["full"], atol=1e-6)
    assert torch.allclose(grads["none"], grads["selective"], atol=1e-6)
    assert grads["none"].abs().sum() > 0


def test_attention_is_causal():
    import torch

    cfg = shrink(SHAPES["llama3-8b"], layers=1, kv_heads=1, head_dim=8, vocab=32)
    m = build(cfg, max_seq_len=8, seed=1)
    x = torch.randint(0, 32, (1, 8))
    y = x.clone()
    y[0, -1] = (y[0, -1] + 1) % 32  # changing the last token cannot change earlier outputs
    with torch.no_grad():
        a, b = m(x), m(y)
    assert torch.allclose(a[0, :-1], b[0, :-1], atol=1e-6)
    assert not torch.allclose(a[0, -1], b[0, -1])


def test_synthetic_data_is_deterministic_per_step_and_rank():
    t = markov_tables(64)
    kw = dict(vocab=64, batch=3, seq_len=10, seed=0, micro=0)
    a = synthetic_batch(t, step=5, dp_rank=1, **kw)
    assert (a[0] == synthetic_batch(t, step=5, dp_rank=1, **kw)[0]).all()
    assert not (a[0] == synthetic_batch(t, step=5, dp_rank=0, **kw)[0]).all()
    assert not (a[0] == synthetic_batch(t, step=6, dp_rank=1, **kw)[0]).all()
    x, y = a
    assert (x[:, 1:] == y[:, :-1]).all()  # targets are the inputs shifted by one
    big = synthetic_batch(t, step=1, dp_rank=0, **{**kw, "batch": 64, "seq_len": 200})
    follows = (big[1] == t["next"][big[0]]).float().mean()
    assert 0.87 < follows < 0.93  # 90% of transitions follow the chain (+ restarts that happen to)
    # advance() is next applied k times
    nxt = t["next"]
    tok, k = 17, 5
    expect = tok
    for _ in range(k):
        expect = int(nxt[expect])
    assert int(t["flat"][(t["pos"][tok] + k) % 64]) == expect
    assert sorted(t["next"].tolist()) == list(range(64))  # a permutation: every token has one successor


def test_rehearsal_layout_keeps_each_kind_at_degree_two_while_ranks_last():
    big = Layout(dp_replicate=4, dp_shard=16, tp=8, pp=4, cp=2, ac="selective", micro_batch=1, grad_accum=8)
    lay, notes = rehearsal_layout(big, max_ranks=4)
    assert (lay.dp_replicate, lay.dp_shard, lay.tp, lay.pp, lay.cp) == (1, 2, 2, 1, 1)
    assert (lay.ac, lay.micro_batch, lay.grad_accum) == ("selective", 1, 8)
    assert "pp=4 rehearsed as pp=1 on 4 local rank(s)" in notes and "tp=8 rehearsed as tp=2 on 4 local rank(s)" in notes
    assert any(n.startswith("cp=2 rehearsed as cp=1") for n in notes)
    assert any(n.startswith("replicate=4 rehearsed as replicate=1") for n in notes)
    lay, notes = rehearsal_layout(Layout(dp_shard=4, pp=4, grad_accum=1), max_ranks=4)
    assert (lay.dp_shard, lay.pp, lay.grad_accum) == (2, 2, 2)  # 1F1B needs micro-batches ≥ stages
    assert any("raised to 2" in n for n in notes)
    lay, notes = rehearsal_layout(Layout(dp_shard=4, pp=4, grad_accum=4), max_ranks=4, tied_embeddings=True)
    assert (lay.dp_shard, lay.pp) == (4, 1) and any("(tied embeddings)" in n for n in notes)
    lay, notes = rehearsal_layout(Layout(dp_shard=8), max_ranks=2)
    assert (lay.dp_shard, lay.tp, lay.world_size) == (2, 1, 2) and len(notes) == 1
    lay, notes = rehearsal_layout(Layout(dp_shard=64), max_ranks=4)
    assert lay.dp_shard == 4
    lay, notes = rehearsal_layout(Layout(dp_shard=2, cp=2), max_ranks=4)
    assert lay == Layout(dp_shard=2, cp=2) and notes == []
    with pytest.raises(BadInput):
        rehearsal_layout(Layout(), max_ranks=0)


def test_trainer_args_parse_back():
    from cloudfit.train_llm import parse_args

    lay = Layout(dp_replicate=1, dp_shard=2, tp=2, ac="full", micro_batch=3, grad_accum=2)
    argv = trainer_args(lay, steps=30, checkpoint_dir="/tmp/x", checkpoint_interval_s=5, stop_file="/tmp/STOP")
    a = parse_args(argv, world_size=4)
    assert a.layout == lay and a.steps == 30 and a.checkpoint_interval_s == 5
    assert a.model_config.name == "llama3-8b (shrunk)"


def test_layout_string_fills_the_flags_and_disagreement_is_refused():
    from cloudfit.train_llm import parse_args, parse_layout

    assert parse_layout("fsdp=4,tp=2,pp=1,cp=1,ac=selective,mb=3,ga=2") == {
        "dp_shard": 4, "tp": 2, "pp": 1, "cp": 1, "ac": "selective", "micro_batch": 3, "grad_accum": 2}
    a = parse_args(["--layout", "fsdp=2,tp=2,ac=full", "--steps", "3", "--checkpoint-dir", "x"], world_size=4)
    assert a.layout == Layout(dp_shard=2, tp=2, ac="full", micro_batch=2)
    with pytest.raises(BadInput, match="--layout says tp=2 but --tp 4"):
        parse_args(["--layout", "tp=2", "--tp", "4", "--steps", "3", "--checkpoint-dir", "x"], world_size=4)
    with pytest.raises(BadInput, match="'zz=3' is not KEY=VALUE"):
        parse_layout("fsdp=2,zz=3")
    with pytest.raises(BadInput, match="is not an integer"):
        parse_layout("tp=two")


def test_only_marked_checkpoint_folders_count_and_pruning_keeps_the_newest(tmp_path):
    from cloudfit.train_llm import MARKER, _prune, complete_checkpoints

    for step, marked in [(4, True), (8, True), (12, False), (16, True), (20, False)]:
        d = tmp_path / f"step-{step:09d}"
        d.mkdir()
        (d / "__0_0.distcp").write_bytes(b"x")
        if marked:
            (d / MARKER).write_text("{}")
    (tmp_path / "step-12").mkdir()  # not ours: left alone
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [16, 8, 4]  # 20 is torn (no marker): ignored
    _prune(tmp_path, keep=2)
    left = sorted(p.name for p in tmp_path.iterdir())
    # 4 is beyond the two kept; 12 is an older torn attempt; 20 may still be in progress: kept
    assert left == ["step-000000008", "step-000000016", "step-000000020", "step-12"]


def test_rehearsal_of_records_what_differs_from_the_plan():
    from cloudfit.train_llm import parse_args

    argv = trainer_args(Layout(dp_shard=2, tp=2, ac="selective"), steps=5, checkpoint_dir="x",
                        rehearsal_of="fsdp=16,tp=8,pp=4,cp=1,ac=selective")
    a = parse_args(argv, world_size=4)
    assert a.rehearsal_notes == ["fsdp=16 rehearsed as fsdp=2", "tp=8 rehearsed as tp=2", "pp=4 rehearsed as pp=1"]


@pytest.mark.slow
def test_compiled_blocks_train_as_the_eager_ones_do(tmp_path):
    """`--compile` (each block under torch.compile before FSDP2 wraps it; 1.44× on one H200, bench/RESULTS_gpu.md)
    trains the same model: the same losses as eager over the first steps, to float tolerance (CPU, one rank)."""
    import torch.distributed as dist

    from cloudfit import train_llm
    from cloudfit.runtime.ranks import join

    losses = {}
    for compiled in (False, True):
        argv = ["--shape", "llama3-1b", "--shrink", "--layers", "2", "--seq-len", "32", "--micro-batch", "2",
                "--ac", "selective", "--steps", "3", "--checkpoint-dir", str(tmp_path / str(compiled)),
                "--precision", "fp32"] + (["--compile"] if compiled else ["--compile", "auto"])  # auto: eager on CPU
        a = train_llm.parse_args(argv)
        r = join()
        try:
            job = train_llm.FAMILY.build(a, r)
            assert job.describe["compile"] is compiled
            losses[compiled] = [job.step(i) for i in range(3)]
        finally:
            dist.destroy_process_group()
    assert losses[True] == pytest.approx(losses[False], rel=1e-3)
    assert losses[True][-1] < losses[True][0]  # it trains


def test_the_own_stack_compiles_unless_the_plan_says_not():
    import dataclasses

    from cloudfit import stacks
    from cloudfit.stacks.base import StackJob

    from cloudfit.llm import zoo

    job = StackJob(model="llama3-1b", shape=zoo.get("llama3-1b").to_dict(), seq_len=2048, nodes=1,
                   gpus_per_node=8, dp_shard=8, steps=10)
    own = stacks.get("cloudfit")
    unsaid = own.command(job)  # a plan that does not say: compiled on GPUs, eager on a CPU rehearsal, and said so
    i = unsaid.argv.index("--compile")
    assert unsaid.argv[i + 1] == "auto" and any("--compile off" in n for n in unsaid.notes)
    on = own.command(dataclasses.replace(job, compile=True)).argv
    assert on[on.index("--compile") + 1] == "on"
    assert "--compile" not in own.command(dataclasses.replace(job, compile=False)).argv
    from cloudfit.train_llm import parse_args

    base = ["--steps", "1", "--checkpoint-dir", "/tmp/x"]
    assert parse_args(base + ["--compile"]).compile == "on" and parse_args(base).compile == "off"
    assert parse_args(base + ["--compile", "auto"]).compile == "auto"
