/* Long quiet stretches of floating-point sums (OpenFOAM's shape) between checkpoints that a
 * single rank changes: 4 rounds, each of 300 world MPI_Allreduce double SUMs (which cannot
 * carry transparent mode's agreement), then a change, then 2 more sums, after which rank 0
 * says "SYNCED <round>" on stderr. The changes: round 1 rank 3 writes ckpt.1/rank_3.dat,
 * round 2 rank 1 writes ckpt.2/rank_1.dat, round 3 every rank writes ckpt.3/rank_<r>.dat,
 * round 4 rank 2 removes its ckpt.3/rank_2.dat. Every sum's result goes to OUT.<rank>, one
 * line each (compared with a run without the preload). No SCR call.
 * With a third argument `barrier`, the quiet stretches are world MPI_Barriers instead (each
 * writes its round and step to OUT.<rank>), rank 0 says "SYNCED <round>" after the first
 * barrier after the change (a world barrier completes what every rank closed before it), and
 * in round 4 a child process of rank 2 removes the file (`system("rm ...")`).
 *
 *   quiet_sums PREFIX OUT [barrier] */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static FILE *out;
static int rank, barriers;

/* `n` world double SUMs of values that depend on the rank and the step (or `n` barriers) */
static void sums(int round, int n) {
  static int step;
  for (int i = 0; i < n; i++, step++) {
    if (barriers) {
      MPI_Barrier(MPI_COMM_WORLD);
      fprintf(out, "%d %d\n", round, step);
      continue;
    }
    double v[3] = {rank * 0.1 + step * 1e-3, 1.0 / (rank + step + 1), step * 3.7e5 - rank}, r[3];
    MPI_Allreduce(v, r, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    fprintf(out, "%d %d %a %a %a\n", round, step, r[0], r[1], r[2]);
  }
}

static void write_file(const char *prefix, int ckpt) {
  char path[4096];
  snprintf(path, sizeof path, "%s/ckpt.%d", prefix, ckpt);
  if (mkdir(path, 0755) && errno != EEXIST)
    MPI_Abort(MPI_COMM_WORLD, 3);
  snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.dat", prefix, ckpt, rank);
  FILE *f = fopen(path, "w");
  if (!f || fprintf(f, "checkpoint %d of rank %d\n", ckpt, rank) < 0 || fclose(f))
    MPI_Abort(MPI_COMM_WORLD, 4);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 3) {
    fprintf(stderr, "usage: quiet_sums PREFIX OUT [barrier]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  barriers = argc > 3 && !strcmp(argv[3], "barrier");
  char name[4096];
  snprintf(name, sizeof name, "%s.%d", argv[2], rank);
  if (!(out = fopen(name, "w")))
    MPI_Abort(MPI_COMM_WORLD, 2);
  for (int round = 1; round <= 4; round++) {
    sums(round, 300);
    if ((round == 1 && rank == 3) || (round == 2 && rank == 1) || round == 3)
      write_file(argv[1], round);
    if (round == 4 && rank == 2) {
      snprintf(name, sizeof name, "%s/ckpt.3/rank_2.dat", argv[1]);
      char cmd[4200];
      snprintf(cmd, sizeof cmd, "rm '%s'", name);
      if (barriers ? system(cmd) != 0 : unlink(name) != 0)
        MPI_Abort(MPI_COMM_WORLD, 5);
    }
    sums(round, barriers ? 1 : 2);
    if (rank == 0) {
      fprintf(stderr, "SYNCED %d\n", round);
      fflush(stderr);
    }
  }
  fclose(out);
  MPI_Finalize();
  return 0;
}
