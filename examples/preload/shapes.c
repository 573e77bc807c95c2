/* An MPI application that knows nothing of SCR, writing its files in the shapes real
 * applications use (issue 22), for transparent mode:
 *
 *   shapes --dir DIR --shape final|toggle|hold [--steps N] [--size BYTES] [--crash-at STEP]
 *          [--syncs K] [--read-rw] [--update [--mmap]]
 *
 * final   (OpenFOAM's last time directory): N steps of MPI_Allreduce, then every rank writes
 *         final/rank_<r>.dat and calls MPI_Finalize, no collective in between. At start,
 *         existing final files are verified: RESTARTED final <step> verified.
 * toggle  (LAMMPS "restart N file.a file.b"): at every step each rank rewrites (O_TRUNC)
 *         toggle/rank_<r>.a (odd steps) or toggle/rank_<r>.b (even steps), then a barrier. At
 *         start, the newest step the two files hold: RESTARTED <step> verified.
 * hold    (Quantum ESPRESSO, disk_io='high'): every rank keeps hold/wfc_<r>.dat open for
 *         writing all run and writes to it every step, while it checkpoints
 *         ckpt.<step>/rank_<r>.dat every step (a barrier, then rank 0 writes the pointer file
 *         "latest"); K allreduces per step. At start, the checkpoint "latest" names is verified.
 *
 * Each data file: a 4-byte step, then BYTES bytes that depend on step, rank and offset.
 * --read-rw: data files are opened for reading with O_RDWR, as Fortran's OPEN without ACTION=
 * does (gfortran); --update: they are rewritten through O_RDWR without O_TRUNC (an update in
 * place of every byte) instead of O_WRONLY | O_TRUNC; with --mmap, through a shared mapping
 * made right after the open, the descriptor closed before the first byte is written (the
 * mapping alone writes the file). --read-rw --mmap: files are read through a shared, writable
 * mapping, unmapped before the close.
 * --crash-at STEP: the last rank exits (status 9) at the start of STEP.
 * Prints (rank 0): RESTARTED ... verified | NO_RESTART, CHECKPOINT <s>, DONE. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir = ".";
static long size = 1 << 16;
static int rank, nranks;
static int read_rw = 0, update = 0, mapped = 0;

static void die(const char *what, const char *path) {
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static unsigned char byte_at(int step, long i) {
  return (unsigned char)((i * 31 + step * 7 + rank * 13) & 0xff);
}

static void write_data(const char *path, int step) {
  int fd = open(path, update ? O_RDWR | O_CREAT : O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("open", path);
  if (mapped) {
    struct stat st;
    if (fstat(fd, &st) != 0) die("fstat", path);
    if (st.st_size != size + 4 && ftruncate(fd, size + 4) != 0) die("ftruncate", path);
    unsigned char *map = mmap(NULL, size + 4, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) die("mmap", path);
    if (close(fd) != 0) die("close", path);
    memcpy(map, &step, 4);
    for (long i = 0; i < size; i++) map[4 + i] = byte_at(step, i);
    if (msync(map, size + 4, MS_SYNC) != 0 || munmap(map, size + 4) != 0) die("msync", path);
    return;
  }
  unsigned char *buf = malloc(size + 4);
  memcpy(buf, &step, 4);
  for (long i = 0; i < size; i++) buf[4 + i] = byte_at(step, i);
  if (write(fd, buf, size + 4) != size + 4) die("write", path);
  if (close(fd) != 0) die("close", path);
  free(buf);
}

/* The step a data file holds if every byte is right, 0 if it is missing, -1 if it is bad. */
static int read_data(const char *path) {
  int fd = open(path, read_rw ? O_RDWR : O_RDONLY);
  if (fd < 0) return 0;
  unsigned char *buf = malloc(size + 5);
  long got = 0, n;
  struct stat st;
  if (mapped && read_rw && fstat(fd, &st) == 0 && st.st_size > 0) {
    /* read through a shared, writable mapping, unmapped before the close */
    unsigned char *map = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) die("mmap", path);
    got = st.st_size < size + 5 ? st.st_size : size + 5;
    memcpy(buf, map, got);
    munmap(map, st.st_size);
  } else {
    while ((n = read(fd, buf + got, size + 5 - got)) > 0) got += n;
  }
  close(fd);
  int step = -1;
  if (got == size + 4) {
    memcpy(&step, buf, 4);
    for (long i = 0; i < size && step > 0; i++)
      if (buf[4 + i] != byte_at(step, i)) step = -1;
  }
  if (step <= 0) fprintf(stderr, "rank %d: %s: %ld bytes, wrong content\n", rank, path, got);
  free(buf);
  return step <= 0 ? -1 : step;
}

