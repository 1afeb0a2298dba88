"""plan.json: the one hand-off between ``recommend`` and ``launch``.

A plan file is ``{"schema_version": 1, "workload": …, "chosen": …, "alternatives": […],
"pareto": […], "provenance": {…}}`` where every estimate carries its full ClusterConfig (offering
included), so ``launch`` needs nothing but the file. Writes are atomic.

A plan file is input like any other: ``plan_from_dict`` checks every field's type and range before
building anything (strict booleans — ``"spot": "false"`` is refused, not truthy —, whole numbers of
nodes and GPUs ≥ 1, finite positive prices, zone and machine-type names of Compute Engine's form),
and ``reprice`` matches each config to the catalog (known zone, known machine type, the same
offering) and refuses a price that differs from the catalog's beyond rounding. With
``trust_prices=True`` a differing or uncatalogued price is accepted, but the budget guard is never
given less than the catalog's price.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from cloudfit.errors import PlanError
from cloudfit.types import CLOUDS, Estimate, Plan, Workload

SCHEMA_VERSION = 1


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    d = plan.to_dict()
    d["schema_version"] = SCHEMA_VERSION
    return d


def plan_from_dict(d: Any, *, source: str = "plan") -> Plan:
    """Parse a plan dict; ``PlanError`` (one line, naming ``source``) on anything malformed."""
    if not isinstance(d, dict):
        raise PlanError(f"{source}: not a plan (expected a JSON object)")
    version = d.get("schema_version")
    if version is None:
        raise PlanError(f"{source}: not a plan (no schema_version)")
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise PlanError(
            f"{source}: plan schema_version {version!r} is not supported by this cloudfit "
            f"(reads version {SCHEMA_VERSION}); upgrade cloudfit or re-run `cloudfit recommend`"
        )
    check_plan_dict(d, source)
    layout = _layout(d.get("layout"), d["workload"], source)
    try:
        return Plan(
            workload=Workload.from_dict(d["workload"]),
            chosen=Estimate.from_dict(d["chosen"]),
            alternatives=tuple(Estimate.from_dict(e) for e in d.get("alternatives", [])),
            pareto=tuple(Estimate.from_dict(e) for e in d.get("pareto", [])),
            provenance=dict(d.get("provenance", {})),
            explanation=str(d.get("explanation", "")),
            sensitivity=str(d.get("sensitivity", "")),
            schema_version=version,
            layout=layout,
        )
    except KeyError as e:
        raise PlanError(f"{source}: plan is missing field {e.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise PlanError(f"{source}: plan has a malformed field ({e})") from None


def _layout(v: Any, workload: dict, source: str) -> dict | None:
    """The optional large-model layout block (``Plan.layout``): a JSON object with the layout text, made
    for the plan's own model. A layout block on a single-model plan (a shipped CNN/transformer profile)
    would launch the large-model trainer in place of the plan's model: refused."""
    if v is None:
        return None
    if not isinstance(v, dict) or not isinstance(v.get("text"), str):
        raise PlanError(f"{source}: plan field 'layout' must be an object with the layout 'text'")
    from cloudfit import resources

    model = workload["model"]
    if (resources.profiles_dir() / f"{model}.json").is_file() or workload.get("profile_path"):
        raise PlanError(f"{source}: plan trains the single model {model!r} (a profile), but carries a large-model "
                        "'layout' block; re-run `cloudfit recommend`")
    stack = v.get("stack")
    if stack is not None:  # plans before stacks have none: cloudfit's own trainer priced them
        from cloudfit.stacks import REGISTRY

        if not isinstance(stack, str) or stack not in REGISTRY or stack == "custom":
            raise PlanError(f"{source}: plan field 'layout.stack' must be one of "
                            f"{', '.join(k for k in REGISTRY if k != 'custom')}, got {json.dumps(stack)[:40]}")
    prof = v.get("profile")  # the LLM profile the plan was made from (plans before it have none)
    if prof is not None and (not isinstance(prof, str) or not prof.strip() or "\n" in prof or len(prof) > 4096):
        raise PlanError(f"{source}: plan field 'layout.profile' must be the path of an LLM profile file, "
                        f"got {json.dumps(prof)[:40]}")
    if v.get("model") != model:
        raise PlanError(f"{source}: plan field 'layout' is for model {json.dumps(v.get('model'))[:40]}, but the plan "
                        f"trains {model!r}; re-run `cloudfit recommend`")
    return v


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise PlanError(f"{p}: no such plan file") from None
    except OSError as e:
        raise PlanError(f"{p}: cannot read plan ({e.strerror or e})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"{p}: corrupt plan (invalid JSON at line {e.lineno}: {e.msg})") from None
    except RecursionError:  # e.g. 100,000 nested arrays: the parser's C recursion guard
        raise PlanError(f"{p}: corrupt plan (JSON nested too deeply)") from None
    return plan_from_dict(d, source=str(p))


def write_json_atomic(obj: Any, path: str | Path) -> None:
    """Write JSON so that readers see either the old file or the whole new one, never half."""
    from cloudfit.atomic import atomic_open

    with atomic_open(path, encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, allow_nan=False)
        fh.write("\n")


def save_plan(plan: Plan, path: str | Path) -> None:
    """Write ``plan`` to ``path`` atomically."""
    write_json_atomic(plan_to_dict(plan), path)


# ------------------------------------------------------------------------------ validation

_ZONE = re.compile(r"^[a-z]+(?:-[a-z]+)*[0-9]+-[a-z]$")
_REGION = re.compile(r"^[a-z]+(?:-[a-z]+)*[0-9]+$")
_MACHINE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
_ACCEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._+-]{0,39}$")
#: Names of the other clouds' instance types, regions and zones (``p5.48xlarge``, ``gpu_8x_h100_sxm5``, ``US-TX-3``).
_OTHER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_NODES = 4096
MAX_PER_NODE = 16
#: Relative difference between a plan's price and the catalog's that still counts as rounding.
PRICE_RTOL = 1e-4


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class _Check:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str, v: Any) -> None:
        shown = json.dumps(v)[:60] if not isinstance(v, str) or len(v) < 60 else json.dumps(v[:57] + "...")
        raise PlanError(f"{self.source}: {where} {what}, got {shown}")

    def obj(self, d: Any, where: str) -> dict:
        if not isinstance(d, dict):
            self.fail(where, "must be an object", d)
        return d

    def number(self, d: dict, key: str, where: str, *, low: float | None = 0.0, strict: bool = True,
               high: float | None = None, optional: bool = False) -> None:
        if key not in d or d[key] is None:
            if optional:
                return
            raise PlanError(f"{self.source}: plan is missing field {key!r} ({where})")
        v = d[key]
        bound = "> " if strict else ">= "
        if not _is_num(v) or (low is not None and (v <= low if strict else v < low)) or (high is not None and v > high):
            rng = f"{bound}{low:g}" + (f" and <= {high:g}" if high is not None else "") if low is not None else "finite"
            self.fail(f"{where}.{key}", f"must be a number {rng}", v)

    def integer(self, d: dict, key: str, where: str, *, low: int = 1, high: int | None = None,
                optional: bool = False) -> None:
        if key not in d or d[key] is None:
            if optional:
                return
            raise PlanError(f"{self.source}: plan is missing field {key!r} ({where})")
        v = d[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < low or (high is not None and v > high):
            self.fail(f"{where}.{key}", f"must be a whole number >= {low}" + (f" and <= {high}" if high else ""), v)

    def boolean(self, d: dict, key: str, where: str, *, optional: bool = False) -> None:
        if key not in d:
            if optional:
                return
            raise PlanError(f"{self.source}: plan is missing field {key!r} ({where})")
        if not isinstance(d[key], bool):
            self.fail(f"{where}.{key}", "must be true or false (a JSON boolean)", d[key])

    def name(self, d: dict, key: str, where: str, pattern: re.Pattern, what: str) -> None:
        if key not in d:
            raise PlanError(f"{self.source}: plan is missing field {key!r} ({where})")
        v = d[key]
        if not isinstance(v, str) or not pattern.match(v):
            self.fail(f"{where}.{key}", f"must be {what}", v)


def check_plan_dict(d: dict, source: str = "plan") -> None:
    """Types and ranges of every field ``launch`` relies on; ``PlanError`` naming the first bad one."""
    c = _Check(source)
    w = c.obj(d.get("workload"), "workload") if "workload" in d else None
    if w is None:
        raise PlanError(f"{source}: plan is missing field 'workload'")
    if not isinstance(w.get("model"), str) or not w.get("model", "").strip():
        c.fail("workload.model", "must be a non-empty string", w.get("model"))
    c.number(w, "samples", "workload")
    c.number(w, "deadline_hours", "workload", optional=True)
    c.number(w, "budget_usd", "workload", optional=True)
    c.number(w, "confidence", "workload", high=1.0, optional=True)
    c.integer(w, "max_nodes", "workload", high=MAX_NODES, optional=True)
    c.integer(w, "batch_size_per_device", "workload", optional=True)
    for key, allowed in (("objective", ("cost", "time")), ("spot", ("allow", "never", "only")),
                         ("precision", ("fp32", "tf32", "fp16", "bf16", "fp8"))):
        if key in w and w[key] not in allowed:
            c.fail(f"workload.{key}", f"must be one of {', '.join(allowed)}", w[key])
    for key in ("regions", "accelerators", "clouds"):
        if key in w and not (isinstance(w[key], list) and all(isinstance(x, str) for x in w[key])):
            c.fail(f"workload.{key}", "must be a list of strings", w[key])
    if "chosen" not in d:
        raise PlanError(f"{source}: plan is missing field 'chosen'")
    ests = [("chosen", d["chosen"])]
    for key in ("alternatives", "pareto"):
        items = d.get(key, [])
        if not isinstance(items, list):
            c.fail(key, "must be a list", items)
        ests += [(f"{key}[{i}]", e) for i, e in enumerate(items)]
    for where, e in ests:
        e = c.obj(e, where)
        cfg = c.obj(e.get("config"), f"{where}.config")
        o = c.obj(cfg.get("offering"), f"{where}.config.offering")
        c.integer(cfg, "nodes", f"{where}.config", high=MAX_NODES)
        c.boolean(cfg, "spot", f"{where}.config")
        cloud = o.get("cloud", "gcp")
        if cloud not in CLOUDS:
            c.fail(f"{where}.config.offering.cloud", f"must be one of {', '.join(CLOUDS)}", cloud)
        gcp = cloud == "gcp"
        c.name(o, "machine_type", f"{where}.config.offering", _MACHINE if gcp else _OTHER_NAME,
               "a Compute Engine machine type (e.g. a2-highgpu-1g)" if gcp else f"a {cloud} instance type")
        c.name(o, "accelerator", f"{where}.config.offering", _ACCEL, "an accelerator name (e.g. A100)")
        c.name(o, "zone", f"{where}.config.offering", _ZONE if gcp else _OTHER_NAME,
               "a zone name (e.g. us-central1-a)" if gcp else f"a {cloud} zone")
        c.name(o, "region", f"{where}.config.offering", _REGION if gcp else _OTHER_NAME,
               "a region name (e.g. us-central1)" if gcp else f"a {cloud} region")
        if gcp and not o["zone"].startswith(o["region"] + "-"):
            c.fail(f"{where}.config.offering.zone", f"must lie in region {o['region']}", o["zone"])
        c.integer(o, "accelerators_per_node", f"{where}.config.offering", high=MAX_PER_NODE)
        c.number(o, "vcpus", f"{where}.config.offering")
        c.number(o, "memory_gib", f"{where}.config.offering")
        c.number(o, "price_per_hour", f"{where}.config.offering")
        c.number(o, "spot_price_per_hour", f"{where}.config.offering", optional=True)
        if cfg["spot"] and o.get("spot_price_per_hour") is None:
            c.fail(f"{where}.config.spot", "cannot be true for an offering without a spot price", True)
        for key in ("samples_per_second", "low", "high"):
            c.number(e, key, where, low=0.0, strict=False)
        for key in ("hours", "hours_p90", "cost_usd", "cost_p90_usd"):
            c.number(e, key, where, low=0.0, strict=False)
        c.number(e, "p_on_time", where, low=0.0, strict=False, high=1.0)
        c.boolean(e, "feasible", where, optional=True)
    if "provenance" in d and not isinstance(d["provenance"], dict):
        c.fail("provenance", "must be an object", d["provenance"])
    for key in ("explanation", "sensitivity"):
        if key in d and not isinstance(d[key], str):
            c.fail(key, "must be a string", d[key])


def reprice(plan: Plan, catalog=None, *, trust_prices: bool = False, source: str = "plan") -> tuple[Plan, list[str]]:
    """The plan with every config's prices taken from ``catalog`` (default: the shipped one).

    Each config must name a zone and a machine type the catalog knows; an offering missing from the
    catalog, or a price differing from the catalog's beyond rounding, is refused with a one-line
    ``PlanError`` — unless ``trust_prices``, which keeps the plan's price where it is *higher* than
    the catalog's (the guard never charges less than the catalog) and accepts uncatalogued
    offerings at the plan's price. Returns ``(plan, notes)``: one note per price the override kept.
    """
    import dataclasses

    from cloudfit import catalog as catalog_mod

    cat = catalog if catalog is not None else catalog_mod.load(clouds=plan.workload.clouds)
    zones = {o.zone for o in cat.offerings}
    machines = {o.machine_type for o in cat.offerings}
    rows = {(o.machine_type, o.accelerator, o.accelerators_per_node, o.zone): o for o in cat.offerings}
    notes: list[str] = []

    def fix(where: str, e):
        o = e.config.offering
        if o.zone not in zones:
            raise PlanError(f"{source}: {where}: zone {o.zone!r} is not in the catalog")
        if o.machine_type not in machines:
            raise PlanError(f"{source}: {where}: machine type {o.machine_type!r} is not in the catalog")
        row = rows.get((o.machine_type, o.accelerator, o.accelerators_per_node, o.zone))
        if row is None:
            if not trust_prices:
                raise PlanError(f"{source}: {where}: {o.machine_type} with {o.accelerators_per_node}x {o.accelerator} "
                                f"is not offered in {o.zone} per the catalog (--trust-plan-prices to launch anyway)")
            notes.append(f"{where}: {o.machine_type} in {o.zone} is not in the catalog; using the plan's prices")
            return e
        new = {"price_per_hour": row.price_per_hour, "spot_price_per_hour": row.spot_price_per_hour}
        for key, cat_price in new.items():
            mine = getattr(o, key)
            if cat_price is None:
                if e.config.spot and key == "spot_price_per_hour":
                    raise PlanError(f"{source}: {where}: the catalog has no spot price for {o.machine_type} in {o.zone}")
                continue
            if mine is None or not math.isclose(mine, cat_price, rel_tol=PRICE_RTOL, abs_tol=1e-5):
                what = "spot" if key.startswith("spot") else "on-demand"
                if not trust_prices:
                    raise PlanError(f"{source}: {where}: the plan prices {o.machine_type} in {o.zone} {what} at "
                                    f"${mine}/h, the catalog at ${cat_price}/h; re-run `cloudfit recommend` "
                                    "(or pass --trust-plan-prices)")
                if mine is not None and mine > cat_price:
                    new[key] = mine
                notes.append(f"{where}: plan {what} price ${mine}/h vs catalog ${cat_price}/h; the guard charges "
                             f"${new[key]}/h")
        off = dataclasses.replace(o, price_per_hour=new["price_per_hour"],
                                  spot_price_per_hour=new["spot_price_per_hour"],
                                  vcpus=row.vcpus, memory_gib=row.memory_gib, region=row.region)
        return dataclasses.replace(e, config=dataclasses.replace(e.config, offering=off))

    chosen = fix("chosen", plan.chosen)
    alts = tuple(fix(f"alternatives[{i}]", e) for i, e in enumerate(plan.alternatives))
    return dataclasses.replace(plan, chosen=chosen, alternatives=alts), notes
