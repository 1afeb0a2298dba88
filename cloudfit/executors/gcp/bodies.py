"""What goes into one Compute Engine insert call: names, labels, metadata, the startup script.

Pure functions and records (no network): ``NodeSpec.instance()`` builds the ``compute_v1.Instance``
and ``NodeSpec.plan()`` the line ``--dry-run`` prints for it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from cloudfit import __version__
from cloudfit.errors import UsageError
from cloudfit.executors.base import NodePlan, RunSpec
from cloudfit.types import ClusterConfig

#: Deep Learning VM image family with PyTorch, CUDA 12.9 and the NVIDIA 580 driver preinstalled.
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/pytorch-2-9-cu129-ubuntu-2404-nvidia-580"
BOOT_DISK_GB = 200
RDZV_PORT = 29400
LAUNCH_LABEL = "cloudfit-launch"  # per-launch identity (a UUID) beside the cluster name
#: N1 shapes take GPUs as guest accelerators; these are their Compute Engine type names.
N1_ACCELERATOR_TYPES = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                        "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80"}

def accelerator_type(machine_type: str, accelerator: str) -> str | None:
    """Compute Engine accelerator type to attach, or None when the machine type has its GPUs built in."""
    if not machine_type.startswith("n1-"):
        return None
    try:
        return N1_ACCELERATOR_TYPES[accelerator]
    except KeyError:
        raise UsageError(f"cloudfit does not know how to attach {accelerator} to {machine_type}") from None


def disk_type(machine_type: str) -> str:
    # A3 Ultra and A4 boot only from Hyperdisk; the rest take Persistent Disk.
    return "hyperdisk-balanced" if machine_type.startswith(("a3-ultragpu", "a4-")) else "pd-balanced"


def node_name(cluster: str, i: int) -> str:
    return f"{cluster}-{i}"


def split_bucket(checkpoint_dir: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` → ``("bucket", "/mnt/cloudfit/bucket/a/b")`` (where the VM mounts it)."""
    rest = checkpoint_dir[len("gs://"):].strip("/")
    bucket, _, path = rest.partition("/")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]", bucket or ""):
        raise UsageError(f"--checkpoint-dir {checkpoint_dir!r} names no valid bucket (expected gs://BUCKET/PATH)")
    if ".." in path.split("/"):
        raise UsageError(f"--checkpoint-dir {checkpoint_dir!r}: '..' is not allowed in the path")
    return bucket, f"/mnt/cloudfit/{bucket}" + (f"/{path}" if path else "")


def render_startup_script(spec: RunSpec, config: ClusterConfig, checkpoint_dir: str, *, install=None,
                          version: str = __version__) -> str:
    """The startup script every node of ``config`` runs (identical on all nodes). ``install``: an
    ``Install`` (``cloudfit.executors.gcp.wheel``); None: ``install_source()``."""
    from cloudfit.executors.gcp.wheel import install_source

    if checkpoint_dir.startswith("gs://"):
        bucket, local = split_bucket(checkpoint_dir)
    else:
        bucket, local = "", checkpoint_dir
    mode, parser, sigterm, stack_env, seq_arg, module = "torchrun", "", "", "", "", ""
    if spec.job.stack is not None:  # another stack (or the user's command with the plan's layout)
        from cloudfit.executors.stack_job import entry_module, node_job

        nj = node_job(spec, config, local)
        mode, parser, sigterm = nj.mode, nj.log_parser, "1"
        entry = " ".join(shlex.quote(a) for a in nj.argv)
        stack_env = "\n".join(f"export {k}={shlex.quote(str(v))}" for k, v in sorted(nj.env.items())
                              if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k))
        seq_arg = f"--seq-len {int(spec.job.stack.seq_len)}" if spec.job.stack.seq_len else ""
        if mode == "torchrun":
            module = entry_module(nj.argv) or ""  # imported once on the node before torchrun (startup.sh)
    elif spec.job.command:
        entry = "--no-python " + " ".join(shlex.quote(a) for a in spec.job.command)
        sigterm = "1"
    else:
        # stop and progress files come from the script's environment; a large-model job gets the layout for config
        args = spec.job.trainer_args(local, config=config)
        entry = f"-m {spec.job.trainer} " + " ".join(shlex.quote(a) for a in args)
    wheel = install.wheel_name if install is not None and install.chunks else ""
    values = {"CLUSTER": spec.name, "NNODES": str(config.nodes), "NPROC": str(config.offering.accelerators_per_node),
              "BUCKET": bucket, "CKPT": local, "PIP_ARGS": "" if wheel else (install or install_source()).spec,
              "WHEEL_NAME": wheel, "WHEEL_SHA": install.sha256 if wheel else "",
              "WHEEL_EXTRA": "[hf]" if wheel and install.spec.endswith("[hf]") else "", "VERSION": version,
              "ENTRY": entry if mode == "torchrun" else "true", "DIRECT_ENTRY": entry if mode == "direct" else "true",
              "WORKDIR_SHA": spec.job.workdir.sha256 if spec.job.workdir is not None else "",
              "LAUNCH_MODE": mode, "LOG_PARSER": parser, "SIGTERM_ON_STOP": sigterm, "STACK_ENV": stack_env,
              "TOTAL_STEPS": str(int(spec.job.steps)), "SEQ_LEN_ARG": seq_arg, "ENTRY_MODULE": module}
    text = (Path(__file__).with_name("startup.sh")).read_text()
    for k, v in values.items():  # ENTRY and PIP_ARGS are already shell words (quoted where needed)
        text = text.replace("{{%s}}" % k, v if k in ("ENTRY", "DIRECT_ENTRY", "PIP_ARGS", "STACK_ENV", "TOTAL_STEPS", "SEQ_LEN_ARG")
                            else shlex.quote(v))
    return text


