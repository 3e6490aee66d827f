#!/usr/bin/env bash
# The cost of a proxy's lossless views (acp_types::lossless) against plain decoding and
# encoding, per message, in ns/op. Prints a markdown table on stdout. See BENCHMARKS.md
# ("## Proxies: lossless edits (issue 14)").
#
#   CARGO_TARGET_DIR=/work/target-lossless bench/lossless/run.sh
#
# Options (environment): REPS (9 interleaved repetitions; the table shows medians),
# ITERS (20000 operations per measurement).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
cargo build --release >&2
"$CARGO_TARGET_DIR/release/acp-lossless-bench" "${REPS:-9}" "${ITERS:-20000}"
