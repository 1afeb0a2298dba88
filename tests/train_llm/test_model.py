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
    first, second = t
    ok = (y == first[x]) | (y == second[x])
    assert ok.all()  # every transition is one of the chain's two: learnable


def test_rehearsal_layout_drops_what_it_cannot_run_and_says_so():
    lay, notes = rehearsal_layout(Layout(dp_replicate=4, dp_shard=16, tp=8, pp=4, cp=2, ac="selective",
                                         micro_batch=1, grad_accum=8), max_ranks=4)
    assert (lay.dp_replicate, lay.dp_shard, lay.tp, lay.pp, lay.cp) == (1, 2, 2, 1, 1)
    assert (lay.ac, lay.micro_batch, lay.grad_accum) == ("selective", 1, 8)
    assert any("pipeline" in n for n in notes) and any("context" in n for n in notes)
    assert any("tp=8 rehearsed as tp=2" in n for n in notes)
    lay, notes = rehearsal_layout(Layout(dp_shard=8), max_ranks=2)
    assert (lay.dp_shard, lay.tp, lay.world_size) == (2, 1, 2) and len(notes) == 1
    lay, notes = rehearsal_layout(Layout(dp_shard=2), max_ranks=2)
    assert lay == Layout(dp_shard=2) and notes == []
    with pytest.raises(BadInput):
        rehearsal_layout(Layout(), max_ranks=0)


def test_trainer_args_parse_back():
    from cloudfit.train_llm import parse_args

    lay = Layout(dp_replicate=1, dp_shard=2, tp=2, ac="full", micro_batch=3, grad_accum=2)
    argv = trainer_args(lay, steps=30, checkpoint_dir="/tmp/x", checkpoint_interval_s=5, stop_file="/tmp/STOP")
    a = parse_args(argv, world_size=4)
    assert a.layout == lay and a.steps == 30 and a.checkpoint_interval_s == 5
    assert a.model_config.name == "llama3-8b (shrunk)"
