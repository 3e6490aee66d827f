#!/usr/bin/env bash
# Remote-transport benchmarks (issue 13): acp-rpc's HTTP/WebSocket server against the
# official Rust server (`agent-client-protocol-http` 5.0.0) and the official
# TypeScript server (npm `@agentclientprotocol/sdk` 2.4.0), side by side in one run
# (alternating, RUNS repetitions, medians). Prints markdown on stdout; progress and the raw
# result lines go to stderr. See BENCHMARKS.md ("## Remote transport (issue 13)").
#
#   CARGO_TARGET_DIR=/work/target-httpbench bench/http/run.sh [all|throughput|conns|slow]
#
# throughput: `session/update` throughput of one prompt turn to one client, over WebSocket and
#   over SSE, from each server to each client (a raw frame reader, acp-rpc's client, the
#   official Rust client).
# conns: CONNS WebSocket connections, each initialized with a session, on one server process:
#   the server's RSS per idle connection, then the prompt round trip while STREAMERS of them
#   stream (once per pace in PAUSES).
# slow: the slow-client run (issue 32, not part of `all`): SILENT silent sockets and SLOWLORIS
#   sockets sending a head a byte a second, then CLIENTS honest WebSocket clients each run a
#   turn; our server with its default socket limit (4096), the official Rust one as it is.
# Options (environment): RUNS (5), N (100000 updates per timed turn), CONNS (10000),
# OFFICIAL_CONNS (CONNS), TS_CONNS (CONNS), STREAMERS (1000), PROBES (20), SAMPLES (2000),
# PAUSES (µs between a streamer's updates, one phase each: "50000,0"), PER_PROMPT (100),
# SOURCES (4 source addresses 127.0.0.x), TS (1: include the TypeScript server, installed by
# `npm ci` from ts/package-lock.json; needs node and npm), RESULTS (keep the raw lines here),
# BEFORE_BIN (an acp-http-bench binary built from an older tree: its `server --impl ours` runs
# as the server "before" beside the others, for an A/B in the same run; its own client code is
# not used), SILENT (4096), SLOWLORIS (1000), CLIENTS (100).
set -euo pipefail

mode="${1:-all}"
case "$mode" in
all | throughput | conns | slow) ;;
*)
    echo "usage: $0 [all|throughput|conns|slow]" >&2
    exit 2
    ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
RUNS="${RUNS:-5}"
N="${N:-100000}"
CONNS="${CONNS:-10000}"
OFFICIAL_CONNS="${OFFICIAL_CONNS:-$CONNS}"
TS_CONNS="${TS_CONNS:-$CONNS}"
STREAMERS="${STREAMERS:-1000}"
PROBES="${PROBES:-20}"
SAMPLES="${SAMPLES:-2000}"
PAUSES="${PAUSES:-50000,0}"
PER_PROMPT="${PER_PROMPT:-100}"
SOURCES="${SOURCES:-4}"
TS="${TS:-1}"
BEFORE_BIN="${BEFORE_BIN:-}"
SILENT="${SILENT:-4096}"
SLOWLORIS="${SLOWLORIS:-1000}"
CLIENTS="${CLIENTS:-100}"

# Each connection is a socket in the server and one in the load generator: raise the soft
# open-file limit of this shell (inherited by both) to the hard one. Done here, not in the
# library.
need=$((CONNS + 256))
if [[ $mode == slow ]]; then need=$((SILENT + SLOWLORIS + CLIENTS + 256)); fi
ulimit -n "$(ulimit -Hn)"
if (($(ulimit -n) < need)); then
    echo "the open-file limit is $(ulimit -n) (hard); $need are needed for CONNS=$CONNS" >&2
    exit 1
fi

# --locked: the official crates (and every other registry crate) exactly as Cargo.lock pins
# them. The lock also records the path crates' own dependencies: when acp-rpc's change,
# refresh it with `cargo update -p acp-rpc --manifest-path bench/http/Cargo.toml`.
if ! cargo build --release --locked >&2; then
    echo "build failed; if Cargo.lock is out of date after a change to acp-rpc's dependencies:" \
        "cargo update -p acp-rpc --manifest-path bench/http/Cargo.toml" >&2
    exit 1
fi
bin="$CARGO_TARGET_DIR/release/acp-http-bench"
if [[ $TS == 1 ]]; then
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        echo "node/npm not found: the TypeScript server is left out (TS=0)" >&2
        TS=0
    elif [[ ! -f ts/node_modules/@agentclientprotocol/sdk/package.json ]]; then
        (cd ts && npm ci --no-audit --no-fund >&2)
    fi
fi
results="${RESULTS:-$(mktemp)}"
: >"$results"

declare -A server_pid server_port

