#!/usr/bin/env bash
# One prepared GPU session (device tool): measured CUDA profiles of the zoo and LLM layer profiles
# with `cloudfit profile run --device cuda`, the CUDA tests, and a single-GPU trainer run with resume.
# Usage there: bash bench/device/gpu_session.sh  (writes under $OUT, or ./gpu_out when OUT is unset)
set -u
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT/profiles" "$OUT/llm"
LOG="$OUT/log.txt"; exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD; else export PYTHONPATH=$PWD; fi
CF="python3 -m cloudfit"
BUDGET="${GPU_BUDGET_S:-420}"   # stop starting new CNN profiles after this many seconds
echo "== $(date -u +%FT%TZ) host $(hostname)"; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv
python3 -c "import torch, typer, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'typer', typer.__version__, 'cuda', torch.version.cuda)"
# 1. LLM layer profiles at the real width (issue 24 item 3)
llm() { local name=$1; shift; echo "== llm $name $*"; local t0=$SECONDS
  timeout 150 $CF profile run --device cuda --out "$OUT/llm/$name.json" --replace "$@" ; echo "rc=$? wall_s=$((SECONDS-t0))"; }
llm llama3-8b-s8192 --model llama3-8b --seq-len 8192 --layers 4
llm llama3-8b-s4096-full --model llama3-8b --seq-len 4096 --layers 4 --ac full
llm llama3-70b-s4096 --model llama3-70b --seq-len 4096 --layers 1
# 2. CUDA tests
echo "== pytest -m cuda"; t0=$SECONDS
timeout 240 python3 -m pytest -q -m cuda -p no:cacheprovider tests/profiling/test_device_runner.py tests/llm/test_anchor.py 2>&1 | tail -15; echo "wall_s=$((SECONDS-t0))"
# 3. The LLM trainer on one GPU (real llama3-1b, FSDP2 over one rank, bf16): 6 steps, then resumed to 10
#    (the 2026-11-26 session ran these two lines as a second call; the first call's had --layers without --shrink: exit 2)
echo "== train_llm on cuda"; t0=$SECONDS; CK=/tmp/ck
A="--shape llama3-1b --seq-len 2048 --micro-batch 2 --precision bf16 --ac selective --checkpoint-dir $CK --checkpoint-every 3 --metrics-file $OUT/train_metrics.jsonl --progress-file $OUT/progress.json"
timeout 100 python3 -m cloudfit.train_llm $A --steps 6; echo "rc=$?"
timeout 100 python3 -m cloudfit.train_llm $A --steps 10; echo "rc=$? wall_s=$((SECONDS-t0))"
# 4. Measured CUDA profiles of the CNN zoo, bf16 autocast, at the zoo's GPU batch (merged into the shipped profiles)
for m in resnet50 bert-base gpt2 resnet18 resnet101 resnet152 vgg16 inception_v3 mobilenet_v2 densenet121 bert-large gpt2-medium transformer-base gnmt ncf ssd300 alexnet resnet32; do
  if [ $SECONDS -gt $BUDGET ]; then echo "== skip $m (budget ${BUDGET}s spent)"; continue; fi
  echo "== cnn $m"; t0=$SECONDS
  timeout 90 $CF profile run "$m" --device cuda --precision bf16 --out "profiles/$m.json"; echo "rc=$? wall_s=$((SECONDS-t0))"
done
tar czf "$OUT/profiles.tgz" profiles/*.json
echo "== done after ${SECONDS}s"
