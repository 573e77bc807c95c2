/*
 * shared: an MPI application whose checkpoint holds one file all ranks write together (N-to-1)
 * besides a file of each rank. At checkpoint step S every rank r writes its block of
 * ckpt.S/shared.dat (BYTES bytes at offset r * BYTES, a pattern of r and S) and its own
 * ckpt.S/rank_<r>.dat (BYTES / 4 + r bytes).
 *
 *   shared [--steps N] [--size BYTES] [--mode pwrite|mpiio|undeclared|mixed] [--even]
 *          [--fail-rank R] [--fail-step K]
 *
 * --mode pwrite      SCR_Route_shared_file, then open + pwrite of the rank's block (default)
 * --mode mpiio       SCR_Route_shared_file, then MPI_File_open on MPI_COMM_WORLD and
 *                    MPI_File_write_at_all
 * --mode undeclared  SCR_Route_file by every rank for the same name (a misuse SCR refuses,
 *                    except with SCR_CACHE_BYPASS=1, where every route leads to the prefix and
 *                    the name becomes a shared file)
 * --mode mixed      even ranks SCR_Route_shared_file, odd ranks SCR_Route_file for the same name
 *                    (a misuse SCR refuses, naming the file and the ranks), then pwrite
 * --even             only the even ranks write the shared file (declare it and pwrite their block
 *                    at (rank / 2) * BYTES): a shared file of a subset of the ranks; give it at
 *                    restart too (not with --mode mpiio)
 * --fail-rank R --fail-step K  rank R reports valid=0 for checkpoint K (after writing its part)
 *
 * At restart every rank lists the checkpoint (SCR_Restart_info, SCR_Restart_file: the shared
 * file has writer -1), reads the whole shared file and the files of the writers w with
 * w % ranks == rank, checking every byte.
 *
 * Output: every rank "RESULT rank=<r> <name> ok=<0|1>" per checkpoint; rank 0 "RESTARTED <name>
 * step=<S> writers=<W> shared_bytes=<n> read=<files read by all ranks>", "NO_RESTART",
 * "DONE steps=<a>..<b>".
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scr.h"

static int rank, ranks, even;

/* The ranks that write the shared file of a checkpoint written by `writers` processes: how many,
 * and the block of rank r (-1: r writes none). */
static int sharers(int writers) { return even ? (writers + 1) / 2 : writers; }
static int block_of(int r) { return even ? (r % 2 ? -1 : r / 2) : r; }

static unsigned char pattern(int seed, int step, size_t i)
{
  return (unsigned char) ((seed * 37 + step * 5 + i * 3 + (i >> 9)) & 0xff);
}

static unsigned char* bytes_of(int seed, int step, size_t n)
{
  unsigned char* b = malloc(n ? n : 1);
  for (size_t i = 0; i < n; i++) b[i] = pattern(seed, step, i);
  return b;
}

static size_t own_size(size_t size, int r) { return size / 4 + (size_t) r; }

static int pwrite_all(const char* path, const unsigned char* buf, size_t n, off_t off, int flags)
{
  int fd = open(path, flags, 0600);
  if (fd < 0) {
    fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
    return 0;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = pwrite(fd, buf + done, n - done, off + (off_t) done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t) w;
  }
  return close(fd) == 0 && done == n;
}

/* Read `n` bytes of `path` at `off` and compare them with `want`; the file must be `total` long. */
static int check_at(const char* path, size_t total, off_t off, const unsigned char* want, size_t n)
{
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
    return 0;
  }
  unsigned char* got = malloc(n ? n : 1);
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, got + done, n - done, off + (off_t) done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t) r;
  }
  off_t end = lseek(fd, 0, SEEK_END);
  close(fd);
  int ok = done == n && memcmp(got, want, n) == 0 && end == (off_t) total;
  if (!ok) fprintf(stderr, "rank %d: %s: wrong bytes at %lld or wrong length %lld\n", rank, path, (long long) off, (long long) end);
  free(got);
  return ok;
}

