"""Export a plan as a SkyPilot task (a dict ready for YAML).

The task runs cloudfit's own trainer under ``torchrun`` on every node, with arguments the trainer
accepts (``--steps`` from the workload's samples, the batch per GPU and the cluster's GPUs; the
Young/Daly checkpoint interval the plan priced), checkpoints in a bucket mounted at
``CHECKPOINT_MOUNT`` (so a recovered spot cluster resumes from them), and the plan's chosen config
followed by its alternatives as ``resources: ordered:`` (SkyPilot tries them in order). Shapes SkyPilot
cannot attach (e.g. ``a3-edgegpu-8g``) are never emitted; alternatives with another node count or GPUs
per node are left out too (one task has one ``num_nodes`` and one ``--steps``).

What the nodes install is the *wheel of the running cloudfit* (the one GCP VMs get), file-mounted at
``WHEEL_MOUNT`` and checked against its SHA-256 before ``pip`` sees it — never a name from the package
index (``cloudfit`` there is not this project: whoever publishes it would run code on every node).
The bucket is unique per launch (``launch_id``), so two jobs of one model never share (or resume) one
another's checkpoints; the checkpoint key is a SkyPilot *secret* (``CLOUDFIT_CHECKPOINT_KEY``, null in
the YAML: ``sky launch --secret CLOUDFIT_CHECKPOINT_KEY`` passes it from the shell), never in the file.
``cloudfit.executors.skypilot.emit`` writes the YAML, the wheel and the key file together.
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from cloudfit.errors import UsageError
from cloudfit.types import ClusterConfig, Plan

CHECKPOINT_MOUNT = "/cloudfit-ckpt"
#: (machine-type prefix, cloudfit accelerator) → SkyPilot's accelerator name, for the GCP shapes
#: SkyPilot's catalog attaches; anything else (a3-edgegpu-8g, …) is not emitted.
SKYPILOT_SHAPES: tuple[tuple[str, str, str], ...] = (
    ("n1-", "T4", "T4"), ("n1-", "V100", "V100"), ("n1-", "P100", "P100"), ("n1-", "P4", "P4"),
    ("n1-", "K80", "K80"), ("a2-highgpu-", "A100", "A100"), ("a2-megagpu-", "A100", "A100"),
    ("a2-ultragpu-", "A100-80GB", "A100-80GB"), ("g2-standard-", "L4", "L4"), ("a3-highgpu-", "H100", "H100"),
    ("a3-megagpu-8g", "H100-MEGA", "H100-MEGA"), ("a3-ultragpu-8g", "H200", "H200"), ("a4-highgpu-8g", "B200", "B200"),
)


def skypilot_accelerator(config: ClusterConfig) -> str | None:
    """SkyPilot's name for the config's GPU on its machine type, or None if SkyPilot cannot attach it."""
    o = config.offering
    for prefix, acc, sky in SKYPILOT_SHAPES:
        if o.machine_type.startswith(prefix) and o.accelerator == acc:
            return sky
    return None


WHEEL_MOUNT = "/cloudfit-wheel"
_NO_WHEEL = ("echo 'cloudfit: this task carries no cloudfit wheel; write it with `cloudfit recommend --emit-skypilot` "
             "(cloudfit.executors.skypilot.emit)' >&2\nexit 1\n")
KEY_SECRET = "CLOUDFIT_CHECKPOINT_KEY"


def bucket_name(model: str, launch_id: str) -> str:
    """``cloudfit-<model>-<launch id>``: a bucket of this launch alone (≤ 63 characters)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", model.lower()).strip("-")[:30] or "job"
    lid = re.sub(r"[^a-z0-9]+", "", launch_id.lower())[:16]
    if len(lid) < 8:
        raise UsageError("a SkyPilot task needs a launch id of at least 8 letters or digits (its bucket's name)")
    return f"cloudfit-{stem}-{lid}"


