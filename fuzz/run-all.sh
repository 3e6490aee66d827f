#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 240), one after the other, and prints the
# executions and crashes of each. SANITIZER=address for AddressSanitizer (default: none, which
# builds on plain stable and runs several times as many inputs); on a stable toolchain ASan
# needs RUSTC_BOOTSTRAP=1 for cargo-fuzz's -Zsanitizer flag, set here (see ../FUZZING.md).
# Usage, from the repository root: fuzz/run-all.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-240}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(framing_decode typed_decode router router_v2 http_server)
sanitizer="${SANITIZER:-none}"
[ "$sanitizer" = none ] || export RUSTC_BOOTSTRAP=1
[ -d fuzz/corpus ] || cargo run --quiet --release --manifest-path fuzz/Cargo.toml --example seed_corpus
mkdir -p fuzz/logs
for t in "${targets[@]}"; do
    log="fuzz/logs/$t-$sanitizer.log"
    mkdir -p "fuzz/corpus/$t"
    status=0
    cargo fuzz run -O -s "$sanitizer" "$t" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
        -max_total_time="$seconds" -timeout=20 -print_final_stats=1 >"$log" 2>&1 || status=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    crashes=$(ls "fuzz/artifacts/$t" 2>/dev/null | wc -l)
    echo "$t ($sanitizer): $runs executions in ${seconds} s, exit $status, $crashes files in fuzz/artifacts/$t"
done
