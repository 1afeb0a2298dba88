#!/bin/bash
# cloudfit node bootstrap, rendered by `cloudfit launch` for cluster {{CLUSTER}}.
# It holds no credentials: the VM's own service account reaches the bucket and metadata.
# Per-node values (rank, rendezvous address, stop time) come from instance metadata.
# CLOUDFIT_METADATA_URL / _WORK_DIR / _LINGER_S / _NO_SHUTDOWN exist so tests can run it off GCP.
set -uo pipefail
MD=${CLOUDFIT_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}
md() { curl -sf -H "Metadata-Flavor: Google" "$MD/instance/attributes/$1"; }
guest() { curl -sf -X PUT --data "$2" -H "Metadata-Flavor: Google" "$MD/instance/guest-attributes/cloudfit/$1" >/dev/null || true; }
# A VM that is done deletes itself (boot disk included) through the Compute API with its own service
# account: only powered off, it would stay TERMINATED and bill its disk until `cloudfit down` — and its
# launcher may be gone. Powering off is the fallback when the delete call fails.
self_delete() {
  local api token name zone project
  api=${CLOUDFIT_COMPUTE_URL:-https://compute.googleapis.com/compute/v1}
  token=$(curl -sf -H "Metadata-Flavor: Google" "$MD/instance/service-accounts/default/token" \
    | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')
  name=$(curl -sf -H "Metadata-Flavor: Google" "$MD/instance/name")
  zone=$(curl -sf -H "Metadata-Flavor: Google" "$MD/instance/zone")
  project=$(curl -sf -H "Metadata-Flavor: Google" "$MD/project/project-id")
  [ -n "$token" ] && [ -n "$name" ] && [ -n "$zone" ] && [ -n "$project" ] || return 1
  curl -sf -X DELETE -H "Authorization: Bearer $token" "$api/projects/$project/zones/${zone##*/}/instances/$name" >/dev/null
}
end_vm() { [ -n "${CLOUDFIT_NO_SHUTDOWN:-}" ] || self_delete || shutdown -h now; }
# A node that cannot start its job says why (guest attributes the launcher reads, which then deletes
# the cluster) and goes: it must not sit idle and billed until its max_run_duration.
fail() {
  guest error "$1"; guest state failed; echo "cloudfit: $1" >&2
  sleep "${CLOUDFIT_LINGER_S:-120}"
  end_vm
  exit 1
}

CLUSTER={{CLUSTER}}
NNODES={{NNODES}}
NPROC={{NPROC}}
BUCKET={{BUCKET}}
CKPT={{CKPT}}
PIP_ARGS=({{PIP_ARGS}})
WHEEL_NAME={{WHEEL_NAME}}
WHEEL_SHA={{WHEEL_SHA}}
WHEEL_EXTRA={{WHEEL_EXTRA}}
WORKDIR_SHA={{WORKDIR_SHA}}  # the user's folder (+ the stack's config files), tar.gz in metadata cloudfit-workdir-N
LAUNCH_MODE={{LAUNCH_MODE}}  # torchrun: ENTRY under torchrun; direct: ENTRY once per node (it launches its ranks)
LOG_PARSER={{LOG_PARSER}}  # a stack whose log lines become the progress file (cloudfit.runtime.logprogress)
SIGTERM_ON_STOP={{SIGTERM_ON_STOP}}  # a stop request reaches the job as SIGTERM (it does not read the stop file)
NODE_RANK=$(md cloudfit-node-rank)
MASTER=$(md cloudfit-master-addr)
if [ "$NODE_RANK" = 0 ]; then  # node 0 hosts the rendezvous at its own internal address
  MASTER=$(curl -sf -H "Metadata-Flavor: Google" "$MD/instance/network-interfaces/0/ip")
fi
STOP_AT=$(md cloudfit-stop-at)
# The key that signs and verifies checkpoints: from instance metadata into the ranks' environment only
# (never the bucket, never echoed). Whoever can write the bucket but not read this VM's metadata cannot
# plant a checkpoint the ranks would load.
CKPT_KEY=$(md cloudfit-checkpoint-key || true)
WORK=${CLOUDFIT_WORK_DIR:-/var/lib/cloudfit}
STOP_FILE=$WORK/STOP
PROGRESS=$WORK/progress.json  # on local disk: read by the watcher below, never written through FUSE
LOCAL_CKPT=$WORK/checkpoints  # rank 0 writes here; the trainer uploads to $CKPT in the background
mkdir -p "$WORK"
rm -f "$STOP_FILE"
guest state booting
echo "cloudfit: node $NODE_RANK of $NNODES in $CLUSTER, rendezvous at $MASTER:29400"

if [ -n "$BUCKET" ]; then  # checkpoints live in a bucket: mount it so every node sees the same files
  if ! command -v gcsfuse >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    curl -sf https://packages.cloud.google.com/apt/doc/apt-key.gpg | gpg --dearmor -o /usr/share/keyrings/cloud.google.gpg
    echo "deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt gcsfuse-$(lsb_release -c -s) main" \
      > /etc/apt/sources.list.d/gcsfuse.list
    apt-get update -q && apt-get install -y -q gcsfuse
  fi
  mkdir -p "/mnt/cloudfit/$BUCKET"
  mountpoint -q "/mnt/cloudfit/$BUCKET" || gcsfuse --implicit-dirs "$BUCKET" "/mnt/cloudfit/$BUCKET" \
    || fail "cannot mount gs://$BUCKET"
fi
mkdir -p "$CKPT"

PY=python3
[ -x /opt/conda/bin/python ] && PY=/opt/conda/bin/python
WANT_VERSION={{VERSION}}
if [ "$("$PY" -c 'import cloudfit; print(cloudfit.__version__)' 2>/dev/null)" != "$WANT_VERSION" ]; then
  if [ -n "$WHEEL_NAME" ]; then  # the launcher's own cloudfit, as a wheel in instance metadata
    : > "$WORK/wheel.b64"
    i=0
    while chunk=$(md "cloudfit-wheel-$i") && [ -n "$chunk" ]; do printf '%s' "$chunk" >> "$WORK/wheel.b64"; i=$((i + 1)); done
    base64 -d "$WORK/wheel.b64" > "$WORK/$WHEEL_NAME" || fail "cannot decode the cloudfit wheel from instance metadata"
    echo "$WHEEL_SHA  $WORK/$WHEEL_NAME" | sha256sum -c --status || fail "the cloudfit wheel in instance metadata is corrupt"
    PIP_ARGS=("$WORK/$WHEEL_NAME$WHEEL_EXTRA")
  fi
  "$PY" -m pip install --quiet "${PIP_ARGS[@]}" || "$PY" -m pip install --quiet --break-system-packages "${PIP_ARGS[@]}" \
    || fail "pip install ${PIP_ARGS[*]} failed"
fi
"$PY" -c "import cloudfit.train" 2>/dev/null || fail "cloudfit does not import after installing ${PIP_ARGS[*]}"

# >>> workdir: the folder the command runs from, checked against its SHA-256 before anything runs from it
JOB_DIR=$WORK
if [ -n "$WORKDIR_SHA" ]; then
  : > "$WORK/workdir.b64"
  i=0
  while chunk=$(md "cloudfit-workdir-$i") && [ -n "$chunk" ]; do printf '%s' "$chunk" >> "$WORK/workdir.b64"; i=$((i + 1)); done
  base64 -d "$WORK/workdir.b64" > "$WORK/workdir.tar.gz" 2>/dev/null || fail "cannot decode the workdir from instance metadata"
  echo "$WORKDIR_SHA  $WORK/workdir.tar.gz" | sha256sum -c --status \
    || fail "the workdir archive in instance metadata does not match its sha256 $WORKDIR_SHA: refusing to run from it"
  rm -rf "$WORK/workdir" && mkdir -p "$WORK/workdir"
  tar -xzf "$WORK/workdir.tar.gz" -C "$WORK/workdir" --no-same-owner --no-same-permissions \
    || fail "cannot unpack the workdir archive"
  JOB_DIR=$WORK/workdir
fi
cd "$JOB_DIR" || fail "cannot enter $JOB_DIR"
# <<< workdir
# A stack run as `-m MODULE` is imported once first (from the job's folder, as torchrun would): an import that cannot
# succeed fails the node in one line rather than torchrun restarting it, attempt after attempt, on billed GPUs
# (torchtitan 0.3.0 on an older torch: bench/RESULTS_gpu.md).
ENTRY_MODULE={{ENTRY_MODULE}}
if [ -n "$ENTRY_MODULE" ] && ! why=$("$PY" -c "import $ENTRY_MODULE" 2>&1 >/dev/null); then
  fail "$ENTRY_MODULE does not import on this VM ($(printf '%s\n' "$why" | grep -v '^[[:space:]]*$' | tail -n 1 | head -c 300))"
fi

# Watcher: a stop request (metadata cloudfit-stop) or the stop time turns into the stop file the
# trainer checks every step; progress is reported as guest attributes for the launcher.
(
  while true; do
    if [ -n "$(md cloudfit-stop)" ] || { [ -n "$STOP_AT" ] && [ "$(date +%s)" -ge "$STOP_AT" ]; }; then
      touch "$STOP_FILE"
    fi
    if [ -n "$SIGTERM_ON_STOP" ] && [ -f "$STOP_FILE" ] && [ -f "$WORK/job.pid" ] && [ ! -f "$WORK/job.sigterm" ]; then
      kill -TERM "$(cat "$WORK/job.pid")" 2>/dev/null && touch "$WORK/job.sigterm"
    fi
    [ -f "$PROGRESS" ] && guest progress "$(head -c 4000 "$PROGRESS")"
    sleep "${CLOUDFIT_WATCH_S:-10}"
  done
) &
WATCHER=$!
JOB_LOG=$WORK/job.log
PARSER_PID=
if [ -n "$LOG_PARSER" ]; then  # the stack prints its progress: its own parser turns the log into the progress file
  touch "$JOB_LOG"
  "$PY" -m cloudfit.runtime.logprogress --stack "$LOG_PARSER" --log "$JOB_LOG" --progress "$PROGRESS" \
    --total-steps {{TOTAL_STEPS}} --gpus $((NNODES * NPROC)) {{SEQ_LEN_ARG}} --every-s "${CLOUDFIT_WATCH_S:-10}" &
  PARSER_PID=$!
fi
{{STACK_ENV}}

export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 CLOUDFIT_CLUSTER="$CLUSTER" CLOUDFIT_CHECKPOINT_DIR="$CKPT" \
  CLOUDFIT_STOP_FILE="$STOP_FILE" CLOUDFIT_PROGRESS_FILE="$PROGRESS" CLOUDFIT_LOCAL_CHECKPOINT_DIR="$LOCAL_CKPT"
# no key in metadata (a VM not made by `cloudfit launch`): the trainer keeps its own key outside the checkpoints
[ -n "$CKPT_KEY" ] && export CLOUDFIT_CHECKPOINT_KEY="$CKPT_KEY"
# The job, its output also in $JOB_LOG (a stack's progress is parsed from it); exec: its pid is the one a stop
# signals (a job that does not read the stop file gets SIGTERM).
run_job() {
  if [ "$LAUNCH_MODE" = direct ]; then  # the command launches its own ranks (accelerate launch, torchrun …)
    export NNODES NPROC NODE_RANK MASTER_ADDR="$MASTER" MASTER_PORT=29400
    exec {{DIRECT_ENTRY}}
  fi
  exec "$PY" -m cloudfit.runtime.torchrun --nnodes="$NNODES" --nproc-per-node="$NPROC" --rdzv-backend=c10d \
    --rdzv-endpoint="$MASTER:29400" --rdzv-id="$CLUSTER" --rdzv-conf=join_timeout=900 --max-restarts=3 \
    {{ENTRY}}
}
guest state running
code=1
# A preempted peer makes torchrun fail here; it is recreated by the launcher, so try again and
# meet it at the rendezvous (the job resumes from the newest checkpoint).
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  run_job > >(tee -a "$JOB_LOG") 2>&1 &
  echo $! > "$WORK/job.pid"
  wait "$(cat "$WORK/job.pid")"
  code=$?
  [ "$code" -eq 0 ] && break
  [ "$code" -eq 2 ] && break  # a rank refused its input (a checkpoint that does not verify): final
  [ -f "$STOP_FILE" ] && break
  sleep 20
done
if [ "$code" -eq 0 ]; then
  state=completed
  grep -q '"state": "stopped"' "$PROGRESS" 2>/dev/null && state=stopped
  [ -n "$LOG_PARSER" ] && [ -f "$STOP_FILE" ] && state=stopped
  [ -f "$PROGRESS" ] && guest progress "$(head -c 4000 "$PROGRESS")"
  guest state "$state"
elif [ "$code" -eq 2 ]; then
  guest exit_code "$code"
  guest error "$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("error", ""))' "$PROGRESS" 2>/dev/null \
    || echo "a rank refused its input (exit 2)")"
  guest state refused
else
  guest exit_code "$code"
  guest state failed
fi
if [ -n "$PARSER_PID" ]; then  # the log's last lines into the progress file, then the parser goes
  sleep 1; kill "$PARSER_PID" 2>/dev/null
  "$PY" -m cloudfit.runtime.logprogress --stack "$LOG_PARSER" --log "$JOB_LOG" --progress "$PROGRESS" \
    --total-steps {{TOTAL_STEPS}} --gpus $((NNODES * NPROC)) {{SEQ_LEN_ARG}} --once || true
  [ -f "$PROGRESS" ] && guest progress "$(head -c 4000 "$PROGRESS")"
fi
kill "$WATCHER" 2>/dev/null
# Give the launcher time to read the result; then stop billing even if nobody is watching.
sleep "${CLOUDFIT_LINGER_S:-120}"
end_vm
exit "$code"
