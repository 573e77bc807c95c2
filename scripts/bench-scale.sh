#!/usr/bin/env bash
# Benchmark (not a test): the scale model of issue 27 item 3, for this library and C SCR 3.1.
# SCR 3.1's examples/test_api.c (as in bench-upstream.sh) runs with P ranks, each on its own
# simulated node (scripts/sim-node.sh, node storage in /dev/shm, all oversubscribed on this
# machine), KIB KiB per rank (default 4), and counts per rank:
#   (a) MPI: every collective and communicator constructor, and every point-to-point call,
#       with the bytes sent and received, by a PMPI shim in LD_PRELOAD
#       (examples/c/bench_count.c; both libraries call MPI through libmpi.so, so it sees the
#       calls of the application, of C SCR and its lwgrp/dtcmp, and of ours alike);
#   (b) metadata operations under strace -f --seccomp-bpf (every thread, every call of the file-name
#       system calls and fsync/fdatasync/getdents64, whether libc or a raw syscall made it),
#       by where their path lies: the node-local cache and control directories, or the prefix:
#       creates (open with O_CREAT, creat, mkdir), opens, stats (stat/lstat/newfstatat/statx/
#       access/readlink/statfs; fstat through newfstatat(fd, "") is left out), renames, unlinks
#       (unlink/unlinkat/rmdir), fsyncs and directory reads;
#   (c) the time of SCR_Start_output..SCR_Complete_output (test_api's "Completed checkpoint",
#       with its 4 KiB write and fsync; median of 5, no shim, no strace, SCR_FLUSH=0).
# Per checkpoint = (run with 6 checkpoints - run with 2) / 4, both from an empty cache, each
# checkpoint cached (SCR_CACHE_BYPASS=0; C SCR 3.1's default is 1), encoded with SCHEME
# (default XOR, sets of SET_SIZE=8: C SCR's default) and flushed (SCR_FLUSH=1): the
# application's own calls cancel out, the library's background work is in. Per restart: in a third run, restarting from the cache with nothing lost, what happens
# inside SCR_Init and from SCR_Have_restart to SCR_Complete_restart (the shim wraps them and
# marks the phase in the strace; test_api's own open and read of its file are in).
#
# Usage: scripts/bench-scale.sh SCR_C_PREFIX [P ...]   (default P: 4 8 16 32 64)
#   SCHEME=SINGLE|PARTNER|XOR|RS, KIB=4, IMPLS="rs c" (a subset), FLUSH=1 (0: no flush),
#   BYPASS=1 (SCR_CACHE_BYPASS: write straight to the prefix), KEEP=1 keeps the straces and counts (the runs: a, b, r as above) and says where.
#   Without C SCR under SCR_C_PREFIX it skips with a message (both libraries run its test_api.c).
# Figures are in BENCHMARKS.md.
set -euo pipefail
cprefix=$(realpath -m "${1:?usage: scripts/bench-scale.sh SCR_C_PREFIX [P ...]}")
shift
sizes=${*:-4 8 16 32 64}
kib=${KIB:-4}
scheme=${SCHEME:-XOR}
impls=${IMPLS:-rs c}
csrc=""
for d in "$cprefix/share/scr/examples" "${SCR_C_SRC:-/nonexistent}/examples"; do
  if [ -f "$d/test_api.c" ] && [ -f "$d/test_common.c" ]; then csrc=$d; break; fi
done
if [ ! -e "$cprefix/lib/libscr.so" ] || [ -z "$csrc" ]; then
  # both libraries run SCR 3.1's own test_api.c and test_common.c (our examples/c/test_api.c
  # takes other options), so without them there is nothing to run
  echo "bench-scale.sh: skipped: no C SCR 3.1 under $cprefix (lib/libscr.so, and test_api.c with" \
    "test_common.c in share/scr/examples or \$SCR_C_SRC/examples); see BENCHMARKS.md for its build" >&2
  exit 0
fi
command -v strace >/dev/null || { echo "bench-scale.sh: strace is needed (apt-get install strace)" >&2; exit 1; }
. "$(dirname "$0")/common.sh"
work=$(mktemp -d /tmp/scr-scale.XXXXXX)
sim=$(mktemp -d /dev/shm/scr-scale.XXXXXX)
if [ -n "${KEEP:-}" ]; then
  trap 'rm -rf "$sim"; echo "bench-scale.sh: traces and counts kept in $work/r/<library>.<P>/{a,b,r}"' EXIT
