/*
 * elastic: an MPI application that restarts from checkpoints written by any number of
 * processes and reads files other ranks wrote. At each checkpoint step S every rank r writes
 * ckpt.S/rank_<r>.dat (size + 1013*r bytes of a pattern of r and S) and rank 0 also writes
 * ckpt.S/header.dat (a text line naming S and the number of processes, padded with a pattern).
 *
 * At restart it asks SCR what the checkpoint holds (SCR_Restart_info, SCR_Restart_file),
 * checks the list (one data file per writer, one header), and every rank reads the header and
 * the data files of the writers w with w % ranks == rank (with --read rank0: writer 0's file),
 * each by name through SCR_Route_file (all routed first, then read), verifying every byte. A
 * failed attempt goes through the usual restart loop (SCR_Complete_restart(0),
 * SCR_Have_restart again).
 *
 *   elastic [--steps N] [--size BYTES] [--header-size BYTES] [--read mine|rank0] [--time]
 *           [--info-outside]
 *
 * Output (rank 0): "ATTEMPT <name> rc=<0|1>" per attempt, "RESTARTED <name> step=<S>
 * writers=<W> files=<F> data_read=<D> header_read=<H>" (D: data files read by all ranks, H: ranks
 * that read the header), "NO_RESTART", "INFO_OUTSIDE rc=<rc>" (--info-outside: SCR_Restart_info
 * called before any restart phase), "RESTART_SECS <s>" with --time (slowest rank, first SCR_Have_restart to the
 * successful SCR_Complete_restart), "CHECKPOINT <name> ok=<0|1>", "DONE steps=<a>..<b>".
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

static unsigned char pattern(int seed, int step, size_t i)
{
  return (unsigned char) ((seed * 29 + step * 13 + i * 11 + (i >> 10)) & 0xff);
}

static size_t data_size(size_t size, int writer) { return size + 1013 * (size_t) writer; }

/* The header's bytes: a line naming the step and the writers, then a pattern. */
static void header_bytes(unsigned char* buf, size_t n, int step, int writers)
{
  char line[128];
  int len = snprintf(line, sizeof line, "ckpt.%d written by %d processes\n", step, writers);
  for (size_t i = 0; i < n; i++) buf[i] = i < (size_t) len ? (unsigned char) line[i] : pattern(1000, step, i);
}

static int write_file(const char* path, const unsigned char* buf, size_t n)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
    return 0;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t) w;
  }
  return close(fd) == 0 && done == n;
}

/* Read `path` whole and compare it with `want`. */
static int check_file(const char* path, const unsigned char* want, size_t n)
{
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
    return 0;
  }
  unsigned char* got = malloc(n + 1);
  size_t done = 0;
  for (;;) {
    ssize_t r = read(fd, got + done, n + 1 - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t) r;
    if (done == n + 1) break;
  }
  close(fd);
  int ok = done == n && memcmp(got, want, n) == 0;
  if (!ok) fprintf(stderr, "rank %d: %s: %zu bytes read, %zu expected, or a wrong byte\n", rank, path, done, n);
  free(got);
  return ok;
}

static unsigned char* data_bytes(size_t n, int writer, int step)
{
  unsigned char* buf = malloc(n ? n : 1);
  for (size_t i = 0; i < n; i++) buf[i] = pattern(writer, step, i);
  return buf;
}

