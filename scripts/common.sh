# Sourced by demo.sh and bench.sh: install what is missing, set the MPI environment, build
# the release library, and compile a C example against it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
scripts/setup.sh
. scripts/mpienv.sh
# cargo shows each crate it compiles; on a fresh machine the first build takes minutes.
echo "== building scr-rs (release)" >&2
cargo build --release -p scr

# build_example NAME OUTPUT: compile examples/c/NAME.c against target/release/libscr.so
build_example() {
  mpicc -O2 -Wall -I "$repo/include" "$repo/examples/c/$1.c" -L "$repo/target/release" -lscr \
    -Wl,-rpath,"$repo/target/release" -o "$2"
}
