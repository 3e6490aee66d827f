#!/usr/bin/env bash
# Codegen benchmarks for BENCHMARKS.md ("## Code generation").
#
#   bench/codegen/run.sh            # from anywhere; prints a markdown report on stdout
#
# Measures
#   1. `xtask codegen --check` wall time (release build; verifies the schema sha256s, generates
#      v1 + unstable + v2, formats, compares with generated/), with hyperfine when available,
#      and the in-process library call `xtask::codegen::generate` alone.
#   2. `cargo check` time of the generated crate (a copy of generated/ as a standalone crate)
#      vs `agent-client-protocol-schema` from crates.io, dependencies already built: each run
#      is `cargo clean -p <crate>` then `cargo check -p <crate>`, the two crates alternating.
#
# Environment knobs: CARGO_TARGET_DIR (default /work/target-bench), CODEGEN_RUNS (default 30),
# CHECK_RUNS (default 7), OFFICIAL_VERSION (default 1.15.1). Progress goes to stderr.
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-/work/target-bench}
CODEGEN_RUNS=${CODEGEN_RUNS:-30}
CHECK_RUNS=${CHECK_RUNS:-7}
OFFICIAL_VERSION=${OFFICIAL_VERSION:-1.15.1}
SCRATCH=$HERE/scratch # git-ignored (bench/codegen/.gitignore)
export CARGO_TARGET_DIR=$TARGET
# Registry crates are never compiled incrementally; compile ours the same way.
export CARGO_INCREMENTAL=0
export CARGO_TERM_COLOR=never

