#!/usr/bin/env bash
# Issue 4: release build time and binary size of the same 13-handler agent, written with
# `#[acp_agent]` (ours/) and with the official `agent-client-protocol` SDK (official/; the
# version official/Cargo.toml pins, which the report names as Cargo.lock resolved it).
#
#   CARGO_TARGET_DIR=/work/target-benchmacro bench/macros/run.sh
#
# Prints a markdown report on stdout (progress on stderr). Each agent gets its own target dir
# under $CARGO_TARGET_DIR (default /work/target-benchmacro): ours/, official/, and
# strip-ours/, strip-official/ for the `strip = true` build.
#
# Options (environment):
#   RUNS=7          agent-crate-only builds per agent (alternating ours/official), medians
#   SCRATCH_RUNS=2  from-scratch builds per agent (deps included), alternating
#   STRIP=1         also build each agent from scratch with `--profile release-strip`
#                   (= release + strip = true) for the stripped size; 0 skips it
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${CARGO_TARGET_DIR:-/work/target-benchmacro}
RUNS=${RUNS:-7}
SCRATCH_RUNS=${SCRATCH_RUNS:-2}
STRIP=${STRIP:-1}
MANIFEST="$HERE/Cargo.toml"
AGENTS=(ours official)
export CARGO_INCREMENTAL=0 # the release default, made explicit
unset CARGO_PROFILE_RELEASE_STRIP CARGO_PROFILE_RELEASE_DEBUG RUSTFLAGS CARGO_BUILD_RUSTFLAGS

