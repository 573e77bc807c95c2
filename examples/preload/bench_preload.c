/* Micro-benchmarks for transparent mode, run with and without the preload.
 *   bench_preload open DIR N     N x open+close of DIR/bench.<rank> (created first)
 *   bench_preload create DIR N   N x open(O_CREAT|O_TRUNC)+write 1 byte+close of DIR/bench.<rank>
 *   bench_preload stat DIR N     N x stat of DIR/bench.<rank> by its absolute path (created
 *                                first; OpenFOAM stats its dictionaries so every time step)
 *   bench_preload inquire DIR N  N x stat of ./ckpt.q<rank>/x.EXIT (absent) from DIR, by a
 *                                relative path with a `.` component (Quantum ESPRESSO looks for
 *                                its exit file so, with access(), at every SCF iteration)
 *   bench_preload write DIR MIB  each rank writes MIB MiB to DIR/rank_<r>.dat, then a barrier
 *   bench_preload list DIR N     each rank writes 1,000 files into DIR/r<rank>/, passes a
 *                                barrier, then lists that directory N times (readdir); N=1
 *                                times the first listing alone
 *   bench_preload barrier DIR N [dup] [paired]
 *                                N x MPI_Barrier(MPI_COMM_WORLD) (dup: on a duplicate of it)
 *                                after 1,000 not timed
 *   bench_preload allreduce DIR N [COUNT] [dup] [paired]
 *                                N x MPI_Allreduce of COUNT doubles (default 1), SUM, on
 *                                MPI_COMM_WORLD (dup: on a duplicate of it) after 1,000 not timed
 *                                paired: in blocks of 1,000 calls, every other block calls MPI's
 *                                own PMPI_ function (found in libmpi, past a preloaded library):
 *                                prints both figures, "RESULT <what> <us> real <us>" (without a
 *                                preload, the two are the same function: a control)
 *   bench_preload ckpt DIR N     N checkpoints: each rank writes 6 files of 9,000 bytes into
 *                                DIR/processor<rank>/0.<k>/ (OpenFOAM's layout), then one
 *                                MPI_Allreduce of a double (with the preload: the sync point
 *                                that completes the checkpoint); milliseconds per checkpoint
 * Prints (rank 0) "RESULT <what> <value>": microseconds per call, or MiB/s over all ranks. */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*allreduce_fn)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
typedef int (*barrier_fn)(MPI_Comm);

