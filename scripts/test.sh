#!/usr/bin/env bash
# Run the whole test suite: unit tests beside the code, then the integration tests that
# compile the C examples against scr.h and run them under mpirun with 4 ranks. Ends with
# one line totalling every test binary's result.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/mpienv.sh
cargo build --workspace --all-targets
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast -- --test-threads 2 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
