#!/usr/bin/env bash
# The Python that runs mpi4py programs here (the Python binding's example, transparent mode's
# Python applications, and the tests that run them): the python3 first on PATH when it imports
# mpi4py (Debian's with python3-mpi4py, a conda Python that has it), else the virtual
# environment scripts/setup.sh makes for that python3 (pip's mpi4py, built from source against
# this machine's MPI).
#
#   scripts/python.sh          print that interpreter's path (exit 1, saying why, when neither
#                              imports mpi4py)
#   scripts/python.sh --venv   print the virtual environment's directory for the python3 on PATH
#
# The environment lives outside the repository, one per interpreter:
# ${SCR_PYTHON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/scr-rs/mpi4py-<cksum of its path>}.
set -euo pipefail

if ! command -v python3 >/dev/null 2>&1; then
  echo "python.sh: no python3 on PATH (scripts/setup.sh installs Debian's)" >&2
  exit 1
fi
# sys.executable, not `command -v`: a pyenv shim or a wrapper script leads to the interpreter
# itself; an activated virtual environment keeps its own path
real=$(python3 -c 'import sys; print(sys.executable)')
sum=$(printf %s "$real" | cksum | cut -d' ' -f1)
venv=${SCR_PYTHON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/scr-rs/mpi4py-$sum}

if [ "${1:-}" = --venv ]; then
  echo "$venv"
  exit 0
fi
if "$real" -c 'import mpi4py' >/dev/null 2>&1; then
  echo "$real"
  exit 0
fi
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c 'import mpi4py' >/dev/null 2>&1; then
  echo "$venv/bin/python3"
  exit 0
fi
echo "python.sh: $real (the python3 first on PATH) cannot import mpi4py, and $venv holds no" \
  "environment that can: run scripts/setup.sh" >&2
exit 1
