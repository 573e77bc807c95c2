/*
 * bench_files: what a checkpoint of many files per rank costs in SCR's own bookkeeping (the
 * files are a few bytes each: the time is the library's, not the bytes').
 *
 *   bench_files N REPS
 *
 * With a checkpoint to restart from, the restart comes first: SCR_Start_restart, every file
 * routed, read and checked, SCR_Complete_restart. Then REPS checkpoints of N files per rank
 * (`ckpt.<i>/r<rank>/f<j>.<rank>`: unique base names, as C SCR 3.1 keeps the files of the
 * ranks of a node in one cache directory by base name). Rank 0 prints, each the slowest
 * rank's time:
 *
 *   TIME route <s>      the N calls of SCR_Route_file of one checkpoint
 *   TIME complete <s>   its SCR_Complete_output
 *   TIME restart <s>    the N calls of SCR_Route_file of the restart
 *   BAD <n>             files whose bytes did not come back at restart (none expected)
 */
#include <mpi.h>
#include <scr.h>
#include <stdio.h>
#include <stdlib.h>

static int rank;

static double slowest(double t)
{
  double max;
  MPI_Reduce(&t, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  return max;
}

/* Route file i of checkpoint `ckpt` into `p`; returns the time SCR_Route_file took. */
static double route(const char* ckpt, int i, char* p)
{
  char f[SCR_MAX_FILENAME + 64];
  snprintf(f, sizeof f, "%s/r%d/f%d.%d", ckpt, rank, i, rank);
  double t = MPI_Wtime();
  if (SCR_Route_file(f, p) != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
  return MPI_Wtime() - t;
}

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 3) {
    if (rank == 0) fprintf(stderr, "usage: bench_files N REPS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int n = atoi(argv[1]), reps = atoi(argv[2]);
  if (SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
  int have = 0;
  char ckpt[SCR_MAX_FILENAME];
  if (SCR_Have_restart(&have, ckpt) == SCR_SUCCESS && have) {
    SCR_Start_restart(ckpt);
    double routes = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
      char p[SCR_MAX_FILENAME];
      routes += route(ckpt, i, p);
      FILE* fp = fopen(p, "r");
      int r = -1, j = -1;
      if (!fp || fscanf(fp, "%d %d", &r, &j) != 2 || r != rank || j != i) bad++;
      if (fp) fclose(fp);
    }
    SCR_Complete_restart(bad == 0);
    routes = slowest(routes);
    int all = 0;
    MPI_Reduce(&bad, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("TIME restart %.6f\nBAD %d\n", routes, all);
  }
  for (int c = 0; c < reps; c++) {
    char name[64];
    snprintf(name, sizeof name, "ckpt.%d", c);
    MPI_Barrier(MPI_COMM_WORLD);
    SCR_Start_output(name, SCR_FLAG_CHECKPOINT);
    double routes = 0;
    for (int i = 0; i < n; i++) {
      char p[SCR_MAX_FILENAME];
      routes += route(name, i, p);
      FILE* fp = fopen(p, "w");
      if (!fp) MPI_Abort(MPI_COMM_WORLD, 1);
      fprintf(fp, "%d %d\n", rank, i);
      fclose(fp);
    }
    double t = MPI_Wtime();
    SCR_Complete_output(1);
    double complete = slowest(MPI_Wtime() - t);
    routes = slowest(routes);
    if (rank == 0) printf("TIME route %.6f\nTIME complete %.6f\n", routes, complete);
  }
  SCR_Finalize();
  MPI_Finalize();
  return 0;
}
