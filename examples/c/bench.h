/*
 * bench.h: what the benchmark programs (bench_api.c, bench_floor.c, bench_pass.c) share: the
 * rank, the bytes per rank, fatal errors, the raw write, the plain read and the time of the
 * slowest rank. Each program
 * is one translation unit that includes it once.
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, ranks;
static size_t size = 64 << 20;
#define CHUNK (1 << 20)

static void die(const char* what, const char* path)
{
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Write `size` bytes to `path`, CHUNK bytes of `buf` at a time (the raw limit's writer). */
static void write_file(const char* path, const unsigned char* buf)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die("open", path);
  for (size_t done = 0; done < size; done += CHUNK) {
    size_t n = size - done < CHUNK ? size - done : CHUNK;
    if (write(fd, buf, n) != (ssize_t) n) die("write", path);
  }
  if (close(fd) != 0) die("close", path);
}

/* Read `path` CHUNK bytes at a time into one buffer (the plain read SCR's restart is
 * measured against). */
static inline void read_file(const char* path)
{
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open", path);
  unsigned long sum = 0;
  ssize_t n;
  unsigned char* rb = malloc(CHUNK);
  while ((n = read(fd, rb, CHUNK)) > 0) sum += rb[0] + rb[n - 1];
  if (n < 0) die("read", path);
  free(rb);
  close(fd);
  if (sum == 1) printf(" ");
}

/* The time since `t0` of the slowest rank. */
static double tmax(double t0)
{
  double t = MPI_Wtime() - t0, m;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

/* One timed raw write of `path` (the limit SCR is measured against), after `gap` idle seconds;
 * the file is deleted outside the timed region. */
static double raw_write(const char* path, const unsigned char* buf, double gap)
{
  if (gap > 0) usleep((useconds_t) (gap * 1e6));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  write_file(path, buf);
  double t = tmax(t0);
  unlink(path);
  return t;
}