# The servers of one repetition, in the order given by its number (so none always runs on a
# warmer machine): ours and official alternate, "before" (BEFORE_BIN) goes beside ours.
servers_of() {
    local rep=$1 first=(ours)
    if [[ -n $BEFORE_BIN ]]; then
        if (((rep / 2) % 2)); then first=(before ours); else first=(ours before); fi
    fi
    if ((rep % 2)); then servers=("${first[@]}" official); else servers=(official "${first[@]}"); fi
    if [[ $TS == 1 && $mode != slow ]]; then servers+=(ts); fi
}

# Starts a server (ours, before, official, ts) on a free port of 127.0.0.1; extra arguments go
# to our server.
start_server() {
    local impl=$1 out
    shift
    out="$(mktemp)"
    if [[ $impl == ts ]]; then
        (cd ts && PORT=0 exec node server.mjs) >"$out" 2>&1 &
    elif [[ $impl == before ]]; then
        "$BEFORE_BIN" server --impl ours >"$out" 2>&1 &
    elif [[ $impl == ours ]]; then
        "$bin" server --impl ours "$@" >"$out" 2>&1 &
    else
        "$bin" server --impl "$impl" >"$out" 2>&1 &
    fi
    server_pid[$impl]=$!
    for _ in $(seq 100); do
        if grep -q LISTENING "$out"; then break; fi
        sleep 0.1
    done
    server_port[$impl]="$(awk '/LISTENING/ {print $2}' "$out")"
    rm -f "$out"
    if [[ -z ${server_port[$impl]} ]]; then
        echo "the $impl server did not start" >&2
        exit 1
    fi
}

stop_server() {
    local impl=$1
    kill "${server_pid[$impl]}" 2>/dev/null || true
    wait "${server_pid[$impl]}" 2>/dev/null || true
}

one() {
    local line
    if line="$(timeout 300 "$@")"; then
        if [[ -n $line ]]; then printf '%s\n' "$line" | tee -a "$results" >&2; fi
    else
        echo "failed ($?): $*" >&2
        if [[ -n $line ]]; then printf '%s\n' "$line" | tee -a "$results" >&2; fi
    fi
}

throughput() {
    local rep=$1 servers impl client scheme
    servers_of "$rep"
    for impl in "${servers[@]}"; do start_server "$impl"; done
    for client in raw ours official; do
        for scheme in ws http; do
            for impl in "${servers[@]}"; do
                one "$bin" throughput --client "$client" --url "$scheme://127.0.0.1:${server_port[$impl]}/acp" \
                    --n "$N" --label "$impl" --pid "${server_pid[$impl]}"
            done
        done
    done
    for impl in "${servers[@]}"; do stop_server "$impl"; done
}

conns() {
    local rep=$1 servers impl n
    servers_of "$rep"
    for impl in "${servers[@]}"; do
        n=$CONNS
        if [[ $impl == official ]]; then n=$OFFICIAL_CONNS; fi
        if [[ $impl == ts ]]; then n=$TS_CONNS; fi
        start_server "$impl"
        one "$bin" load --url "ws://127.0.0.1:${server_port[$impl]}/acp" --pid "${server_pid[$impl]}" --n "$n" \
            --streamers "$STREAMERS" --probes "$PROBES" --samples "$SAMPLES" --pause-us "$PAUSES" \
            --per-prompt "$PER_PROMPT" --sources "$SOURCES" --label "$impl"
        stop_server "$impl"
        # Let the closed sockets go before the next server.
        sleep 2
    done
}

# The older build ("before") has no socket limit to pass: it had none.
slow() {
    local rep=$1 servers impl
    servers_of "$rep"
    for impl in "${servers[@]}"; do
        start_server "$impl" --max-sockets 4096
        one "$bin" slow --url "ws://127.0.0.1:${server_port[$impl]}/acp" --silent "$SILENT" \
            --slowloris "$SLOWLORIS" --clients "$CLIENTS" --label "$impl"
        stop_server "$impl"
        sleep 2
    done
}

for ((rep = 1; rep <= RUNS; rep++)); do
    echo "--- repetition $rep/$RUNS (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    if [[ $mode == slow ]]; then
        slow "$rep"
        continue
    fi
    if [[ $mode != conns ]]; then throughput "$rep"; fi
    if [[ $mode != throughput ]]; then conns "$rep"; fi
done

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
mem="$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
node_version="$(command -v node >/dev/null && node --version || echo none)"
echo "Machine: $cpu, \`nproc\` = $(nproc), $mem RAM, $(rustc --version), node $node_version; mode $mode;" \
    "$RUNS repetitions; load average at the end $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%d)."
echo
"$bin" report "$results"
