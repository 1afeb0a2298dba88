"""The user's working folder, packed to ship to every node: ``pack(folder) -> Packed``.

``cloudfit launch plan.json -- python train.py`` runs ``train.py`` on machines that have never seen the
laptop's files: the script's folder (or ``--workdir DIR``) travels with the launch as a gzip'd tar,
byte-for-byte reproducible (sorted entries, fixed times and owners), checked on the node against its
SHA-256 before anything runs from it — as the cloudfit wheel is (``cloudfit.executors.gcp.wheel``).

Refused in one line, before anything is created:

* a folder over ``MAX_BYTES`` (uncompressed) or ``MAX_FILES`` files — the line names the biggest files;
* a secret: ``.env`` files, keys and certificates (``*.pem``, ``*.key``, ``*.p12``, ``id_rsa*`` …),
  ``credentials*.json``, ``.netrc``, ``.pgpass``, and any JSON holding a ``"private_key"`` (a service
  account key under any name) — the line names the file (move it out, or pass ``--workdir`` to a folder
  without it);
* links that leave the folder.

Skipped silently: version-control folders (``.git``, ``.hg``), caches and environments (``__pycache__``,
``.venv``, ``venv``, ``node_modules``, ``.ipynb_checkpoints``, ``.pytest_cache``, ``.mypy_cache``), ``*.pyc``.

How it reaches the nodes is the backend's (gcp: base64 chunks in instance metadata beside the wheel, so the
archive is bounded by what metadata has left, ``metadata_room``; the local backend runs in the folder itself).
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from cloudfit.errors import UsageError

#: Largest folder shipped (uncompressed bytes): code and small configs travel with the launch; data sets and
#: weights belong in a bucket the job reads.
MAX_BYTES = 8 * 1024 * 1024
MAX_FILES = 2000
SKIP_DIRS = (".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "node_modules", ".ipynb_checkpoints",
             ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox")
SKIP_FILES = ("*.pyc", "*.pyo", ".DS_Store")
#: File names that are secrets whatever their content (matched case-insensitively on the base name).
SECRET_NAMES = (".env", ".env.*", "*.env", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "id_rsa*",
                "id_dsa*", "id_ecdsa*", "id_ed25519*", "credentials*.json", "*credentials.json", ".netrc", "_netrc",
                ".pgpass", ".git-credentials", ".pypirc", "*.tfstate", "application_default_credentials.json")
#: A JSON file whose first bytes hold this is a key (a Google service-account key under any name).
SECRET_MARKERS = (b'"private_key"', b"-----BEGIN RSA PRIVATE KEY-----", b"-----BEGIN OPENSSH PRIVATE KEY-----",
                  b"-----BEGIN PRIVATE KEY-----", b"-----BEGIN EC PRIVATE KEY-----")
_SNIFF = 256 * 1024  # bytes of each small file read for the markers
_EPOCH = 315532800  # 1980-01-01: every entry's mtime (reproducible archives)
#: Where the node unpacks it (below the startup script's work folder) and the metadata keys that carry it.
NODE_DIR = "workdir"
METADATA_PREFIX = "cloudfit-workdir-"


@dataclass(frozen=True)
class Packed:
    """A packed folder: the archive, its SHA-256, what is in it (relative path, bytes) and the total bytes."""

    folder: str
    tar_gz: bytes = field(repr=False)
    sha256: str
    files: tuple[tuple[str, int], ...]
    total: int  # uncompressed bytes of the files

    @property
    def size(self) -> int:
        """Bytes of the compressed archive (what travels)."""
        return len(self.tar_gz)

    def describe(self) -> str:
        return (f"{self.folder} ({len(self.files)} file(s), {_kb(self.total)} → {_kb(self.size)} tar.gz, "
                f"sha256 {self.sha256[:12]}…)")

    def to_dict(self) -> dict:
        return {"folder": self.folder, "sha256": self.sha256, "archive_bytes": self.size, "total_bytes": self.total,
                "files": [{"path": p, "bytes": n} for p, n in self.files]}

    def chunks(self, chunk: int = 250_000) -> dict[str, str]:
        """Metadata key → base64 text, in order (``cloudfit-workdir-0`` …): how the gcp backend ships it."""
        return b64_chunks(self.tar_gz, METADATA_PREFIX, chunk)


def b64_chunks(data: bytes, prefix: str, chunk: int) -> dict[str, str]:
    """``data`` as base64 in values of at most ``chunk`` characters, keyed ``<prefix>0``, ``<prefix>1`` … in order
    (instance metadata takes 256 KB per value: the wheel and the workdir archive both travel this way)."""
    import base64

    text = base64.b64encode(data).decode()
    return {f"{prefix}{i}": text[j:j + chunk] for i, j in enumerate(range(0, len(text), chunk))}


def _kb(n: int) -> str:
    return f"{n / 1024:,.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:,.2f} MB"


def is_secret_name(name: str) -> bool:
    low = name.lower()
    return any(fnmatch.fnmatchcase(low, pat) for pat in SECRET_NAMES)


def _secret_content(path: Path, size: int) -> bool:
    if size == 0:
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF)
    except OSError:
        return False
    return any(m in head for m in SECRET_MARKERS)


def _walk(root: Path) -> list[tuple[str, Path, int]]:
    """(relative path, path, bytes) of every file to ship, sorted; refuses secrets and links out of the folder."""
    out: list[tuple[str, Path, int]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        here = Path(dirpath)
        for d in list(dirnames):  # a linked folder is followed only if it stays inside
            if (here / d).is_symlink():
                _inside(root, here / d)
        for name in sorted(filenames):
            if any(fnmatch.fnmatchcase(name, pat) for pat in SKIP_FILES):
                continue
            p = here / name
            rel = p.relative_to(root).as_posix()
            if is_secret_name(name):
                raise UsageError(f"refusing to ship {rel}: it looks like a secret (by its name); move it out of "
                                 f"{root} or pass --workdir a folder without it")
            if p.is_symlink():
                _inside(root, p)
            if not p.is_file():
                continue
            size = p.stat().st_size
            if _secret_content(p, size):
                raise UsageError(f"refusing to ship {rel}: it holds a private key; move it out of {root} or pass "
                                 "--workdir a folder without it")
            out.append((rel, p, size))
    return out


def _inside(root: Path, p: Path) -> None:
    target = p.resolve()
    if target != root and root not in target.parents:
        raise UsageError(f"refusing to ship {p.relative_to(root).as_posix()}: it links outside {root}")


def pack(folder: str | Path | None, *, extra: dict[str, str] | None = None, max_bytes: int = MAX_BYTES,
         max_files: int = MAX_FILES) -> Packed:
    """``folder`` as a reproducible tar.gz (see the module docstring for what is refused and skipped), with
    ``extra`` (relative path → text: a stack's config files) added at its root, replacing a file of the same
    name. ``folder`` None: only ``extra``."""
    entries: dict[str, bytes | Path] = {}
    if folder is not None:
        root = Path(folder).expanduser()
        if not root.is_dir():
            raise UsageError(f"--workdir {folder}: no such folder")
        root = root.resolve()
        for rel, p, _ in _walk(root):
            entries[rel] = p
        label = str(root)
    else:
        label = "(stack files)"
    for rel, text in (extra or {}).items():
        rel = Path(rel).as_posix()
        if rel.startswith("/") or ".." in rel.split("/"):
            raise UsageError(f"a stack file must have a relative path inside the workdir, got {rel!r}")
        entries[rel] = text.encode() if isinstance(text, str) else bytes(text)
    files = sorted((rel, v, len(v) if isinstance(v, bytes) else v.stat().st_size) for rel, v in entries.items())
    total = sum(n for _, _, n in files)
    if total > max_bytes or len(files) > max_files:
        big = sorted(files, key=lambda f: -f[2])[:3]
        names = ", ".join(f"{rel} ({_kb(n)})" for rel, _, n in big)
        what = (f"{_kb(total)} in {len(files)} file(s)" if total > max_bytes else f"{len(files)} files")
        raise UsageError(f"the workdir {label} is too large to ship ({what}; at most {_kb(max_bytes)} and {max_files} "
                         f"files): the biggest are {names} — keep data and weights in a bucket, or pass --workdir a "
                         "smaller folder")
    buf = io.BytesIO()
    # gzip with mtime 0 and no file name: the same folder packs to the same bytes
    import gzip

    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, p, size in files:
                data = p if isinstance(p, bytes) else p.read_bytes()
                info = tarfile.TarInfo(rel)
                info.size, info.mtime, info.uid, info.gid, info.uname, info.gname = len(data), _EPOCH, 0, 0, "", ""
                info.mode = 0o755 if not isinstance(p, bytes) and os.access(p, os.X_OK) else 0o644
                tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    return Packed(label, data, hashlib.sha256(data).hexdigest(), tuple((r, n) for r, _, n in files), total)


def unpack(data: bytes, sha256: str, dest: str | Path) -> Path:
    """The node's side in Python (the startup script does the same in bash): verify, then extract safely."""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise UsageError("the workdir archive does not match its checksum: refusing to run from it")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    return dest


def script_folder(command: tuple[str, ...] | list[str]) -> Path | None:
    """The folder of the script a command runs (``python train.py`` → train.py's folder; ``torchrun … x.py``,
    ``bash run.sh``, ``./run.sh``), or None when the command names no local file (``python -m pkg``)."""
    for word in command:
        if word.startswith("-"):
            continue
        p = Path(word).expanduser()
        if p.suffix in (".py", ".sh", ".bash", ".yaml", ".yml", ".toml") and p.is_file():
            return p.resolve().parent
    return None


def node_command(command: tuple[str, ...] | list[str], folder: Path) -> tuple[str, ...]:
    """``command`` as it runs on a node from the unpacked folder: paths of files under ``folder`` (absolute, or
    relative to here) become relative to it (``python /home/me/proj/train.py``, ``python proj/train.py`` →
    ``python train.py``)."""
    out = []
    for word in command:
        p = Path(word).expanduser()
        if not word.startswith("-") and word and p.exists() and (p.is_absolute() or "/" in word or p.is_file()):
            r = p.resolve()
            if r == folder or folder in r.parents:
                out.append(r.relative_to(folder).as_posix() or ".")
                continue
        out.append(word)
    return tuple(out)