static const char* base(const char* p)
{
  const char* s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* One restart attempt at checkpoint `name`; returns whether this rank read everything. */
static int attempt(const char* name, size_t size, size_t header_size, int read_rank0, int* step_out, int* counts)
{
  int step = -1, writers = 0, nfiles = 0;
  sscanf(name, "ckpt.%d", &step);
  if (SCR_Restart_info(&writers, &nfiles) != SCR_SUCCESS || step < 0) return 0;
  char** data = calloc((size_t) writers, sizeof *data);
  char header[SCR_MAX_FILENAME] = "";
  int ok = 1;
  for (int i = 0; i < nfiles && ok; i++) {
    char path[SCR_MAX_FILENAME];
    int w = -2, k = -1;
    ok = SCR_Restart_file(i, path, &w) == SCR_SUCCESS;
    if (ok && w == 0 && !strcmp(base(path), "header.dat")) {
      strcpy(header, path);
    } else if (ok && sscanf(base(path), "rank_%d.dat", &k) == 1 && k == w && w >= 0 && w < writers && !data[w]) {
      data[w] = strdup(path);
    } else if (ok) {
      fprintf(stderr, "rank %d: unexpected file %d of %s: %s (writer %d)\n", rank, i, name, path, w);
      ok = 0;
    }
  }
  ok = ok && nfiles == writers + 1 && header[0];
  for (int w = 0; w < writers && ok; w++) ok = data[w] != NULL;
  /* Route every file this rank needs before reading any: one failed attempt then tells SCR
   * about all the files it must bring to this node. */
  char routed_header[SCR_MAX_FILENAME];
  char (*routed)[SCR_MAX_FILENAME] = calloc((size_t) writers + 1, sizeof *routed);
  int routes_ok = ok && SCR_Route_file(header, routed_header) == SCR_SUCCESS;
  for (int w = 0; w < writers && ok; w++) {
    if (read_rank0 ? w != 0 : w % ranks != rank) continue;
    routes_ok = (SCR_Route_file(data[w], routed[w]) == SCR_SUCCESS) && routes_ok;
  }
  ok = ok && routes_ok;
  if (ok) {
    unsigned char* want = malloc(header_size);
    header_bytes(want, header_size, step, writers);
    ok = check_file(routed_header, want, header_size);
    free(want);
    counts[1] += ok;
  }
  for (int w = 0; w < writers && ok; w++) {
    if (read_rank0 ? w != 0 : w % ranks != rank) continue;
    unsigned char* want = data_bytes(data_size(size, w), w, step);
    ok = check_file(routed[w], want, data_size(size, w));
    free(want);
    counts[0] += ok;
  }
  free(routed);
  for (int w = 0; w < writers; w++) free(data[w]);
  free(data);
  counts[2] = writers;
  counts[3] = nfiles;
  *step_out = step;
  return ok;
}

int main(int argc, char** argv)
{
  size_t size = 100003, header_size = 100;
  int steps = 3, read_rank0 = 0, timed = 0, outside = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--header-size") && i + 1 < argc) header_size = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--read") && i + 1 < argc) read_rank0 = !strcmp(argv[++i], "rank0");
    else if (!strcmp(argv[i], "--time")) timed = 1;
    else if (!strcmp(argv[i], "--info-outside")) outside = 1;
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (header_size < 64) header_size = 64;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (SCR_Init() != SCR_SUCCESS) {
    if (rank == 0) printf("SCR_INIT_FAILED\n");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (outside) {
    int dummy[2];
    int rc = SCR_Restart_info(&dummy[0], &dummy[1]);
    if (rank == 0) printf("INFO_OUTSIDE rc=%d\n", rc);
  }

  int start = 0, have = 0;
  char name[SCR_MAX_FILENAME];
  double t0 = MPI_Wtime();
  while (SCR_Have_restart(&have, name) == SCR_SUCCESS && have) {
    SCR_Start_restart(name);
    int step = -1, counts[4] = {0, 0, 0, 0}, sums[2] = {0, 0};
    int valid = attempt(name, size, header_size, read_rank0, &step, counts);
    MPI_Reduce(counts, sums, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    int rc = SCR_Complete_restart(valid);
    if (rank == 0) printf("ATTEMPT %s rc=%d\n", name, rc);
    if (rc == SCR_SUCCESS) {
      start = step;
      double secs = MPI_Wtime() - t0, slowest = 0;
      MPI_Reduce(&secs, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        printf("RESTARTED %s step=%d writers=%d files=%d data_read=%d header_read=%d\n", name, step, counts[2],
               counts[3], sums[0], sums[1]);
        if (timed) printf("RESTART_SECS %.6f\n", slowest);
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
    snprintf(path, sizeof path, "%s/rank_%d.dat", ckname, rank);
    size_t n = data_size(size, rank);
    unsigned char* buf = data_bytes(n, rank, step);
    int valid = SCR_Route_file(path, routed) == SCR_SUCCESS && write_file(routed, buf, n);
    free(buf);
    if (rank == 0) {
      snprintf(path, sizeof path, "%s/header.dat", ckname);
      unsigned char* h = malloc(header_size);
      header_bytes(h, header_size, step, ranks);
      valid = valid && SCR_Route_file(path, routed) == SCR_SUCCESS && write_file(routed, h, header_size);
      free(h);
    }
    int ok = SCR_Complete_output(valid);
    if (rank == 0) printf("CHECKPOINT %s ok=%d\n", ckname, ok == SCR_SUCCESS);
  }
  if (rank == 0) printf("DONE steps=%d..%d\n", start + 1, start + steps);
  fflush(stdout);
  SCR_Finalize();
  MPI_Finalize();
  return 0;
}