/* `name` as the MPI library itself defines it (not a preloaded library's). */
static void *mpi_own(const char *name) {
  const char *libs[] = {"libmpi.so.40", "libmpi.so.12", "libmpi.so"};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
    void *h = dlopen(libs[i], RTLD_NOLOAD | RTLD_LAZY);
    void *p = h ? dlsym(h, name) : NULL;
    if (p) return p;
  }
  return NULL;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *mode = argv[1], *dir = argv[2];
  long n = atol(argv[3]);
  char path[4096];
  mkdir(dir, 0755);
  MPI_Barrier(MPI_COMM_WORLD);
  if (!strcmp(mode, "open") || !strcmp(mode, "create") || !strcmp(mode, "stat")) {
    snprintf(path, sizeof path, "%s/bench.%d", dir, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    close(fd);
    int create = !strcmp(mode, "create"), stats = !strcmp(mode, "stat");
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
      if (stats) {
        struct stat st;
        if (stat(path, &st) != 0) {
          perror(path);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        continue;
      }
      fd = create ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : open(path, O_RDONLY);
      if (fd < 0) {
        perror(path);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (create && write(fd, "x", 1) != 1) MPI_Abort(MPI_COMM_WORLD, 1);
      close(fd);
    }
    double us = (MPI_Wtime() - t0) / n * 1e6, max = 0;
    MPI_Reduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("RESULT %s_us %.3f\n", mode, max);
  } else if (!strcmp(mode, "inquire")) {
    snprintf(path, sizeof path, "%s/ckpt.q%d", dir, rank);
    mkdir(path, 0755);
    if (chdir(dir) != 0) {
      perror(dir);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    snprintf(path, sizeof path, "./ckpt.q%d/x.EXIT", rank);
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
      struct stat st;
      if (stat(path, &st) == 0) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double us = (MPI_Wtime() - t0) / n * 1e6, max = 0;
    MPI_Reduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("RESULT %s_us %.3f\n", mode, max);
  } else if (!strcmp(mode, "barrier") || !strcmp(mode, "allreduce")) {
    int barrier = !strcmp(mode, "barrier"), count = 1, dup = 0, paired = 0;
    for (int a = 4; a < argc; a++) {
      if (!strcmp(argv[a], "dup")) dup = 1;
      else if (!strcmp(argv[a], "paired")) paired = 1;
      else count = atoi(argv[a]);
    }
    MPI_Comm comm = MPI_COMM_WORLD;
    if (dup) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    double *in = calloc(count, sizeof(double)), *out = calloc(count, sizeof(double)), check = 0;
    for (int i = 0; i < count; i++) in[i] = rank + i;
    /* paired: the real functions, past any library preloaded in front of MPI's */
    allreduce_fn real_allreduce = paired ? (allreduce_fn)mpi_own("PMPI_Allreduce") : NULL;
    barrier_fn real_barrier = paired ? (barrier_fn)mpi_own("PMPI_Barrier") : NULL;
    if (paired && (!real_allreduce || !real_barrier)) {
      fprintf(stderr, "rank %d: MPI's own PMPI_Allreduce and PMPI_Barrier not found\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* blocks of BLOCK calls; paired: odd blocks call the real functions; 1,000 calls of each
     * kind first, not timed */
    const long BLOCK = 1000;
    long warm = paired ? 2 * BLOCK : BLOCK, calls[2] = {0, 0};
    double spent[2] = {0, 0};
    for (long b = -warm / BLOCK; b * BLOCK < n; b++) {
      int real = paired && (b & 1);
      double t0 = MPI_Wtime();
      for (long i = 0; i < BLOCK; i++) {
        if (barrier) {
          if (real) real_barrier(comm);
          else MPI_Barrier(comm);
        } else {
          if (real) real_allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, comm);
          else MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, comm);
          check += out[count - 1];
        }
      }
      if (b >= 0) {
        spent[real] += MPI_Wtime() - t0;
        calls[real] += BLOCK;
      }
    }
    long total = calls[0] + calls[1] + warm;
    /* the sums are exact small integers: a wrong result shows */
    if (!barrier && check != (double)total * (size * (count - 1) + size * (size - 1) / 2)) {
      fprintf(stderr, "rank %d: wrong allreduce results\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double us[2] = {spent[0] / calls[0] * 1e6, paired ? spent[1] / calls[1] * 1e6 : 0}, max[2] = {0, 0};
    MPI_Reduce(us, max, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0 && paired) printf("RESULT %s_us %.3f real %.3f\n", mode, max[0], max[1]);
    else if (rank == 0) printf("RESULT %s_us %.3f\n", mode, max[0]);
  } else if (!strcmp(mode, "ckpt")) {
    char buf[9000], sub[2048];
    memset(buf, 'x', sizeof buf);
    snprintf(sub, sizeof sub, "%s/processor%d", dir, rank);
    mkdir(sub, 0755);
    double one = 1, sum = 0, t0 = MPI_Wtime();
    for (long k = 1; k <= n; k++) {
      snprintf(sub, sizeof sub, "%s/processor%d/0.%04ld", dir, rank, k);
      mkdir(sub, 0755);
      for (int f = 0; f < 6; f++) {
        snprintf(path, sizeof path, "%s/f%d", sub, f);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, buf, sizeof buf) != (ssize_t)sizeof buf || close(fd) != 0) {
          perror(path);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
      }
      MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (sum != size) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double ms = (MPI_Wtime() - t0) / n * 1e3, max = 0;
    MPI_Reduce(&ms, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("RESULT ckpt_ms %.3f\n", max);
  } else if (!strcmp(mode, "list")) {
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/r%d", dir, rank);
    mkdir(sub, 0755);
    for (int i = 0; i < 1000; i++) {
      snprintf(path, sizeof path, "%s/f.%04d", sub, i);
      int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* with the preload: the files are a dataset in cache now */
    long entries = 0;
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
      DIR *d = opendir(sub);
      while (d && readdir(d)) entries++;
      if (d) closedir(d);
    }
    double us = (MPI_Wtime() - t0) / n * 1e6, max = 0;
    if (entries != n * 1002) {
      fprintf(stderr, "rank %d: %ld entries in %ld listings, expected 1002 each\n", rank, entries, n);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Reduce(&us, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("RESULT list_us %.3f\n", max);
  } else {
    long bytes = n << 20, chunk = 1 << 20;
    char *buf = malloc(chunk);
    memset(buf, rank + 1, chunk);
    snprintf(path, sizeof path, "%s/rank_%d.dat", dir, rank);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    for (long done = 0; done < bytes; done += chunk)
      if (write(fd, buf, chunk) != chunk) MPI_Abort(MPI_COMM_WORLD, 1);
    close(fd);
    MPI_Barrier(MPI_COMM_WORLD); /* with the preload: the dataset completes here */
    double s = MPI_Wtime() - t0;
    if (rank == 0) printf("RESULT write_mib_s %.1f\n", (double)bytes * size / (1 << 20) / s);
  }
  MPI_Finalize();
  return 0;
}
