"""``cloudfit models``: the model zoo, with counted figures from the shipped profiles."""

from __future__ import annotations

import typer

from cloudfit.cli.render import console, print_json


def models(as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
           llm: bool = typer.Option(False, "--llm", help="Only the large-language-model zoo (for predict --model).")) -> None:
    """List the zoo models `cloudfit profile run` can build (random weights; nothing is downloaded)."""
    import json

    if llm:
        _llm_models(as_json)
        return

    from cloudfit.profiling import io, zoo

    shipped = io.shipped_profiles()
    rows = []
    for name in zoo.names():
        row = zoo.info(name)
        stats = None
        if name in shipped:
            try:  # plain JSON read: listing must stay fast and must not fail on one bad file
                stats = json.loads(shipped[name].read_text(encoding="utf-8")).get("stats")
            except (OSError, ValueError):
                stats = None
        row["parameters"] = stats.get("parameters") if isinstance(stats, dict) else None
        row["flops_per_sample"] = stats.get("flops_per_sample") if isinstance(stats, dict) else None
        row["profile"] = str(shipped[name]) if name in shipped else None
        rows.append(row)
    if as_json:
        print_json(rows)
        return
    from rich import box
    from rich.table import Table

    t = Table(title=f"{len(rows)} zoo models — GFLOP: forward + backward per sample (multiply-add = 2 FLOPs)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col, just in [("model", "left"), ("input", "left"), ("batch GPU/CPU", "right"),
                      ("params", "right"), ("GFLOP", "right")]:
        t.add_column(col, justify=just, no_wrap=col != "input")  # type: ignore[arg-type]
    for r in rows:
        params = f"{r['parameters'] / 1e6:.1f} M" if r["parameters"] else "—"
        gflop = f"{r['flops_per_sample'] / 1e9:.4g}" if r["flops_per_sample"] else "—"
        t.add_row(r["name"], r["input"], f"{r['default_batch_size']}/{r['cpu_batch_size']}",
                  params, gflop)
    console().print(t)
    console().print("`cloudfit models --json` adds each model's task, where its definition comes from, and its options.")
    _llm_models(False)


def _llm_models(as_json: bool) -> None:
    """The LLM zoo (shapes only; ``cloudfit predict --model NAME``)."""
    from cloudfit.llm import stats, zoo as llm_zoo

    rows = []
    for name in llm_zoo.names():
        row = stats.info(name)
        row["gflop_per_token_at_8192"] = (stats.token_stats(llm_zoo.get(name), 8192).flops_per_token / 1e9
                                          if llm_zoo.get(name).max_seq_len >= 8192 else None)
        rows.append(row)
    if as_json:
        print_json(rows)
        return
    from rich import box
    from rich.table import Table

    t = Table(title=f"{len(rows)} LLM shapes for `cloudfit predict --model` — GFLOP per trained token "
                    "(6 × matmul params + causal-half attention, at 8,192 tokens)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("model", "params", "hidden", "layers", "heads/kv", "GFLOP/token"):
        t.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in rows:
        g = r["gflop_per_token_at_8192"]
        t.add_row(r["name"], f"{r['parameters'] / 1e9:.2f} B", str(r["hidden"]), str(r["layers"]),
                  f"{r['heads']}/{r['kv_heads']}", f"{g:,.1f}" if g else "—")
    console().print(t)
