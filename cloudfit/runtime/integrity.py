"""Checkpoint integrity: an HMAC-SHA256 over every file of a checkpoint, signed into its marker.

A DCP checkpoint's ``.metadata`` is a pickle, and ``torch.distributed.checkpoint`` unpickles it on
every rank: whoever can write to the checkpoint bucket could run code on the VMs. So every rank
HMACs the files it wrote, rank 0 writes the completion marker last with those digests and an HMAC
over the marker itself, and a resume verifies the marker, that the folder holds exactly the signed
files, and every file's digest — before anything in it is unpickled. A checkpoint that does not
verify is refused (one line naming the file, exit 2), never skipped silently.

The key (32 bytes) comes out of band, never from the checkpoint folder:

* ``$CLOUDFIT_CHECKPOINT_KEY`` (64 hex characters): the launcher makes one per launch, keeps it in
  its state and passes it to the ranks.
* Without it (a trainer run by hand, a notebook), the key of this user, ``$CLOUDFIT_HOME/checkpoint.key``
  (created once, mode 0600, outside every checkpoint folder). A checkpoint signed elsewhere (another
  user, another machine, another launch) does not verify here: set ``$CLOUDFIT_CHECKPOINT_KEY`` to
  the key that signed it. An unsigned checkpoint is never trusted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterable

from cloudfit.runtime.family import BadInput

ENV_KEY = "CLOUDFIT_CHECKPOINT_KEY"
KEY_FILE = "checkpoint.key"
_CHUNK = 1 << 20


class CheckpointRefused(BadInput):
    """A checkpoint whose signature does not verify (exit 2, one line naming the file)."""


def _parse(text: str, where: str) -> bytes:
    text = text.strip()
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise BadInput(f"{where} must be 64 hex characters (a 32-byte key)")
    return bytes.fromhex(text)


def checkpoint_key(home: Path | None = None) -> bytes:
    """The signing key: ``$CLOUDFIT_CHECKPOINT_KEY``, else this user's key file (created on first use)."""
    env = os.environ.get(ENV_KEY)
    if env is not None:
        return _parse(env, f"${ENV_KEY}")
    from cloudfit.resources import home as cloudfit_home

    path = (home or cloudfit_home()) / KEY_FILE
    if not path.exists():
        _create_key(path)
    try:
        return _parse(path.read_text(), str(path))
    except OSError as e:
        raise BadInput(f"cannot read the checkpoint key {path}: {e.strerror}; set ${ENV_KEY}") from None


def _create_key(path: Path) -> None:
    """A new random key at ``path``, mode 0600, whole or not at all (ranks racing: the first link wins)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError as e:
        raise BadInput(f"cannot create the checkpoint key {path}: {e.strerror}; set ${ENV_KEY}") from None
    finally:
        tmp.unlink(missing_ok=True)


def fingerprint(key: bytes) -> str:
    """A name for the key that reveals nothing of it (ranks compare it; progress shows it)."""
    return hmac.new(key, b"cloudfit checkpoint key fingerprint", hashlib.sha256).hexdigest()[:16]


def file_digest(key: bytes, path: Path) -> str:
    mac = hmac.new(key, path.name.encode() + b"\0", hashlib.sha256)
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            mac.update(chunk)
    return mac.hexdigest()


def _canonical(marker: dict[str, Any]) -> bytes:
    body = {k: v for k, v in marker.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def sign(key: bytes, marker: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    """``marker`` with the file digests and the signature over both (what rank 0 writes last)."""
    out = {**marker, "files": dict(sorted(files.items()))}
    out["signature"] = hmac.new(key, _canonical(out), hashlib.sha256).hexdigest()
    return out


def verified_marker(key: bytes, path: Path) -> dict[str, Any]:
    """The marker file at ``path`` (a checkpoint's completion marker), once its signature verifies;
    and the folder holding exactly the files it signs. Raises :class:`CheckpointRefused`."""
    try:
        raw = path.read_bytes()
        marker = json.loads(raw)
    except (OSError, ValueError) as e:
        raise CheckpointRefused(f"checkpoint marker {path} is unreadable ({e.__class__.__name__}): refused") from None
    if not isinstance(marker, dict) or not isinstance(marker.get("signature"), str) \
            or not isinstance(marker.get("files"), dict):
        raise CheckpointRefused(f"checkpoint {path} is not signed: refused (nothing in it was loaded)")
    want = hmac.new(key, _canonical(marker), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, marker["signature"]):
        raise CheckpointRefused(f"checkpoint marker {path}: signature does not verify (tampered, or signed with "
                                f"another key: set ${ENV_KEY}): refused")
    present = {p.name for p in path.parent.iterdir()} - {path.name}
    extra, missing = sorted(present - set(marker["files"])), sorted(set(marker["files"]) - present)
    if extra or missing:
        name = (extra or missing)[0]
        raise CheckpointRefused(f"checkpoint file {path.parent / name}: {'not signed' if extra else 'missing'}: refused")
    return marker


def verify_files(key: bytes, folder: Path, digests: dict[str, str], names: Iterable[str]) -> str | None:
    """The first of ``names`` (files in ``folder``) whose digest differs from the signed one, else None."""
    for name in names:
        try:
            ok = hmac.compare_digest(file_digest(key, folder / name), str(digests[name]))
        except (OSError, KeyError):
            ok = False
        if not ok:
            return str(folder / name)
    return None
