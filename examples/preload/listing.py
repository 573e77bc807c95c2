"""Directory listings and tree removal of checkpoint files, as a Python application does
them (os.listdir, os.scandir, os.walk, shutil.rmtree), printing what it sees; run with and
without transparent mode, the printed lines must be the same. Knows nothing of SCR.
Usage: listing.py DIR"""
import os
import shutil
import subprocess
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
top = sys.argv[1]
mine = f"{top}/ckpt.1/r{rank}"


def out(*words):
    # one write per line, so the ranks' lines never interleave
    sys.stdout.write(" ".join([f"r{rank}"] + [str(w) for w in words]) + "\n")
    sys.stdout.flush()


if rank == 0:
    os.makedirs(f"{top}/ckpt.1", exist_ok=True)
comm.Barrier()
os.makedirs(f"{mine}/sub", exist_ok=True)
for name, text in [("f", "checkpoint"), ("a", "aa"), ("sub/c", "ccc"), ("notes.txt", "not a checkpoint file")]:
    with open(f"{mine}/{name}", "w") as fh:
        fh.write(text)
comm.Barrier()  # the checkpoint is complete

out("listdir", sorted(os.listdir(mine)))
entries = []
for e in os.scandir(mine):
    entries.append((e.name, e.is_dir(), e.is_file(), e.stat().st_size if e.is_file() else 0, e.inode() != 0))
out("scandir", sorted(entries))
walk = [(os.path.relpath(root, top), sorted(dirs), sorted(files)) for root, dirs, files in os.walk(mine)]
out("walk", sorted(walk))
out("exists", os.path.exists(f"{mine}/f"), os.path.getsize(f"{mine}/sub/c"))
out("child-ls", subprocess.run(["ls", "-1", mine], capture_output=True, text=True).stdout.split())
shutil.rmtree(mine)
out("after-rmtree", os.path.exists(f"{mine}/f"), os.path.exists(f"{mine}/sub/c"), os.path.exists(mine))
comm.Barrier()  # a sync point: the removal reaches SCR's dataset
out("after-sync", os.path.exists(f"{mine}/f"), os.path.exists(mine), sorted(os.listdir(f"{top}/ckpt.1")))