log() { printf '%s\n' "$*" >&2; }
pkg() { echo "bench-macros-$1"; }
bin() { echo "agent-$1"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# cargo build of one agent into $BASE/<dir>; echoes wall ms. Output goes to the log file.
build() { # agent, target subdir, logfile, [cargo args...]
    local agent=$1 dir=$2 logf=$3
    shift 3
    local t0 t1
    t0=$(now_ms)
    CARGO_TARGET_DIR="$BASE/$dir" cargo build --manifest-path "$MANIFEST" --locked --offline \
        -p "$(pkg "$agent")" "$@" >"$logf" 2>&1 || { cat "$logf" >&2; return 1; }
    t1=$(now_ms)
    echo $((t1 - t0))
}

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
minmax() { sort -n | awk 'NR==1{mn=$1} {mx=$1} END {print mn "–" mx}'; }
secs() { awk -v ms="$1" 'BEGIN {printf "%.2f", ms/1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
verdict() { awk -v r="$1" 'BEGIN {print (r <= 0.5) ? "met" : "**not met**"}'; }

LOAD0=$(cut -d" " -f1-3 /proc/loadavg)
SCRATCH=$HERE/scratch
mkdir -p "$SCRATCH" "$BASE"
log "fetching dependencies"
cargo fetch --manifest-path "$MANIFEST" --locked >&2

# ---- (2) from scratch, dependencies included --------------------------------------------------
declare -A FULL=()
for ((r = 1; r <= SCRATCH_RUNS; r++)); do
    for a in "${AGENTS[@]}"; do
        rm -rf "${BASE:?}/$a"
        log "from-scratch build $r/$SCRATCH_RUNS: $a"
        ms=$(build "$a" "$a" "$SCRATCH/full-$a.log" --release)
        FULL[$a]+="$ms "
        log "  $ms ms"
    done
done

# ---- (1) the agent crate alone, dependencies already built ------------------------------------
declare -A CRATE=()
for ((r = 1; r <= RUNS; r++)); do
    # Alternate which agent goes first, so a drift in machine load hits both alike.
    order=("${AGENTS[@]}")
    ((r % 2 == 0)) && order=(official ours)
    for a in "${order[@]}"; do
        CARGO_TARGET_DIR="$BASE/$a" cargo clean --manifest-path "$MANIFEST" --release -p "$(pkg "$a")" \
            >/dev/null 2>&1
        ms=$(build "$a" "$a" "$SCRATCH/crate-$a.log" --release)
        # Exactly one crate (the agent) must have been compiled.
        n=$(grep -c '^ *Compiling ' "$SCRATCH/crate-$a.log" || true)
        [[ $n == 1 ]] || { log "expected 1 crate compiled for $a, got $n"; cat "$SCRATCH/crate-$a.log" >&2; exit 1; }
        CRATE[$a]+="$ms "
        log "agent-crate build $r/$RUNS: $a $ms ms"
    done
done

# ---- (3) sizes ------------------------------------------------------------------------------
declare -A SIZE=() SSIZE=()
for a in "${AGENTS[@]}"; do
    SIZE[$a]=$(stat -c %s "$BASE/$a/release/$(bin "$a")")
    if [[ $STRIP == 1 ]]; then
        rm -rf "${BASE:?}/strip-$a"
        log "release-strip build: $a"
        build "$a" "strip-$a" "$SCRATCH/strip-$a.log" --profile release-strip >/dev/null
        SSIZE[$a]=$(stat -c %s "$BASE/strip-$a/release-strip/$(bin "$a")")
    fi
done

# ---- smoke: each binary answers initialize, and a prompt streams 3 chunks then end_turn ----
smoke() { # agent
    local exe=$1 line i
    coproc AG { "$exe" 2>/dev/null; }
    local in=${AG[1]} out=${AG[0]}
    ask() { printf '%s\n' "$1" >&"$in"; }
    expect() { # pattern: read lines until one matches (3 s per line)
        while IFS= read -r -t 3 line <&"$out"; do
            [[ $line == *$1* ]] && return 0
        done
        log "smoke $exe: no line matching $1"
        return 1
    }
    ask '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}'
    expect '"id":1,"result":{*"protocolVersion":1' # members in any order
    ask '{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}'
    expect '"id":2,"result":{"sessionId":"sess_1"}'
    ask '{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sess_1","prompt":[{"type":"text","text":"hi"}]}}'
    local chunks=0
    for i in 1 2 3 4; do
        IFS= read -r -t 3 line <&"$out" || { log "smoke $exe: prompt timed out"; return 1; }
        [[ $line == *'"sessionUpdate":"agent_message_chunk"'* ]] && chunks=$((chunks + 1))
    done
    [[ $chunks == 3 && $line == *'"id":3,"result":{"stopReason":"end_turn"}'* ]] ||
        { log "smoke $exe: expected 3 chunks then end_turn, got $chunks, last: $line"; return 1; }
    ask '{"jsonrpc":"2.0","id":4,"method":"logout","params":{}}'
    expect '"id":4,"result":{'
    exec {in}>&- # EOF: the agent exits
    wait "$AG_PID"
}
SMOKE=""
for a in "${AGENTS[@]}"; do
    log "smoke: $a"
    smoke "$BASE/$a/release/$(bin "$a")"
    SMOKE+="$a ok; "
done

# ---- report ---------------------------------------------------------------------------------
cm_o=$(tr ' ' '\n' <<<"${CRATE[ours]}" | grep . | median)
cm_f=$(tr ' ' '\n' <<<"${CRATE[official]}" | grep . | median)
fm_o=$(tr ' ' '\n' <<<"${FULL[ours]}" | grep . | median)
fm_f=$(tr ' ' '\n' <<<"${FULL[official]}" | grep . | median)
rng() { tr ' ' '\n' <<<"$1" | grep . | minmax | awk -F'–' '{printf "%.2f–%.2f", $1/1000, $2/1000}'; }

# The official SDK's version as this workspace's lock file resolved it.
official_version=$(grep -A1 '^name = "agent-client-protocol"$' "$HERE/Cargo.lock" | sed -n 's/^version = "\(.*\)"$/\1/p')

cat <<EOF
Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), nproc $(nproc),
$(free -g | awk '/^Mem:/{print $2}') GiB RAM, $(rustc -V), $(cargo -V | cut -d' ' -f1-2); load average (1/5/15 min) at the start: $LOAD0, at the end: $(cut -d" " -f1-3 /proc/loadavg).
Tree: HEAD $(git -C "$HERE" rev-parse --short HEAD)$(git -C "$HERE/../.." status --porcelain -- runtime macros generated | grep -q . && echo ", runtime/macros/generated modified" || echo ", runtime/ macros/ generated/ clean").
Runs: $RUNS agent-crate builds and $SCRATCH_RUNS from-scratch builds per agent. Smoke: ${SMOKE%; }.

| What (default release profile) | ours (\`#[acp_agent]\`) | official SDK $official_version | ours / official | goal ≤ 0.50 |
|---|---:|---:|---:|---|
| Agent crate build, deps built (s, median (min–max)) | $(secs "$cm_o") ($(rng "${CRATE[ours]}")) | $(secs "$cm_f") ($(rng "${CRATE[official]}")) | $(ratio "$cm_o" "$cm_f") | $(verdict "$(ratio "$cm_o" "$cm_f")") |
| From-scratch build incl. deps (s, median (min–max)) | $(secs "$fm_o") ($(rng "${FULL[ours]}")) | $(secs "$fm_f") ($(rng "${FULL[official]}")) | $(ratio "$fm_o" "$fm_f") | $(verdict "$(ratio "$fm_o" "$fm_f")") |
| Binary size (bytes) | ${SIZE[ours]} | ${SIZE[official]} | $(ratio "${SIZE[ours]}" "${SIZE[official]}") | $(verdict "$(ratio "${SIZE[ours]}" "${SIZE[official]}")") |
EOF
if [[ $STRIP == 1 ]]; then
    echo "| Binary size, \`strip = true\` (bytes) | ${SSIZE[ours]} | ${SSIZE[official]} | $(ratio "${SSIZE[ours]}" "${SSIZE[official]}") | $(verdict "$(ratio "${SSIZE[ours]}" "${SSIZE[official]}")") |"
fi
