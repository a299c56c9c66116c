#!/usr/bin/env bash
# One command for the day a GPU is lent: the primitive benchmarks and one timed
# update of each experiment's paper preset, every output in one folder, within
# 10 minutes. On the device machine:
#
#   bash scripts/bench/gpu.sh "$OUT"          # a GPU: paper shapes
#   bash scripts/bench/gpu.sh --cpu /tmp/b    # this script's own check on a CPU: tiny shapes
#
# Each benchmark runs under its own time limit, so one slow or failing part
# leaves the others' files; summary.txt lists what each exited with.
# The primitives' tables have a floor column: a jitted copy of the same bytes
# in and out, so floor / ours is the fraction of copy bandwidth ours reaches.
set -uo pipefail
cd "$(dirname "$0")/../.."

cpu=0
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
out=${1:?usage: gpu.sh [--cpu] OUT_DIR}
mkdir -p "$out"

if [ ! -d .venv ]; then
  python3 -m venv .venv && . .venv/bin/activate && pip install -q -r requirements.txt
  if [ "$cpu" = 0 ]; then
    pip install -q "jax[cuda12]==$(python -c 'import jax; print(jax.__version__)')"
  fi
else
  . .venv/bin/activate
fi

if [ "$cpu" = 1 ]; then
  norm_shapes=8x400,128x1000; reps=3; rnn_shapes=short; hw=cpu; skip=smoke; limit=120
else
  norm_shapes=8x400,128x1000,8x1600,4096x1024,32x25088; reps=30; rnn_shapes=short,handwriting,draw
  hw=paper; skip=paper; limit=150
fi

run() {  # run NAME LIMIT_S COMMAND...: stdout and stderr to NAME.txt
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" > "$out/$name.txt" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s: $*" | tee -a "$out/summary.txt"
}

: > "$out/summary.txt"
python -c 'import jax; print(jax.devices())' > "$out/devices.txt" 2>&1
run layer_norm "$limit" python -m scripts.bench.norm --shapes "$norm_shapes" --repeats "$reps"
run rms_norm "$limit" python -m scripts.bench.norm --norm rms --shapes "$norm_shapes" --repeats "$reps"
run lstm "$limit" python -m scripts.bench.rnn --shapes "$rnn_shapes" --repeats "$reps" \
    --candidates "LSTM(none),LSTM(layer)" --no-check
run pi_mnist_epoch "$limit" python -m scripts.bench.epoch --norms none,layer --repeats 2 \
    --examples $((cpu ? 640 : 6400))
run handwriting_update "$limit" python -m scripts.bench.handwriting --shapes "$hw" --repeats 2
run skipthoughts_update "$limit" python -m scripts.bench.skipthoughts --preset "$skip" --repeats 2
echo "results in $out"
