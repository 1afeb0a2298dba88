"""The one SkyPilot task builder: ``recommend --emit-skypilot`` and ``launch --backend sky`` both build here.

``build_task`` turns configs (tried in order), a run script, the checkpoint bucket and what ships to the nodes into
a task dict (for YAML or ``sky.Task.from_yaml_config``):

* ``resources: ordered:`` — each config pinned to its cloud, region, instance type, SkyPilot's accelerator name
  (``sky_accelerator``: one table for every cloud) and spot flag; the zone too on GCP and RunPod (AWS zones are AZ
  *ids* in the catalog, Lambda and Nebius have none). Shapes SkyPilot cannot attach (GCP's a3-edgegpu-8g …) and
  alternatives with another node count or GPUs per node are left out (one task has one ``num_nodes``).
* what ships (``Shipped``): the *wheel of the running cloudfit* and, optionally, a packed workdir archive, each a
  file mount checked against its SHA-256 by ``setup`` before ``pip`` or ``tar`` sees it — never a name from the
  package index (``cloudfit`` there is not this project: whoever publishes it would run code on every node).
  ``$CLOUDFIT_PIP_SPEC`` replaces the wheel with the user's pip arguments, credentials stripped by the caller.
* the checkpoint bucket mounted at ``CHECKPOINT_MOUNT``: a bucket of this launch alone (``bucket_name``) or the
  user's ``--checkpoint-dir`` URI;
* the checkpoint key as a SkyPilot *secret* (``CLOUDFIT_CHECKPOINT_KEY``, null in the task: its value comes from
  ``sky launch --secret`` or, for ``--backend sky``, from ``secrets_overrides`` at launch), never in the file.

``skypilot_task(plan)`` is the task of a plan running cloudfit's trainer (``--emit-skypilot``);
``cloudfit.executors.skypilot`` writes it with its wheel and key file, ``cloudfit.executors.sky`` launches it.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from cloudfit.errors import UsageError
from cloudfit.types import ClusterConfig, Plan

CHECKPOINT_MOUNT = "/cloudfit-ckpt"
WHEEL_MOUNT = "/cloudfit-wheel"
WORKDIR_MOUNT = "/cloudfit-workdir"
WORKDIR = "~/sky_workdir"  # where SkyPilot runs ``run`` (its remote workdir): the archive is unpacked there
KEY_SECRET = "CLOUDFIT_CHECKPOINT_KEY"
#: The clouds a task may name (SkyPilot's names are cloudfit's).
SKY_CLOUDS = ("gcp", "aws", "lambda", "runpod", "nebius")
#: (cloud, machine-type prefix, cloudfit accelerator) → SkyPilot's accelerator name. On GCP only these shapes are
#: attachable (anything else, e.g. a3-edgegpu-8g, is never emitted); on the other clouds an accelerator keeps its
#: name unless it is listed here (scripts/build_cloud_catalogs.py renamed the ambiguous ones).
SKY_ACCELERATORS: tuple[tuple[str, str, str, str], ...] = (
    ("gcp", "n1-", "T4", "T4"), ("gcp", "n1-", "V100", "V100"), ("gcp", "n1-", "P100", "P100"), ("gcp", "n1-", "P4", "P4"),
    ("gcp", "n1-", "K80", "K80"), ("gcp", "a2-highgpu-", "A100", "A100"), ("gcp", "a2-megagpu-", "A100", "A100"),
    ("gcp", "a2-ultragpu-", "A100-80GB", "A100-80GB"), ("gcp", "g2-standard-", "L4", "L4"),
    ("gcp", "a3-highgpu-", "H100", "H100"), ("gcp", "a3-megagpu-8g", "H100-MEGA", "H100-MEGA"),
    ("gcp", "a3-ultragpu-8g", "H200", "H200"), ("gcp", "a4-highgpu-8g", "B200", "B200"),
    ("lambda", "", "H100-PCIe", "H100"), ("runpod", "", "H100-PCIe", "H100"),
    ("runpod", "", "A100-80GB-PCIe", "A100-80GB"), ("runpod", "", "A100-80GB", "A100-80GB-SXM"),
    ("runpod", "", "H100", "H100-SXM"),
)
_ZONED = ("gcp", "runpod")


def sky_accelerator(config: ClusterConfig) -> str | None:
    """SkyPilot's name for the config's GPU on its machine type, or None if SkyPilot cannot attach it."""
    o = config.offering
    for cloud, prefix, acc, sky in SKY_ACCELERATORS:
        if o.cloud == cloud and o.machine_type.startswith(prefix) and o.accelerator == acc:
            return sky
    return o.accelerator if o.cloud in SKY_CLOUDS and o.cloud != "gcp" else None


def sky_resources(config: ClusterConfig) -> dict[str, Any]:
    """One ``resources`` entry pinned to the config (cloud, region, zone where it is one, instance type, GPUs, spot)."""
    o = config.offering
    acc = sky_accelerator(config)
    if acc is None:
        raise UsageError(f"SkyPilot cannot attach {o.accelerator} on {o.cloud} {o.machine_type}")
    r = {"cloud": o.cloud, "region": o.region, "instance_type": o.machine_type,
         "accelerators": f"{acc}:{o.accelerators_per_node}", "use_spot": bool(config.spot)}
    if o.cloud in _ZONED and o.zone:
        r["zone"] = o.zone
    return r


@dataclass(frozen=True)
class Shipped:
    """A local file the nodes receive as a file mount (``mount``/``name``) and check against ``sha256`` before use."""

    mount: str  # the folder on the node
    name: str  # the file's name there
    local: str  # this machine's path (SkyPilot uploads it)
    sha256: str
    size_bytes: int

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{64}", self.sha256 or ""):
            raise UsageError(f"{self.name or 'a shipped file'}: a SHA-256 is 64 hex digits, got {self.sha256!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.name or ""):
            raise UsageError(f"a shipped file's name must be letters, digits and ._+-, got {self.name!r}")
        if self.size_bytes < 0:
            raise UsageError(f"{self.name}: size must be non-negative")

    @property
    def remote(self) -> str:
        return f"{self.mount}/{self.name}"

    def describe(self) -> str:
        return f"{self.name} ({_size(self.size_bytes)}, sha256 {self.sha256[:12]}…) → {self.remote}"


def workdir_archive(path: str, sha256: str, size_bytes: int | None = None) -> Shipped:
    """A packed workdir (a tar archive, any compression ``tar`` reads) as the task ships it: mounted, checked, then
    unpacked into SkyPilot's workdir before ``run``. ``size_bytes`` is checked against the file when it exists."""
    import os

    name = os.path.basename(path)
    if os.path.exists(path):
        real = os.path.getsize(path)
        if size_bytes is not None and real != size_bytes:
            raise UsageError(f"the workdir archive {path} is {real} bytes, not the {size_bytes} it was packed with")
        size_bytes = real
    return Shipped(WORKDIR_MOUNT, name, str(path), sha256, int(size_bytes or 0))


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{max(1, round(n / 1024))} KiB"


