#!/usr/bin/env bash
# The decoding cost of acp-types' `float_roundtrip` (serde_json's exact float parsing): the
# bench built with and without it, run alternately, each line the median of its repetitions.
# See BENCHMARKS.md ("acp-types: what exact floats cost").
#
#   CARGO_TARGET_DIR=/work/target-floats bench/floats/run.sh
#
# Options (environment): ROUNDS (3 alternations of the two builds), REPS (9), ITERS (20000).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
base="${CARGO_TARGET_DIR:-$here/target}"
CARGO_TARGET_DIR="$base/plain" cargo build -q --release >&2
CARGO_TARGET_DIR="$base/exact" cargo build -q --release --features float_roundtrip >&2
for ((round = 1; round <= ${ROUNDS:-3}; round++)); do
    for build in plain exact; do
        "$base/$build/release/acp-floats-bench" "${REPS:-9}" "${ITERS:-20000}"
    done
done