log() { echo "[codegen-bench] $*" >&2; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# stats FILE -> "median min max" of one number per line (median of an even count = mean of the two middles)
stats() {
    sort -g "$1" | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan nan nan"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.0f %.0f %.0f\n", m, v[1], v[NR] }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

command -v jq >/dev/null || { echo "run.sh needs jq (apt-get install -y jq)" >&2; exit 1; }
mkdir -p "$SCRATCH"
RES=$SCRATCH/results
rm -rf "$RES" && mkdir -p "$RES"

# ---------------------------------------------------------------- machine
CPU=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
MEM=$(free -h | awk '/^Mem:/ { print $2 " total, " $7 " available" }')
RUSTC=$(rustc -V)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
HEAD=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$ROOT" status --porcelain -- xtask generated schema 2>/dev/null | wc -l)

# ---------------------------------------------------------------- 1. codegen wall time
log "building xtask (release) into $TARGET"
(cd "$ROOT" && cargo build --release --quiet --manifest-path xtask/Cargo.toml)
XTASK=$TARGET/release/xtask
# The binary finds the workspace from its compile-time manifest dir; run it from the root anyway.
cd "$ROOT"
if "$XTASK" codegen --check --full >/dev/null 2>"$RES/check.err"; then
    CHECK_STATE="generated/ up to date"
else
    # A stale tree does the same work (generate everything, compare every file), so the timing
    # still holds; but say so, since someone is editing xtask/ or generated/.
    CHECK_STATE="generated/ stale vs xtask (--check exits 1; same work, timing still valid)"
    grep -q 'stale' "$RES/check.err" || { cat "$RES/check.err" >&2; exit 1; }
fi
log "timing '$XTASK codegen --check --full' x$CODEGEN_RUNS ($CHECK_STATE)"
if command -v hyperfine >/dev/null; then
    TOOL="hyperfine $(hyperfine --version | cut -d' ' -f2)"
    hyperfine -N -i --style none --warmup 3 --runs "$CODEGEN_RUNS" \
        --export-json "$RES/codegen.json" "$XTASK codegen --check --full" >&2
    jq '.results[0].times[] * 1000' "$RES/codegen.json" > "$RES/codegen.ms"
else
    TOOL="date +%s%N loop"
    for _ in 1 2 3; do "$XTASK" codegen --check --full >/dev/null 2>&1 || true; done
    for _ in $(seq "$CODEGEN_RUNS"); do
        s=$(date +%s%N); "$XTASK" codegen --check --full >/dev/null 2>&1 || true; e=$(date +%s%N)
        echo $(( (e - s) / 1000 )) | awk '{ print $1 / 1000 }'
    done > "$RES/codegen.ms"
fi
read -r CG_MED CG_MIN CG_MAX < <(stats "$RES/codegen.ms")

# As users type it: through cargo's alias (a debug build, cargo's own start-up included), where
# schema/codegen.stamp answers when nothing changed.
log "timing 'cargo xtask codegen --check' (as typed) x$CODEGEN_RUNS"
cargo xtask codegen --check >/dev/null
for _ in 1 2 3; do cargo xtask codegen --check >/dev/null 2>&1 || true; done
for _ in $(seq "$CODEGEN_RUNS"); do
    s=$(date +%s%N); cargo xtask codegen --check >/dev/null 2>&1 || true; e=$(date +%s%N)
    echo $(( (e - s) / 1000 )) | awk '{ print $1 / 1000 }'
done > "$RES/typed.ms"
read -r TY_MED TY_MIN TY_MAX < <(stats "$RES/typed.ms")

log "building the in-process timer (library call xtask::codegen::generate)"
GT=$SCRATCH/gen-timer
rm -rf "$GT" && mkdir -p "$GT/src"
sed "s|@ROOT@|$ROOT|" "$HERE/template/gen-timer/Cargo.toml.in" > "$GT/Cargo.toml"
cp "$HERE/template/gen-timer/src/main.rs" "$GT/src/"
cp "$ROOT/xtask/Cargo.lock" "$GT/"
(cd "$GT" && cargo build --release --quiet)
TAG=$(jq -r .tag "$ROOT/schema/lock.json")
"$TARGET/release/codegen-gen-timer" "$ROOT/schema/json" "$TAG" "$CODEGEN_RUNS" > "$RES/lib.ms" 2>/dev/null
read -r LIB_MED LIB_MIN LIB_MAX < <(stats "$RES/lib.ms")

# ---------------------------------------------------------------- 2. cargo check
# Ours: a snapshot of generated/src with a standalone Cargo.toml (generated/Cargo.toml inherits
# from the workspace), features copied from generated/Cargo.toml, serde pinned by the workspace lock.
OURS=$SCRATCH/acp-types
rm -rf "$OURS" && mkdir -p "$OURS"
cp -r "$ROOT/generated/src" "$OURS/src"
awk '/^\[features\]/ { p = 1 } /^\[dependencies\]/ { p = 0 } p' "$ROOT/generated/Cargo.toml" > "$RES/features.toml"
awk -v f="$RES/features.toml" '/^@FEATURES@$/ { while ((getline l < f) > 0) print l; next } { print }' \
    "$HERE/template/acp-types/Cargo.toml.in" > "$OURS/Cargo.toml"
cp "$ROOT/Cargo.lock" "$OURS/"
OURS_LINES=$(find "$OURS/src" -name '*.rs' -exec cat {} + | wc -l)
OURS_SHA=$(cd "$OURS" && find src -name '*.rs' | sort | xargs sha256sum | sha256sum | cut -c1-12)

# Official: one scratch crate per feature set, all depending on the registry crate.
official_crate() { # name dep-options
    local dir=$SCRATCH/official-$1
    rm -rf "$dir" && mkdir -p "$dir/src" && : > "$dir/src/lib.rs"
    sed -e "s|@VERSION@|$OFFICIAL_VERSION|" -e "s|@DEP_OPTS@|$2|" \
        "$HERE/template/official/Cargo.toml.in" > "$dir/Cargo.toml"
    cp "$ROOT/Cargo.lock" "$dir/" # same serde / serde_json versions as ours
}
official_crate default ''
official_crate unstable ', features = ["unstable"]'
official_crate nodefault ', default-features = false'

OFF=agent-client-protocol-schema
# variant -> "dir|target dir|package|extra cargo args"
declare -A V=(
    [ours]="$OURS|$TARGET/codegen-bench/ours|acp-types|"
    [ours_all]="$OURS|$TARGET/codegen-bench/ours|acp-types|--all-features"
    [off_default]="$SCRATCH/official-default|$TARGET/codegen-bench/official|$OFF|"
    [off_unstable]="$SCRATCH/official-unstable|$TARGET/codegen-bench/official|$OFF|"
    [off_nodefault]="$SCRATCH/official-nodefault|$TARGET/codegen-bench/official|$OFF|"
)
check_once() { # variant [clean] -> prints ms of the check alone
    local dir tgt pkg args
    IFS='|' read -r dir tgt pkg args <<< "${V[$1]}"
    cd "$dir"
    if [ "${2:-}" = clean ]; then CARGO_TARGET_DIR=$tgt cargo clean --quiet -p "$pkg"; fi
    local s; s=$(now_ms)
    # shellcheck disable=SC2086
    CARGO_TARGET_DIR=$tgt cargo check --quiet -p "$pkg" $args 2>"$RES/$1.stderr" >&2 \
        || { cat "$RES/$1.stderr" >&2; exit 1; }
    echo $(( $(now_ms) - s ))
}

log "warm-up: building dependencies of every scratch crate (fetches $OFF $OFFICIAL_VERSION once)"
for v in ours ours_all off_default off_unstable off_nodefault; do check_once "$v" >/dev/null; done
OFF_LINES=$(find "$(dirname "$(cd "$SCRATCH/official-default" && cargo metadata --format-version 1 --quiet \
    | jq -r ".packages[] | select(.name == \"$OFF\") | .manifest_path")")/src" -name '*.rs' -exec cat {} + | wc -l)

PAIRS="ours:off_default ours_all:off_unstable ours:off_nodefault"
log "timing cargo check, $CHECK_RUNS rounds, crates alternating"
for round in $(seq "$CHECK_RUNS"); do
    for pair in $PAIRS; do
        a=${pair%%:*} b=${pair##*:}
        # Swap who goes first every round, so a drift in machine load hits both alike.
        if (( round % 2 )); then order="$a $b"; else order="$b $a"; fi
        for v in $order; do
            ms=$(check_once "$v" clean)
            echo "$ms" >> "$RES/$pair.$v.ms"
            log "round $round  $v  ${ms} ms"
        done
    done
done

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- report
row() { # label ours-variant official-variant official-label
    local pair=$2:$3 om oi ox fm fi fx
    read -r om oi ox < <(stats "$RES/$pair.$2.ms")
    read -r fm fi fx < <(stats "$RES/$pair.$3.ms")
    echo "| $1 | $om ($oi–$ox) | $4 | $fm ($fi–$fx) | $(ratio "$om" "$fm") |"
}

cat <<EOF

### Machine

- CPU: $CPU, \`nproc\` = $(nproc)
- Memory: $MEM
- Toolchain: $RUSTC
- Load average (1/5/15 min) at start: $LOAD_START; at end: $LOAD_END
- Tree: HEAD $HEAD, $DIRTY modified/untracked paths under xtask/ generated/ schema/; schema $TAG; $CHECK_STATE

### Codegen wall time (goal < 100 ms)

$CODEGEN_RUNS runs each, after 3 warm-up runs ($TOOL). ms.

| What | Median | Min | Max |
|---|---:|---:|---:|
| \`cargo xtask codegen --check\` as typed (debug build through cargo; the stamp answers) | $TY_MED | $TY_MIN | $TY_MAX |
| \`xtask codegen --check --full\` (release binary, whole process, regenerates everything) | $CG_MED | $CG_MIN | $CG_MAX |
| \`xtask::codegen::generate\` alone (in-process library call) | $LIB_MED | $LIB_MIN | $LIB_MAX |

### \`cargo check\` of the types crate (goal ≤ 1/3 of the official crate)

Each run: \`cargo clean -p <crate>\` then \`cargo check -p <crate>\`, dependencies already built,
CARGO_INCREMENTAL=0, $CHECK_RUNS runs per crate, the two crates of a row alternating.
Milliseconds, median (min–max). acp-types: $OURS_LINES lines (src sha256 $OURS_SHA);
$OFF $OFFICIAL_VERSION: $OFF_LINES lines.

| acp-types features | acp-types | $OFF $OFFICIAL_VERSION features | official | ratio |
|---|---:|---|---:|---:|
$(row "default" ours off_default "default (= schemars)")
$(row "\`--all-features\` (incl. protocol v2)" ours_all off_unstable "default + \`unstable\`")
$(row "default" ours off_nodefault "\`default-features = false\` (for reference)")
EOF
