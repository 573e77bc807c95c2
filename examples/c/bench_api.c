/*
 * bench_api: what the SCR API costs against the raw limit, measured in the same run. Every
 * repetition times our operation and its raw limit back to back (A B A B ...), and rank 0
 * prints one line per pair and per plain time:
 *
 *   RATIO <name> <value>      scripts/common.sh's `summarize` gives median, min and max
 *   TIME <name> <seconds>
 *
 * Times are the maximum over ranks.
 *
 *   bench_api write   --size BYTES --reps N [--gap S]
 *                                             a checkpoint through SCR vs the same bytes
 *                                             written into the same cache directory by a raw
 *                                             writer that deletes its previous file outside the
 *                                             timed region; RATIO checkpoint = raw / SCR time.
 *                                             Pairs are S seconds apart (idle), so that the
 *                                             library's background work on one checkpoint (CRC,
 *                                             deleting the one it evicted) does not slow the
 *                                             next pair's raw write
 *   bench_api restart --size BYTES            SCR_Init..SCR_Complete_restart (reading the data
 *                                             included) vs a plain read of the same files right
 *                                             after; RATIO restart = SCR / read time, TIME init
 *   bench_api alternate --size BYTES --reps N [--compute S]
 *                                             checkpoints 1, 2, 3, ... (odd and even ones may
 *                                             use different CKPT descriptors, INTERVAL=2), each
 *                                             followed by S seconds of compute (a kernel
 *                                             calibrated without SCR); RATIO checkpoint_even =
 *                                             even / odd checkpoint time, RATIO compute_even =
 *                                             compute after an even one / after an odd one
 *   bench_api async   --size BYTES --reps N [--gap S]
 *                                             with SCR_FLUSH=0: a checkpoint that stays in
 *                                             cache vs one flagged output too (flushed by
 *                                             SCR_FLUSH_ASYNC), S seconds apart (idle: the
 *                                             first one's background CRC32 is not what the
 *                                             second measures); RATIO flush = the second /
 *                                             the first; RATIO compute_flush = a compute kernel
 *                                             while that flush runs / with nothing behind it
 *
 * Run from the prefix directory with SCR_CACHE_BYPASS=0 and SCR_FLUSH=0 (the scripts do).
 */
#include "bench.h"
#include "scr.h"

static unsigned char* buf;

static void ratio(const char* name, double v)
{
  if (rank == 0) printf("RATIO %s %.4f\n", name, v);
}

static void timed(const char* name, double secs)
{
  if (rank == 0) printf("TIME %s %.4f\n", name, secs);
}

/* A compute kernel: `iters` rounds of arithmetic on a 4 MiB array (cache-resident work
 * that background work competes with for cores and memory bandwidth). */
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

/* Kernel iterations that take about `secs` on rank 0 (the same on every rank). */
static long calibrate(double secs)
{
  kernel(1); /* first touch of the array */
  double t0 = MPI_Wtime();
  kernel(1);
  double one = MPI_Wtime() - t0;
  long iters = (long) (secs / (one > 1e-6 ? one : 1e-6));
  if (iters < 1) iters = 1;
  MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return iters;
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

/* One checkpoint through SCR, timed from SCR_Start_output to SCR_Complete_output's return. */
static double checkpoint(const char* name, int flags)
{
  char path[2 * SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  SCR_Start_output(name, flags);
  snprintf(path, sizeof path, "%s/rank_%d", name, rank);
  SCR_Route_file(path, routed);
  write_file(routed, buf);
  SCR_Complete_output(1);
  return tmax(t0);
}

int main(int argc, char** argv)
{
  int reps = 5;
  double compute = 0, gap = 0;
  const char* mode = argc > 1 ? argv[1] : "write";
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--compute") && i + 1 < argc) compute = atof(argv[++i]);
    else if (!strcmp(argv[i], "--gap") && i + 1 < argc) gap = atof(argv[++i]);
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  buf = malloc(CHUNK);
  for (int i = 0; i < CHUNK; i++) buf[i] = (unsigned char) (i * 7 + rank);
  const char* base = getenv("SCR_CACHE_BASE");
  char raw[4096], path[2 * SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME], name[64];
  snprintf(raw, sizeof raw, "%s/bench_raw.%d", base ? base : "/dev/shm", rank);

  if (!strcmp(mode, "write")) {
    if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int r = 0; r < reps; r++) {
      double t_raw = raw_write(raw, buf, r > 0 ? gap : 0);
      snprintf(name, sizeof name, "bench.%d", r);
      double t_scr = checkpoint(name, SCR_FLAG_CHECKPOINT);
      ratio("checkpoint", t_raw / t_scr);
      timed("raw_write", t_raw);
      timed("checkpoint", t_scr);
    }
    SCR_Finalize();
  } else if (!strcmp(mode, "alternate")) {
    if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    long iters = compute > 0 ? calibrate(compute) : 0;
    double t_ckpt[2] = {0, 0}, t_comp[2] = {0, 0};
    for (int c = 1; c <= 2 * reps; c++) {
      snprintf(name, sizeof name, "bench.%d", c);
      t_ckpt[c % 2] = checkpoint(name, SCR_FLAG_CHECKPOINT);
      if (iters > 0) {
        double t0 = MPI_Wtime();
        kernel(iters);
        t_comp[c % 2] = tmax(t0);
      }
      if (c % 2 == 0) {
        ratio("checkpoint_even", t_ckpt[0] / t_ckpt[1]);
        timed("checkpoint_odd", t_ckpt[1]);
        timed("checkpoint_even", t_ckpt[0]);
        if (iters > 0) {
          ratio("compute_even", t_comp[0] / t_comp[1]);
          timed("compute_odd", t_comp[1]);
        }
      }
    }
    SCR_Finalize();
  } else if (!strcmp(mode, "async")) {
    if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    long iters = calibrate(0.5);
    for (int r = 0; r < reps; r++) {
      snprintf(name, sizeof name, "single.%d", r);
      double t_single = checkpoint(name, SCR_FLAG_CHECKPOINT);
      /* idle, so the background CRC32 of the checkpoint just taken does not slow the next */
      if (gap > 0) usleep((useconds_t) (gap * 1e6));
      snprintf(name, sizeof name, "async.%d", r);
      double t_async = checkpoint(name, SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT);
      /* compute while the flush runs, then with nothing behind it */
      double t0 = MPI_Wtime();
      kernel(iters);
      double t_busy = tmax(t0);
      wait_published(2 * r + 2, name);
      t0 = MPI_Wtime();
      kernel(iters);
      double t_idle = tmax(t0);
      ratio("flush", t_async / t_single);
      ratio("compute_flush", t_busy / t_idle);
      timed("checkpoint", t_single);
    }
    SCR_Finalize();
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 2);
    double t_init = tmax(t0);
    int have = 0;
    char ckpt[SCR_MAX_FILENAME];
    SCR_Have_restart(&have, ckpt);
    if (!have) MPI_Abort(MPI_COMM_WORLD, 3);
    SCR_Start_restart(ckpt);
    snprintf(path, sizeof path, "%s/rank_%d", ckpt, rank);
    SCR_Route_file(path, routed);
    read_file(routed);
    SCR_Complete_restart(1);
    double t_scr = tmax(t0);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    read_file(routed);
    double t_read = tmax(t0);
    ratio("restart", t_scr / t_read);
    timed("init", t_init);
    timed("restart", t_scr);
    timed("read", t_read);
    SCR_Finalize();
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
