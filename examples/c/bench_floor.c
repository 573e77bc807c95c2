/*
 * bench_floor: a minimal schedule of a PARTNER or XOR checkpoint or rebuild on this machine,
 * without SCR, timed against the raw write of the same bytes in the same run: the
 * checkpoint's own bytes written, then the scheme's redundancy with no copy beyond MPI's (the
 * data is sent and XORed straight from memory mappings of the files, the redundancy written
 * once), no checksums, no metadata, no crash safety. The PARTNER schedules are pipelined (a
 * piece is written while the next one travels); the XOR ones are not (each rank waits for
 * every piece before it passes the piece on).
 *
 *   bench_floor partner|xor|partner-rebuild|xor-rebuild --size BYTES --reps N
 *               [--piece BYTES] [--gap S]
 *
 * Each repetition: the raw write of BYTES per rank, then the floor operation, each timed as
 * the maximum over ranks; rank 0 prints "RATIO floor_<mode> <value>" and
 * "TIME raw_write|floor_<mode> <s>". Files go to $SCR_CACHE_BASE (each simulated node's own
 * storage under scripts/sim-node.sh).
 *
 * partner, xor: a checkpoint (the same write to another file, then the encoding); the ratio is
 *   raw / floor time, as SCR's checkpoint ratio. XOR is SCR's ring reduce-scatter: the data is
 *   cut into n - 1 chunks; the sum for rank d starts at d + 1, gains one chunk at each rank it
 *   passes and reaches d after n - 1 steps.
 * partner-rebuild, xor-rebuild: rank 1 is lost (its new files are created in the timed region)
 *   and gets its data and redundancy back from the files the others wrote before (untimed);
 *   the ratio is floor / raw time, as SCR's rebuild figure. PARTNER: its files from its right
 *   neighbour's copy and its copy from its left neighbour, both at once. XOR: a chain through
 *   the survivors in order; each adds its n shards (n - 1 data chunks and its parity, sent
 *   and XORed from mappings) to the sums it passes on; the last one sends them to rank 1.
 */
#include <sys/mman.h>
#include <sys/stat.h>

#include "bench.h"

static size_t piece = 256 << 10;

static void put(int fd, const char* path, const unsigned char* b, size_t n, size_t off)
{
  if (pwrite(fd, b, n, (off_t) off) != (ssize_t) n) die("write", path);
}

/* PARTNER: send the mapped file to the right, write what comes from the left. */
static void partner(const unsigned char* data, int out, const char* path, unsigned char* in)
{
  int left = (rank + ranks - 1) % ranks, right = (rank + 1) % ranks;
  size_t prev = 0, prev_off = 0;
  for (size_t off = 0, p = 0; off < size; off += piece, p++) {
    size_t n = size - off < piece ? size - off : piece;
    MPI_Request req[2];
    MPI_Irecv(in + (p % 2) * piece, (int) n, MPI_BYTE, left, 0, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(data + off, (int) n, MPI_BYTE, right, 0, MPI_COMM_WORLD, &req[1]);
    if (prev) put(out, path, in + ((p + 1) % 2) * piece, prev, prev_off); /* while this one travels */
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    prev = n, prev_off = off;
  }
  if (prev) put(out, path, in + (((size - 1) / piece) % 2) * piece, prev, prev_off);
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

/* A file of `n` bytes written (untimed set-up of the rebuilds) and mapped. */
static const unsigned char* mapped(const char* path, size_t n, const unsigned char* buf)
{
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die("open", path);
  for (size_t done = 0; done < n; done += CHUNK) {
    size_t k = n - done < CHUNK ? n - done : CHUNK;
    if (write(fd, buf, k) != (ssize_t) k) die("write", path);
  }
  const unsigned char* map = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) die("mmap", path);
  close(fd);
  return map;
}

static int create(const char* path)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) die("open", path);
  return fd;
}

