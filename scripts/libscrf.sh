#!/usr/bin/env bash
# Build the Fortran bindings beside libscr in DIR (a cargo output directory, target/release or
# target/debug, where libscr.so already is):
#   DIR/libscrf.so, DIR/libscrf.a   from csrc/scrf.c (C wrappers over libscr's C API; see the
#                                   file's comment for why they are C and depend on libscr)
#   DIR/fortran/scr.mod             the `use scr` module, from include/scr_mod.f90 (gfortran)
# Only what is missing or older than its sources is built; each output is replaced atomically,
# so a concurrent reader never sees half a library. Prints what it builds.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath "${1:?usage: scripts/libscrf.sh TARGET_DIR}")
[ -f "$dir/libscr.so" ] || { echo "libscrf.sh: $dir/libscr.so is missing (cargo build first)" >&2; exit 1; }

# stale OUTPUT SOURCE...: the output is missing or older than a source
stale() {
  local out=$1
  shift
  [ -e "$out" ] || return 0
  local src
  for src in "$@"; do
    [ "$src" -nt "$out" ] && return 0
  done
  return 1
}

tmp=$(mktemp -d "$dir/.libscrf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-cc}
srcs=("$repo/csrc/scrf.c" "$repo/include/scr.h" "$repo/scripts/libscrf.sh")
if stale "$dir/libscrf.a" "${srcs[@]}" || stale "$dir/libscrf.so" "${srcs[@]}"; then
  echo "libscrf.sh: building $dir/libscrf.so and libscrf.a"
  "$cc" -O2 -g -fPIC -Wall -Wextra -Werror -I"$repo/include" -c "$repo/csrc/scrf.c" -o "$tmp/scrf.o"
  ar rcs "$tmp/libscrf.a" "$tmp/scrf.o"
  # RUNPATH $ORIGIN: libscrf.so finds the libscr.so beside it, in DIR as in PREFIX/lib.
  "$cc" -shared -o "$tmp/libscrf.so" "$tmp/scrf.o" -Wl,-soname,libscrf.so -L"$dir" -lscr \
    -Wl,-rpath,'$ORIGIN' -Wl,--no-undefined
  mv -f "$tmp/libscrf.a" "$dir/libscrf.a"
  mv -f "$tmp/libscrf.so" "$dir/libscrf.so"
fi

if command -v gfortran >/dev/null 2>&1; then
  if stale "$dir/fortran/scr.mod" "$repo/include/scr_mod.f90" "$repo/include/scrf.h"; then
    echo "libscrf.sh: building $dir/fortran/scr.mod"
    mkdir -p "$dir/fortran"
    gfortran -c -I"$repo/include" -J"$tmp" "$repo/include/scr_mod.f90" -o "$tmp/scr_mod.o"
    mv -f "$tmp/scr.mod" "$dir/fortran/scr.mod"
  fi
fi
