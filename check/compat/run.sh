#!/usr/bin/env bash
# Checks the agents pinned in check/compat/agents.json (all, or the ids given) with acp-check,
# saves the results to check/compat/results/ and rewrites the compatibility table in docs/book/src/compatibility.md.
# Needs node/npm, python3 (venv, pip), cargo and the network to the registries.
# Options: --scratch DIR (where the agents are installed), --reinstall.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q -p acp-check --bin acp-check --bin acp-check-compat
exec cargo run -q -p acp-check --bin acp-check-compat -- run "$@"
