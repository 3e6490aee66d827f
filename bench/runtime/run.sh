#!/usr/bin/env bash
# Runtime benchmarks: acp-rpc vs the official `agent-client-protocol` 5.2.0 SDK, side by
# side in one run (alternating, RUNS repetitions, medians). Prints markdown on stdout; progress
# and the raw result lines go to stderr. See BENCHMARKS.md ("## Runtime").
#
#   CARGO_TARGET_DIR=/work/target-benchrt bench/runtime/run.sh [all|v1|v2]
#
# The argument picks the protocol: v1 (throughput, RSS, round trip, cancel), v2 (throughput
# and RSS of a prompt turn, `session/list` round trip; about 1 minute), or all (the default).
# Options (environment): RUNS (5), N_SMALL (10000), N_MID (100000), N_BIG (1000000),
# V2_NS (the v2 pipe sizes: "$N_SMALL $N_MID"; the official SDK takes about a minute per 1M),
# RTT_N (10000), CANCEL_N (1000), CANCEL_IGNORE_N (50; each takes the 100 ms grace),
# OFFICIAL_YIELD_EVERY (1; see src/official.rs), RESULTS (keep the raw lines in this file).
set -euo pipefail

mode="${1:-all}"
case "$mode" in
all | v1 | v2) ;;
*)
    echo "usage: $0 [all|v1|v2]" >&2
    exit 2
    ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
RUNS="${RUNS:-5}"
N_SMALL="${N_SMALL:-10000}"
N_MID="${N_MID:-100000}"
N_BIG="${N_BIG:-1000000}"
RTT_N="${RTT_N:-10000}"
CANCEL_N="${CANCEL_N:-1000}"
CANCEL_IGNORE_N="${CANCEL_IGNORE_N:-50}"
V2_NS="${V2_NS:-$N_SMALL $N_MID}"

# Not --locked: the path dependencies follow the working tree (their own dependencies may
# change); the registry crates stay pinned by Cargo.lock.
cargo build --release >&2
bin="$CARGO_TARGET_DIR/release/acp-rpc-bench"
results="${RESULTS:-$(mktemp)}"
: >"$results"

one() {
    local line
    line="$(timeout 900 "$bin" "$@")"
    printf '%s\n' "$line" | tee -a "$results" >&2
}

v1() {
    local rep=$1 order corder n rt impl
    # Alternate which implementation goes first, so neither always runs on a warmer machine.
    if ((rep % 2)); then order=(ours official); else order=(official ours); fi
    for n in "$N_SMALL" "$N_MID" "$N_BIG"; do
        for impl in "${order[@]}" raw; do one pipe --impl "$impl" --n "$n"; done
    done
    # In-memory latencies on both tokio runtimes (multi-thread, then current-thread).
    for rt in multi_thread current_thread; do
        export BENCH_RUNTIME="$rt"
        for impl in "${order[@]}" official-channel raw; do one rtt --impl "$impl" --n "$RTT_N"; done
        if [[ $rt == multi_thread ]]; then
            # The same with the caller in a worker task instead of the main thread's block_on.
            for impl in "${order[@]}" raw; do BENCH_CALLER=task one rtt --impl "$impl" --n "$RTT_N"; done
        fi
        if ((rep % 2)); then corder=(ours-coop official); else corder=(official ours-coop); fi
        for impl in "${corder[@]}" ours-ignore-grace0 ours-typed-ignore; do one cancel --impl "$impl" --n "$CANCEL_N"; done
    done
    export BENCH_RUNTIME=multi_thread
    one cancel --impl ours-ignore --n "$CANCEL_IGNORE_N"
}

v2() {
    local rep=$1 order n rt impl
    if ((rep % 2)); then order=(ours official); else order=(official ours); fi
    for n in $V2_NS; do
        # ours-raw-client: our v2 agent, with the v1 measurement's kind of client (a raw Handler).
        for impl in "${order[@]}" ours-raw-client raw; do one pipe2 --impl "$impl" --n "$n"; done
    done
    for rt in multi_thread current_thread; do
        export BENCH_RUNTIME="$rt"
        for impl in "${order[@]}" raw; do one rtt2 --impl "$impl" --n "$RTT_N"; done
        if [[ $rt == multi_thread ]]; then
            for impl in "${order[@]}" raw; do BENCH_CALLER=task one rtt2 --impl "$impl" --n "$RTT_N"; done
        fi
    done
    export BENCH_RUNTIME=multi_thread
}

for ((rep = 1; rep <= RUNS; rep++)); do
    echo "--- repetition $rep/$RUNS (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    if [[ $mode != v2 ]]; then v1 "$rep"; fi
    if [[ $mode != v1 ]]; then v2 "$rep"; fi
done

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
mem="$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "Machine: $cpu, \`nproc\` = $(nproc), $mem RAM, $(rustc --version); mode $mode; $RUNS repetitions;" \
    "load average at the end $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%d)."
echo
"$bin" report "$results"
