"""Training stacks as plug-ins: one module per stack, this registry, one contract (``tests/stacks/test_contract.py``).

``names()`` lists the registered stacks; ``get(name)`` imports ``cloudfit.stacks.<module>`` lazily and returns its
``STACK`` (a ``cloudfit.stacks.base.Stack``). A stack module defines ``STACK = TheStack()`` at top level and keeps
its heavy imports (torch, the stack's own package) inside functions. The interface is documented in
``cloudfit.stacks.base``.
"""

from __future__ import annotations

import importlib

from cloudfit.errors import UsageError
from cloudfit.stacks.base import (CheckpointSaved, Progress, Stack, StackCommand, StackJob,  # noqa: F401
                                  StackNotInstalled)

#: stack name → module under cloudfit.stacks
REGISTRY: dict[str, str] = {
    "torchtitan": "torchtitan",
    "megatron": "megatron",
    "accelerate": "accelerate",
    "custom": "custom",
    "cloudfit": "own",
}
DEFAULT_LLM_STACK = "torchtitan"


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(name: str) -> Stack:
    """The stack called ``name`` (``UsageError`` in one line for an unknown or missing one)."""
    key = str(name).strip().lower()
    if key not in REGISTRY:
        raise UsageError(f"unknown stack {name!r}: choose one of {', '.join(REGISTRY)}")
    mod_name = f"cloudfit.stacks.{REGISTRY[key]}"
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name == mod_name:
            raise UsageError(f"stack {key!r} is not available in this version of cloudfit ({mod_name} is missing)") from None
        raise
    stack = getattr(mod, "STACK", None)
    if not isinstance(stack, Stack):
        raise UsageError(f"stack {key!r}: {mod_name} defines no STACK")
    return stack


def available() -> tuple[str, ...]:
    """The registered stacks whose module is present (H2's and later ones may be missing in a partial tree)."""
    out = []
    for n in REGISTRY:
        try:
            get(n)
        except UsageError:
            continue
        out.append(n)
    return tuple(out)
