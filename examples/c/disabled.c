/*
 * disabled: an application that checkpoints through the SCR API and keeps running without
 * SCR when SCR_Init fails (SCR_ENABLE=0). It writes two checkpoints, ckpt.<step>/rank_<r>.ckpt
 * relative to the current directory (rank 0 creates each directory), through the usual
 * calls, and reads every file back.
 *
 *   disabled
 *
 * Output lines tests rely on (rank 0): "INIT rc=<n>",
 * "CALLS need=<rc>/<flag> have=<rc>/<flag> start=<rc> route=<rc> same=<0|1> complete=<rc>
 *  exit=<rc>/<flag> config=<null|value> finalize=<rc>" (return codes and flags of rank 0's
 * calls of the last step; every rank checks that its own match rank 0's) and
 * "DONE verified=<0|1>".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "scr.h"

int main(int argc, char** argv)
{
  int rank, ranks;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  (void) argv;
  int init = SCR_Init();
  if (rank == 0) printf("INIT rc=%d\n", init);

  int have = 7, have_rc = SCR_Have_restart(&have, NULL);
  int codes[10] = {0};
  int verified = 1;
  for (int step = 1; step <= 2; step++) {
    int need = 7;
    int need_rc = SCR_Need_checkpoint(&need);
    char name[64], path[SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
    snprintf(name, sizeof name, "ckpt.%d", step);
    if (rank == 0) mkdir(name, 0700);
    MPI_Barrier(MPI_COMM_WORLD);
    int start_rc = SCR_Start_output(name, SCR_FLAG_CHECKPOINT);
    snprintf(path, sizeof path, "%s/rank_%d.ckpt", name, rank);
    memset(routed, 0, sizeof routed);
    int route_rc = SCR_Route_file(path, routed);
    int same = strcmp(path, routed) == 0;
    FILE* f = fopen(routed[0] ? routed : path, "w");
    if (f) {
      fprintf(f, "rank %d step %d of %d\n", rank, step, ranks);
      fclose(f);
    }
    int complete_rc = SCR_Complete_output(f != NULL);
    int exit_flag = 7, exit_rc = SCR_Should_exit(&exit_flag);
    int c[10] = {need_rc, need, have_rc, have, start_rc, route_rc, same, complete_rc, exit_rc, exit_flag};
    memcpy(codes, c, sizeof codes);
  }
  /* read back what each rank wrote */
  for (int step = 1; step <= 2; step++) {
    char path[SCR_MAX_FILENAME], want[128], got[128] = {0};
    snprintf(path, sizeof path, "ckpt.%d/rank_%d.ckpt", step, rank);
    snprintf(want, sizeof want, "rank %d step %d of %d\n", rank, step, ranks);
    FILE* f = fopen(path, "r");
    if (!f || !fgets(got, sizeof got, f) || strcmp(got, want) != 0) verified = 0;
    if (f) fclose(f);
  }
  const char* config = SCR_Config("SCR_DEBUG");
  int fin = SCR_Finalize();

  /* every rank saw what rank 0 saw */
  int mine[10], root[10];
  memcpy(mine, codes, sizeof mine);
  memcpy(root, codes, sizeof root);
  MPI_Bcast(root, 10, MPI_INT, 0, MPI_COMM_WORLD);
  int agree = memcmp(mine, root, sizeof mine) == 0, all = 0, all_verified = 0;
  MPI_Allreduce(&agree, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  MPI_Allreduce(&verified, &all_verified, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("CALLS need=%d/%d have=%d/%d start=%d route=%d same=%d complete=%d exit=%d/%d config=%s finalize=%d"
           " agree=%d\n",
           codes[0], codes[1], codes[2], codes[3], codes[4], codes[5], codes[6], codes[7], codes[8], codes[9],
           config ? config : "null", fin, all);
    printf("DONE verified=%d\n", all_verified);
  }
  MPI_Finalize();
  return 0;
}
