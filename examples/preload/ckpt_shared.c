/* An MPI application that knows nothing of SCR and writes an N-to-1 checkpoint file: every
 * few steps, into <dir>/ckpt.<step>/, all ranks write their part of shared.dat at their own
 * offset (through MPI-IO, or plain pwrite), each rank also writes rank_<r>.dat, then rank 0
 * writes the "latest" pointer. On start-up it restarts from the step the pointer names and
 * verifies every byte it reads back (shared.dat through MPI-IO or pread, its own file).
 *
 *   ckpt_shared --dir DIR [--steps N] [--every K] [--io mpiio|pwrite] [--crash-at STEP]
 *               [--crash-in STEP] [--fail-write STEP] [--meta-after] [--self-file]
 *
 * Rank r's part of shared.dat has 10000 + 777 r bytes (never a multiple of 4096) at the sum
 * of the sizes of the parts before it, each rank a pattern of its own.
 * --fail-write STEP: at STEP, rank 1's writes of shared.dat fail (a file size limit of one
 * byte; --io pwrite: its own descriptor). --crash-at STEP: the last rank dies at STEP.
 * --crash-in STEP: the last rank dies in the checkpoint of STEP, after every file of it was
 * written and before the barrier that ends it.
 * --meta-after: after the barrier that ends the checkpoint (a sync point: it is complete),
 * rank 0 adds ckpt.<step>/meta.txt to it, then writes the pointer.
 * --self-file: each rank also writes ckpt.<step>/self_<r>.dat through MPI-IO on
 * MPI_COMM_SELF (a file of its own).
 * Prints (rank 0): RESTARTED <s> verified | NO_RESTART, CHECKPOINT <s>, DONE. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir = ".";
static int use_mpiio = 1, meta_after = 0, self_file = 0;
static int rank, nranks;

static void die(const char *what, const char *path) {
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static long part_size(int r) { return 10000 + 777L * r; }

static long part_offset(int r) {
  long off = 0;
  for (int i = 0; i < r; i++) off += part_size(i);
  return off;
}

static unsigned char byte_at(int step, int r, int file, long i) {
  return (unsigned char)((i * 7 + step * 11 + r * 37 + file * 53 + (i >> 8)) & 0xff);
}

static unsigned char *pattern(int step, int file, long n) {
  unsigned char *buf = malloc(n);
  for (long i = 0; i < n; i++) buf[i] = byte_at(step, rank, file, i);
  return buf;
}

/* 1 if the n bytes of buf are this rank's pattern */
static int same(const unsigned char *buf, long n, int step, int file, const char *what) {
  for (long i = 0; i < n; i++)
    if (buf[i] != byte_at(step, rank, file, i)) {
      fprintf(stderr, "rank %d: %s: byte %ld differs\n", rank, what, i);
      return 0;
    }
  return 1;
}

static void write_shared(const char *path, int step) {
  long n = part_size(rank), off = part_offset(rank);
  unsigned char *buf = pattern(step, 0, n);
  if (use_mpiio) {
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) die("MPI_File_open", path);
    MPI_Status st;
    rc = MPI_File_write_at_all(fh, off, buf, (int)n, MPI_BYTE, &st);
    if (rc != MPI_SUCCESS) fprintf(stderr, "rank %d: MPI_File_write_at_all %s failed\n", rank, path);
    if (MPI_File_close(&fh) != MPI_SUCCESS) die("MPI_File_close", path);
  } else {
    int fd = open(path, O_WRONLY | O_CREAT, 0640);
    if (fd < 0) die("open", path);
    if (pwrite(fd, buf, n, off) != n) fprintf(stderr, "rank %d: pwrite %s failed: %s\n", rank, path, strerror(errno));
    if (close(fd) != 0) die("close", path);
  }
  free(buf);
}

static int check_shared(const char *path, int step) {
  long n = part_size(rank), off = part_offset(rank);
  unsigned char *buf = calloc(1, n);
  long got = 0;
  if (use_mpiio) {
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS) {
      fprintf(stderr, "rank %d: MPI_File_open %s (read) failed\n", rank, path);
      free(buf);
      return 0;
    }
    MPI_Offset total = 0;
    MPI_File_get_size(fh, &total);
    MPI_Status st;
    int count = 0;
    if (MPI_File_read_at_all(fh, off, buf, (int)n, MPI_BYTE, &st) == MPI_SUCCESS) MPI_Get_count(&st, MPI_BYTE, &count);
    got = count;
    MPI_File_close(&fh);
    if (total != part_offset(nranks)) {
      fprintf(stderr, "rank %d: %s has %lld bytes, not %ld\n", rank, path, (long long)total, part_offset(nranks));
      got = -1;
    }
  } else {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
      fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
      free(buf);
      return 0;
    }
    got = pread(fd, buf, n, off);
    close(fd);
  }
  int ok = got == n && same(buf, n, step, 0, path);
  if (got != n) fprintf(stderr, "rank %d: %s: read %ld of %ld bytes\n", rank, path, got, n);
  free(buf);
  return ok;
}

