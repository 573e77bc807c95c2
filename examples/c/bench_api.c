/*
 * bench_api: what the SCR API costs against the raw limit, measured in the same run.
 *
 *   bench_api write   --size BYTES --reps N   checkpoints through SCR vs the same bytes
 *                                             written straight into the same cache dir;
 *                                             then a flush vs a plain copy to the prefix
 *   bench_api restart --size BYTES            SCR_Init..SCR_Complete_restart (data read
 *                                             included) vs reading the same files directly
 *   bench_api async   --size BYTES --reps N   with SCR_FLUSH=0: a checkpoint that stays in
 *                                             cache (SINGLE, no flush) vs one flagged
 *                                             output too, flushed by SCR_FLUSH_ASYNC; and a
 *                                             compute kernel timed while that flush runs vs
 *                                             with no flush running
 *
 * Times are the maximum over ranks of each phase; bandwidth is aggregate. Run from the
 * prefix directory with SCR_CACHE_BYPASS=0 and SCR_FLUSH=0 (scripts/bench.sh does).
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scr.h"

static int rank, ranks;
static size_t size = 64 << 20;
static unsigned char* buf;
#define CHUNK (1 << 20)

static void die(const char* what, const char* path)
{
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void write_file(const char* path, int do_fsync)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die("open", path);
  for (size_t done = 0; done < size; done += CHUNK) {
    size_t n = size - done < CHUNK ? size - done : CHUNK;
    if (write(fd, buf, n) != (ssize_t) n) die("write", path);
  }
  if (do_fsync) fsync(fd);
  if (close(fd) != 0) die("close", path);
}

static void read_file(const char* path)
{
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open", path);
  unsigned long sum = 0;
  ssize_t n;
  unsigned char* rb = malloc(CHUNK);
  while ((n = read(fd, rb, CHUNK)) > 0) sum += rb[0] + rb[n - 1];
  free(rb);
  close(fd);
  if (sum == 1) printf(" ");
}

static void copy_file(const char* src, const char* dst, int do_fsync)
{
  int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0) die("open", src);
  if (out < 0) die("open", dst);
  unsigned char* cb = malloc(CHUNK);
  ssize_t n;
  while ((n = read(in, cb, CHUNK)) > 0)
    if (write(out, cb, (size_t) n) != n) die("write", dst);
  free(cb);
  if (do_fsync) fsync(out);
  close(in);
  close(out);
}

static double tmax(double t0)
{
  double t = MPI_Wtime() - t0, m;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static double bw(double secs) { return (double) size * ranks / (1024.0 * 1024.0) / secs; }

static int cmp(const void* a, const void* b)
{
  double x = *(const double*) a, y = *(const double*) b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n)
{
  qsort(v, (size_t) n, sizeof(double), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A compute kernel: `iters` rounds of arithmetic on a 4 MiB array (cache-resident work
 * that a background copy competes with for cores and memory bandwidth). */
static double kernel(long iters)
{
  static double* a = NULL;
  const size_t n = (4 << 20) / sizeof(double);
  if (!a) {
    a = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) a[i] = (double) i * 1e-9;
  }
  double s = 0;
  for (long it = 0; it < iters; it++)
    for (size_t i = 0; i < n; i++) {
      a[i] = a[i] * 1.0000001 + 1e-12;
      s += a[i];
    }
  return s;
}

/* Rank 0 waits until dataset `id` (named `name`) is published in the prefix: its summary
 * exists and the background flush's working directory is gone. */
