/* An MPI application that checkpoints through HDF5's default (sec2, POSIX) driver and knows
 * nothing of SCR: one file per rank ckpt.<step>/rank_<r>.h5 with dataset "state", a
 * "latest" pointer, restart verified element by element. Usage: ckpt_hdf5 DIR STEPS [CRASH_AT] */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 10000

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *dir = argv[1];
  int steps = atoi(argv[2]), crash_at = argc > 3 ? atoi(argv[3]) : -1, start = 0;
  static double buf[N], got[N];
  char path[4096];
  hsize_t dims[1] = {N};
  snprintf(path, sizeof path, "%s/latest", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%d", &start) != 1) start = 0;
    fclose(f);
  }
  if (start > 0) {
    int ok = 0;
    snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.h5", dir, start, rank);
    H5E_BEGIN_TRY {
      hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
      if (file >= 0) {
        hid_t ds = H5Dopen2(file, "state", H5P_DEFAULT);
        if (ds >= 0 && H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0) {
          ok = 1;
          for (int i = 0; i < N; i++)
            if (got[i] != i * 0.5 + start * 100 + rank) ok = 0;
        }
        if (ds >= 0) H5Dclose(ds);
        H5Fclose(file);
      }
    } H5E_END_TRY;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) printf("RESTARTED %d %s\n", start, all ? "verified" : "CORRUPT");
  } else if (rank == 0) {
    printf("NO_RESTART\n");
  }
  fflush(stdout);
  for (int step = start + 1; step <= steps; step++) {
    if (step == crash_at && rank == size - 1) _exit(9);
    MPI_Barrier(MPI_COMM_WORLD);
    if (step % 2) continue;
    if (rank == 0) {
      snprintf(path, sizeof path, "%s/ckpt.%d", dir, step);
      mkdir(path, 0755);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) buf[i] = i * 0.5 + step * 100 + rank;
    snprintf(path, sizeof path, "%s/ckpt.%d/rank_%d.h5", dir, step, rank);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t ds = H5Dcreate2(file, "state", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(file);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      char tmp[4096];
      snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
      snprintf(path, sizeof path, "%s/latest", dir);
      f = fopen(tmp, "w");
      fprintf(f, "%d\n", step);
      fclose(f);
      rename(tmp, path);
      printf("CHECKPOINT %d\n", step);
      fflush(stdout);
    }
  }
  if (rank == 0) printf("DONE\n");
  MPI_Finalize();
  return 0;
}