/* PARTNER rebuild of rank 1 (see the top). */
static void partner_rebuild(const unsigned char* data, const unsigned char* copy, const char* dpath,
                            const char* rpath, unsigned char* in, unsigned char* in2)
{
  int lost = 1, left = 0, right = 2 % ranks;
  int d = rank == lost ? create(dpath) : -1, r = rank == lost ? create(rpath) : -1;
  size_t prev = 0, prev_off = 0;
  for (size_t off = 0, p = 0; off < size; off += piece, p++) {
    int n = (int) (size - off < piece ? size - off : piece);
    if (rank == right) MPI_Send(copy + off, n, MPI_BYTE, lost, 0, MPI_COMM_WORLD);
    if (rank == left) MPI_Send(data + off, n, MPI_BYTE, lost, 1, MPI_COMM_WORLD);
    if (rank != lost) continue;
    MPI_Request req[2];
    size_t at = (p % 2) * piece, was = ((p + 1) % 2) * piece;
    MPI_Irecv(in + at, n, MPI_BYTE, right, 0, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(in2 + at, n, MPI_BYTE, left, 1, MPI_COMM_WORLD, &req[1]);
    if (prev) put(d, dpath, in + was, prev, prev_off), put(r, rpath, in2 + was, prev, prev_off);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    prev = (size_t) n, prev_off = off;
  }
  if (rank == lost && prev) {
    size_t at = (((size - 1) / piece) % 2) * piece;
    put(d, dpath, in + at, prev, prev_off), put(r, rpath, in2 + at, prev, prev_off);
  }
  if (d >= 0 && (close(d) != 0 || close(r) != 0)) die("close", dpath);
}

/* XOR rebuild of rank 1 (see the top). */
static void xor_rebuild(const unsigned char* data, const unsigned char* red, const char* dpath, const char* rpath,
                        unsigned char* sums, unsigned char* pad)
{
  int n = ranks, lost = 1;
  size_t chunk = (size + n - 2) / (n - 1);
  int pred = rank == 0 ? -1 : rank == 2 ? 0 : rank - 1, next = rank == n - 1 ? lost : rank == 0 ? 2 : rank + 1;
  if (rank == lost) pred = n - 1;
  int d = rank == lost ? create(dpath) : -1, r = rank == lost ? create(rpath) : -1;
  MPI_Request req[64];
  for (size_t off = 0; off < chunk; off += piece) {
    size_t len = chunk - off < piece ? chunk - off : piece;
    for (int s = 0; s < n && pred >= 0; s++)
      MPI_Irecv(sums + s * len, (int) len, MPI_BYTE, pred, s, MPI_COMM_WORLD, &req[s]);
    if (pred >= 0) MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    if (rank == lost) {
      for (int s = 0; s < n - 1; s++)
        if (s * chunk + off < size) {
          size_t k = size - (s * chunk + off) < len ? size - (s * chunk + off) : len;
          put(d, dpath, sums + s * len, k, s * chunk + off);
        }
      put(r, rpath, sums + (n - 1) * len, len, off);
      continue;
    }
    for (int s = 0; s < n; s++) {
      const unsigned char* mine = s < n - 1 ? chunk_at(data, chunk, s, off, len, pad) : red + off;
      if (pred < 0) {
        MPI_Isend(mine, (int) len, MPI_BYTE, next, s, MPI_COMM_WORLD, &req[s]);
        MPI_Wait(&req[s], MPI_STATUS_IGNORE); /* `pad` may be reused by the next shard */
        continue;
      }
      unsigned char* sum = sums + s * len;
      for (size_t k = 0; k < len; k++) sum[k] ^= mine[k];
      MPI_Isend(sum, (int) len, MPI_BYTE, next, s, MPI_COMM_WORLD, &req[s]);
    }
    if (pred >= 0) MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
  }
  if (d >= 0 && (close(d) != 0 || close(r) != 0)) die("close", dpath);
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
  int is_xor = !strcmp(scheme, "xor"), rebuild = strstr(scheme, "-rebuild") != NULL;
  if (strcmp(scheme, "xor") && strcmp(scheme, "partner") && strcmp(scheme, "xor-rebuild") &&
      strcmp(scheme, "partner-rebuild")) {
    fprintf(stderr, "the mode is partner, xor, partner-rebuild or xor-rebuild, not %s\n", scheme);
    return 2;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks < 3 || ranks > 64) die("needs 3 to 64 ranks", "");
  unsigned char* buf = malloc(CHUNK);
  unsigned char *in = malloc(2 * piece), *acc = malloc(2 * piece), *pad = malloc(piece), *sums = malloc(ranks * piece);
  for (int i = 0; i < CHUNK; i++) buf[i] = (unsigned char) (i * 7 + rank);
  const char* base = getenv("SCR_CACHE_BASE");
  if (base && mkdir(base, 0700) != 0 && errno != EEXIST) die("mkdir", base);
  char raw[4096], data[4096], red[4096];
  snprintf(raw, sizeof raw, "%s/bench_raw.%d", base ? base : "/dev/shm", rank);
  snprintf(data, sizeof data, "%s/bench_floor.%d", base ? base : "/dev/shm", rank);
  snprintf(red, sizeof red, "%s/bench_floor_red.%d", base ? base : "/dev/shm", rank);
  for (int r = 0; r < reps; r++) {
    double t_raw = raw_write(raw, buf, r > 0 ? gap : 0);
    if (rebuild) {
      size_t rsize = strstr(scheme, "xor") ? (size + ranks - 2) / (ranks - 1) : size;
      const unsigned char* d = rank == 1 ? NULL : mapped(data, size, buf);
      const unsigned char* c = rank == 1 ? NULL : mapped(red, rsize, buf);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (strstr(scheme, "xor")) xor_rebuild(d, c, data, red, sums, pad);
      else partner_rebuild(d, c, data, red, in, acc);
      double t = tmax(t0);
      if (d) munmap((void*) d, size);
      if (c) munmap((void*) c, rsize);
      unlink(data);
      unlink(red);
      if (rank == 0) printf("RATIO floor_%s %.4f\nTIME raw_write %.4f\nTIME floor_%s %.4f\n", scheme, t / t_raw, t_raw, scheme, t);
      continue;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
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
