/* An MPI application that knows nothing of SCR: it reduces rank-dependent values with every
 * predefined operation the preload carries its sync-point flags in (SUM MAX MIN PROD LOR BOR
 * LAND BAND) on int, long, long long, unsigned, float, double and int64_t, into a separate
 * buffer and in place, for counts 1..N (across the preload's 512-byte limit), and prints a
 * hash of every result, one line per combination. Between the reductions it checkpoints:
 * ckpt.<k>/rank_<r>.dat written and closed while rank 0 holds ckpt.<k>/held.dat open across
 * reductions (sync points where one rank has an open file), the previous checkpoint's files
 * removed, then held.dat closed (see between()).
 * Output must be the same with and without the preload.
 *
 *   allreduce_exact DIR OUT       (EXACT_THREAD_MULTIPLE set: MPI_Init_thread(MULTIPLE);
 *                                  EXACT_FLOAT_SUM set: float/double SUM and PROD only)
 *
 * Writes OUT.<rank>: one line "<op> <type> <inplace|separate> <count> <hash>" per reduction
 * (a file per rank: the launcher may split lines the ranks print), then 30 lines of
 * reductions on a duplicate of MPI_COMM_WORLD and on halves of it. Prints on stderr (rank 0),
 * after the 8th reduction that follows each checkpoint, "SYNCED ckpt.<k>", and at the end
 * "CHECKPOINTS <n>". */
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank, nranks;
static const char *dir;
static FILE *out_file;
static int ckpt = 0, calls = 0;
static int held = -1; /* rank 0's checkpoint file kept open across reductions */
static char held_path[4096];

static void die(const char *what) {
  perror(what);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static void write_file(const char *path, int k) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die(path);
  char buf[4096];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)(i * 7 + k * 3 + rank);
  if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) die("write");
  if (close(fd)) die("close");
}

/* Before every reduction, in cycles of 40: at the 5th every rank writes and closes
 * ckpt.<k>/rank_<r>.dat and rank 0 opens ckpt.<k>/held.dat, which it keeps open (no sync point
 * may complete the checkpoint while a rank has one of its files open); at the 20th every rank
 * removes its file of the previous checkpoint (a new version of it, without them); at the
 * 40th rank 0 writes and closes held.dat: the reduction that follows completes ckpt.<k>. */
