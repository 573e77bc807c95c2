/* An MPI application that checkpoints through parallel HDF5 (the MPI-IO driver) and knows
 * nothing of SCR: all ranks write one file ckpt.<step>/state.h5 together, dataset "state" of
 * N doubles per rank, each rank its own hyperslab with a collective write; then rank 0 writes
 * the "latest" pointer. At restart each rank reads its hyperslab back and checks every
 * element. Usage: ckpt_phdf5 DIR STEPS [CRASH_AT]
 * Prints (rank 0): RESTARTED <s> verified | NO_RESTART, CHECKPOINT <s>, DONE. */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define N 3001

static double value(int step, int rank, int i) { return i * 0.25 + step * 1000 + rank * 7; }

static hid_t open_file(const char *path, int create) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  hid_t file = create ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  return file;
}

/* this rank's hyperslab of the dataset's file space */
static hid_t my_slab(hid_t ds, int rank) {
  hid_t space = H5Dget_space(ds);
  hsize_t start[1] = {(hsize_t)rank * N}, count[1] = {N};
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
  return space;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *dir = argv[1];
  int steps = atoi(argv[2]), crash_at = argc > 3 ? atoi(argv[3]) : -1, start = 0;
  static double buf[N];
  char path[4096];
  hsize_t mdims[1] = {N}, fdims[1] = {(hsize_t)N * size};
  hid_t mem = H5Screate_simple(1, mdims, NULL);
  hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
  snprintf(path, sizeof path, "%s/latest", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%d", &start) != 1) start = 0;
    fclose(f);
  }
  if (start > 0) {
    int ok = 0;
    snprintf(path, sizeof path, "%s/ckpt.%d/state.h5", dir, start);
    hid_t file = open_file(path, 0);
    if (file >= 0) {
      hid_t ds = H5Dopen2(file, "state", H5P_DEFAULT);
      hid_t space = my_slab(ds, rank);
      if (H5Dread(ds, H5T_NATIVE_DOUBLE, mem, space, xfer, buf) >= 0) {
        ok = 1;
        for (int i = 0; i < N; i++)
          if (buf[i] != value(start, rank, i)) ok = 0;
      }
      H5Sclose(space);
      H5Dclose(ds);
      H5Fclose(file);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) printf("RESTARTED %d %s\n", start, all ? "verified" : "CORRUPT");
    if (!all) MPI_Abort(MPI_COMM_WORLD, 3);
  } else if (rank == 0) {
    printf("NO_RESTART\n");
  }
  fflush(stdout);
  for (int step = start + 1; step <= steps; step++) {
    if (step == crash_at) {
      if (rank == size - 1) _exit(9);
      sleep(30);
    }
    double x = step, sum = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (step % 2) continue;
    snprintf(path, sizeof path, "%s/ckpt.%d", dir, step);
    if (rank == 0) mkdir(path, 0755);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(path, sizeof path, "%s/ckpt.%d/state.h5", dir, step);
    for (int i = 0; i < N; i++) buf[i] = value(step, rank, i);
    hid_t file = open_file(path, 1);
    if (file < 0) MPI_Abort(MPI_COMM_WORLD, 2);
    hid_t fspace = H5Screate_simple(1, fdims, NULL);
    hid_t ds = H5Dcreate2(file, "state", H5T_NATIVE_DOUBLE, fspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = my_slab(ds, rank);
    if (H5Dwrite(ds, H5T_NATIVE_DOUBLE, mem, space, xfer, buf) < 0) MPI_Abort(MPI_COMM_WORLD, 2);
    H5Sclose(space);
    H5Sclose(fspace);
    H5Dclose(ds);
    if (H5Fclose(file) < 0) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      snprintf(path, sizeof path, "%s/latest", dir);
      f = fopen(path, "w");
      fprintf(f, "%d\n", step);
      fclose(f);
      printf("CHECKPOINT %d\n", step);
      fflush(stdout);
    }
  }
  H5Pclose(xfer);
  H5Sclose(mem);
  if (rank == 0) printf("DONE\n");
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