@dataclass(frozen=True)
class NodeSpec:
    """Everything that goes into one insert call (also what ``--dry-run`` prints)."""

    name: str
    zone: str
    index: int
    config: ClusterConfig
    cap_s: int
    labels: dict[str, str]
    metadata: dict[str, str]  # without the startup script
    image: str
    attachments: dict[str, str] = field(default_factory=dict, repr=False)  # large metadata (the wheel), not shown

    @property
    def price_per_hour(self) -> float:
        return self.config.price_per_hour / self.config.nodes

    def instance(self, startup_script: str, network_ip: str | None = None):
        from google.cloud import compute_v1

        o = self.config.offering
        mt = o.machine_type
        acc = accelerator_type(mt, o.accelerator)
        nic = compute_v1.NetworkInterface(
            network="global/networks/default",
            access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
        )
        if mt.startswith(("a3-", "a4-")):
            nic.nic_type = "GVNIC"
        if network_ip:
            nic.network_i_p = network_ip
        items = [compute_v1.Items(key="startup-script", value=startup_script)]
        items += [compute_v1.Items(key=k, value=v) for k, v in sorted({**self.attachments, **self.metadata}.items())]
        inst = compute_v1.Instance(
            name=self.name,
            machine_type=f"zones/{self.zone}/machineTypes/{mt}",
            labels=self.labels,
            disks=[compute_v1.AttachedDisk(
                boot=True, auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=self.image, disk_size_gb=BOOT_DISK_GB,
                    disk_type=f"zones/{self.zone}/diskTypes/{disk_type(mt)}"),
            )],
            network_interfaces=[nic],
            metadata=compute_v1.Metadata(items=items),
            scheduling=compute_v1.Scheduling(
                provisioning_model="SPOT" if self.config.spot else "STANDARD",
                on_host_maintenance="TERMINATE",
                automatic_restart=False,
                instance_termination_action="DELETE",
                max_run_duration=compute_v1.Duration(seconds=int(self.cap_s)),
            ),
            service_accounts=[compute_v1.ServiceAccount(
                email="default",
                # compute: the finished VM deletes itself (startup.sh self_delete), disk and all
                scopes=["https://www.googleapis.com/auth/devstorage.read_write",
                        "https://www.googleapis.com/auth/logging.write", "https://www.googleapis.com/auth/compute"],
            )],
        )
        if acc:
            inst.guest_accelerators = [compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{self.zone}/acceleratorTypes/{acc}",
                accelerator_count=o.accelerators_per_node)]
        return inst

    def plan(self) -> NodePlan:
        o = self.config.offering
        return NodePlan(
            name=self.name, zone=self.zone, machine_type=o.machine_type, accelerator=o.accelerator,
            accelerators=o.accelerators_per_node, provisioning="SPOT" if self.config.spot else "STANDARD",
            price_per_hour=self.price_per_hour, max_run_duration_s=int(self.cap_s), labels=dict(self.labels),
            detail={"image": self.image, "instance_termination_action": "DELETE", "on_host_maintenance": "TERMINATE",
                    "guest_accelerator": accelerator_type(o.machine_type, o.accelerator) or "built in",
                    "boot_disk": f"{BOOT_DISK_GB} GB {disk_type(o.machine_type)}", "metadata": dict(self.metadata)},
        )