else
  trap 'rm -rf "$work" "$sim"' EXIT
fi
mpicc -O2 -Wall -shared -fPIC "$repo/examples/c/bench_count.c" -o "$work/bench_count.so" -ldl
if [[ " $impls " == *" c "* ]]; then
  mpicc -O2 -I "$cprefix/include" -I "$csrc" "$csrc/test_api.c" "$csrc/test_common.c" \
    -L "$cprefix/lib" -lscr -Wl,-rpath,"$cprefix/lib" -o "$work/test_api.c" 2>/dev/null
fi
mpicc -O2 -I "$repo/include" -I "$csrc" "$csrc/test_api.c" "$csrc/test_common.c" \
  -L "$libdir" -lscr -Wl,-rpath,"$libdir" -o "$work/test_api.rs" 2>/dev/null
export SIM_NODE_ROOT=$sim SCR_PREFIX=$work/prefix SCR_CACHE_BASE=$sim/node/cache SCR_CNTL_BASE=$sim/node/cntl
# SCR_CACHE_BYPASS=0 for both (C SCR 3.1 writes straight to the prefix by default)
export SCR_COPY_TYPE=$scheme SCR_SET_SIZE=${SET_SIZE:-8} SCR_CACHE_BYPASS=${BYPASS:-0} USER=${USER:-$(id -un)}
[ "$scheme" = RS ] && export SCR_SET_FAILURES=2
unset SCR_CONF_FILE SCR_CACHE_SIZE SCR_CRC_ON_COPY
# run OUT IMPL NP COUNT ARGS...: test_api of IMPL with NP ranks; COUNT=1 under the shim and
# strace (per rank: OUT/mpi/rank.R, OUT/trace.R.<pid>), else plain; its output in OUT/log
run() {
  local out=$1 impl=$2 np=$3 count=$4
  shift 4
  mkdir -p "$out/mpi"
  local cmd=("$work/test_api.$impl" -s "${kib}KB" "$@")
  if [ "$count" = 1 ]; then
    cmd=(sh -c 'shim=$1 && shift && exec strace -qq -f --seccomp-bpf -y -e trace=%file,fsync,fdatasync,getdents64 \
      -o "$0/trace.$OMPI_COMM_WORLD_RANK" env LD_PRELOAD="$shim" BENCH_COUNT_DIR="$0/mpi" "$@"' \
      "$out" "$work/bench_count.so" "${cmd[@]}")
  fi
  (cd "$work/prefix" && SIM_NODE_MAP=$(seq -s, -f 'n%g' 0 $((np - 1))) mpirun -np "$np" \
    "$repo/scripts/sim-node.sh" "${cmd[@]}") >"$out/log" 2>&1 ||
    { echo "bench-scale.sh: test_api ($impl, $np ranks) $* failed:" >&2; tail -20 "$out/log" >&2; exit 1; }
}
fresh() { rm -rf "$sim/nodes" "$work/prefix" && mkdir -p "$work/prefix"; }
machine
echo "== test_api.c from $csrc, $kib KiB per rank, SCR_COPY_TYPE=$scheme SCR_SET_SIZE=$SCR_SET_SIZE" \
  "SCR_CACHE_BYPASS=$SCR_CACHE_BYPASS," \
  "ranks: $sizes, each rank on its own simulated node"
for np in $sizes; do
  for impl in $impls; do
    d=$work/r/$impl.$np
    fresh
    SCR_FLUSH=0 run "$d/time" "$impl" "$np" 0 -t 5
    fresh
    SCR_FLUSH=${FLUSH:-1} run "$d/a" "$impl" "$np" 1 -t 1
    fresh
    SCR_FLUSH=${FLUSH:-1} run "$d/b" "$impl" "$np" 1 -t 5
    SCR_FLUSH=${FLUSH:-1} run "$d/r" "$impl" "$np" 1 -t 1
    grep -q '^Restarting from checkpoint' "$d/r/log" ||
      { echo "bench-scale.sh: $impl with $np ranks did not restart" >&2; tail "$d/r/log" >&2; exit 1; }
    rm -rf "$sim/nodes"
    echo "   $impl, $np ranks done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