static void make_dir(const char *path) {
  if (rank == 0 && mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
}

/* Every rank found step `mine` (0: nothing, -1: bad): print the agreed restart, or abort. */
static int agree(const char *what, int mine) {
  int lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (hi == 0) {
    if (rank == 0) printf("NO_RESTART\n");
    fflush(stdout);
    return 0;
  }
  if (lo != hi || lo < 0) {
    if (rank == 0) printf("RESTARTED %s%d CORRUPT (ranks found %d to %d)\n", what, hi, lo, hi);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (rank == 0) printf("RESTARTED %s%d verified\n", what, lo);
  fflush(stdout);
  return lo;
}

static void crash(int step) {
  if (rank == nranks - 1) {
    fprintf(stderr, "rank %d: CRASH at step %d\n", rank, step);
    _exit(9);
  }
  sleep(30);
}

static void compute(int step, int syncs) {
  double x = rank + step, sum = 0;
  for (int k = 0; k < syncs; k++) MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
  int steps = 4, crash_at = -1, syncs = 1;
  const char *shape = "";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir")) dir = argv[++i];
    else if (!strcmp(argv[i], "--shape")) shape = argv[++i];
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--size")) size = atol(argv[++i]);
    else if (!strcmp(argv[i], "--crash-at")) crash_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--syncs")) syncs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--read-rw")) read_rw = 1;
    else if (!strcmp(argv[i], "--update")) update = 1;
    else if (!strcmp(argv[i], "--mmap")) mapped = 1;
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  char path[4096], sub[4096];

  if (!strcmp(shape, "final")) {
    snprintf(path, sizeof path, "%s/final/rank_%d.dat", dir, rank);
    agree("final ", read_data(path));
    snprintf(sub, sizeof sub, "%s/final", dir);
    make_dir(sub);
    for (int step = 1; step <= steps; step++) {
      if (step == crash_at) crash(step);
      compute(step, syncs);
    }
    write_data(path, steps);
  } else if (!strcmp(shape, "toggle")) {
    int newest = 0;
    for (int t = 0; t < 2; t++) {
      snprintf(path, sizeof path, "%s/toggle/rank_%d.%c", dir, rank, "ab"[t]);
      int s = read_data(path);
      if (s < 0 || newest < 0) newest = -1;
      else if (s > newest) newest = s;
    }
    int start = agree("", newest);
    snprintf(sub, sizeof sub, "%s/toggle", dir);
    make_dir(sub);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int step = start + 1; step <= steps; step++) {
      if (step == crash_at) crash(step);
      snprintf(path, sizeof path, "%s/toggle/rank_%d.%c", dir, rank, step % 2 ? 'a' : 'b');
      write_data(path, step);
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) printf("CHECKPOINT %d\n", step);
      fflush(stdout);
      compute(step, syncs);
    }
  } else if (!strcmp(shape, "hold")) {
    int start = 0;
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (f) {
      if (fscanf(f, "%d", &start) != 1) start = 0;
      fclose(f);
    }
    snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.dat", dir, start, rank);
    start = agree("", start > 0 ? (read_data(path) == start ? start : -1) : 0);
    snprintf(sub, sizeof sub, "%s/hold", dir);
    make_dir(sub);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(sub, sizeof sub, "%s/hold/wfc_%d.dat", dir, rank);
    int held = open(sub, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (held < 0) die("open", sub);
    for (int step = start + 1; step <= steps; step++) {
      if (step == crash_at) crash(step);
      snprintf(path, sizeof path, "%s/ckpt.%d", dir, step);
      make_dir(path);
      MPI_Barrier(MPI_COMM_WORLD);
      snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.dat", dir, step, rank);
      write_data(path, step);
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) {
        snprintf(path, sizeof path, "%s/latest", dir);
        FILE *l = fopen(path, "w");
        if (!l) die("fopen", path);
        fprintf(l, "%d\n", step);
        fclose(l);
        printf("CHECKPOINT %d\n", step);
      }
      fflush(stdout);
      if (pwrite(held, &step, sizeof step, 0) != sizeof step) die("pwrite", sub);
      compute(step, syncs);
    }
    if (close(held) != 0) die("close", sub);
  } else {
    fprintf(stderr, "--shape final|toggle|hold\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (rank == 0) printf("DONE\n");
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
