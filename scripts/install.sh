#!/usr/bin/env bash
# Build in release mode and install libscr.so, scr.h, scr.pc and the job commands (scr_run,
# scr_halt, scr_index, ...) under PREFIX (default /usr/local), so `pkg-config --cflags --libs scr`
# works with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(realpath -m "${1:-/usr/local}")
cargo build --release --workspace --quiet
install -d "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/bin"
install -m 0755 target/release/libscr.so target/release/libscr_preload.so "$prefix/lib/"
for cmd in scr_run scr_srun scr_mpirun scr_prerun scr_postrun scr_scavenge scr_copy scr_halt scr_index scr_interval; do
  install -m 0755 "target/release/$cmd" "$prefix/bin/"
done
install -m 0644 include/scr.h "$prefix/include/"
sed "s|@PREFIX@|$prefix|" scr.pc.in > "$prefix/lib/pkgconfig/scr.pc"
echo "installed under $prefix (pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
