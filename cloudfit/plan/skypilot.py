"""Export a plan as a SkyPilot task (a dict ready for YAML)."""

from __future__ import annotations

from typing import Any

from cloudfit.types import Plan



def skypilot_task(plan: Plan, *, steps_command: str | None = None) -> dict[str, Any]:
    """A SkyPilot task (as a dict, for YAML) that runs cloudfit's trainer on the chosen config."""
    c = plan.chosen.config
    o = c.offering
    w = plan.workload
    if steps_command is None and plan.layout:  # a large-model plan: torchrun runs the plan's layout
        launch = plan.layout["launch"]  # (or the nearest layout cloudfit.train_llm runs: no pp/cp there)
        args = launch["args"] if launch.get("runnable", True) or not launch.get("runnable_args") else launch["runnable_args"]
        steps_command = (
            'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
            "torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE "
            "--node_rank=$SKYPILOT_NODE_RANK --master_addr=$MASTER_ADDR --master_port=29500 "
            "-m cloudfit.train_llm " + " ".join(args) + " --checkpoint-dir ~/cloudfit-ckpt\n")
    run = steps_command or (
        'MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
        "torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE "
        "--node_rank=$SKYPILOT_NODE_RANK --master_addr=$MASTER_ADDR --master_port=29500 "
        f"-m cloudfit.train --model {w.model} --samples {int(w.samples)} --precision {w.precision} "
        "--checkpoint-dir ~/cloudfit-ckpt\n"
    )
    return {
        "name": f"cloudfit-{w.model}",
        "resources": {
            "cloud": "gcp",
            "region": o.region,
            "zone": o.zone,
            "instance_type": o.machine_type,
            "accelerators": f"{o.accelerator}:{o.accelerators_per_node}",
            "use_spot": bool(c.spot),
        },
        "num_nodes": int(c.nodes),
        "setup": "pip install cloudfit\n",
        "run": run,
    }
