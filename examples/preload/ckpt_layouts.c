/* An MPI application that knows nothing of SCR and finds its restart by listing directories,
 * as real codes do: OpenFOAM (`startFrom latestTime`: each rank writes
 * processor<rank>/<time>/{p,U} and restarts from the newest time directory it lists) and
 * LAMMPS (flat per-step files restart.<step>.<rank>, the newest step listed). Shape rotate:
 * each rank keeps its last three checkpoints in turn in processor<rank>/restart.{0,1,2}/state
 * (the step in the file's first bytes; the newest of the three restarts), and the run's only
 * collective is the check of every rank's first half inside each write: no sync point
 * between closing one checkpoint's file and opening the next one's. After a last barrier
 * every rank writes processor<rank>/restart.<newest>/done, next to its newest state.
 *
 *   ckpt_layouts --dir DIR --shape foam|flat|rotate|qe [--steps N] [--every K] [--crash-at STEP]
 *                [--note] [--late] [--purge P]
 *
 * --note: rank 0 also writes processor0/<time>/notes.txt (a file no checkpoint pattern
 * takes) at every checkpoint. --late: after the barrier that ends a checkpoint, rank 0
 * writes processor0/<time>/time (as OpenFOAM writes uniform/time last), checked at restart.
 * --purge P (foam): once a time directory is written, each rank removes its directory of the
 * checkpoint P checkpoints older, files first (OpenFOAM's purgeWrite P), before the barrier.
 * Prints (rank 0): RESTARTED <s> verified | NO_RESTART, CHECKPOINT <s>, DONE. A rank whose
 * newest time directory lacks its files prints "MISSING <path>" and the run fails, as
 * OpenFOAM's "cannot find file". Ranks that chose different steps print RESTART_MISMATCH.
 * Shape qe (Quantum ESPRESSO's out/): each rank rewrites out/r<rank>.dat in place at every
 * checkpoint (the step in its first bytes), and after the last one adds out/wfc<k>.<rank>,
 * k = 1..6, one per barrier (QE's last save writes a wave function file per k-point). */
#include <dirent.h>
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir = ".";
static const char *shape = "foam";
static int rank, nranks, note = 0, late = 0, every = 2, purge = 0;
static const long size = 4096;

static unsigned char byte_at(int step, int r, int k, long i) {
  return (unsigned char)((i * 31 + step * 7 + r * 13 + k * 101) & 0xff);
}

/* step 6 is time "0.6", step 12 "1.2" */
static void time_name(char *out, size_t n, int step) { snprintf(out, n, "%d.%d", step / 10, step % 10); }

static int rotate(void) { return !strcmp(shape, "rotate"); }

static int qe(void) { return !strcmp(shape, "qe"); }

/* the step is in the file's first bytes, rewritten in place */
static int stepped(void) { return rotate() || qe(); }

/* rotate: the directory of the checkpoint at `step` (0, 1, 2, 0, ...) */
static void rotate_dir(char *out, size_t n, int step) {
  snprintf(out, n, "%s/processor%d/restart.%d", dir, rank, (step / every) % 3);
}

static void file_path(char *out, size_t n, int step, int k) {
  char t[32];
  time_name(t, sizeof t, step);
  if (rotate()) {
    char d[4000];
    rotate_dir(d, sizeof d, step);
    snprintf(out, n, "%s/state", d);
  } else if (qe())
    snprintf(out, n, "%s/out/r%d.dat", dir, rank);
  else if (!strcmp(shape, "foam"))
    snprintf(out, n, "%s/processor%d/%s/%s", dir, rank, t, k ? "U" : "p");
  else
    snprintf(out, n, "%s/restart.%d.%d", dir, step, rank);
}

static int nfiles(void) { return !strcmp(shape, "foam") ? 2 : 1; }

static void die(const char *what, const char *path) {
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static void write_file(const char *path, int step, int k) {
  FILE *f = fopen(path, "w");
  if (!f) die("open", path);
  if (stepped() && fwrite(&step, sizeof step, 1, f) != 1) die("write", path);
  for (long i = 0; i < size; i++) {
    fputc(byte_at(step, rank, k, i), f);
    if (rotate() && i == size / 2) {
      /* every rank's first half went out (the file stays open across this sync point) */
      int ok = !ferror(f), all = 0;
      MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      if (!all) die("write (some rank)", path);
    }
  }
  if (fclose(f) != 0) die("close", path);
}

static int check_file(const char *path, int step, int k) {
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("MISSING %s\n", path);
    fflush(stdout);
    return 0;
  }
  int ok = 1, got = -1;
  if (stepped() && (fread(&got, sizeof got, 1, f) != 1 || got != step)) ok = 0;
  for (long i = 0; i < size; i++)
    if (fgetc(f) != byte_at(step, rank, k, i)) ok = 0;
  if (fgetc(f) != EOF) ok = 0;
  fclose(f);
  if (!ok) fprintf(stderr, "rank %d: CORRUPT %s\n", rank, path);
  return ok;
}