static const char* base(const char* p)
{
  const char* s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* One restart attempt; returns whether this rank read everything. */
static int attempt(const char* name, size_t size, int* step, int* writers_out, int* read)
{
  int writers = 0, nfiles = 0;
  sscanf(name, "ckpt.%d", step);
  if (SCR_Restart_info(&writers, &nfiles) != SCR_SUCCESS || nfiles != writers + 1) return 0;
  *writers_out = writers;
  int ok = 1;
  for (int i = 0; i < nfiles && ok; i++) {
    char path[SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
    int w = -2, k = -1;
    ok = SCR_Restart_file(i, path, &w) == SCR_SUCCESS;
    if (!ok) break;
    if (w == -1 && !strcmp(base(path), "shared.dat")) {
      ok = SCR_Route_file(path, routed) == SCR_SUCCESS;
      for (int r = 0; r < writers && ok; r++) {
        if (block_of(r) < 0) continue;
        unsigned char* want = bytes_of(r, *step, size);
        ok = check_at(routed, size * (size_t) sharers(writers), (off_t) (size * (size_t) block_of(r)), want, size);
        free(want);
      }
      *read += ok;
    } else if (sscanf(base(path), "rank_%d.dat", &k) == 1 && k == w) {
      if (w % ranks != rank) continue;
      unsigned char* want = bytes_of(1000 + w, *step, own_size(size, w));
      ok = SCR_Route_file(path, routed) == SCR_SUCCESS && check_at(routed, own_size(size, w), 0, want, own_size(size, w));
      free(want);
      *read += ok;
    } else {
      fprintf(stderr, "rank %d: unexpected file %s (writer %d)\n", rank, path, w);
      ok = 0;
    }
  }
  return ok;
}

int main(int argc, char** argv)
{
  size_t size = 65537;
  int steps = 2, fail_rank = -1, fail_step = -1;
  const char* mode = "pwrite";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
    else if (!strcmp(argv[i], "--even")) even = 1;
    else if (!strcmp(argv[i], "--fail-rank") && i + 1 < argc) fail_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fail-step") && i + 1 < argc) fail_step = atoi(argv[++i]);
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  int mpiio = !strcmp(mode, "mpiio"), undeclared = !strcmp(mode, "undeclared"), mixed = !strcmp(mode, "mixed");
  if (even && mpiio) {
    fprintf(stderr, "--even writes with pwrite: not with --mode mpiio\n");
    return 2;
  }

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (SCR_Init() != SCR_SUCCESS) {
    if (rank == 0) printf("SCR_INIT_FAILED\n");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  int start = 0, have = 0;
  char name[SCR_MAX_FILENAME];
  while (SCR_Have_restart(&have, name) == SCR_SUCCESS && have) {
    SCR_Start_restart(name);
    int step = -1, writers = 0, read = 0, total = 0;
    int valid = attempt(name, size, &step, &writers, &read);
    MPI_Reduce(&read, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (SCR_Complete_restart(valid) == SCR_SUCCESS) {
      start = step;
      if (rank == 0) {
        printf("RESTARTED %s step=%d writers=%d shared_bytes=%zu read=%d\n", name, step, writers,
               size * (size_t) sharers(writers), total);
      }
      break;
    }
  }
  if (start == 0 && rank == 0) printf("NO_RESTART\n");
  fflush(stdout);

  for (int step = start + 1; step <= start + steps; step++) {
    char ckname[64], path[SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
    snprintf(ckname, sizeof ckname, "ckpt.%d", step);
    SCR_Start_output(ckname, SCR_FLAG_CHECKPOINT);
    snprintf(path, sizeof path, "%s/shared.dat", ckname);
    int privately = undeclared || (mixed && rank % 2);
    int writes = block_of(rank) >= 0;
    int valid = !writes || (privately ? SCR_Route_file(path, routed) : SCR_Route_shared_file(path, routed)) == SCR_SUCCESS;
    unsigned char* block = bytes_of(rank, step, size);
    MPI_Offset off = (MPI_Offset) size * (writes ? block_of(rank) : 0);
    if (mpiio) {
      /* collective: every rank opens, even one whose route failed (it writes nothing) */
      MPI_File fh;
      int rc = MPI_File_open(MPI_COMM_WORLD, valid ? routed : path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
      MPI_Status st;
      if (rc == MPI_SUCCESS) {
        rc = MPI_File_write_at_all(fh, off, block, valid ? (int) size : 0, MPI_BYTE, &st);
        valid = valid && rc == MPI_SUCCESS;
        valid = MPI_File_close(&fh) == MPI_SUCCESS && valid;
      } else {
        valid = 0;
      }
    } else if (valid && writes) {
      valid = pwrite_all(routed, block, size, (off_t) off, O_WRONLY | O_CREAT);
    }
    free(block);
    snprintf(path, sizeof path, "%s/rank_%d.dat", ckname, rank);
    unsigned char* own = bytes_of(1000 + rank, step, own_size(size, rank));
    valid = valid && SCR_Route_file(path, routed) == SCR_SUCCESS &&
            pwrite_all(routed, own, own_size(size, rank), 0, O_WRONLY | O_CREAT | O_TRUNC);
    free(own);
    if (rank == fail_rank && step == fail_step) valid = 0;
    int rc = SCR_Complete_output(valid);
    printf("RESULT rank=%d %s ok=%d\n", rank, ckname, rc == SCR_SUCCESS);
    fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("DONE steps=%d..%d\n", start + 1, start + steps);
  fflush(stdout);
  SCR_Finalize();
  MPI_Finalize();
  return 0;
}
