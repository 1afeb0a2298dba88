#!/usr/bin/env bash
# The second prepared GPU session (device tool, 2026-11-27): torchtitan run *through cloudfit* (recommend → launch
# --stack torchtitan on this machine's GPU, its log read back as progress and a measured speed), torch.profiler over
# cloudfit's own LLM step (eager and each block compiled), the CUDA tests, measured zoo profiles on this GPU.
# Needs (carried, ignored by git): .whl/ (torchtitan 0.3.0 and its pure-Python needs, typer 0.28, click 8.5.1) and
# .devrun/tt_assets (a tokenizer and a text dataset made from cloudfit's own sources: /tmp/mk_assets.py recipe in
# bench/RESULTS_gpu.md). Usage there: bash bench/device/gpu_session2.sh (writes ≤ 8 files under $OUT).
set -u
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 CLOUDFIT_HOME=/tmp/cfhome
REPO=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$REPO || echo "wheel install failed"
BUDGET="${GPU_BUDGET_S:-450}"   # no new zoo profile after this many seconds
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader)"
python3 -c "import torch, typer, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'typer', typer.__version__)"

# 1. torchtitan through cloudfit: a 1-GPU plan for llama3-1b priced for torchtitan, launched on this GPU
echo "== torchtitan through cloudfit"; t0=$SECONDS
A=$REPO/.devrun/tt_assets; mkdir -p /tmp/tt && cd /tmp/tt
python3 -c "import torchtitan, torchao, tyro, datasets; print('torchtitan imports')" 2>&1 | tail -2
ACC=$(python3 -c "import torch; from cloudfit.profiling.device import canonical_device_name as c; print(c(torch.cuda.get_device_name(0)))")
echo "this GPU: $ACC"
timeout 60 python3 -m cloudfit recommend --model llama3-1b --tokens 1e8 --seq-len 2048 --deadline 2d --accelerators $ACC \
  --clouds nebius,lambda,runpod,aws,gcp --stack torchtitan --max-gpus 1 --global-batch 8 --layout ac=selective --out plan.json 2>&1 | tail -12
timeout 240 python3 -m cloudfit launch plan.json --stack torchtitan --yes --steps 40 --name titan -- \
  --hf_assets_path $A --dataloader.dataset c4_test --dataloader.dataset_path $A/c4_test --metrics.log_freq 1 \
  --checkpoint.no-enable 2>&1 | tail -40; echo "launch rc=$? wall_s=$((SECONDS-t0))"
timeout 30 python3 -m cloudfit status titan 2>&1 | tail -15
timeout 30 python3 -m cloudfit status titan --json > /tmp/tt/status.json 2>&1
tar czf "$OUT/titan.tgz" --exclude=checkpoints -C /tmp tt cfhome 2>/dev/null
cd "$REPO"

# 2. torch.profiler over cloudfit's own LLM step, at torchtitan's micro-batch: eager, then each block compiled
for v in "" "--compile"; do echo "== llm step profile $v"; t0=$SECONDS
  timeout 170 python3 bench/device/llm_step_profile.py --shape llama3-1b --seq-len 2048 --micro-batch 8 --ac selective --out /tmp/lp $v 2>&1 | grep -v "^USDT\|Warning" | tail -4
  echo "rc=$? wall_s=$((SECONDS-t0))"; cp /tmp/lp/llm_step_*.json "$OUT/" 2>/dev/null; cat /tmp/lp/llm_step_*.txt > "$OUT/prof_tables.txt" 2>/dev/null
done

# 3. CUDA tests
echo "== pytest -m cuda"; t0=$SECONDS
timeout 120 python3 -m pytest -q -m cuda -p no:cacheprovider tests/profiling/test_device_runner.py tests/llm/test_anchor.py 2>&1 | tail -6; echo "wall_s=$((SECONDS-t0))"

# 4. Measured CUDA profiles of the zoo on this GPU (bf16 autocast, the zoo's GPU batch; merged into profiles/)
for m in resnet50 alexnet ncf resnet18 gnmt bert-base vgg16 inception_v3 gpt2 transformer-base mobilenet_v2 ssd300 densenet121 resnet101 resnet152 bert-large gpt2-medium; do
  if [ $SECONDS -gt $BUDGET ]; then echo "== skip $m (budget ${BUDGET}s spent)"; continue; fi
  echo "== cnn $m"; t0=$SECONDS
  timeout 60 python3 -m cloudfit profile run "$m" --device cuda --precision bf16 --out "profiles/$m.json" 2>&1 | tail -2; echo "rc=$? wall_s=$((SECONDS-t0))"
  tar czf "$OUT/profiles.tgz" profiles/*.json
done
echo "== done after ${SECONDS}s"
