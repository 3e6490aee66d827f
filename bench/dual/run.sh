#!/usr/bin/env bash
# Issue 12: the cost of serving protocol v1 and v2 from one binary. The demo agent
# (runtime/examples/agent.rs) built from the same sources as v1 only, as v1 + v2 with its
# native v2 agent (`--features unstable_protocol_v2`), and as v1 + v2 with v2 served by its v1
# agent through the bridge (`--features unstable_v2_bridge`): release build time (from
# scratch, and the agent crate alone) and binary size, with the ratios to v1 (goal < 1.3x).
#
#   bench/dual/run.sh
#
# Prints a markdown report on stdout (progress on stderr). Target dirs under $CARGO_TARGET_DIR
# (default /work/target-benchdual): v1/, dual/, bridged/, and strip-v1/, strip-dual/, strip-bridged/.
#
# Options (environment):
#   RUNS=5          agent-crate-only builds per variant (alternating), medians
#   SCRATCH_RUNS=2  from-scratch builds per variant (dependencies included), alternating
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${CARGO_TARGET_DIR:-/work/target-benchdual}
RUNS=${RUNS:-5}
SCRATCH_RUNS=${SCRATCH_RUNS:-2}
MANIFEST="$HERE/Cargo.toml"
VARIANTS=(v1 dual bridged)
export CARGO_INCREMENTAL=0
unset CARGO_PROFILE_RELEASE_STRIP CARGO_PROFILE_RELEASE_DEBUG RUSTFLAGS CARGO_BUILD_RUSTFLAGS