static void between(void) {
  calls++;
  char path[4096];
  if (calls % 40 == 5) {
    snprintf(path, sizeof path, "%s/ckpt.%d", dir, ckpt + 1);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.dat", dir, ckpt + 1, rank);
    write_file(path, ckpt + 1);
    if (rank == 0) {
      snprintf(held_path, sizeof held_path, "%s/ckpt.%d/held.dat", dir, ckpt + 1);
      held = open(held_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (held < 0) die(held_path);
    }
  } else if (calls % 40 == 20 && ckpt > 0) {
    snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.dat", dir, ckpt, rank);
    if (unlink(path)) die(path);
  } else if (calls % 40 == 0) {
    ckpt++;
    if (held >= 0) {
      if (write(held, "held", 4) != 4 || close(held)) die(held_path);
      held = -1;
    }
  }
}

static void after(void) {
  /* 8 reductions after held.dat's close (the preload's DEFER_LIMIT: a run of reductions that
   * cannot carry the agreement, floating-point sums, runs it at least that often) */
  if (calls % 40 == 7 && rank == 0) {
    fprintf(stderr, "SYNCED ckpt.%d\n", ckpt);
    fflush(stderr);
  }
}

static uint64_t fnv(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The value rank r contributes at element i for operation op (small for PROD, 0/1 or bits for
 * the logical and bitwise ones, signed and fractional where the type allows). */
static double value(const char *op, int r, int i) {
  if (!strcmp(op, "PROD")) return 1 + (r + i) % 3;
  if (!strcmp(op, "LOR") || !strcmp(op, "LAND")) return (r * 3 + i) % 4 != 0;
  if (!strcmp(op, "BOR") || !strcmp(op, "BAND")) return (double)((0x5a5a + r * 37 + i * 11) & 0x7fff);
  return (r * 7 + i * 13) % 23 - 11 + (r + 1) * 0.1 + i * 0.013;
}

#define MAXN 130

#define FILL(T)                                       \
  for (int i = 0; i < n; i++) ((T *)in)[i] = (T)value(opname, rank, i);

static void one(const char *opname, MPI_Op op, const char *tname, MPI_Datatype t, size_t size, int n, int inplace) {
  unsigned char in[MAXN * 8], out[MAXN * 8];
  memset(out, 0xee, sizeof out);
  if (t == MPI_INT) { FILL(int) }
  else if (t == MPI_LONG) { FILL(long) }
  else if (t == MPI_LONG_LONG) { FILL(long long) }
  else if (t == MPI_UNSIGNED) {
    /* wrap-around sums: values near the top of the range */
    for (int i = 0; i < n; i++) ((unsigned *)in)[i] = strcmp(opname, "SUM") ? (unsigned)value(opname, rank, i) : 4000000000u + (unsigned)(rank * 5 + i);
  }
  else if (t == MPI_FLOAT) { FILL(float) }
  else if (t == MPI_DOUBLE) { FILL(double) }
  else { FILL(int64_t) }
  between();
  int rc;
  if (inplace) {
    memcpy(out, in, (size_t)n * size);
    rc = MPI_Allreduce(MPI_IN_PLACE, out, n, t, op, MPI_COMM_WORLD);
  } else {
    rc = MPI_Allreduce(in, out, n, t, op, MPI_COMM_WORLD);
  }
  if (rc != MPI_SUCCESS) die("MPI_Allreduce");
  after();
  /* nothing written beyond the count */
  for (size_t i = (size_t)n * size; i < sizeof out; i++)
    if (out[i] != 0xee) {
      fprintf(stderr, "rank %d: %s %s %d: byte %zu beyond the result changed\n", rank, opname, tname, n, i);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  fprintf(out_file, "%s %s %s %d %016llx\n", opname, tname, inplace ? "inplace" : "separate", n,
         (unsigned long long)fnv(out, (size_t)n * size));
}

int main(int argc, char **argv) {
  if (getenv("EXACT_THREAD_MULTIPLE")) { /* (the test's second run) */
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argc != 3) {
    if (rank == 0) fprintf(stderr, "usage: allreduce_exact DIR OUT\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  dir = argv[1];
  char out_path[4096];
  snprintf(out_path, sizeof out_path, "%s.%d", argv[2], rank);
  out_file = fopen(out_path, "w");
  if (!out_file) die(out_path);
  struct { const char *name; MPI_Op op; int ints_only; } ops[] = {
      {"SUM", MPI_SUM, 0}, {"MAX", MPI_MAX, 0}, {"MIN", MPI_MIN, 0}, {"PROD", MPI_PROD, 0},
      {"LOR", MPI_LOR, 1}, {"BOR", MPI_BOR, 1}, {"LAND", MPI_LAND, 1}, {"BAND", MPI_BAND, 1}};
  struct { const char *name; MPI_Datatype t; size_t size; int is_int; } types[] = {
      {"int", MPI_INT, sizeof(int), 1},       {"long", MPI_LONG, sizeof(long), 1},
      {"longlong", MPI_LONG_LONG, sizeof(long long), 1}, {"unsigned", MPI_UNSIGNED, sizeof(unsigned), 1},
      {"float", MPI_FLOAT, sizeof(float), 0}, {"double", MPI_DOUBLE, sizeof(double), 0},
      {"int64", MPI_INT64_T, sizeof(int64_t), 1}};
  int counts[] = {1, 2, 3, 4, 7, 16, 63, 64, 65, 127, 128, 129, MAXN};
  /* EXACT_FLOAT_SUM set: only float and double SUM and PROD (the test's runs under an
   * algorithm choice that changes at 512 bytes) */
  int float_sum = getenv("EXACT_FLOAT_SUM") != NULL;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      if (ops[o].ints_only && !types[t].is_int) continue;
      if (float_sum && (types[t].is_int || (ops[o].op != MPI_SUM && ops[o].op != MPI_PROD))) continue;
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int inplace = 0; inplace < 2; inplace++)
          one(ops[o].name, ops[o].op, types[t].name, types[t].t, types[t].size, counts[c], inplace);
    }
  /* communicators: a duplicate of the world is one too (its allreduces are sync points), a
   * split in halves is not; freed (the middle round: disconnected), the duplicate first, their
   * handles may come back for the other kind in the next round */
  for (int round = 0; round < 3; round++) {
    MPI_Comm dup, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    for (int i = 0; i < 10; i++) {
      long v = rank * 100 + i + round, a = 0, b = 0;
      MPI_Allreduce(&v, &a, 1, MPI_LONG, MPI_SUM, dup);
      MPI_Allreduce(&v, &b, 1, MPI_LONG, MPI_MAX, half);
      fprintf(out_file, "dup %d %d %ld half %ld\n", round, i, a, b);
    }
    if (round == 1) {
      MPI_Comm_disconnect(&dup);
      MPI_Comm_disconnect(&half);
    } else {
      MPI_Comm_free(&dup);
      MPI_Comm_free(&half);
    }
  }
  if (held >= 0) close(held);
  if (fclose(out_file)) die(out_path);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fprintf(stderr, "CHECKPOINTS %d\n", ckpt);
  MPI_Finalize();
  return 0;
}
