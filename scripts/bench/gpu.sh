#!/usr/bin/env bash
# One command for the day a GPU is lent: the primitive benchmarks and one timed
# update of each experiment's paper preset, every output in one folder, within
# 10 minutes. On the device machine:
#
#   bash scripts/bench/gpu.sh "$OUT"          # a GPU: paper shapes
#   bash scripts/bench/gpu.sh --cpu /tmp/b    # this script's own check on a CPU: tiny shapes
#
# The device machine fetches nothing: it runs its own python3 (JAX, Flax, optax,
# orbax, torch there) and installs what that lacks (ml-collections, tensorboardX)
# from wheels carried in .whl/, made here beforehand with
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       -d .whl ml-collections==1.1.0 tensorboardX==2.6.5
# (and `echo /.whl/ >> .git/info/exclude`, then carry .whl). Every benchmark
# makes its own random data: nothing reads ../shared/data.
#
# Each benchmark runs under its own time limit (8 of them: about 9.5 minutes in
# all at most), so one slow or failing part leaves the others' files;
# summary.txt lists what each exited with.
# The primitives' tables have a floor column: a jitted copy of the same bytes
# in and out, so floor / ours is the fraction of copy bandwidth ours reaches.
set -uo pipefail
cd "$(dirname "$0")/../.."

cpu=0
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; fi
out=${1:?usage: gpu.sh [--cpu] OUT_DIR}
mkdir -p "$out"

if [ -d .venv ]; then
  . .venv/bin/activate
elif [ -d .whl ]; then
  python3 -m pip install -q --no-index --find-links .whl ml-collections tensorboardX \
      > "$out/pip.txt" 2>&1 || echo "pip: carried wheels did not install (see pip.txt)"
fi
python3 -c 'import ml_collections, flax, optax, orbax.checkpoint' 2> "$out/imports.txt" \
    || echo "imports: a package is missing (imports.txt); the benchmarks that need it fail"

if [ "$cpu" = 1 ]; then
  norm_shapes=8x400,128x1000; reps=3; rnn_shapes=short; hw=cpu; preset=smoke; limit=120
  tf_layers=2
else
  norm_shapes=8x400,128x1000,8x1600,4096x1024,32x25088; reps=30; rnn_shapes=short,handwriting,draw
  hw=paper; preset=paper; limit=70; tf_layers=12,2
fi

run() {  # run NAME LIMIT_S PYTHON_ARGS...: python3's stdout and stderr to NAME.txt
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" python3 "$@" > "$out/$name.txt" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s: python3 $*" | tee -a "$out/summary.txt"
}

: > "$out/summary.txt"
python3 -c 'import jax; print(jax.devices())' > "$out/devices.txt" 2>&1
run layer_norm "$limit" -m scripts.bench.norm --shapes "$norm_shapes" --repeats "$reps"
run rms_norm "$limit" -m scripts.bench.norm --norm rms --shapes "$norm_shapes" --repeats "$reps"
run lstm "$limit" -m scripts.bench.rnn --shapes "$rnn_shapes" --repeats "$reps" \
    --candidates "LSTM(none),LSTM(layer)" --no-check
run pi_mnist_epoch "$limit" -m scripts.bench.epoch --norms none,layer --repeats 2 \
    --examples $((cpu ? 640 : 6400))
run handwriting_update "$limit" -m scripts.bench.handwriting --shapes "$hw" --repeats 2
run skipthoughts_update "$limit" -m scripts.bench.skipthoughts --preset "$preset" --repeats 2
run order_embeddings_update "$limit" -m scripts.bench.order_embeddings --preset "$preset" \
    --repeats 2
run transformer_update "$limit" -m scripts.bench.transformer --preset "$preset" \
    --layers "$tf_layers" --repeats 2 --sample_s 1
echo "results in $out"