python3 - "$work/r" "$sim/node" "$work/prefix" "$sizes" "$impls" <<'EOF'
import collections, glob, os, re, statistics, sys

root, node, prefix, sizes, impls = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split()
COLL = {"MPI_Barrier", "MPI_Bcast", "MPI_Reduce", "MPI_Allreduce", "MPI_Gather", "MPI_Gatherv",
        "MPI_Scatter", "MPI_Scatterv", "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall",
        "MPI_Alltoallv", "MPI_Alltoallw", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block",
        "MPI_Scan", "MPI_Exscan", "MPI_Ibarrier", "MPI_Ibcast", "MPI_Ireduce", "MPI_Iallreduce",
        "MPI_Igather", "MPI_Iallgather"}
COMM = {"MPI_Comm_split", "MPI_Comm_split_type", "MPI_Comm_dup", "MPI_Comm_create", "MPI_Comm_free"}
P2P_MSG = {"MPI_Send", "MPI_Ssend", "MPI_Isend", "MPI_Issend", "MPI_Sendrecv", "MPI_Sendrecv_replace"}
KIND = {"open": "open", "openat": "open", "creat": "create", "mkdir": "create", "mkdirat": "create",
        "rename": "rename", "renameat": "rename", "renameat2": "rename",
        "unlink": "unlink", "unlinkat": "unlink", "rmdir": "unlink",
        "stat": "stat", "lstat": "stat", "newfstatat": "stat", "statx": "stat", "access": "stat",
        "faccessat": "stat", "faccessat2": "stat", "readlink": "stat", "readlinkat": "stat",
        "statfs": "stat", "fsync": "fsync", "fdatasync": "fsync", "getdents64": "readdir"}
CATS = ["create", "open", "stat", "rename", "unlink", "fsync", "readdir"]
line_re = re.compile(r'^\d+ +(\w+)\((.*?)(?:\)\s+= | <unfinished \.\.\.>$)')
arg_re = re.compile(r'^(?:(?:AT_FDCWD|\d+)<([^>]*)>(?:, )?)?(?:"((?:[^"\\]|\\.)*)")?')

def where(path):
    if path.startswith(node + "/"):
        return "cache"
    if path == prefix or path.startswith(prefix + "/"):
        return "prefix"
    return None

def mpi(run, rank, which="rank"):
    c = collections.Counter()
    try:
        with open(f"{run}/mpi/{which}.{rank}") as f:
            for l in f:
                op, calls, out, inn = l.split()
                calls, out, inn = int(calls), int(out), int(inn)
                c[("op", op)] += calls
                c[("opb", op)] += out + inn
                if op in COLL:
                    c["coll"] += calls; c["coll_bytes"] += out + inn
                elif op in COMM:
                    c["comm"] += calls
                else:
                    c["p2p_bytes"] += out + inn
                    if op in P2P_MSG:
                        c["p2p_msgs"] += calls
    except FileNotFoundError:
        pass
    return c

def files(run, rank):
    """all the counts of the run, and those of its restart phase"""
    c, rc, restart = collections.Counter(), collections.Counter(), False
    for t in glob.glob(f"{run}/trace.{rank}"):
        with open(t, errors="replace") as f:
            for l in f:
                m = line_re.match(l.rstrip("\n"))
                if not m or m.group(1) not in KIND:
                    continue
                call, args = m.group(1), m.group(2)
                if "/scr-bench-phase/restart-" in args:
                    restart = "restart-begin" in args
                    continue
                a = arg_re.match(args)
                base, name = a.group(1), a.group(2)
                if name is None:
                    path = base or ""
                elif name == "":
                    if call == "newfstatat":
                        continue  # fstat of an open descriptor
                    path = base or ""
                elif name.startswith("/") or base is None:
                    path = name
                else:
                    path = base + "/" + name
                w = where(os.path.normpath(path)) if path else None
                if w is None:
                    continue
                kind = KIND[call]
                if kind == "open" and ("O_CREAT" in args):
                    kind = "create"
                c[(w, kind)] += 1
                if restart:
                    rc[(w, kind)] += 1
    return c, rc

def counts(run, np):
    """per rank: all the counts of the run, and those of its restart phase"""
    out = []
    for r in range(np):
        c, rc = files(run, r)
        out.append((mpi(run, r) + c, mpi(run, r, "restart") + rc))
    return out