def bucket_name(model: str, launch_id: str) -> str:
    """``cloudfit-<model>-<launch id>``: a bucket of this launch alone (≤ 63 characters)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", model.lower()).strip("-")[:30] or "job"
    lid = re.sub(r"[^a-z0-9]+", "", launch_id.lower())[:16]
    if len(lid) < 8:
        raise UsageError("a SkyPilot task needs a launch id of at least 8 letters or digits (its bucket's name)")
    return f"cloudfit-{stem}-{lid}"


_NO_WHEEL = ("echo 'cloudfit: this task carries no cloudfit wheel; write it with `cloudfit recommend --emit-skypilot` "
             "(cloudfit.executors.skypilot.emit)' >&2\nexit 1\n")


def setup_script(wheel: Shipped | None = None, *, pip_words: Sequence[str] = (), extra: str = "",
                 workdir: Shipped | None = None) -> str:
    """The task's ``setup``: check every shipped file's SHA-256, unpack the workdir, install cloudfit from the
    checked wheel (or the user's ``pip_words``); without either it refuses."""
    if wheel is None and not pip_words:
        return _NO_WHEEL
    lines = ["set -e"]
    for f in (wheel, workdir):
        if f is not None:
            lines.append(f"echo '{f.sha256}  {f.remote}' | sha256sum -c --status "
                         f"|| {{ echo 'cloudfit: {f.remote} does not match its SHA-256 {f.sha256[:12]}…' >&2; exit 1; }}")
    if workdir is not None:
        lines.append(f"mkdir -p {WORKDIR} && tar -xf {shlex.quote(workdir.remote)} -C {WORKDIR}")
    target = [f"{wheel.remote}{extra}"] if wheel is not None else list(pip_words)
    lines.append("python -m pip install --quiet " + " ".join(shlex.quote(w) for w in target))
    return "\n".join(lines) + "\n"


def build_task(name: str, configs: Sequence[ClusterConfig], run: str, *, bucket: Mapping[str, Any],
               wheel: Shipped | None = None, pip_words: Sequence[str] = (), extra: str = "",
               workdir: Shipped | None = None, envs: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The SkyPilot task (a dict) running ``run`` on the first config's shape, the others as ordered fallbacks.

    ``bucket``: the checkpoint mount (``{"name": …}`` a bucket SkyPilot makes, or ``{"source": URI}``);
    ``wheel``/``pip_words``: what the nodes install (see ``setup_script``); ``workdir``: a packed folder."""
    usable = [c for c in configs if c.offering.cloud in SKY_CLOUDS and sky_accelerator(c)]
    if not usable:
        raise UsageError("SkyPilot cannot attach any of the plan's shapes (e.g. a3-edgegpu-8g); "
                         "re-run recommend with other --accelerators")
    first = usable[0]
    same: list[ClusterConfig] = []
    for c in usable:
        if (c.nodes, c.offering.accelerators_per_node) == (first.nodes, first.offering.accelerators_per_node) \
                and c not in same:
            same.append(c)
    mounts: dict[str, Any] = {CHECKPOINT_MOUNT: {**bucket, "mode": "MOUNT"}}
    for f in (wheel, workdir):
        if f is not None:
            mounts[f.remote] = f.local
    task: dict[str, Any] = {
        "name": name,
        "resources": {"ordered": [sky_resources(c) for c in same]},
        "num_nodes": int(first.nodes),
        "secrets": {KEY_SECRET: None},
        "file_mounts": mounts,
    }
    if envs:
        task["envs"] = dict(envs)
    task["setup"] = setup_script(wheel, pip_words=pip_words, extra=extra, workdir=workdir)
    task["run"] = run
    return task


def shipping(task: Mapping[str, Any], shipped: Sequence[Shipped] = ()) -> list[str]:
    """Lines saying what a task ships to its nodes and where its checkpoints go (for a dry run)."""
    out = [f"ships {f.describe()}" for f in shipped]
    b = task["file_mounts"][CHECKPOINT_MOUNT]
    out.append(f"bucket {b.get('source') or b.get('name')} mounted at {CHECKPOINT_MOUNT} "
               + ("(--checkpoint-dir)" if "source" in b else "(made by SkyPilot for this launch alone)"))
    out.append(f"secret {KEY_SECRET} (the plan's checkpoint key, the same on every node; never in the task)")
    return out


def skypilot_task(plan: Plan, *, wheel: Shipped | None = None, pip_words: Sequence[str] = (),
                  launch_id: str | None = None, bucket: str | None = None, steps_command: str | None = None,
                  batch_size_per_device: int | None = None, workdir: Shipped | None = None) -> dict[str, Any]:
    """The SkyPilot task (a dict, for YAML) that runs cloudfit's trainer on the plan's configs, any cloud.

    ``wheel``: the wheel of the running cloudfit (``cloudfit.executors.skypilot.emit`` builds it) — without it
    (or ``pip_words``) the task's setup refuses to run; ``launch_id``: this launch's identity (the bucket's name
    unless ``bucket`` is given; default: new)."""
    import uuid

    from cloudfit.spot.checkpointing import planned_interval

    launch_id = launch_id or uuid.uuid4().hex
    w = plan.workload
    configs: list[ClusterConfig] = []
    for e in plan.candidates():
        if e.config.offering.cloud in SKY_CLOUDS and sky_accelerator(e.config) and e.config not in configs:
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
    stem = re.sub(r"[^a-z0-9-]+", "-", w.model.lower()).strip("-")[:30] or "job"
    extra = "[hf]" if any(w.model.startswith(p) for p in ("bert", "gpt2")) else ""
    return build_task(f"cloudfit-{stem}-{launch_id[:8]}", configs, run,
                      bucket={"name": bucket or bucket_name(w.model, launch_id)}, wheel=wheel, pip_words=pip_words,
                      extra=extra, workdir=workdir)


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
            'python -m cloudfit.runtime.torchrun --nnodes="$SKYPILOT_NUM_NODES" '
            '--nproc-per-node="$SKYPILOT_NUM_GPUS_PER_NODE" --node-rank="$SKYPILOT_NODE_RANK" '
            '--master-addr="$MASTER_ADDR" --master-port=29500 '
            f"-m {module} " + " ".join(shlex.quote(a) for a in args) + "\n")
