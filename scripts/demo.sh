#!/usr/bin/env bash
# The main job, end to end: build, then an MPI application (examples/c/test_api.c) with
# 4 ranks checkpoints into node-local cache through the SCR API, flushes every 2nd
# checkpoint to the prefix, is killed, restarts from cache, loses its cache, and restarts
# from the prefix. Everything it writes is in two directories it creates (the prefix under
# /tmp, the cache under $SCR_CACHE_BASE, default /dev/shm); it deletes only the cache one.
. "$(dirname "$0")/common.sh"
work=$(mktemp -d /tmp/scr-demo.XXXXXX)
cache=$(mktemp -d "${SCR_CACHE_BASE:-/dev/shm}/scr-demo-cache.XXXXXX")
trap 'rm -rf "$cache"' EXIT
mkdir -p "$work/prefix" "$work/bin"
build_example test_api "$work/bin/test_api"
export SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$cache SCR_CNTL_BASE=$cache
export SCR_COPY_TYPE=SINGLE SCR_CACHE_SIZE=2 SCR_FLUSH=2 SCR_DEBUG=1
run() { (cd "$work/prefix" && mpirun -np 4 "$work/bin/test_api" --size $((16 << 20)) "$@" 2>&1 \
         | grep -E '^(SCR DEBUG|SCR WARNING|SCR ERROR|RESTARTED|NO_RESTART|CHECKPOINT|CRASH|DONE)' | grep -v 'effective configuration') || true; }
echo "== run 1: 4 checkpoints of 4 x 16 MiB, flushed every 2nd; killed after the 3rd"
run --steps 4 --crash-after 3
echo; echo "== run 2: restart (same job, same cache): from cache"
run --steps 1 --crash-after 4
echo; echo "== the node-local cache is lost"
rm -rf "${cache:?}"/*
echo; echo "== run 3: restart from the prefix (newest flushed checkpoint)"
run --steps 2
echo; echo "== prefix $work/prefix:"; ls "$work/prefix"
