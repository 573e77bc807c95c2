/*
 * bench_pass: what one pass over a checkpoint's bytes costs on this machine, without SCR: the
 * floor under any check of every byte (a CRC32 at restart, the background CRC32 of a SINGLE
 * checkpoint), measured against the writes and reads SCR's ratios divide by. Every rank
 * writes `--size` bytes to its own file in $SCR_CACHE_BASE, then each repetition times, as the
 * slowest rank:
 *
 *   write  the raw write of the file (CHUNK bytes at a time; bench_api's raw limit);
 *   read   a plain read of it, CHUNK bytes at a time into one buffer (bench_api's plain read);
 *   map    a pass over it through a read-only mapping populated at once (MAP_POPULATE), each
 *          64-bit word added into a sum (as SCR's restart check maps files: the page tables of
 *          the mapping included, the CRC32 arithmetic left out);
 *   mem    the same sum over the same bytes already in this process's memory (faulted in
 *          before the timed region): no file, no page tables to build, the memory's own speed.
 *
 * and prints "TIME <name> <s>" and "RATIO <name>_over_read <value>" (rank 0), for
 * scripts/common.sh's summarize. A check of every byte costs at least `map` at restart (the
 * bytes are in the file) and at least `mem` anywhere.
 *
 *   bench_pass --size BYTES --reps N
 */
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "bench.h"

static volatile uint64_t sink;

/* The sum of the 64-bit words of `p` (n a multiple of 8): every byte read once. */
static uint64_t sum_words(const unsigned char* p, size_t n)
{
  const uint64_t* w = (const uint64_t*) p;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t k = n / 8, i = 0;
  for (; i + 4 <= k; i += 4) a += w[i], b += w[i + 1], c += w[i + 2], d += w[i + 3];
  for (; i < k; i++) a += w[i];
  return a + b + c + d;
}

static double read_pass(const char* path)
{
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  read_file(path);
  return tmax(t0);
}

static double map_pass(const char* path)
{
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("open", path);
  const unsigned char* p = mmap(NULL, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) die("mmap", path);
  sink = sum_words(p, size);
  munmap((void*) p, size);
  close(fd);
  return tmax(t0);
}

static double mem_pass(const unsigned char* p)
{
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  sink = sum_words(p, size);
  return tmax(t0);
}

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int reps = 5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10) & ~(size_t) 7;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
  }
  const char* base = getenv("SCR_CACHE_BASE");
  char path[4096];
  snprintf(path, sizeof path, "%s/pass_%d", base ? base : "/dev/shm", rank);
  unsigned char* buf = malloc(CHUNK);
  for (int i = 0; i < CHUNK; i++) buf[i] = (unsigned char) (i * 7 + rank);
  unsigned char* copy = malloc(size);
  for (size_t i = 0; i < size; i++) copy[i] = (unsigned char) (i * 13 + rank);
  for (int r = 0; r < reps; r++) {
    unlink(path);
    double w = raw_write(path, buf, 0.5);
    /* raw_write deleted it: write it again, untimed, for the passes */
    write_file(path, buf);
    double rd = read_pass(path);
    double mp = map_pass(path);
    double me = mem_pass(copy);
    if (rank == 0) {
      printf("TIME write %.4f\nTIME read %.4f\nTIME map %.4f\nTIME mem %.4f\n", w, rd, mp, me);
      printf("RATIO map_over_read %.4f\nRATIO mem_over_read %.4f\nRATIO map_over_write %.4f\n", mp / rd, me / rd,
             mp / w);
      fflush(stdout);
    }
  }
  unlink(path);
  free(copy);
  free(buf);
  MPI_Finalize();
  return 0;
}
