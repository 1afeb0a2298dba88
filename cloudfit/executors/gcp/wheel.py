"""The cloudfit the VMs install: a wheel of the very install that planned the launch.

``cloudfit==<version>`` is not on the package index, so the VMs cannot ``pip install`` it by name.
``runtime_wheel()`` builds a wheel from the running ``cloudfit`` package (its code and package data;
the fitted performance model and shipped planning data are left out: training does not read them),
byte-for-byte reproducible (fixed timestamps, sorted entries). It travels in instance metadata,
base64 in chunks of at most ``CHUNK`` characters (Compute Engine takes 256 KB per value, 512 KB in
all); the startup script reassembles it, checks its SHA-256 and installs it, with only what
training needs (``numpy``; ``transformers`` for the Hugging Face zoo models). ``$CLOUDFIT_PIP_SPEC``
replaces all of this with a pip spec of your own (credentials stripped: they would land in metadata).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from cloudfit import __version__
from cloudfit.errors import UsageError

CHUNK = 250_000  # characters of base64 per metadata value (the limit is 256 KB)
MAX_METADATA_BYTES = 480_000  # of the 512 KB per instance, leave room for the startup script and keys
#: Planning code and data the VMs never read: the trainers (cloudfit.train, cloudfit.train_llm) import
#: none of it (tests/executors/test_wheel_closure.py checks that against their import closure).
EXCLUDE = ("perf/model.json", "_shipped/", "cli/", "__main__.py", "search/", "plan/", "active/", "llm/",
           "catalog/refresh.py", "explore.py", "plot.py")
#: Kept although their folder is excluded: the LLM shapes that profiles (profiling/io, which the trainers import)
#: read lazily (tests/executors/test_wheel_closure.py proves the closure).
KEEP = ("llm/__init__.py", "llm/hardware.py", "llm/layout.py", "llm/stats.py", "llm/zoo.py")
TRAINING_REQUIRES = ("numpy>=1.26", "transformers>=4.44; extra == 'hf'")
HF_MODELS = ("bert", "gpt2")
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Install:
    """What the VMs install and from where (``--dry-run`` shows it)."""

    source: str  # "wheel in instance metadata" | "CLOUDFIT_PIP_SPEC"
    spec: str  # the pip arguments on the VM, shell-quoted (the reassembled wheel's path, or the user's spec)
    describe: str  # one line for people
    wheel_name: str = ""
    sha256: str = ""
    size_bytes: int = 0
    chunks: dict[str, str] = field(default_factory=dict, repr=False)  # metadata key → base64 chunk


#: What runs on a node: the trainers, the log follower of other stacks (``cloudfit.runtime.logprogress``) and every
#: stack's parser (``cloudfit.stacks`` imports them by name). Only modules these import (``closure``: every
#: ``import`` and ``from … import`` of cloudfit, lazy ones too, and module names written as strings) ship: the
#: launcher, the executors and the performance model stay home, leaving instance metadata room for the workdir.
ROOTS = ("cloudfit.train", "cloudfit.train_llm", "cloudfit.runtime.logprogress", "cloudfit.stacks")


def _module_files(root: Path) -> dict[str, Path]:
    out = {}
    for p in root.rglob("*.py"):
        if "__pycache__" in p.parts:
            continue
        name = ".".join(p.relative_to(root.parent).with_suffix("").parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def closure(root: Path, roots=ROOTS) -> set[str]:
    """The cloudfit modules ``roots`` import, transitively (read from the source, nothing is imported); a root
    package brings all its modules."""
    import ast

    mods = _module_files(root)
    stack = [m for m in mods for r in roots if m == r or m.startswith(r + ".")]
    seen: set[str] = set()
    while stack:
        m = stack.pop()
        if m in seen or m not in mods:
            continue
        seen.add(m)
        parts = m.split(".")
        stack += [".".join(parts[:i]) for i in range(1, len(parts))]
        for node in ast.walk(ast.parse(mods[m].read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cloudfit"):
                stack.append(node.module)
                stack += [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                stack += [a.name for a in node.names if a.name.startswith("cloudfit")]
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("cloudfit.")
                  and m != "cloudfit"):  # import_module("cloudfit.…"), registries of module names (not the
                stack.append(node.value)  # package's lazy attributes: `cloudfit.launch` is not used on a node)
    return seen


def _files(root: Path) -> list[tuple[str, bytes]]:
    mods = closure(root)
    needed = {p.resolve() for m, p in _module_files(root).items() if m in mods}
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root.parent).as_posix()
        inner = path.relative_to(root).as_posix()
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if inner not in KEEP and any(inner == e or inner.startswith(e) for e in EXCLUDE):
            continue
        if path.suffix == ".py" and path.resolve() not in needed and inner not in KEEP:
            continue
        out.append((rel, path.read_bytes()))
    return out


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def runtime_wheel(package_dir: Path | None = None, version: str = __version__) -> tuple[str, bytes]:
    """``(file name, bytes)`` of a py3-none-any wheel of the running cloudfit (deterministic)."""
    import cloudfit

    root = Path(package_dir) if package_dir is not None else Path(cloudfit.__file__).resolve().parent
    dist = f"cloudfit-{version}.dist-info"
    meta = "\n".join(["Metadata-Version: 2.1", "Name: cloudfit", f"Version: {version}",
                      "Summary: cloudfit runtime for training VMs (built by cloudfit launch)", "Provides-Extra: hf",
                      *(f"Requires-Dist: {r}" for r in TRAINING_REQUIRES)]) + "\n"
    wheel = "Wheel-Version: 1.0\nGenerator: cloudfit launch\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = _files(root) + [(f"{dist}/METADATA", meta.encode()), (f"{dist}/WHEEL", wheel.encode())]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries) + f"{dist}/RECORD,,\n"
    entries.append((f"{dist}/RECORD", record.encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
    return f"cloudfit-{version}-py3-none-any.whl", buf.getvalue()


#: Query parameters that carry credentials (signed URLs, tokens): dropped before a spec is stored anywhere.
_SECRET_PARAM = re.compile(r"(?i)(signature|sig|token|secret|password|passwd|pwd|credential|auth|key)")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*)://([^/@\s]+)@")


def _strip_word(word: str) -> str:
    """One pip argument without credentials: ``user:password@`` and token users go (an ssh URL keeps its
    user, ``git@``: a key authenticates it, the name is no secret), and so do query parameters named
    like a secret (``X-Goog-Signature``, ``X-Goog-Credential``, ``token``, ``sig`` …)."""
    def userinfo(m: re.Match) -> str:
        scheme, info = m.group(1), m.group(2)
        if "ssh" in scheme.lower():
            return f"{scheme}://{info.split(':', 1)[0]}@"
        return f"{scheme}://"

    word = _USERINFO.sub(userinfo, word)
    if "?" not in word or "://" not in word:
        return word
    head, _, rest = word.partition("?")
    query, hash_, frag = rest.partition("#")
    kept = [kv for kv in query.split("&") if kv and not _SECRET_PARAM.search(kv.split("=", 1)[0])]
    return head + ("?" + "&".join(kept) if kept else "") + hash_ + frag


def pip_words(raw: str) -> list[str]:
    """``$CLOUDFIT_PIP_SPEC`` as the pip arguments it means (split like a shell would: a spec with
    options, e.g. ``cloudfit==1.2 --extra-index-url URL``, is several words), credentials stripped."""
    import shlex

    try:
        words = shlex.split(raw)
    except ValueError as e:
        raise UsageError(f"${_env_name()} is not a valid list of pip arguments ({e})") from None
    if not words:
        raise UsageError(f"${_env_name()} is empty")
    return [_strip_word(w) for w in words]


def _env_name() -> str:
    from cloudfit.endpoints import ENV_PIP_SPEC

    return ENV_PIP_SPEC


def install_source(model: str = "") -> Install:
    """How the VMs get cloudfit: ``$CLOUDFIT_PIP_SPEC`` when set, else this install's wheel in metadata."""
    import shlex

    from cloudfit.endpoints import ENV_PIP_SPEC

    hf = any(model.startswith(p) for p in HF_MODELS)
    if os.environ.get(ENV_PIP_SPEC, "").strip():
        words = pip_words(os.environ[ENV_PIP_SPEC])
        spec = shlex.join(words)
        return Install(ENV_PIP_SPEC, spec, f"the VMs install {spec} (from ${ENV_PIP_SPEC})")
    name, data = runtime_wheel()
    from cloudfit.executors.workdir import b64_chunks

    chunks = b64_chunks(data, "cloudfit-wheel-", CHUNK)
    if sum(map(len, chunks.values())) > MAX_METADATA_BYTES:
        raise UsageError(f"this cloudfit's wheel is {len(data) // 1024} KB, too large for instance metadata; "
                         f"set {ENV_PIP_SPEC} to a pip spec the VMs can install (an index URL, a gs:// wheel, …)")
    sha = hashlib.sha256(data).hexdigest()
    spec = f"/var/lib/cloudfit/{name}" + ("[hf]" if hf else "")
    return Install("wheel in instance metadata", spec,
                   f"the VMs install cloudfit {__version__} from a wheel of this install ({name}, "
                   f"{len(data) // 1024} KB, sha256 {sha[:12]}…) carried in instance metadata "
                   f"({len(chunks)} key(s) cloudfit-wheel-N)" + (" with transformers" if hf else ""),
                   wheel_name=name, sha256=sha, size_bytes=len(data), chunks=chunks)


def check_room(install: Install, packed) -> None:
    """The workdir archive (``cloudfit.executors.workdir.Packed``) must fit in the instance metadata the wheel
    leaves (``MAX_METADATA_BYTES`` in all): refused in one line naming its biggest files otherwise."""
    if packed is None:
        return
    used = sum(len(v) for v in install.chunks.values())
    need = sum(len(v) for v in packed.chunks(CHUNK).values())
    room = MAX_METADATA_BYTES - used
    if need > room:
        from cloudfit.endpoints import ENV_PIP_SPEC

        big = ", ".join(f"{p} ({n // 1024} KB)" for p, n in sorted(packed.files, key=lambda f: -f[1])[:3])
        raise UsageError(f"the workdir {packed.folder} packs to {packed.size // 1024} KB ({need // 1024} KB in base64); "
                         f"instance metadata has {max(0, room) // 1024} KB left beside the cloudfit wheel"
                         + ("" if not install.chunks else f" (set {ENV_PIP_SPEC} to install cloudfit from an index "
                            f"and free {used // 1024} KB)")
                         + f": the biggest files are {big} — keep data and weights in the bucket")