def diff(x, y, div):
    keys = set(x) | set(y)
    return {k: (x.get(k, 0) - y.get(k, 0)) / div for k in keys}

def med_time(run):
    v = []
    with open(f"{run}/log") as f:
        for l in f:
            if l.startswith("Completed checkpoint"):
                v.append(float(l.split()[3]))
    return statistics.median(v[1:]) if len(v) > 1 else float("nan")

res = {}
for np in sizes:
    for impl in impls:
        d = f"{root}/{impl}.{np}"
        a, b, r = counts(f"{d}/a", int(np)), counts(f"{d}/b", int(np)), counts(f"{d}/r", int(np))
        res[(impl, np, "ckpt")] = [diff(b[k][0], a[k][0], 4) for k in range(int(np))]
        res[(impl, np, "restart")] = [r[k][1] for k in range(int(np))]
        res[(impl, np, "time")] = med_time(f"{d}/time")

name = {"rs": "scr-rs", "c": "C SCR 3.1"}
def g(v):
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.2f}"
for what, title in (("ckpt", "per checkpoint (each flushed)"), ("restart", "per restart from cache")):
    print(f"\n### MPI {title}: per rank, mean / max over ranks")
    print("| P | library | collectives | comm constructors | collective bytes (max rank) | p2p messages | p2p bytes (max rank) |")
    print("|---|---|---|---|---|---|---|")
    for np in sizes:
        for impl in impls:
            rows = res[(impl, np, what)]
            mm = lambda k: (sum(r.get(k, 0) for r in rows) / len(rows), max(r.get(k, 0) for r in rows))
            c, cm, cb, pm, pb = mm("coll"), mm("comm"), mm("coll_bytes"), mm("p2p_msgs"), mm("p2p_bytes")
            print(f"| {np} | {name[impl]} | {g(c[0])} / {g(c[1])} | {g(cm[0])} / {g(cm[1])} | {g(cb[1])} | {g(pm[0])} / {g(pm[1])} | {g(pb[1])} |")
    print(f"\n### Metadata operations {title}: per rank mean / max; prefix also the total of all ranks")
    print("| P | library | cache: " + ", ".join(CATS) + " | prefix: " + ", ".join(CATS) + " | prefix total | " +
          ("Start+Complete_output ms |" if what == "ckpt" else ""))
    print("|---|---|---|---|---|" + ("---|" if what == "ckpt" else ""))
    for np in sizes:
        for impl in impls:
            rows = res[(impl, np, what)]
            def cell(w):
                out = []
                for k in CATS:
                    vals = [r.get((w, k), 0) for r in rows]
                    mean, mx = sum(vals) / len(vals), max(vals)
                    out.append(g(mean) if abs(mean - mx) < 0.05 else f"{g(mean)}/{g(mx)}")
                return " ".join(out)
            total = sum(r.get(("prefix", k), 0) for r in rows for k in CATS)
            t = f" {res[(impl, np, 'time')] * 1000:.1f} |" if what == "ckpt" else ""
            print(f"| {np} | {name[impl]} | {cell('cache')} | {cell('prefix')} | {g(total)} |{t}")
    lo, hi = sizes[0], sizes[-1]
    print(f"\n### MPI operations {title}, P={lo} -> P={hi}: calls per rank (mean), bytes on the busiest rank")
    print(f"| library | operation | calls P={lo} | calls P={hi} | bytes P={lo} | bytes P={hi} |")
    print("|---|---|---|---|---|---|")
    for impl in impls:
        a, b = res[(impl, lo, what)], res[(impl, hi, what)]
        ops = sorted({k[1] for r in a + b for k in r if isinstance(k, tuple) and k[0] == "op"})
        for op in ops:
            ca = sum(r.get(("op", op), 0) for r in a) / len(a)
            cb = sum(r.get(("op", op), 0) for r in b) / len(b)
            if abs(ca) < 0.005 and abs(cb) < 0.005:
                continue
            ba = max(r.get(("opb", op), 0) for r in a)
            bb = max(r.get(("opb", op), 0) for r in b)
            print(f"| {name[impl]} | {op} | {g(ca)} | {g(cb)} | {g(ba)} | {g(bb)} |")
EOF
machine