/* The newest step this rank finds by listing (rotate: in its state files), 0 if none. */
static int newest_step(void) {
  char d[4096];
  if (rotate()) {
    int best = 0;
    for (int c = 0; c < 3; c++) {
      snprintf(d, sizeof d, "%s/processor%d/restart.%d/state", dir, rank, c);
      FILE *f = fopen(d, "r");
      int s = 0;
      if (f && fread(&s, sizeof s, 1, f) == 1 && s > best) best = s;
      if (f) fclose(f);
    }
    return best;
  }
  if (qe()) {
    int s = 0;
    file_path(d, sizeof d, 0, 0);
    FILE *f = fopen(d, "r");
    if (f && fread(&s, sizeof s, 1, f) != 1) s = 0;
    if (f) fclose(f);
    return s;
  }
  if (!strcmp(shape, "foam"))
    snprintf(d, sizeof d, "%s/processor%d", dir, rank);
  else
    snprintf(d, sizeof d, "%s", dir);
  DIR *dp = opendir(d);
  if (!dp) return 0;
  int best = 0;
  struct dirent *e;
  while ((e = readdir(dp))) {
    int a, b, s, r;
    char end;
    if (!strcmp(shape, "foam")) {
      if (sscanf(e->d_name, "%d.%d%c", &a, &b, &end) != 2) continue;
      s = a * 10 + b;
    } else {
      if (sscanf(e->d_name, "restart.%d.%d%c", &s, &r, &end) != 2 || r != rank) continue;
    }
    if (s > best) best = s;
  }
  closedir(dp);
  return best;
}

static void checkpoint(int step) {
  char path[4096], t[32];
  if (rotate()) {
    rotate_dir(path, sizeof path, step);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
    file_path(path, sizeof path, step, 0);
    write_file(path, step, 0);
    if (rank == 0) {
      printf("CHECKPOINT %d\n", step);
      fflush(stdout);
    }
    return;
  }
  if (!strcmp(shape, "foam")) {
    time_name(t, sizeof t, step);
    snprintf(path, sizeof path, "%s/processor%d/%s", dir, rank, t);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
    if (note && rank == 0) {
      snprintf(path, sizeof path, "%s/processor0/%s/notes.txt", dir, t);
      FILE *f = fopen(path, "w");
      if (!f) die("open", path);
      fprintf(f, "step %d\n", step);
      fclose(f);
    }
  }
  for (int k = 0; k < nfiles(); k++) {
    file_path(path, sizeof path, step, k);
    write_file(path, step, k);
  }
  int old = step - purge * every;
  if (purge > 0 && old > 0 && !strcmp(shape, "foam")) {
    for (int k = 0; k < nfiles(); k++) {
      file_path(path, sizeof path, old, k);
      if (unlink(path) != 0 && errno != ENOENT) die("unlink", path);
    }
    time_name(t, sizeof t, old);
    snprintf(path, sizeof path, "%s/processor%d/%s", dir, rank, t);
    if (rmdir(path) != 0 && errno != ENOENT) die("rmdir", path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (late && rank == 0) {
    snprintf(path, sizeof path, "%s/processor0/%s/time", dir, t);
    FILE *f = fopen(path, "w");
    if (!f) die("open", path);
    fprintf(f, "time %d\n", step);
    if (fclose(f) != 0) die("close", path);
  }
  if (rank == 0) {
    printf("CHECKPOINT %d\n", step);
    fflush(stdout);
  }
}

int main(int argc, char **argv) {
  int steps = 6, crash_at = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir")) dir = argv[++i];
    else if (!strcmp(argv[i], "--shape")) shape = argv[++i];
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--every")) every = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--crash-at")) crash_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--note")) note = 1;
    else if (!strcmp(argv[i], "--late")) late = 1;
    else if (!strcmp(argv[i], "--purge")) purge = atoi(argv[++i]);
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  char path[4096];
  if (!strcmp(shape, "foam") || rotate()) {
    snprintf(path, sizeof path, "%s/processor%d", dir, rank);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
  }
  if (qe()) {
    snprintf(path, sizeof path, "%s/out", dir);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
  }

  int start = newest_step(), lo = 0, hi = 0;
  MPI_Allreduce(&start, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&start, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (lo != hi) {
    if (rank == 0) printf("RESTART_MISMATCH %d %d\n", lo, hi);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (start > 0) {
    int ok = 1;
    for (int k = 0; k < nfiles(); k++) {
      file_path(path, sizeof path, start, k);
      ok &= check_file(path, start, k);
    }
    if (late && rank == 0) {
      char t[32], want[64], got[64] = "";
      time_name(t, sizeof t, start);
      snprintf(path, sizeof path, "%s/processor0/%s/time", dir, t);
      snprintf(want, sizeof want, "time %d\n", start);
      FILE *f = fopen(path, "r");
      if (!f || !fgets(got, sizeof got, f) || strcmp(got, want)) {
        printf("MISSING %s\n", path);
        ok = 0;
      }
      if (f) fclose(f);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) printf("RESTARTED %d %s\n", start, all ? "verified" : "FAILED");
    fflush(stdout);
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
    if (!rotate()) MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (step % every == 0) checkpoint(step);
  }
  int last = steps - steps % every;
  if (rotate() && last > start) {
    /* a plain file next to the newest state file (no checkpoint pattern takes it) */
    MPI_Barrier(MPI_COMM_WORLD);
    rotate_dir(path, sizeof path, last);
    strcat(path, "/done");
    FILE *f = fopen(path, "w");
    if (!f) die("open", path);
    fprintf(f, "step %d\n", last);
    if (fclose(f) != 0) die("close", path);
  }
  if (qe() && last > start) {
    for (int k = 1; k <= 6; k++) {
      snprintf(path, sizeof path, "%s/out/wfc%d.%d", dir, k, rank);
      FILE *f = fopen(path, "w");
      if (!f) die("open", path);
      fprintf(f, "wave function %d of step %d\n", k, last);
      if (fclose(f) != 0) die("close", path);
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  if (rank == 0) printf("DONE\n");
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
