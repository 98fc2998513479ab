#!/usr/bin/env bash
# The GPU measurements of issue "Feed a real accelerator", in one lent-machine call.
#
# Prepare here (../shared/device/README.md): ../shared/device/pack-tensorflow.sh, then send
# each .device/part-NN in its own `run` (carry [".device/part-NN"], command
# `mkdir -p /tmp/tfinput-device/chunks && cp .device/part-NN/* /tmp/tfinput-device/chunks/`),
# then this script: `run` with carry [".device/bin", ".device/setup-on-device.sh"] and
# command `bash benchmarks/device.sh`.
#
# Each phase is time-bounded (the lent machine's minutes are few) and writes under $OUT as
# it goes, so a phase cut short still returns what the earlier ones measured:
#   feed-gpu.md / results-feed-gpu.json  benchmarks/feed.py on the GPU (step bound and fed
#                                        rates per layout and steps_per_execution; transfer)
#   tune-FMT.log, tune-FMT/result.json   `tfinput tune --step ranking_fit` against the GPU step,
#                                        for each format in TUNE_SOURCES
#   jax-profile-gpu.md                   benchmarks/jax_profile.py: the device compute per step
#                                        read from JAX's trace vs the tuner's step bound
#   traces/batchN-0.xplane.pb            JAX's trace of each batch size's first round (to read
#                                        again offline)
#   profile-gpu.txt                      `tfinput profile --demo --step ranking`'s report
#   read-batch.md                        benchmarks/read_batch.py: read_batch against
#                                        read_batch=0 on TFRecord, on the 16 host cores
#   sparsecore-loaders-T.md              benchmarks/sparsecore_loaders.py --threads T for
#                                        each T in LOADER_THREADS: the feed against keras-rs's
#                                        MLPerf loader (issue 51, point 1); skipped without
#                                        jax-tpu-embedding (0.2 ships cp313 wheels only:
#                                        carry its wheel and a Python 3.13 if the image has one)
#   log.txt                              everything else (setup, versions, timings)
set -uo pipefail
OUT=${OUT:-/tmp/tfinput-device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 KERAS_BACKEND=jax
ROWS=${ROWS:-200000}
FEED_S=${FEED_S:-240}       # bound on the feed benchmark (new rounds stop at FEED_S - 90)
TUNE_S=${TUNE_S:-150}       # bound on each tune (search at most TUNE_S / 3)
SKIP_FEED=${SKIP_FEED:-}    # non-empty: skip the feed benchmark (the data is still written)
TUNE_SOURCES=${TUNE_SOURCES-tfrecord}  # tune against each of these formats in turn (empty: no tune)
TUNE_FIX=${TUNE_FIX:-}      # e.g. cache=false: --fix for every tune
PROFILE_S=${PROFILE_S:-150} # bound on the JAX profile benchmark and the profile report
PROFILE_BATCHES=${PROFILE_BATCHES:-4096}  # batch sizes for the JAX profile benchmark (commas)
READ_BATCH_S=${READ_BATCH_S:-240}  # bound on the read_batch benchmark (empty: skip)
LOADERS_S=${LOADERS_S:-180}        # bound on each SparseCore loaders run
LOADER_THREADS=${LOADER_THREADS-2 8}  # thread counts of the SparseCore loaders runs (empty: skip)
t0=$(date +%s)
stamp() { echo "[device.sh +$(($(date +%s) - t0))s] $*"; }

stamp "unpacking TensorFlow"
. .device/setup-on-device.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
python3 -c 'import jax, keras, tensorflow as tf; print("jax", jax.__version__, jax.devices(), "| keras", keras.__version__, keras.config.backend(), "| tf", tf.__version__)' \
  || { stamp "no TensorFlow/JAX here: stopping"; exit 1; }

if [ -n "$SKIP_FEED" ] && [ -z "$TUNE_SOURCES" ]; then
  stamp "feed benchmark and tune skipped (jax_profile.py writes its own data)"
elif [ -n "$SKIP_FEED" ]; then
  stamp "writing the data (feed benchmark skipped)"
  python3 -c "import sys; sys.path.insert(0, '.'); from pathlib import Path
from benchmarks.core import data; from benchmarks.columnar import columnar_data
s, t, p = data(Path('benchmarks/.data'), $ROWS); columnar_data(Path('benchmarks/.data'), $ROWS, p)"
else
stamp "feed benchmark (data generated first)"
timeout "$FEED_S" python3 benchmarks/feed.py --rows "$ROWS" --step-batch 4096 --rounds 3 \
  --deadline-s $((FEED_S - 90)) > "$OUT/feed-gpu.md"
stamp "feed exit $?"
cp benchmarks/results-feed-gpu.json "$OUT/" 2>/dev/null
fi

data=benchmarks/.data/criteo-$ROWS
stamp "JAX profile vs step bound on the GPU"
timeout "$PROFILE_S" python3 benchmarks/jax_profile.py --rows "$ROWS" \
  --batch-size "$PROFILE_BATCHES" --rounds 3 --keep-traces "$OUT/traces" > "$OUT/jax-profile-gpu.md"
stamp "jax profile exit $?"
echo '{"batch_size": 4096}' > /tmp/profile-config.json
timeout "$PROFILE_S" python3 -c 'import sys; from tfinput.cli import main; sys.exit(main())' \
  profile --demo --config /tmp/profile-config.json --step ranking --steps 10 --warmup 5 \
  --logdir /tmp/profile-gpu > "$OUT/profile-gpu.txt" 2>&1
stamp "profile exit $?"
python3 -c "from tfinput import testing; testing.criteo_like_schema().to_json('/tmp/schema.json')"
fix=(); for f in $TUNE_FIX; do fix+=(--fix "$f"); done
for fmt in $TUNE_SOURCES; do
  stamp "tune against the GPU step: $fmt ${TUNE_FIX:+(fixed: $TUNE_FIX)}"
  schema=(); [ "$fmt" = columnar ] || schema=(--schema /tmp/schema.json)
  timeout "$TUNE_S" python3 -c 'import sys; from tfinput.cli import main; sys.exit(main())' tune \
    "$data/$fmt" "${schema[@]}" --step ranking_fit --batch-size 4096 "${fix[@]}" \
    --n-trials 24 --timeout $((TUNE_S / 3)) --confirm-windows 3 --out "/tmp/tune-$fmt" \
    > "$OUT/tune-$fmt.log" 2>&1
  stamp "tune $fmt exit $?"
  mkdir -p "$OUT/tune-$fmt"
  cp "/tmp/tune-$fmt/result.json" "$OUT/tune-$fmt/" 2>/dev/null
done
if [ -n "$READ_BATCH_S" ]; then
  stamp "read_batch against read_batch=0 on TFRecord"
  timeout "$READ_BATCH_S" python3 benchmarks/read_batch.py --rows "$ROWS" --rounds 3 \
    > "$OUT/read-batch.md"
  stamp "read_batch exit $?"
fi
if [ -n "$LOADER_THREADS" ] && python3 -c 'import jax_tpu_embedding' 2>/dev/null; then
  for threads in $LOADER_THREADS; do
    stamp "SparseCore feed against the MLPerf loader, $threads threads"
    timeout "$LOADERS_S" python3 benchmarks/sparsecore_loaders.py --threads "$threads" \
      --rounds 3 > "$OUT/sparsecore-loaders-$threads.md"
    stamp "sparsecore loaders exit $?"
  done
elif [ -n "$LOADER_THREADS" ]; then
  stamp "SparseCore loaders skipped: jax-tpu-embedding does not import here"
fi
stamp "done"
