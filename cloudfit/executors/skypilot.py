"""Write a plan's SkyPilot task as a launch: the YAML, the wheel its nodes install, and the key file.

``emit(plan, path)`` draws a launch id (the task's bucket: unique to this launch, so no other job
resumes — or 403s on — its checkpoints), builds the wheel of the running cloudfit (the one GCP VMs
get, ``cloudfit.executors.gcp.wheel``), writes it beside the YAML, and a fresh checkpoint key to
``<task>.key`` (mode 0600; the YAML names the secret, never its value):

    CLOUDFIT_CHECKPOINT_KEY=$(cat task.key) sky launch --secret CLOUDFIT_CHECKPOINT_KEY task.yaml

Relaunching the same YAML (SkyPilot's spot recovery, or by hand) keeps its bucket and key: only this
task resumes its checkpoints.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Emitted:
    task: Path
    wheel: Path
    key_file: Path
    bucket: str
    launch_id: str


def emit(plan, path: str | os.PathLike) -> Emitted:
    """Write ``path`` (the task YAML), its wheel and its key file (see the module docstring)."""
    import yaml

    from cloudfit.atomic import atomic_open
    from cloudfit.executors.gcp.wheel import runtime_wheel
    from cloudfit.plan.skypilot import skypilot_task

    path = Path(path)
    name, data = runtime_wheel()
    wheel = path.parent / name
    with atomic_open(wheel, "wb") as fh:
        fh.write(data)
    launch_id = uuid.uuid4().hex
    task = skypilot_task(plan, wheel_name=name, wheel_sha256=hashlib.sha256(data).hexdigest(),
                         wheel_path=str(wheel.resolve()), launch_id=launch_id)
    key_file = path.with_name(path.name.rsplit(".", 1)[0] + ".key")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    with atomic_open(path, encoding="utf-8") as fh:
        fh.write(yaml.safe_dump(task, sort_keys=False))
    return Emitted(path, wheel, key_file, task["file_mounts"]["/cloudfit-ckpt"]["name"], launch_id)