static void wait_published(int id, const char* name)
{
  if (rank == 0) {
    char summary[4096], work[4096];
    snprintf(summary, sizeof summary, ".scr/scr.dataset.%d/summary.scr", id);
    snprintf(work, sizeof work, ".scr/scr.dataset.%d/flush", id);
    for (int tries = 0;; tries++) {
      if (access(summary, F_OK) == 0 && access(work, F_OK) != 0) break;
      if (tries > 200000) {
        fprintf(stderr, "dataset %d (%s) never reached the prefix\n", id, name);
        MPI_Abort(MPI_COMM_WORLD, 4);
      }
      usleep(1000);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void one_checkpoint(const char* name, int flags)
{
  char path[2 * SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
  SCR_Start_output(name, flags);
  snprintf(path, sizeof path, "%s/rank_%d", name, rank);
  SCR_Route_file(path, routed);
  write_file(routed, 0);
  SCR_Complete_output(1);
}

int main(int argc, char** argv)
{
  int reps = 5;
  const char* mode = argc > 1 ? argv[1] : "write";
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  buf = malloc(CHUNK);
  for (int i = 0; i < CHUNK; i++) buf[i] = (unsigned char) (i * 7 + rank);
  const char* base = getenv("SCR_CACHE_BASE");
  char raw[4096], path[2 * SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
  snprintf(raw, sizeof raw, "%s/bench_raw.%d", base ? base : "/dev/shm", rank);

  if (!strcmp(mode, "write")) {
    double t0 = MPI_Wtime();
    if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    double t_init = tmax(t0);
    double* t_raw = calloc((size_t) reps, sizeof(double));
    double* t_scr = calloc((size_t) reps, sizeof(double));
    for (int r = 0; r < reps; r++) {
      /* raw: the same bytes straight into the same cache directory */
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      write_file(raw, 0);
      t_raw[r] = tmax(t0);
      unlink(raw);
      /* through SCR: Start_output .. Complete_output */
      char name[64];
      snprintf(name, sizeof name, "bench.%d", r);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      SCR_Start_output(name, SCR_FLAG_CHECKPOINT);
      snprintf(path, sizeof path, "%s/rank_%d", name, rank);
      SCR_Route_file(path, routed);
      write_file(routed, 0);
      SCR_Complete_output(1);
      t_scr[r] = tmax(t0);
    }
    /* flush: an output dataset's completion minus a checkpoint's, vs a plain copy */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    SCR_Start_output("bench.flush", SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT);
    snprintf(path, sizeof path, "bench.flush/rank_%d", rank);
    SCR_Route_file(path, routed);
    write_file(routed, 0);
    SCR_Complete_output(1);
    double t_out = tmax(t0);
    double m_raw = median(t_raw, reps), m_scr = median(t_scr, reps);
    double t_flush = t_out - m_scr;
    char dst[4096];
    snprintf(dst, sizeof dst, "bench.copy.%d", rank);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    copy_file(routed, dst, 0);
    double t_copy = tmax(t0);
    unlink(dst);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    copy_file(routed, dst, 1);
    double t_copy_sync = tmax(t0);
    unlink(dst);
    if (rank == 0) {
      printf("BENCH ranks=%d size_per_rank=%zu MiB reps=%d init=%.4f s\n", ranks, size >> 20, reps, t_init);
      printf("BENCH checkpoint raw  median %.4f s  %8.1f MiB/s\n", m_raw, bw(m_raw));
      printf("BENCH checkpoint scr  median %.4f s  %8.1f MiB/s  ratio %.3f\n", m_scr, bw(m_scr), m_raw / m_scr);
      printf("BENCH flush scr            %.4f s  %8.1f MiB/s\n", t_flush, bw(t_flush));
      printf("BENCH copy plain           %.4f s  %8.1f MiB/s  ratio %.3f\n", t_copy, bw(t_copy), t_copy / t_flush);
      printf("BENCH copy plain+fsync     %.4f s  %8.1f MiB/s  ratio %.3f\n", t_copy_sync, bw(t_copy_sync), t_copy_sync / t_flush);
    }
    free(t_raw);
    free(t_scr);
    SCR_Finalize();
  } else if (!strcmp(mode, "async")) {
    if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    /* calibrate the kernel to about 0.5 s on rank 0 */
    long iters = 1;
    kernel(iters); /* first touch of the array */
    double t0 = MPI_Wtime();
    kernel(iters);
    double one = MPI_Wtime() - t0;
    iters = (long) (0.5 / (one > 1e-6 ? one : 1e-6));
    if (iters < 1) iters = 1;
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    double* t_single = calloc((size_t) reps, sizeof(double));
    double* t_async = calloc((size_t) reps, sizeof(double));
    double* t_busy = calloc((size_t) reps, sizeof(double));
    double* t_idle = calloc((size_t) reps, sizeof(double));
    char name[64];
    for (int r = 0; r < reps; r++) {
      snprintf(name, sizeof name, "single.%d", r);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      one_checkpoint(name, SCR_FLAG_CHECKPOINT);
      t_single[r] = tmax(t0);
      snprintf(name, sizeof name, "async.%d", r);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      one_checkpoint(name, SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT);
      t_async[r] = tmax(t0);
      /* compute while the flush runs */
      t0 = MPI_Wtime();
      kernel(iters);
      t_busy[r] = tmax(t0);
      wait_published(2 * r + 2, name);
      /* the same compute with nothing in the background */
      t0 = MPI_Wtime();
      kernel(iters);
      t_idle[r] = tmax(t0);
    }
    const char* env_async = getenv("SCR_FLUSH_ASYNC");
    int async = env_async && atoi(env_async);
    double ms = median(t_single, reps), ma = median(t_async, reps);
    double mb = median(t_busy, reps), mi = median(t_idle, reps);
    if (rank == 0) {
      printf("BENCH ranks=%d size_per_rank=%zu MiB reps=%d\n", ranks, size >> 20, reps);
      printf("BENCH checkpoint single, no flush   median %.4f s  %8.1f MiB/s\n", ms, bw(ms));
      printf("BENCH checkpoint + flush (%s)  median %.4f s  %8.1f MiB/s  ratio %.3f\n",
             async ? "async" : "sync ", ma, bw(ma), ma / ms);
      if (async) {
        printf("BENCH compute, nothing behind       median %.4f s\n", mi);
        printf("BENCH compute, flush behind         median %.4f s  slowdown %.3f\n", mb, mb / mi);
      }
    }
    free(t_single);
    free(t_async);
    free(t_busy);
    free(t_idle);
    SCR_Finalize();
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    int have = 0;
    char name[SCR_MAX_FILENAME];
    SCR_Have_restart(&have, name);
    if (!have) MPI_Abort(MPI_COMM_WORLD, 3);
    SCR_Start_restart(name);
    snprintf(path, sizeof path, "%s/rank_%d", name, rank);
    SCR_Route_file(path, routed);
    read_file(routed);
    SCR_Complete_restart(1);
    double t_scr = tmax(t0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    read_file(routed);
    double t_raw = tmax(t0);
    if (rank == 0) {
      printf("BENCH restart raw read       %.4f s  %8.1f MiB/s\n", t_raw, bw(t_raw));
      printf("BENCH restart scr (init..complete) %.4f s  %8.1f MiB/s  ratio %.3f\n", t_scr, bw(t_scr), t_scr / t_raw);
    }
    SCR_Finalize();
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
