/*
 * bench_floor: the least work a PARTNER or XOR checkpoint can do on this machine, without
 * SCR, timed against the raw write of the same bytes in the same run. It is the ceiling of
 * what any implementation of the scheme can reach here: the checkpoint's own bytes written,
 * then the scheme's redundancy with no copy that can be avoided (the data is sent and XORed
 * straight from a memory mapping of the file just written, the redundancy written once, no
 * checksums, no metadata, no crash safety).
 *
 *   bench_floor partner|xor --size BYTES --reps N [--piece BYTES] [--gap S]
 *
 * Each repetition: the raw write of BYTES per rank, then the floor checkpoint (the same write
 * to another file plus the encoding), each timed as the maximum over ranks; rank 0 prints
 * "RATIO floor_<scheme> <raw / floor>" and "TIME raw_write|floor_<scheme> <s>". Files go to
 * $SCR_CACHE_BASE (each simulated node's own storage under scripts/sim-node.sh).
 *
 * XOR is SCR's ring reduce-scatter: the data is cut into n - 1 chunks; the sum for rank d
 * starts at d + 1, gains one chunk at each rank it passes and reaches d after n - 1 steps.
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank, ranks;
static size_t size = 64 << 20, piece = 256 << 10;
#define CHUNK (1 << 20)

static void die(const char* what, const char* path)
{
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

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

static double tmax(double t0)
{
  double t = MPI_Wtime() - t0, m;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static void put(int fd, const char* path, const unsigned char* b, size_t n, size_t off)
{
  if (pwrite(fd, b, n, (off_t) off) != (ssize_t) n) die("write", path);
}

/* PARTNER: send the mapped file to the right, write what comes from the left. */
static void partner(const unsigned char* data, int out, const char* path, unsigned char* in)
{
  int left = (rank + ranks - 1) % ranks, right = (rank + 1) % ranks;
  for (size_t off = 0; off < size; off += piece) {
    size_t n = size - off < piece ? size - off : piece;
    MPI_Sendrecv(data + off, (int) n, MPI_BYTE, right, 0, in, (int) n, MPI_BYTE, left, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    put(out, path, in, n, off);
  }
}

/* A piece of chunk `c` at `off` (zero past the end of the data). */
static const unsigned char* chunk_at(const unsigned char* data, size_t chunk, int c, size_t off, size_t n,
                                     unsigned char* pad)
{
  size_t at = (size_t) c * chunk + off;
  if (at + n <= size) return data + at;
  memset(pad, 0, n);
  if (at < size) memcpy(pad, data + at, size - at);
  return pad;
}

/* XOR: the ring reduce-scatter (see the top). */
static void xor_encode(const unsigned char* data, int out, const char* path, unsigned char* acc, unsigned char* in,
                       unsigned char* pad)
{
  int n = ranks, left = (rank + n - 1) % n, right = (rank + 1) % n;
  size_t chunk = (size + n - 2) / (n - 1);
  for (size_t off = 0; off < chunk; off += piece) {
    size_t len = chunk - off < piece ? chunk - off : piece;
    /* step 0: the sum for d = rank - 1 starts here, with this rank's chunk for it */
    int d = (rank + n - 1) % n;
    const unsigned char* send = chunk_at(data, chunk, (d - rank - 1 + 2 * n) % n, off, len, pad);
    for (int t = 1; t < n; t++) {
      MPI_Sendrecv(send, (int) len, MPI_BYTE, right, 0, in, (int) len, MPI_BYTE, left, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
      if (t == n - 1) break; /* `in` is this rank's parity */
      d = (rank + 2 * n - 1 - t) % n;
      const unsigned char* mine = chunk_at(data, chunk, (d - rank - 1 + 2 * n) % n, off, len, pad);
      for (size_t k = 0; k < len; k++) acc[k] = in[k] ^ mine[k];
      send = acc;
    }
    put(out, path, in, len, off);
  }
}

int main(int argc, char** argv)
{
  int reps = 5;
  double gap = 0;
  const char* scheme = argc > 1 ? argv[1] : "xor";
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--piece") && i + 1 < argc) piece = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--gap") && i + 1 < argc) gap = atof(argv[++i]);
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  int is_xor = !strcmp(scheme, "xor");
  if (!is_xor && strcmp(scheme, "partner")) {
    fprintf(stderr, "scheme must be partner or xor, not %s\n", scheme);
    return 2;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks < 2) die("needs two ranks or more", "");
  unsigned char* buf = malloc(CHUNK);
  unsigned char *in = malloc(piece), *acc = malloc(piece), *pad = malloc(piece);
  for (int i = 0; i < CHUNK; i++) buf[i] = (unsigned char) (i * 7 + rank);
  const char* base = getenv("SCR_CACHE_BASE");
  if (base && mkdir(base, 0700) != 0 && errno != EEXIST) die("mkdir", base);
  char raw[4096], data[4096], red[4096];
  snprintf(raw, sizeof raw, "%s/bench_raw.%d", base ? base : "/dev/shm", rank);
  snprintf(data, sizeof data, "%s/bench_floor.%d", base ? base : "/dev/shm", rank);
  snprintf(red, sizeof red, "%s/bench_floor_red.%d", base ? base : "/dev/shm", rank);
  for (int r = 0; r < reps; r++) {
    if (r > 0 && gap > 0) usleep((useconds_t) (gap * 1e6));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    write_file(raw, buf);
    double t_raw = tmax(t0);
    unlink(raw);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    write_file(data, buf);
    int fd = open(data, O_RDONLY);
    if (fd < 0) die("open", data);
    const unsigned char* map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) die("mmap", data);
    int out = open(red, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0) die("open", red);
    if (is_xor) xor_encode(map, out, red, acc, in, pad);
    else partner(map, out, red, in);
    if (close(out) != 0) die("close", red);
    munmap((void*) map, size);
    close(fd);
    double t_floor = tmax(t0);
    unlink(data);
    unlink(red);
    if (rank == 0) {
      printf("RATIO floor_%s %.4f\n", scheme, t_raw / t_floor);
      printf("TIME raw_write %.4f\nTIME floor_%s %.4f\n", t_raw, scheme, t_floor);
    }
  }
  MPI_Finalize();
  return 0;
}