log() { printf '%s\n' "$*" >&2; }
features() {
    case $1 in
    dual) echo "--features=unstable_protocol_v2" ;;
    bridged) echo "--features=unstable_v2_bridge" ;;
    *) echo "--features=" ;;
    esac
}
# The variants in an order that changes with the round, so none is always first.
rotated() { local r=$1 n=${#VARIANTS[@]} i; for ((i = 0; i < n; i++)); do echo "${VARIANTS[$(((i + r) % n))]}"; done; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
minmax() { sort -n | awk 'NR==1{mn=$1} {mx=$1} END {print mn "–" mx}'; }
secs() { awk -v ms="$1" 'BEGIN {printf "%.2f", ms/1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
verdict() { awk -v r="$1" 'BEGIN {print (r < 1.3) ? "met" : "**not met**"}'; }

build() { # variant, target subdir, logfile, [cargo args...]; echoes wall ms
    local v=$1 dir=$2 logf=$3
    shift 3
    local t0 t1
    t0=$(now_ms)
    CARGO_TARGET_DIR="$BASE/$dir" cargo build --manifest-path "$MANIFEST" --locked --offline \
        "$(features "$v")" "$@" >"$logf" 2>&1 || { cat "$logf" >&2; return 1; }
    t1=$(now_ms)
    echo $((t1 - t0))
}

LOAD0=$(cut -d" " -f1-3 /proc/loadavg)
SCRATCH=$HERE/scratch
mkdir -p "$SCRATCH" "$BASE"
log "fetching dependencies"
cargo fetch --manifest-path "$MANIFEST" --locked >&2

declare -A FULL=() CRATE=() SIZE=() SSIZE=()
for ((r = 1; r <= SCRATCH_RUNS; r++)); do
    mapfile -t order < <(rotated "$r")
    for v in "${order[@]}"; do
        rm -rf "${BASE:?}/$v"
        log "from-scratch build $r/$SCRATCH_RUNS: $v"
        ms=$(build "$v" "$v" "$SCRATCH/full-$v.log" --release)
        FULL[$v]+="$ms "
        log "  $ms ms"
    done
done

for ((r = 1; r <= RUNS; r++)); do
    mapfile -t order < <(rotated "$r")
    for v in "${order[@]}"; do
        CARGO_TARGET_DIR="$BASE/$v" cargo clean --manifest-path "$MANIFEST" --release -p bench-dual-agent \
            >/dev/null 2>&1
        ms=$(build "$v" "$v" "$SCRATCH/crate-$v.log" --release)
        n=$(grep -c '^ *Compiling ' "$SCRATCH/crate-$v.log" || true)
        [[ $n == 1 ]] || { log "expected 1 crate compiled for $v, got $n"; cat "$SCRATCH/crate-$v.log" >&2; exit 1; }
        CRATE[$v]+="$ms "
        log "agent-crate build $r/$RUNS: $v $ms ms"
    done
done

for v in "${VARIANTS[@]}"; do
    SIZE[$v]=$(stat -c %s "$BASE/$v/release/demo-agent")
    rm -rf "${BASE:?}/strip-$v"
    log "release-strip build: $v"
    build "$v" "strip-$v" "$SCRATCH/strip-$v.log" --profile release-strip >/dev/null
    SSIZE[$v]=$(stat -c %s "$BASE/strip-$v/release-strip/demo-agent")
done

# ---- smoke: asked for 2, the v1 build answers 1 and the two others 2 --------------------------
smoke() { # exe, expected version
    local exe=$1 want=$2 line
    line=$(printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":2,"info":{"name":"smoke","version":"1"},"capabilities":{},"clientCapabilities":{}}}' |
        timeout 5 "$exe" 2>/dev/null | head -n 1)
    [[ $line == *'"protocolVersion":'$want* ]] || { log "smoke $exe: expected protocolVersion $want, got: $line"; return 1; }
}
smoke "$BASE/v1/release/demo-agent" 1
smoke "$BASE/dual/release/demo-agent" 2
smoke "$BASE/bridged/release/demo-agent" 2
log "smoke: v1 answers 1, dual and bridged answer 2"

fm() { tr ' ' '\n' <<<"${FULL[$1]}" | grep . | median; }
cm() { tr ' ' '\n' <<<"${CRATE[$1]}" | grep . | median; }
cr() { tr ' ' '\n' <<<"${CRATE[$1]}" | grep . | minmax; }
fr() { tr ' ' '\n' <<<"${FULL[$1]}" | grep . | minmax; }
both() { # v1 figure, dual figure, bridged figure
    local rd rb
    rd=$(ratio "$2" "$1")
    rb=$(ratio "$3" "$1")
    echo "$rd ($(verdict "$rd")) | $rb ($(verdict "$rb"))"
}
LOAD1=$(cut -d" " -f1-3 /proc/loadavg)
cat <<REPORT
| release build of the demo agent | v1 only | v1 + native v2 | v1 + bridged v2 | native / v1 | bridged / v1 |
|---|---|---|---|---|---|
| from scratch, dependencies included (median of $SCRATCH_RUNS; range) | $(secs "$(fm v1)") s ($(fr v1) ms) | $(secs "$(fm dual)") s ($(fr dual) ms) | $(secs "$(fm bridged)") s ($(fr bridged) ms) | $(both "$(fm v1)" "$(fm dual)" "$(fm bridged)") |
| the agent crate alone (median of $RUNS; range) | $(secs "$(cm v1)") s ($(cr v1) ms) | $(secs "$(cm dual)") s ($(cr dual) ms) | $(secs "$(cm bridged)") s ($(cr bridged) ms) | $(both "$(cm v1)" "$(cm dual)" "$(cm bridged)") |
| binary size | ${SIZE[v1]} B | ${SIZE[dual]} B | ${SIZE[bridged]} B | $(both "${SIZE[v1]}" "${SIZE[dual]}" "${SIZE[bridged]}") |
| binary size, stripped | ${SSIZE[v1]} B | ${SSIZE[dual]} B | ${SSIZE[bridged]} B | $(both "${SSIZE[v1]}" "${SSIZE[dual]}" "${SSIZE[bridged]}") |

Goal < 1.3x. Smoke: asked for protocol 2, the v1 build answers 1 and the two others 2. Load
average before/after: $LOAD0 / $LOAD1. $(rustc --version).
REPORT
