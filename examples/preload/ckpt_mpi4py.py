"""An mpi4py application that knows nothing of SCR: checkpoints ckpt.<step>/rank_<r>.dat with
Python's open(), a "latest" pointer written with os.replace, restart verified byte by byte.
Usage: python3 ckpt_mpi4py.py DIR STEPS [CRASH_AT]"""
import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
top, steps = sys.argv[1], int(sys.argv[2])
crash_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
NBYTES = 50000


def content(step):
    return bytes(((i * 31 + step * 7 + rank * 13) & 0xFF) for i in range(NBYTES))


def path(step):
    return os.path.join(top, "ckpt.%d" % step, "rank_%d.dat" % rank)


start = 0
latest = os.path.join(top, "latest")
if os.path.exists(latest):
    with open(latest) as f:
        start = int(f.read())
if start:
    ok = os.path.exists(path(start)) and os.path.getsize(path(start)) == NBYTES
    if ok:
        with open(path(start), "rb") as f:
            ok = f.read() == content(start)
    ok = comm.allreduce(ok, op=MPI.LAND)
    if rank == 0:
        print("RESTARTED %d %s" % (start, "verified" if ok else "CORRUPT"), flush=True)
elif rank == 0:
    print("NO_RESTART", flush=True)

for step in range(start + 1, steps + 1):
    if step == crash_at and rank == size - 1:
        os._exit(9)
    comm.Barrier()
    if step % 2 == 0:
        os.makedirs(os.path.join(top, "ckpt.%d" % step), exist_ok=True)
        with open(path(step), "wb") as f:
            f.write(content(step))
        comm.Barrier()
        if rank == 0:
            with open(latest + ".tmp", "w") as f:
                f.write("%d\n" % step)
            os.replace(latest + ".tmp", latest)
            print("CHECKPOINT %d" % step, flush=True)
if rank == 0:
    print("DONE", flush=True)
