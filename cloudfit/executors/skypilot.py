"""What a SkyPilot task ships, and ``--emit-skypilot``: the YAML, the wheel its nodes install, the key file.

``node_install(model, folder)`` is what every SkyPilot task of cloudfit installs on its nodes (both
``--emit-skypilot`` and ``--backend sky``): the wheel of the running cloudfit (the one GCP VMs get,
``cloudfit.executors.gcp.wheel``) written to ``folder`` and checked against its SHA-256 on the node, or
``$CLOUDFIT_PIP_SPEC``'s pip arguments with their credentials stripped (a ``?token=`` or ``user:password@``
never reaches the task, the dry run or a log).

``emit(plan, path)`` draws a launch id (the task's bucket: unique to this launch, so no other job resumes —
or 403s on — its checkpoints), writes the wheel beside the YAML and a fresh checkpoint key to ``<task>.key``
(mode 0600; the YAML names the secret, never its value):

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

from cloudfit.plan.skypilot import WHEEL_MOUNT, Shipped


@dataclass(frozen=True)
class NodeInstall:
    """What the nodes install: ``wheel`` (checked on the node) or ``pip_words`` (``$CLOUDFIT_PIP_SPEC``, stripped)."""

    wheel: Shipped | None
    pip_words: tuple[str, ...]
    describe: str
    data: bytes = b""  # the wheel's bytes (written by ``write``)

    def write(self) -> None:
        """Write the wheel where the task's file mount takes it from (atomically)."""
        from cloudfit.atomic import atomic_open

        if self.wheel is None:
            return
        Path(self.wheel.local).parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(self.wheel.local, "wb") as fh:
            fh.write(self.data)


def node_install(folder: str | os.PathLike) -> NodeInstall:
    """The nodes' cloudfit: ``$CLOUDFIT_PIP_SPEC`` (credentials stripped) when set, else this install's wheel,
    to be written into ``folder`` (``NodeInstall.write``) and file-mounted."""
    from cloudfit import __version__
    from cloudfit.endpoints import ENV_PIP_SPEC
    from cloudfit.executors.gcp.wheel import pip_words, runtime_wheel

    raw = os.environ.get(ENV_PIP_SPEC, "").strip()
    if raw:
        words = tuple(pip_words(raw))
        import shlex

        return NodeInstall(None, words, f"the nodes pip-install {shlex.join(words)} (from ${ENV_PIP_SPEC}; "
                                        "credentials stripped)")
    name, data = runtime_wheel()
    wheel = Shipped(WHEEL_MOUNT, name, str(Path(folder).resolve() / name), hashlib.sha256(data).hexdigest(), len(data))
    return NodeInstall(wheel, (), f"the nodes install cloudfit {__version__} from the wheel of this install, "
                                  f"checked against its SHA-256: {wheel.describe()}", data)


@dataclass(frozen=True)
class Emitted:
    task: Path
    wheel: Path | None
    key_file: Path
    bucket: str
    launch_id: str


def emit(plan, path: str | os.PathLike, *, workdir: Shipped | None = None) -> Emitted:
    """Write ``path`` (the task YAML), its wheel and its key file (see the module docstring)."""
    import yaml

    from cloudfit.atomic import atomic_open
    from cloudfit.plan.skypilot import CHECKPOINT_MOUNT, skypilot_task

    path = Path(path)
    install = node_install(path.parent)
    launch_id = uuid.uuid4().hex
    task = skypilot_task(plan, wheel=install.wheel, pip_words=install.pip_words, launch_id=launch_id, workdir=workdir)
    install.write()
    key_file = path.with_name(path.name.rsplit(".", 1)[0] + ".key")
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    with atomic_open(path, encoding="utf-8") as fh:
        fh.write(yaml.safe_dump(task, sort_keys=False))
    return Emitted(path, Path(install.wheel.local) if install.wheel else None, key_file,
                   task["file_mounts"][CHECKPOINT_MOUNT]["name"], launch_id)
