"""``cloudfit predict``: predicted training throughput of a profile on one hardware configuration."""

from __future__ import annotations

from typing import Optional

import typer

from cloudfit.cli import options as opts
from cloudfit.cli.render import console, print_json


def predict(
    profile: Optional[str] = typer.Option(None, "--profile", "-p",
                                          help="Profile file, or a shipped profile name (e.g. resnet50)."),
    accelerator: str = typer.Option(..., "--accelerator", "-a", help="Accelerator, e.g. H100, A100-80GB, L4, T4."),
    count: int = typer.Option(1, "--count", "-c", help="Accelerators per node."),
    nodes: int = typer.Option(1, "--nodes", "-n", help="Nodes (VMs)."),
    precision: str = typer.Option("fp16", "--precision", help="fp32, tf32, fp16, bf16 or fp8."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", "-b", help="Batch per device (default: the profile's)."),
    machine_type: Optional[str] = typer.Option(
        None, "--machine-type", help="VM machine type: sets the inter-node network (default: the catalog's largest VM)."),
    network_gbps: Optional[float] = typer.Option(None, "--network-gbps", help="Inter-node network cap in Gbit/s."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
    model: Optional[str] = typer.Option(
        None, "--model", "-m", help="An LLM of the zoo (e.g. llama3-8b: large-model path) or a shipped profile (resnet50)."),
    config: Optional[str] = typer.Option(None, "--config", help="A decoder's Hugging Face config.json (large-model path)."),
    seq_len: int = typer.Option(8192, "--seq-len", help="LLM: tokens per sequence."),
    layout: str = typer.Option("auto", "--layout", help="LLM: e.g. fsdp=128,tp=1,pp=1,cp=1,ac=selective, or auto."),
    finetune: str = typer.Option("full", "--finetune", help="LLM: full or lora."),
    lora_rank: int = typer.Option(16, "--lora-rank", help="LLM: LoRA adapter rank (with --finetune lora)."),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="LLM: tokens to train (adds samples and hours)."),
    stack: Optional[str] = opts.STACK,
    framework: Optional[str] = opts.FRAMEWORK_ALIAS,
) -> None:
    """Predict samples/s (with a 10–90% band) of a profiled model on COUNT × ACCELERATOR × NODES."""
    from cloudfit.errors import UsageError

    _check_point(accelerator, count, nodes, machine_type, network_gbps)
    framework = _framework_of(opts.stack_option(stack, framework))
    llm_profile = None
    if model is not None and profile is None and config is None:
        model, profile = _zoo_model_or_profile(model)
    if profile is not None:
        llm_profile = _llm_profile(profile)
        if model is not None or config is not None:
            raise UsageError("give either --profile (a profiled model) or --model/--config (an LLM), not both")
    if model is not None or config is not None or llm_profile is not None:
        _predict_llm(profile=llm_profile, model=model, config=config, accelerator=accelerator, count=count, nodes=nodes,
                     precision="bf16" if precision == "fp16" else precision, batch_size=batch_size or 1,
                     seq_len=seq_len, layout=layout, finetune=finetune, lora_rank=lora_rank,
                     machine_type=machine_type, network_gbps=network_gbps, tokens=tokens, framework=framework,
                     as_json=as_json)
        return
    if framework is not None:
        raise UsageError("--stack applies to the large-model path (--model / --config)")
    if profile is None:
        raise UsageError("give --profile (a profiled model) or --model NAME / --config config.json (an LLM)")
    _predict_profile(profile=profile, accelerator=accelerator, count=count, nodes=nodes, precision=precision,
                     batch_size=batch_size, machine_type=machine_type, network_gbps=network_gbps, as_json=as_json)


def _zoo_model_or_profile(model: str) -> tuple[str | None, str | None]:
    """``--model NAME`` as ``recommend`` reads it: an LLM of the zoo, else a profile ``resolve_profile`` finds
    (``./NAME.json`` or a shipped one: ``--model resnet50`` is ``--profile resnet50``); neither is one line naming
    both lists."""
    from cloudfit.errors import ProfileError, UsageError
    from cloudfit.llm import zoo
    from cloudfit.profiling.io import resolve_profile, shipped_profiles

    if zoo.is_llm(model):
        return model, None
    try:
        resolve_profile(model)
    except ProfileError:
        raise UsageError(f"unknown model {model!r}: an LLM ({', '.join(zoo.names())}) or a shipped profile "
                         f"({', '.join(sorted(shipped_profiles()))}); or give --config config.json / --profile FILE"
                         ) from None
    return None, model


def _framework_of(stack: str | None) -> str | None:
    """The step model's constants for ``--stack`` (a stack's ``framework``); the constants' own names
    (fsdp, megatron-deepspeed …) that ``--framework`` took are still read."""
    if stack is None:
        return None
    from cloudfit.llm.step import FRAMEWORKS

    if stack in FRAMEWORKS:
        return stack
    from cloudfit import stacks
    from cloudfit.errors import UsageError

    if stack not in stacks.names():
        raise UsageError(f"--stack must be one of {', '.join(n for n in stacks.names() if n != 'custom')} (or the step "
                         f"model's {', '.join(f for f in FRAMEWORKS if f not in stacks.names())}), got {stack!r}")
    return stacks.get(stack).framework


def _predict_profile(*, profile, accelerator, count, nodes, precision, batch_size, machine_type, network_gbps,
                     as_json) -> None:
    """The branch of ``cloudfit predict`` for a CNN-era profile (the learned performance model)."""
    from cloudfit.errors import UsageError
    from cloudfit.perf import model as perf
    from cloudfit.profiling import io as pio

    from cloudfit.catalog import hardware

    acc = hardware.canonical_name(accelerator)
    note = _check_shape(acc, count, precision)
    prof = pio.load_profile(pio.resolve_profile(profile))
    p = perf.predict(prof, accelerator, count, nodes, precision=precision, batch_size=batch_size,
                     machine_type=machine_type, network_gbps=network_gbps)
    batch = prof.stats.batch_size if batch_size is None else batch_size
    out = {
        "model": prof.model,
        "accelerator": acc,
        "count": count,
        "nodes": nodes,
        "precision": precision,
        "batch_size_per_device": batch,
        "fits": p.fits,
        "reason": p.reason,
        "samples_per_second": p.samples_per_second,
        "low": p.low,
        "high": p.high,
        "step_time_s": p.step_time_s,
        "breakdown": {"compute_s": p.compute_s, "communication_s": p.communication_s},
        "basis": p.basis,
        "model_version": perf.model_version(),
        "offering_note": note,
    }
    if as_json:
        print_json(out)
        return
    c = console()
    where = f"{nodes} × {count}× {acc}" if nodes > 1 else f"{count}× {acc}"
    if not p.fits:
        c.print(f"{prof.model} on {where}: does not fit — {p.reason}")
        return
    c.print(f"{prof.model} on {where} ({precision}, batch {batch} per device)")
    c.print(f"  {p.samples_per_second:,.1f} samples/s  (10–90%: {p.low:,.1f} – {p.high:,.1f})")
    c.print(f"  step {p.step_time_s * 1e3:,.1f} ms = compute {p.compute_s * 1e3:,.1f} ms + communication "
            f"{p.communication_s * 1e3:,.1f} ms")
    c.print(f"  basis: {p.basis}")
    if note:
        c.print(f"  note: {note}")


def _llm_profile(profile: str):
    """The LLM profile ``profile`` names, or None when it is a CNN-era profile (read by the other path)."""
    from cloudfit.profiling import io as pio
    from cloudfit.types import LLMProfile

    p = pio.load_profile(pio.resolve_profile(profile), llm_ok=True)
    return p if isinstance(p, LLMProfile) else None


def _predict_llm(*, profile=None, model, config, accelerator, count, nodes, precision, batch_size, seq_len, layout, finetune,
                 lora_rank, machine_type, network_gbps, tokens, framework, as_json) -> None:
    """The large-model branch of ``cloudfit predict`` (``--model llama3-8b`` / ``--config``)."""
    from cloudfit.llm.predict import predict as llm_predict
    from cloudfit.llm.predict import tokens_to_samples

    samples = tokens_to_samples(tokens, seq_len) if tokens is not None else None
    a = anchored_llm(profile, model=model, config=config, accelerator=accelerator, count=count, nodes=nodes,
                     precision=precision, seq_len=seq_len, batch_size=batch_size, layout=layout, finetune=finetune,
                     lora_rank=lora_rank, machine_type=machine_type, network_gbps=network_gbps, framework=framework)
    p = a.prediction
    out = a.to_dict()
    out["offering_note"] = _offering_note(p.accelerator, count)
    if samples is not None:
        out.update(tokens=tokens, samples=samples, hours=tokens / p.tokens_per_second / 3600.0)
    if as_json:
        print_json(out)
        return
    c = console()
    where = f"{nodes} × {count}× {p.accelerator}" if nodes > 1 else f"{count}× {p.accelerator}"
    c.print(f"{p.model} on {where} ({precision}, seq {seq_len:,}, {finetune}, {p.framework}); layout "
            f"{p.layout.describe()}")
    if not p.fits:
        c.print(f"  {p.memory.reason}")
    c.print(f"  {p.tokens_per_second:,.0f} tokens/s ({p.tokens_per_second / p.gpus:,.0f} per GPU; 10–90%: "
            f"{p.low:,.0f} – {p.high:,.0f}), {p.samples_per_second:,.2f} samples/s, MFU {p.mfu * 100:.1f}%")
    b = p.breakdown
    c.print(f"  step {b['step_s']:,.3f} s = compute {b['compute_s']:,.3f} + exposed TP {b['exposed_tp_s']:,.3f} "
            f"FSDP {b['exposed_fsdp_s']:,.3f} DP {b['exposed_dp_s']:,.3f} PP {b['exposed_pp_s']:,.3f} "
            f"CP {b['exposed_cp_s']:,.3f} + bubble {b['bubble_s']:,.3f} + other {b['optimizer_and_overhead_s']:,.3f}")
    c.print(f"  basis: {a.basis}", soft_wrap=True, markup=False)
    for line in [out["offering_note"]] + list(out["anchor"].get("notes", [])):
        if line:
            c.print(f"  note: {line}", soft_wrap=True, markup=False)
    m = p.memory
    if samples is not None:
        c.print(f"  {tokens:,.3g} tokens = {samples:,.0f} samples: {out['hours']:,.1f} h at the predicted rate")
    c.print(f"  memory {m.total_gib:,.1f} of {m.capacity_gib:,.0f} GiB per GPU: weights {m.weights_gib:,.1f}, "
            f"grads {m.gradients_gib:,.1f}, optimizer {m.optimizer_gib:,.1f}, activations {m.activations_gib:,.1f}, "
            f"logits {m.logits_gib:,.1f}, buffers {m.buffers_gib:,.1f}, overhead {m.overhead_gib:,.1f}")


def anchored_llm(profile, *, model, config, accelerator, count, nodes, precision, seq_len, batch_size, layout,
                 finetune, lora_rank, machine_type, network_gbps, framework):
    """The LLM prediction, anchored on ``profile``'s measurements when given (else stack-generic)."""
    from dataclasses import replace

    from cloudfit.llm import anchor as A
    from cloudfit.llm.predict import predict as llm_predict
    from cloudfit.llm.zoo import resolve
    from cloudfit.profiling import io as pio

    shape = pio.llm_shape(profile) if profile is not None else resolve(model, config)
    anchors, notes = A.anchors_from_profile(profile, shape) if profile is not None else ([], [])
    fw = framework or (anchors[0].setup.framework if anchors else None)
    kw = dict(finetune=finetune, lora_rank=lora_rank, machine_type=machine_type, network_gbps=network_gbps)
    first = llm_predict(shape, accelerator, gpus_per_node=count, nodes=nodes, precision=precision, seq_len=seq_len,
                        batch_size=batch_size, layout=layout, framework=fw, **kw)  # checks; resolves layout=auto
    query = A.Setup(first.accelerator, count, nodes, precision, seq_len, first.layout.sequences_per_replica,
                    first.layout.describe(), first.framework)
    a = A.predict_anchored(shape, query, anchors, **kw)
    if notes:
        a = replace(a, notes=a.notes + tuple(notes))
    return a


def _offering_note(acc: str, count: int) -> str | None:
    """Where no GCP VM offers ``count`` × ``acc``: a note naming the clouds that do sell that shape, if any (the
    prediction still stands; recommend plans only real offerings, GCP's unless ``--clouds`` says otherwise)."""
    from cloudfit import catalog
    from cloudfit.types import CLOUDS

    offs = [o for o in catalog.load(clouds=CLOUDS).offerings if o.accelerator == acc]
    gcp = sorted({o.accelerators_per_node for o in offs if o.cloud == "gcp"})
    if count in gcp:
        return None
    elsewhere = sorted({o.cloud for o in offs if o.accelerators_per_node == count})
    sold = (f"; {', '.join(elsewhere)} sell{'s' if len(elsewhere) == 1 else ''} it (recommend --clouds "
            f"{','.join(elsewhere)})") if elsewhere else ": this is a prediction for the hardware, not a plan"
    if not gcp:
        return f"no GCP VM in the catalog offers {acc}{sold}"
    return f"no GCP VM offers {count}× {acc} (the catalog has {', '.join(map(str, gcp))} per VM){sold}"


def _check_point(accelerator: str, count: int, nodes: int, machine_type: str | None,
                 network_gbps: float | None) -> None:
    """One line, exit 2, for a hardware point no cloud has: more GPUs per VM than any catalog's largest VM,
    more nodes than cloudfit plans (``MAX_NODES_LIMIT``), a network that is not a positive number, or a
    machine type that does not carry the accelerator (GPU counts a catalog lacks only get a note)."""
    import math

    from cloudfit import catalog
    from cloudfit.catalog import hardware
    from cloudfit.errors import UsageError
    from cloudfit.types import CLOUDS, MAX_NODES_LIMIT

    if network_gbps is not None and not (network_gbps > 0 and math.isfinite(network_gbps)):
        raise UsageError(f"--network-gbps must be a positive number of Gbit/s, got {network_gbps:g}")
    if not 1 <= nodes <= MAX_NODES_LIMIT:
        raise UsageError(f"--nodes must be between 1 and {MAX_NODES_LIMIT} (the largest cluster cloudfit plans), "
                         f"got {nodes}")
    acc = hardware.canonical_name(accelerator)
    offs = catalog.load(clouds=CLOUDS).offerings
    most = max(o.accelerators_per_node for o in offs)
    if not 1 <= count <= most:
        raise UsageError(f"--count must be between 1 and {most} (the most GPUs any VM in the catalogs carries), "
                         f"got {count}")
    if machine_type is not None:
        carried = {o.accelerator for o in offs if o.machine_type == machine_type}
        if acc not in carried:
            with_acc = sorted({o.machine_type for o in offs if o.accelerator == acc})
            has = f"it carries {', '.join(sorted(carried))}" if carried else "no catalog lists it with a GPU"
            raise UsageError(f"machine type {machine_type} cannot carry an {acc} ({has}); {acc} VMs: "
                             f"{', '.join(with_acc[:6])}{', …' if len(with_acc) > 6 else ''}")


def _check_shape(acc: str, count: int, precision: str) -> str | None:
    """One line, exit 2, for fp8 on a GPU without FP8 tensor cores (it would silently run as fp16); a note
    (returned) for a GPU count per VM the catalog does not offer."""
    from cloudfit import catalog
    from cloudfit.catalog import hardware
    from cloudfit.errors import UsageError

    if precision == "fp8" and hardware.get(acc).fp8_tflops is None:
        with_fp8 = sorted(a for a in catalog.load().accelerators if hardware.get(a).fp8_tflops)
        raise UsageError(f"{acc} has no FP8 tensor cores (fp8 runs on {', '.join(with_fp8)}); "
                         "use --precision fp16 or bf16")
    return _offering_note(acc, count)
