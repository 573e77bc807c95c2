/* A removal that waits (Quantum ESPRESSO's shape: a file of out/ removed while another is
 * still being written): each rank writes ckpt.1/rank_<r>.dat, a barrier completes ckpt.1;
 * rank 0 then opens ckpt.1/held.dat for writing, rank 1 removes its rank_1.dat, and 200
 * barriers pass before rank 0 writes and closes held.dat and a last barrier completes the new
 * version (without rank_1.dat, with held.dat). No SCR call.
 *
 *   remove_while_open write PREFIX    the run above
 *   remove_while_open list PREFIX     rank 0 lists ckpt.1 (a relaunch: what was kept) */
#include <dirent.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 3) {
    fprintf(stderr, "usage: remove_while_open write|list PREFIX\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char dir[4096], path[4096];
  snprintf(dir, sizeof dir, "%s/ckpt.1", argv[2]);
  if (!strcmp(argv[1], "write")) {
    if (rank == 0)
      mkdir(dir, 0755);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(path, sizeof path, "%s/rank_%d.dat", dir, rank);
    FILE *f = fopen(path, "w");
    fprintf(f, "rank %d\n", rank);
    fclose(f);
    MPI_Barrier(MPI_COMM_WORLD);
    int held = -1;
    snprintf(path, sizeof path, "%s/held.dat", dir);
    if (rank == 0 && (held = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
      MPI_Abort(MPI_COMM_WORLD, 3);
    if (rank == 1) {
      snprintf(path, sizeof path, "%s/rank_1.dat", dir);
      if (unlink(path))
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    for (int i = 0; i < 200; i++)
      MPI_Barrier(MPI_COMM_WORLD);
    if (held >= 0 && (write(held, "held\n", 5) != 5 || close(held)))
      MPI_Abort(MPI_COMM_WORLD, 5);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("WROTE rank=%d\n", rank);
  } else if (rank == 0) {
    DIR *d = opendir(dir);
    char *names[64];
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 64)
      if (e->d_name[0] != '.')
        names[n++] = strdup(e->d_name);
    if (d)
      closedir(d);
    qsort(names, n, sizeof names[0], cmp);
    printf("KEPT");
    for (int i = 0; i < n; i++)
      printf(" %s", names[i]);
    printf("\n");
  }
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
