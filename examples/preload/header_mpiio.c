/* An MPI application that knows nothing of SCR and writes its restart file the way LAMMPS'
 * `restart N file.mpiio` does: rank 0 alone creates the file with stdio and writes a header,
 * closes it, and then every rank opens the same file with MPI_File_open(MPI_COMM_WORLD,
 * MPI_MODE_WRONLY) - no MPI_MODE_CREATE, the file exists - sets its size and writes its part
 * after the header with MPI_File_write_at_all. On start-up it restarts from the step the
 * "latest" pointer names: rank 0 reads the header with stdio, every rank its part through
 * MPI-IO, every byte verified.
 *
 *   header_mpiio --dir DIR [--steps N] [--every K] [--create] [--crash-at STEP]
 *                [--header-ranks N]
 *
 * The file of step s is DIR/restart.<s>.mpiio: a header of 1000 + 3 s bytes (its first 4
 * bytes the step), then rank r's part of 10000 + 777 r bytes at the sum of the parts before
 * it, each a pattern of its own. --create: the MPI_File_open also has MPI_MODE_CREATE.
 * --crash-at STEP: the last rank dies at STEP (the others wait to be killed).
 * --header-ranks N: ranks 0 to N-1 each write the (same) header with stdio (default 1).
 * Prints (rank 0): RESTARTED <s> verified | NO_RESTART, CHECKPOINT <s>, DONE. */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir = ".";
static int rank, nranks, create = 0, header_ranks = 1;

static void die(const char *what, const char *path) {
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static void mpi_die(const char *what, const char *path, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static long header_size(int step) { return 1000 + 3L * step; }
static long part_size(int r) { return 10000 + 777L * r; }

static long part_offset(int r) {
  long off = 0;
  for (int i = 0; i < r; i++) off += part_size(i);
  return off;
}

static unsigned char header_byte(int step, long i) {
  if (i < 4) return (unsigned char)((step >> (8 * i)) & 0xff);
  return (unsigned char)((i * 13 + step * 5 + (i >> 7)) & 0xff);
}

static unsigned char part_byte(int step, int r, long i) {
  return (unsigned char)((i * 7 + step * 11 + r * 37 + (i >> 8)) & 0xff);
}

static void checkpoint(int step) {
  char path[4096];
  snprintf(path, sizeof path, "%s/restart.%d.mpiio", dir, step);
  MPI_Offset header = 0;
  if (rank < header_ranks) {
    FILE *f = fopen(path, "wb");
    if (!f) die("fopen", path);
    for (long i = 0; i < header_size(step); i++) fputc(header_byte(step, i), f);
    header = ftell(f);
    if (fclose(f) != 0) die("fclose", path);
  }
  MPI_Bcast(&header, 1, MPI_OFFSET, 0, MPI_COMM_WORLD);
  MPI_File fh;
  int amode = MPI_MODE_WRONLY | (create ? MPI_MODE_CREATE : 0);
  int rc = MPI_File_open(MPI_COMM_WORLD, path, amode, MPI_INFO_NULL, &fh);
  if (rc != MPI_SUCCESS) mpi_die("MPI_File_open", path, rc);
  rc = MPI_File_set_size(fh, header + part_offset(nranks));
  if (rc != MPI_SUCCESS) mpi_die("MPI_File_set_size", path, rc);
  long n = part_size(rank);
  unsigned char *buf = malloc(n);
  for (long i = 0; i < n; i++) buf[i] = part_byte(step, rank, i);
  rc = MPI_File_write_at_all(fh, header + part_offset(rank), buf, (int)n, MPI_BYTE, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) mpi_die("MPI_File_write_at_all", path, rc);
  free(buf);
  rc = MPI_File_close(&fh);
  if (rc != MPI_SUCCESS) mpi_die("MPI_File_close", path, rc);
  /* the next step's collective: the sync point that completes the checkpoint */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char tmp[4096], latest[4096];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", step) < 0 || fclose(f) != 0) die("write", tmp);
    if (rename(tmp, latest) != 0) die("rename", tmp);
    printf("CHECKPOINT %d\n", step);
    fflush(stdout);
  }
}

/* 1 if the checkpoint of `step` reads back exactly */
static int verify(int step) {
  char path[4096];
  snprintf(path, sizeof path, "%s/restart.%d.mpiio", dir, step);
  int ok = 1;
  if (rank == 0) {
    FILE *f = fopen(path, "rb");
    if (!f) {
      fprintf(stderr, "rank 0: fopen %s: %s\n", path, strerror(errno));
      ok = 0;
    } else {
      for (long i = 0; i < header_size(step) && ok; i++) {
        int c = fgetc(f);
        if (c != header_byte(step, i)) {
          fprintf(stderr, "rank 0: %s: header byte %ld is %d\n", path, i, c);
          ok = 0;
        }
      }
      fclose(f);
    }
  }
  MPI_File fh;
  int rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "rank %d: MPI_File_open %s (read) failed\n", rank, path);
    return 0;
  }
  MPI_Offset total = 0;
  MPI_File_get_size(fh, &total);
  if (total != header_size(step) + part_offset(nranks)) {
    fprintf(stderr, "rank %d: %s has %lld bytes\n", rank, path, (long long)total);
    ok = 0;
  }
  long n = part_size(rank);
  unsigned char *buf = calloc(1, n);
  MPI_Status st;
  int count = 0;
  if (MPI_File_read_at_all(fh, header_size(step) + part_offset(rank), buf, (int)n, MPI_BYTE, &st) == MPI_SUCCESS)
    MPI_Get_count(&st, MPI_BYTE, &count);
  MPI_File_close(&fh);
  if (count != n) {
    fprintf(stderr, "rank %d: %s: read %d of %ld bytes\n", rank, path, count, n);
    ok = 0;
  }
  for (long i = 0; i < n && ok; i++)
    if (buf[i] != part_byte(step, rank, i)) {
      fprintf(stderr, "rank %d: %s: byte %ld of its part differs\n", rank, path, i);
      ok = 0;
    }
  free(buf);
  return ok;
}

int main(int argc, char **argv) {
  int steps = 6, every = 2, crash_at = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir")) dir = argv[++i];
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--every")) every = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--create")) create = 1;
    else if (!strcmp(argv[i], "--crash-at")) crash_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--header-ranks")) header_ranks = atoi(argv[++i]);
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  int start = 0;
  char path[4096];
  snprintf(path, sizeof path, "%s/latest", dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%d", &start) != 1) start = 0;
    fclose(f);
  }
  if (start > 0) {
    int ok = verify(start), all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) printf("RESTARTED %d %s\n", start, all ? "verified" : "CORRUPT");
    if (!all) MPI_Abort(MPI_COMM_WORLD, 3);
  } else if (rank == 0) {
    printf("NO_RESTART\n");
  }
  fflush(stdout);

  double x = rank;
  for (int step = start + 1; step <= steps; step++) {
    if (step == crash_at) {
      if (rank == nranks - 1) {
        fprintf(stderr, "rank %d: CRASH at step %d\n", rank, step);
        _exit(9);
      }
      sleep(30);
    }
    double sum = 0;
    x = x * 0.5 + step;
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (step % every == 0) checkpoint(step);
  }
  if (rank == 0) printf("DONE\n");
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
