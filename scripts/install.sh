#!/usr/bin/env bash
# Install scr-rs under PREFIX (default /usr/local) from the release build (--debug: from the
# debug build):
#   lib/      libscr.so and libscr.a (C API), libscrf.so and libscrf.a (Fortran API),
#             libscr_preload.so (transparent mode); lib/pkgconfig/scr.pc and scrf.pc
#   include/  scr.h, scrf.h, scr_mod.f90 and scr.mod (the `use scr` module, built by gfortran)
#   bin/      the job commands (scr_run, scr_halt, scr_index, scr_should_exit,
#             scr_list_down_nodes, ...)
#   share/scr/examples/  test_api.c with its makefile (`make test_api`, user guide 2.1.2),
#             CMakeLists.txt and README.md, and the job-script templates of user guide 2.8.4
#             (scr_srun.sh, scr_srun_loop.sh, scr_jsrun.sh, scr_jsrun_loop.sh)
#   share/scr/cmake/   scrConfig.cmake, scrConfigVersion.cmake (find_package(scr))
#   share/scr/python/  scr.py, README.md, scr_example.py
#   share/scr/scr_log.sql  the tables of database logging (SCR_LOG_DB_ENABLE)
# It builds only what is missing or stale and says so: `cargo build` (which does nothing when
# the build is current) and scripts/libscrf.sh (the same for libscrf and scr.mod).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = "--debug" ]; then
  profile=debug
  shift
fi
case "${1:-}" in -*) echo "usage: scripts/install.sh [--debug] [PREFIX]" >&2; exit 2 ;; esac
prefix=$(realpath -m "${1:-/usr/local}")
out=target/$profile

echo "install.sh: cargo build ($profile; only what changed is rebuilt)"
cargo build $([ "$profile" = release ] && echo --release) --workspace --lib --bins
bash scripts/libscrf.sh "$out"

# Versions: the SCR API implemented (what pkg-config and CMake report) and this implementation's.
api=$(sed -n 's/^#define SCR_VERSION "\([0-9.]*\) (.*)"$/\1/p' include/scr.h)
impl=$(sed -n 's/^#define SCR_VERSION "[0-9.]* (\(.*\))"$/\1/p' include/scr.h)
[ -n "$api" ] && [ -n "$impl" ] || { echo "install.sh: no SCR_VERSION in include/scr.h" >&2; exit 1; }

# What a static link of libscr.a needs besides it: the MPI library libscr.so was linked with
# (by full path, as libscr.so records it), then the system libraries of Rust's standard library
# on Linux (rustc --print native-static-libs: -lgcc_s -lutil -lrt -lpthread -lm -ldl).
deps=()
while read -r lib; do
  case "$lib" in libc.so.*|libgcc_s.so.*|libm.so.*|ld-linux*) continue ;; esac
  path=$(ldd "$out/libscr.so" | awk -v l="$lib" '$1 == l && $3 ~ /^\// { print $3 }')
  [ -n "$path" ] || { echo "install.sh: cannot locate $lib, which libscr.so needs" >&2; exit 1; }
  deps+=("$path")
done < <(readelf -d "$out/libscr.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
std_libs=(gcc_s util rt pthread m dl)

install -d "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/bin" "$prefix/share/scr/cmake" \
  "$prefix/share/scr/python" "$prefix/share/scr/examples"
install -m 0755 "$out/libscr.so" "$out/libscrf.so" "$out/libscr_preload.so" "$prefix/lib/"
install -m 0644 "$out/libscr.a" "$out/libscrf.a" "$prefix/lib/"
for cmd in scr_run scr_srun scr_mpirun scr_prerun scr_postrun scr_scavenge scr_copy scr_halt scr_index \
  scr_interval scr_should_exit scr_list_down_nodes; do
  install -m 0755 "$out/$cmd" "$prefix/bin/"
done
install -m 0644 include/scr.h include/scrf.h include/scr_mod.f90 "$prefix/include/"
if [ -f "$out/fortran/scr.mod" ]; then
  install -m 0644 "$out/fortran/scr.mod" "$prefix/include/"
fi
libs_private="${deps[*]} ${std_libs[*]/#/-l}"
static_deps=$(IFS=';'; echo "${deps[*]};${std_libs[*]}")
fill() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@API_VERSION@|$api|g" -e "s|@IMPL_VERSION@|$impl|g" \
    -e "s|@LIBS_PRIVATE@|$libs_private|g" -e "s|@STATIC_DEPS@|$static_deps|g" "$1" > "$2"
}
fill scr.pc.in "$prefix/lib/pkgconfig/scr.pc"
fill scrf.pc.in "$prefix/lib/pkgconfig/scrf.pc"
fill cmake/scrConfig.cmake.in "$prefix/share/scr/cmake/scrConfig.cmake"
fill cmake/scrConfigVersion.cmake.in "$prefix/share/scr/cmake/scrConfigVersion.cmake"
for t in scripts/templates/*.sh; do
  sed -e "s|@BINDIR@|$prefix/bin|g" "$t" > "$prefix/share/scr/examples/$(basename "$t")"
  chmod 0755 "$prefix/share/scr/examples/$(basename "$t")"
done
install -m 0644 examples/c/test_api.c examples/installed/CMakeLists.txt examples/installed/README.md \
  "$prefix/share/scr/examples/"
fill examples/installed/makefile "$prefix/share/scr/examples/makefile"
install -m 0644 python/scr.py python/README.md python/scr_example.py "$prefix/share/scr/python/"
install -m 0644 share/scr/scr_log.sql "$prefix/share/scr/"
echo "install.sh: installed scr-rs ($impl, SCR API $api, $profile build) under $prefix"
echo "  pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig; CMake: CMAKE_PREFIX_PATH=$prefix;"
echo "  Python: PYTHONPATH=$prefix/share/scr/python"