static void write_own(const char *path, int step, int mpiio) {
  long n = 7001 + rank;
  unsigned char *buf = pattern(step, 1, n);
  if (mpiio) {
    MPI_File fh;
    MPI_Status st;
    if (MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS ||
        MPI_File_write_at(fh, 0, buf, (int)n, MPI_BYTE, &st) != MPI_SUCCESS || MPI_File_close(&fh) != MPI_SUCCESS)
      die("MPI-IO on MPI_COMM_SELF", path);
  } else {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    if (fd < 0) die("open", path);
    if (write(fd, buf, n) != n || close(fd) != 0) die("write", path);
  }
  free(buf);
}

static int check_own(const char *path, int step, int mpiio) {
  long n = 7001 + rank;
  unsigned char *buf = calloc(1, n + 1);
  long got = -1;
  if (mpiio) {
    MPI_File fh;
    MPI_Status st;
    int count = 0;
    if (MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh) == MPI_SUCCESS) {
      if (MPI_File_read_at(fh, 0, buf, (int)n + 1, MPI_BYTE, &st) == MPI_SUCCESS) MPI_Get_count(&st, MPI_BYTE, &count);
      MPI_File_close(&fh);
      got = count;
    }
  } else {
    int fd = open(path, O_RDONLY);
    got = fd < 0 ? -1 : read(fd, buf, n + 1);
    if (fd >= 0) close(fd);
  }
  int ok = got == n && same(buf, n, step, 1, path);
  if (!ok) fprintf(stderr, "rank %d: %s: read %ld of %ld bytes (%s)\n", rank, path, got, n, strerror(errno));
  free(buf);
  return ok;
}

static int crash_in = -1;

static void checkpoint(int step, int fail_write) {
  char path[4096], tmp[4096];
  snprintf(path, sizeof path, "%s/ckpt.%d", dir, step);
  if (rank == 0 && mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
  MPI_Barrier(MPI_COMM_WORLD);
  struct rlimit saved;
  getrlimit(RLIMIT_FSIZE, &saved);
  if (fail_write) {
    struct rlimit rl = {1, saved.rlim_max};
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &rl);
  }
  snprintf(path, sizeof path, "%s/ckpt.%d/shared.dat", dir, step);
  write_shared(path, step);
  if (fail_write) setrlimit(RLIMIT_FSIZE, &saved);
  snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.dat", dir, step, rank);
  write_own(path, step, 0);
  if (self_file) {
    snprintf(path, sizeof path, "%s/ckpt.%d/self_%d.dat", dir, step, rank);
    write_own(path, step, 1);
  }
  if (step == crash_in && rank == nranks - 1) {
    fprintf(stderr, "rank %d: CRASH in the checkpoint of step %d\n", rank, step);
    _exit(9);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    if (meta_after) {
      snprintf(path, sizeof path, "%s/ckpt.%d/meta.txt", dir, step);
      FILE *m = fopen(path, "w");
      if (!m || fprintf(m, "step %d\n", step) < 0 || fclose(m) != 0) die("write", path);
    }
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(tmp, "w");
    if (!f) die("fopen", tmp);
    fprintf(f, "%d\n", step);
    fclose(f);
    if (rename(tmp, path) != 0) die("rename", tmp);
    printf("CHECKPOINT %d\n", step);
    fflush(stdout);
  }
}

int main(int argc, char **argv) {
  int steps = 6, every = 2, crash_at = -1, fail_write = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir")) dir = argv[++i];
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--every")) every = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--io")) use_mpiio = !strcmp(argv[++i], "mpiio");
    else if (!strcmp(argv[i], "--crash-at")) crash_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--crash-in")) crash_in = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fail-write")) fail_write = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--meta-after")) meta_after = 1;
    else if (!strcmp(argv[i], "--self-file")) self_file = 1;
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  int start = 0;
  char path[4096];
  snprintf(path, sizeof path, "%s/latest", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%d", &start) != 1) start = 0;
    fclose(f);
  }
  if (start > 0) {
    snprintf(path, sizeof path, "%s/ckpt.%d/shared.dat", dir, start);
    int ok = check_shared(path, start);
    snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.dat", dir, start, rank);
    ok &= check_own(path, start, 0);
    if (self_file) {
      snprintf(path, sizeof path, "%s/ckpt.%d/self_%d.dat", dir, start, rank);
      ok &= check_own(path, start, 1);
    }
    if (meta_after && rank == 0) {
      snprintf(path, sizeof path, "%s/ckpt.%d/meta.txt", dir, start);
      FILE *m = fopen(path, "r");
      int s = -1;
      if (!m || fscanf(m, "step %d", &s) != 1 || s != start) {
        fprintf(stderr, "rank 0: bad %s\n", path);
        ok = 0;
      }
      if (m) fclose(m);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) printf("RESTARTED %d %s\n", start, all ? "verified" : "CORRUPT");
    if (!all) MPI_Abort(MPI_COMM_WORLD, 3);
  } else if (rank == 0) {
    printf("NO_RESTART\n");
  }
  fflush(stdout);

  double x = rank;
  for (int step = start + 1; step <= steps; step++) {
    if (step == crash_at) {
      if (rank == nranks - 1) {
        fprintf(stderr, "rank %d: CRASH at step %d\n", rank, step);
        _exit(9);
      }
      sleep(30);
    }
    double sum = 0;
    x = x * 0.5 + step;
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (step % every == 0) checkpoint(step, step == fail_write && rank == 1);
  }
  if (rank == 0) printf("DONE\n");
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
