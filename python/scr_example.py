"""An MPI program that checkpoints through the scr module, restarts from the newest
checkpoint SCR offers and verifies every byte it reads back.

    mpirun -np 4 python3 scr_example.py [--steps N] [--size BYTES] [--output-step K]
                                        [--crash-after K] [--shared]

Each rank writes ckpt.<step>/rank_<rank>.dat (below the current directory, which should be
the prefix, SCR_PREFIX) holding a pattern of its rank and step. --output-step K also marks
checkpoint K as output (copied to the prefix whatever SCR_FLUSH says); --crash-after K ends
every process right after checkpoint K, without scr.finalize(), the way a failure would.
--shared: every rank also writes its block of ckpt.<step>/all.dat, one file all ranks write
(scr.route_shared_file), and at restart finds it in the checkpoint's list (scr.restart_info,
scr.restart_file) and reads all of it.
Rank 0 prints what happens: RESTARTED <name> step=<n> or NO_RESTART, SHARED writers=<n>
files=<n> (--shared), CHECKPOINT <name> ok=<0|1>, CRASH after <name>, DONE steps=<a>..<b>.
"""

import argparse
import os

from mpi4py import MPI

import scr

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--size", type=int, default=1 << 20)
parser.add_argument("--output-step", type=int, default=0)
parser.add_argument("--crash-after", type=int, default=0)
parser.add_argument("--shared", action="store_true")
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
BLOCK = 4096


def say(line):
    if rank == 0:
        print(line, flush=True)


def pattern(step, size=None, who=None):
    size = args.size if size is None else size
    seed = ("rank %d step %d;" % (rank if who is None else who, step)).encode()
    return (seed * (size // len(seed) + 1))[:size]


def read_shared(step):
    """Find the shared file in the checkpoint's list and check every writer's block."""
    writers, nfiles = scr.restart_info()
    listed = [scr.restart_file(i) for i in range(nfiles)]
    shared = [path for path, writer in listed if writer == -1]
    if len(shared) != 1:
        return False
    with open(scr.route_file(shared[0]), "rb") as f:
        data = f.read()
    say("SHARED writers=%d files=%d" % (writers, nfiles))
    return data == b"".join(pattern(step, BLOCK, w) for w in range(writers))


# Parameters may be set before init() (the environment and the user's config file win).
scr.config("SCR_CACHE_SIZE = 2")
say("CONFIG SCR_CACHE_SIZE=%s" % scr.config("SCR_CACHE_SIZE"))
scr.init()

# Restart: try the checkpoint SCR loaded; if any rank cannot read it, SCR offers the next one.
first = 1
while True:
    name = scr.have_restart()
    if name is None:
        say("NO_RESTART")
        break
    scr.start_restart()
    step = int(name.split(".")[1])
    try:
        with open(scr.route_file("ckpt.%d/rank_%d.dat" % (step, rank)), "rb") as f:
            valid = f.read() == pattern(step)
        if args.shared:
            valid = read_shared(step) and valid
    except (OSError, RuntimeError):
        valid = False
    if scr.complete_restart(valid):
        say("RESTARTED %s step=%d" % (name, step))
        first = step + 1
        break

last = first + args.steps - 1
for step in range(first, last + 1):
    # ... compute ...
    name = "ckpt.%d" % step
    flags = scr.FLAG_CHECKPOINT
    if step == args.output_step:
        flags |= scr.FLAG_OUTPUT
    scr.start_output(name, flags)
    try:
        with open(scr.route_file("%s/rank_%d.dat" % (name, rank)), "wb") as f:
            f.write(pattern(step))
        if args.shared:
            fd = os.open(scr.route_shared_file("%s/all.dat" % name), os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, pattern(step, BLOCK), rank * BLOCK)
            finally:
                os.close(fd)
        valid = True
    except (OSError, RuntimeError):
        valid = False
    ok = scr.complete_output(valid)
    say("CHECKPOINT %s ok=%d" % (name, ok))
    if step == args.crash_after:
        say("CRASH after %s" % name)
        comm.Barrier()
        os._exit(9)
    if scr.should_exit():
        last = step
        break

scr.finalize()
say("DONE steps=%d..%d" % (first, last))
