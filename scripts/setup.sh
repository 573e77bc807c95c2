#!/usr/bin/env bash
# Install what building and testing scr-rs needs on Debian/Ubuntu: an MPI implementation
# (Open MPI), libclang (rsmpi generates its MPI bindings with bindgen), a C compiler,
# pkg-config, CMake, the compilers and libraries of the transparent-mode examples and the
# bindings (gfortran; mpi4py for the python3 first on PATH: Debian's python3-mpi4py, or pip's in
# a virtual environment when that python3 is not Debian's), and Slurm (munge, slurmctld, slurmd, slurm-client) for
# tests/it/slurm.rs, which starts a private cluster, and the real applications of
# tests/it/realapps.rs (lammps, openfoam, openfoam-examples, quantum-espresso,
# quantum-espresso-data) and jemalloc and tcmalloc (libjemalloc2, libtcmalloc-minimal4: preloaded
# beside the library in tests/it/preload_shapes.rs), and MariaDB (mariadb-server,
# mariadb-client) for tests/it/dblog.rs,
# which starts a private server on a socket. As root it installs what is missing; otherwise it
# says exactly what to install (without root the Slurm, real-application and MariaDB tests are skipped, so their
# packages are not required then).
set -euo pipefail
here=$(dirname "$0")

need=()
command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev openmpi-bin)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# the bindings' tests: a CMake project using the installed package (gfortran and mpi4py below)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v readelf >/dev/null 2>&1 || need+=(binutils)
# transparent mode's example applications: C++, Fortran, mpi4py, HDF5
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v gfortran >/dev/null 2>&1 || need+=(gfortran)
# mpi4py for the python3 first on PATH: Debian's package when that is Debian's Python (or there
# is none), else a virtual environment with pip's mpi4py (python_mpi4py below)
debian_python=""
if ! command -v python3 >/dev/null 2>&1 \
  || python3 -c 'import sys; sys.exit(not (sys.prefix == sys.base_prefix == "/usr"))' 2>/dev/null; then
  debian_python=1
  /usr/bin/python3 -c 'import mpi4py' >/dev/null 2>&1 || need+=(python3-mpi4py)
fi
[ -f /usr/include/hdf5/serial/hdf5.h ] || need+=(libhdf5-dev)
# parallel HDF5 (its MPI-IO driver) for the shared-file test of transparent mode
[ -f /usr/include/hdf5/openmpi/hdf5.h ] || need+=(libhdf5-openmpi-dev)
# bindgen loads libclang.so / libclang-N.so (libclang-cpp, which other packages bring, is not it)
if ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1 \
  && ! ldconfig -p 2>/dev/null | grep -qE 'libclang(-[0-9.]+)?\.so'; then
  need+=(libclang-dev)
fi
# Slurm, without the recommended extras (plugin development files, hdf5, ...); munged and the
# daemons live in /usr/sbin
slurm=()
for p in munge:munged slurmctld:slurmctld slurmd:slurmd slurm-client:srun; do
  command -v "${p#*:}" >/dev/null 2>&1 || [ -x "/usr/sbin/${p#*:}" ] || slurm+=("${p%%:*}")
done
# MariaDB for tests/it/dblog.rs (database logging); its service is not started (see below)
[ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1 || slurm+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || slurm+=(mariadb-client)
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install a Rust toolchain (1.88 or newer), e.g. from rustup.rs" >&2
  exit 1
fi
# real applications for tests/it/realapps.rs (LAMMPS, OpenFOAM with its tutorials, Quantum
# ESPRESSO with the pseudopotentials of quantum-espresso-data): about 205 MB of packages, half
# a minute to install; without root the tests are skipped, naming these packages
apps=()
command -v lmp >/dev/null 2>&1 || apps+=(lammps)
command -v icoFoam >/dev/null 2>&1 || apps+=(openfoam)
[ -d /usr/share/doc/openfoam-examples/examples/incompressible/icoFoam/cavity ] || apps+=(openfoam-examples)
command -v pw.x >/dev/null 2>&1 || apps+=(quantum-espresso)
[ -f /usr/share/espresso/pseudo/Si.pz-vbc.UPF ] || apps+=(quantum-espresso-data)
# allocators a site may preload beside the library (its mmap hook), for tests/it/preload_shapes.rs
has_lib() {
  local f
  for f in /usr/lib/*-linux-gnu/"$1" /usr/lib64/"$1"; do [ -e "$f" ] && return 0; done
  return 1
}
has_lib libjemalloc.so.2 || apps+=(libjemalloc2)
has_lib libtcmalloc_minimal.so.4 || apps+=(libtcmalloc-minimal4)
if [ ${#apps[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
  echo "setup: ${apps[*]} missing: tests/it/realapps.rs and the allocator test of tests/it/preload_shapes.rs skip what needs them; as root: apt-get install --no-install-recommends ${apps[*]}" >&2
  apps=()
fi
if [ ${#slurm[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
  echo "setup: ${slurm[*]} missing: tests/it/slurm.rs and tests/it/dblog.rs skip what needs them; as root: apt-get install --no-install-recommends ${slurm[*]}" >&2
  slurm=()
fi

# python_mpi4py: when the python3 first on PATH is not Debian's and cannot import mpi4py (a
# pyenv or conda Python), a virtual environment for it outside the repository (see
# scripts/python.sh, which the tests and examples ask for the interpreter) with mpi4py from
# PyPI, built from source by this machine's mpicc so that it uses the MPI that mpirun starts.
python_mpi4py() {
  [ -z "$debian_python" ] || return 0
  "$here/python.sh" >/dev/null 2>&1 && return 0
  local real venv
  real=$(python3 -c 'import sys; print(sys.executable)')
  venv=$("$here/python.sh" --venv)
  echo "setup: $real (the python3 first on PATH) cannot import mpi4py: pip install mpi4py into $venv"
  rm -rf "$venv"
  if ! "$real" -m venv "$venv"; then
    echo "setup: $real -m venv failed: that Python lacks venv/ensurepip; the mpi4py tests will fail" >&2
    exit 1
  fi
  MPICC=$(command -v mpicc) "$venv/bin/python3" -m pip install -q --no-binary mpi4py mpi4py
  "$here/python.sh" >/dev/null
}

if [ ${#need[@]} -eq 0 ] && [ ${#slurm[@]} -eq 0 ] && [ ${#apps[@]} -eq 0 ]; then
  python_mpi4py
  exit 0
fi
# shellcheck disable=SC2207
need=($(printf '%s\n' "${need[@]}" | sort -u))
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${need[*]}" >&2
  echo "setup: install them with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "setup: installing ${need[*]} ${slurm[*]} ${apps[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ${#apps[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${apps[@]}" >/dev/null
fi
if [ ${#slurm[@]} -gt 0 ]; then
  # The tests start daemons of their own (slurmctld, slurmd, mariadbd): the packages'
  # services must not start (a policy denying it, for the time of the install, unless the
  # machine has one already).
  policy=/usr/sbin/policy-rc.d made=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh
# scripts/setup.sh of scr-rs: no service starts while it installs Slurm and MariaDB
exit 101
' >"$policy"
    chmod 755 "$policy"
    made=1
  fi
  rc=0
  apt-get install -y -qq --no-install-recommends "${slurm[@]}" >/dev/null || rc=$?
  if [ -n "$made" ]; then rm -f "$policy"; fi
  [ "$rc" -eq 0 ] || exit "$rc"
fi
python_mpi4py