def setup_script(wheel_name: str, sha256: str, extra: str = "") -> str:
    """The task's ``setup``: check the mounted wheel's SHA-256, then install that file (no index name)."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256 or "") or not re.fullmatch(r"[A-Za-z0-9_.+-]+\.whl", wheel_name or ""):
        raise UsageError("the SkyPilot task needs the wheel's file name and SHA-256")
    path = f"{WHEEL_MOUNT}/{wheel_name}"
    return ("set -e\n"
            f"echo '{sha256}  {path}' | sha256sum -c --status "
            f"|| {{ echo 'cloudfit: {path} does not match its SHA-256 {sha256[:12]}…' >&2; exit 1; }}\n"
            f"python -m pip install --quiet '{path}{extra}'\n")


def skypilot_task(plan: Plan, *, wheel_name: str | None = None, wheel_sha256: str | None = None,
                  wheel_path: str | None = None, launch_id: str | None = None, bucket: str | None = None,
                  steps_command: str | None = None, batch_size_per_device: int | None = None) -> dict[str, Any]:
    """A SkyPilot task (as a dict, for YAML) that runs cloudfit's trainer on the plan's configs.

    ``wheel_*``: the wheel of the running cloudfit (name, SHA-256, local path SkyPilot uploads) — without
    them the task's setup refuses to run (use ``cloudfit.executors.skypilot.emit``, which builds it);
    ``launch_id``: this launch's identity (the bucket's name unless ``bucket`` is given; default: new)."""
    import uuid

    from cloudfit.spot.checkpointing import planned_interval

    launch_id = launch_id or uuid.uuid4().hex

    w = plan.workload
    cloud = plan.chosen.config.offering.cloud
    if cloud != "gcp":  # the other clouds' task (resources per cloud) is issue 26's SkyPilot backend, not here yet
        raise UsageError(f"--emit-skypilot writes tasks for GCP plans only; this plan is for {cloud}")
    configs: list[ClusterConfig] = []
    for e in plan.candidates():
        if e.config.offering.cloud == cloud and skypilot_accelerator(e.config) and e.config not in configs:
            configs.append(e.config)
    if plan.layout and steps_command is None:  # the layout's arguments are for its own GPU count
        lay = plan.layout
        configs = [c for c in configs if c.nodes == lay.get("nodes")
                   and c.offering.accelerators_per_node == lay.get("gpus_per_node")]
    if not configs:
        raise UsageError("SkyPilot cannot attach any of the plan's shapes (e.g. a3-edgegpu-8g)"
                         + (" with the layout's node and GPU count" if plan.layout else "")
                         + "; re-run recommend with other --accelerators")
    first = configs[0]
    configs = [c for c in configs if c.nodes == first.nodes
               and c.offering.accelerators_per_node == first.offering.accelerators_per_node]
    batch = batch_size_per_device or w.batch_size_per_device or _default_batch(w.model)
    gpus = first.nodes * first.offering.accelerators_per_node
    steps = max(1, math.ceil(w.samples / (batch * gpus)))
    interval_s, hazard, _ = planned_interval(first, w.model)
    trainer = ["--model", w.model, "--steps", str(steps), "--batch-size", str(batch),
               "--precision", w.precision if w.precision in ("fp32", "tf32", "fp16", "bf16") else "bf16",
               "--checkpoint-dir", CHECKPOINT_MOUNT, "--checkpoint-interval-s", f"{interval_s:.0f}",
               "--hazard-per-hour", f"{hazard:.6g}", "--local-checkpoint-dir", "/tmp/cloudfit-ckpt-local",
               "--progress-file", "/tmp/cloudfit-progress.json"]
    if steps_command is None and plan.layout:  # a large-model plan: torchrun runs the plan's layout
        launch = plan.layout["launch"]  # (or the nearest layout cloudfit.train_llm runs: no pp/cp there)
        args = launch["args"] if launch.get("runnable", True) or not launch.get("runnable_args") else launch["runnable_args"]
        steps_command = _torchrun("cloudfit.train_llm", [*map(str, args), "--checkpoint-dir", CHECKPOINT_MOUNT,
                                                         "--progress-file", "/tmp/cloudfit-progress.json"])
    run = steps_command or _torchrun("cloudfit.train", trainer)
    ordered = [{
        "cloud": "gcp",
        "region": c.offering.region,
        "zone": c.offering.zone,
        "instance_type": c.offering.machine_type,
        "accelerators": f"{skypilot_accelerator(c)}:{c.offering.accelerators_per_node}",
        "use_spot": bool(c.spot),
    } for c in configs]
    extra = "[hf]" if any(w.model.startswith(p) for p in ("bert", "gpt2")) else ""
    return {
        "name": f"cloudfit-{re.sub(r'[^a-z0-9-]+', '-', w.model.lower()).strip('-')[:30] or 'job'}-{launch_id[:8]}",
        "resources": {"ordered": ordered},
        "num_nodes": int(first.nodes),
        "secrets": {KEY_SECRET: None},
        "file_mounts": {CHECKPOINT_MOUNT: {"name": bucket or bucket_name(w.model, launch_id), "mode": "MOUNT"},
                        **({f"{WHEEL_MOUNT}/{wheel_name}": str(wheel_path)} if wheel_name else {})},
        "setup": setup_script(wheel_name, wheel_sha256, extra) if wheel_name else _NO_WHEEL,
        "run": run,
    }


def _default_batch(model: str) -> int:
    try:
        from cloudfit.profiling import zoo

        return int(zoo.info(model)["default_batch_size"])
    except Exception:  # a user model: the trainer's own default applies per rank; count one sample
        return 1


def _torchrun(module: str, args: list[str]) -> str:
    """The task's run script: torchrun over SkyPilot's nodes (node 0 is the rendezvous) running ``module``."""
    return ("set -e\n"
            'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
            "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n"
            'python -m torch.distributed.run --nnodes="$SKYPILOT_NUM_NODES" '
            '--nproc-per-node="$SKYPILOT_NUM_GPUS_PER_NODE" --node-rank="$SKYPILOT_NODE_RANK" '
            '--master-addr="$MASTER_ADDR" --master-port=29500 '
            f"-m {module} " + " ".join(shlex.quote(a) for a in args) + "\n")
