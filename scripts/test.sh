#!/usr/bin/env bash
# Run the whole test suite: unit tests beside the code, then the integration tests that
# compile the C examples against scr.h and run them under mpirun with 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/mpienv.sh
cargo build --workspace --all-targets
cargo test --workspace -- --test-threads 2
