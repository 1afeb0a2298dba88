#!/usr/bin/env bash
# The third call of the 2026-11-27 GPU session: torchtitan 0.2.2 (torchtitan 0.3.0 imports
# torch.distributed.fsdp.DataParallelMeshDims, which the device image's torch 2.11 lacks) run through cloudfit:
# a llama3-8b plan on one GPU priced for torchtitan, launched locally with the user's own torchtitan command
# (`cloudfit launch plan.json --stack torchtitan -- python -m torch.distributed.run … -m torchtitan.train …`),
# its log read by cloudfit's torchtitan parser, its speed and memory against the plan's.
set -u
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 CLOUDFIT_HOME=/tmp/cfhome
REPO=$PWD; A=$REPO/.devrun/tt_assets
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$REPO || echo "wheel install failed"
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
python3 -c "import torchtitan.train, torch; print('torchtitan.train imports on torch', torch.__version__)" 2>&1 | tail -2
ACC=$(python3 -c "import torch; from cloudfit.profiling.device import canonical_device_name as c; print(c(torch.cuda.get_device_name(0)))")
mkdir -p /tmp/tt && cd /tmp/tt
timeout 60 python3 -m cloudfit recommend --model llama3-8b --tokens 1e8 --seq-len 2048 --deadline 7d --accelerators $ACC \
  --clouds nebius,lambda,runpod,aws,gcp --stack torchtitan --max-gpus 1 --global-batch 4 --out plan.json 2>&1 | grep -E "^│ 1|Layout #1|Plan"
t0=$SECONDS
timeout 170 python3 -m cloudfit launch plan.json --stack torchtitan --yes --name titan -- \
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m torchtitan.train \
  --model.name llama3 --model.flavor 8B --model.hf_assets_path $A --training.dataset c4_test --training.dataset_path $A/c4_test \
  --training.local_batch_size 2 --training.global_batch_size 4 --training.seq_len 2048 --training.steps 20 \
  --training.mixed_precision_param bfloat16 --parallelism.data_parallel_shard_degree 1 --activation_checkpoint.mode full \
  --metrics.log_freq 1 --checkpoint.no-enable --compile.no-enable 2>&1 | tail -25; echo "launch rc=$? wall_s=$((SECONDS-t0))"
timeout 30 python3 -m cloudfit status titan --json > /tmp/tt/status.json 2>&1
grep -E "step: *[0-9]+ |memory|Error|error" /tmp/cfhome/clusters/titan/train.log | tail -25
tar czf "$OUT/titan22.tgz" --exclude=checkpoints -C /tmp tt cfhome 2>/dev/null
echo "== done after ${SECONDS}s"
