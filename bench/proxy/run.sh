#!/usr/bin/env bash
# Proxy chain benchmarks, side by side in one run: the bench agent alone ("direct"), and our
# conductor (`acp-conductor`, proxies written with `acp_rpc::proxy`) against the official
# one (`agent-client-protocol-conductor` 5.0.0, proxies written with `agent-client-protocol`
# 5.0.0), each with 0, 1 and 3 pass-through proxies in front of the same agent, driven by the
# same editor. RUNS repetitions, alternating which implementation goes first; medians.
#
#   CARGO_TARGET_DIR=/work/target-proxybench bench/proxy/run.sh
#
# Options (environment): RUNS (5), PIPE_N (50000 updates in one prompt), RTT_N (2000 pings),
# AGENT (runtime: an acp-rpc agent with typed updates; raw: a bare JSON printing loop),
# RESULTS (keep the raw result lines in this file). Prints markdown on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
RUNS="${RUNS:-5}"
PIPE_N="${PIPE_N:-50000}"
RTT_N="${RTT_N:-2000}"
AGENT="${AGENT:-runtime}"
cargo build --release >&2
bin="$CARGO_TARGET_DIR/release/proxy-bench"
results="${RESULTS:-$(mktemp)}"
: >"$results"

one() {
    timeout 600 "$bin" "$@" --agent "$AGENT" | tee -a "$results" >&2
}

for rep in $(seq 1 "$RUNS"); do
    if ((rep % 2)); then order=(ours official); else order=(official ours); fi
    one pipe --impl direct --proxies 0 --n "$PIPE_N"
    one rtt --impl direct --proxies 0 --n "$RTT_N"
    for impl in "${order[@]}"; do
        for k in 0 1 3; do
            one pipe --impl "$impl" --proxies "$k" --n "$PIPE_N"
            one rtt --impl "$impl" --proxies "$k" --n "$RTT_N"
        done
    done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(mode, impl, k, key):
    xs = [r["result"][key] for r in rows if r["mode"] == mode and r["impl"] == impl and r["proxies"] == k]
    return statistics.median(xs) if xs else None
direct = med("pipe", "direct", 0, "msgs_per_s")
direct_rtt = med("rtt", "direct", 0, "p50_us")
print(f"runs: {len(rows)} result lines\n")
print("| chain | ours msg/s | official msg/s | ours / official | ours / direct | ours p50 µs | official p50 µs | ours p99 µs | official p99 µs |")
print("|---|---|---|---|---|---|---|---|---|")
print(f"| direct (no conductor) | {direct:,.0f} | | | 1.00 | {direct_rtt} | | {med('rtt','direct',0,'p99_us')} | |")
for k in (0, 1, 3):
    o, f = med("pipe", "ours", k, "msgs_per_s"), med("pipe", "official", k, "msgs_per_s")
    print(f"| conductor + {k} proxies | {o:,.0f} | {f:,.0f} | {o/f:.1f}x | {o/direct:.2f} | {med('rtt','ours',k,'p50_us')} | {med('rtt','official',k,'p50_us')} | {med('rtt','ours',k,'p99_us')} | {med('rtt','official',k,'p99_us')} |")
o0, o1, o3 = (med("rtt", "ours", k, "p50_us") for k in (0, 1, 3))
f0, f1, f3 = (med("rtt", "official", k, "p50_us") for k in (0, 1, 3))
print(f"\nadded p50 round trip per proxy: ours {(o3 - o0) / 3:.1f} µs (3 proxies), {o1 - o0:.1f} µs (1 proxy); "
      f"official {(f3 - f0) / 3:.1f} µs, {f1 - f0:.1f} µs")
print(f"3 proxies keep {med('pipe','ours',3,'msgs_per_s') / med('pipe','ours',0,'msgs_per_s'):.2f} of the conductor alone's throughput (ours), "
      f"{med('pipe','official',3,'msgs_per_s') / med('pipe','official',0,'msgs_per_s'):.2f} (official)")
PY
