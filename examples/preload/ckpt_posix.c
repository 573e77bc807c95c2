/* An MPI application that knows nothing of SCR: it checkpoints every few steps into
 * <dir>/ckpt.<step>/ (or another layout), writes a "latest" pointer file, and on start-up
 * restarts from the step the pointer names, verifying every byte it reads back.
 *
 *   ckpt_posix --dir DIR [--steps N] [--every K] [--size BYTES] [--layout L] [--stdio]
 *              [--uneven] [--meta] [--meta-after] [--crash-at STEP] [--fail-write STEP]
 *              [--no-finalize] [--hang-at STEP] [--die-in-ckpt STEP] [--die-before-pointer STEP]
 *              [--quiet-steps] [--die-in-meta STEP]
 *
 * Layouts: dir      ckpt.<s>/rank_<r>.dat (rank 0 creates the directory)
 *          flat     ckpt_<s>_<r>.dat
 *          tmpdir   ckpt.<s>.tmp/rank_<r>.dat, then rank 0 renames the directory to ckpt.<s>
 *          tmpfile  ckpt.<s>/rank_<r>.dat.tmp, each rank renames it to rank_<r>.dat
 * --uneven: rank r writes r%3 files (some ranks none); --meta: rank 0 also writes meta.txt.
 * --meta-after: after the barrier that ends the checkpoint (a sync point: the checkpoint is
 * complete) and the tmpdir rename, rank 0 writes ckpt.<s>/meta through meta.tmp + rename,
 * then the pointer file.
 * --quiet-steps: no allreduce in the steps and every rank creates the checkpoint directory
 * (no barrier before the files), so the next sync point after a checkpoint is the next
 * checkpoint's barrier (with --meta-after: rank 0 has files of both pending there).
 * --hang-at STEP: in a run that did not restart, the last rank hangs (pause(), no CPU) at STEP
 * while the others wait for it in that step's allreduce.
 * --die-in-ckpt STEP: the last rank exits after writing its file of checkpoint STEP, before
 * the barrier that would complete it (the others wait there until the launcher ends them).
 * --die-before-pointer STEP: rank 0 exits after the barrier that completes checkpoint STEP,
 * before it moves the pointer file (which still names the previous checkpoint).
 * --die-in-meta STEP: rank 0 exits halfway through writing ckpt.<STEP>/meta (opened directly,
 * never closed) after the barrier that completes checkpoint STEP, before the pointer moves.
 * Prints (rank 0): RESTARTED <s> | NO_RESTART, CHECKPOINT <s>, DONE; every rank checks. */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir = ".";
static const char *layout = "dir";
static int use_stdio = 0, uneven = 0, meta = 0, meta_after = 0, quiet_steps = 0;
static long size = 1 << 16;
static int rank, nranks, die_in_ckpt = -1, die_before_pointer = -1, die_in_meta = -1;

static void die(const char *what, const char *path) {
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static unsigned char byte_at(int step, int r, int k, long i) {
  return (unsigned char)((i * 31 + step * 7 + r * 13 + k * 101) & 0xff);
}

static int nfiles(int r) { return uneven ? r % 3 : 1; }

static void file_name(char *out, size_t n, int step, int r, int k, int tmp) {
  const char *suffix = tmp ? ".tmp" : "";
  char leaf[64];
  if (uneven)
    snprintf(leaf, sizeof leaf, "rank_%d_%d.dat", r, k);
  else
    snprintf(leaf, sizeof leaf, "rank_%d.dat", r);
  if (!strcmp(layout, "flat"))
    snprintf(out, n, "%s/ckpt_%d_%d_%d.dat%s", dir, step, r, k, suffix);
  else if (!strcmp(layout, "tmpdir"))
    snprintf(out, n, "%s/ckpt.%d%s/%s", dir, step, tmp ? ".tmp" : "", leaf);
  else
    snprintf(out, n, "%s/ckpt.%d/%s%s", dir, step, leaf, suffix);
}

static void write_file(const char *path, int step, int k) {
  unsigned char *buf = malloc(size);
  for (long i = 0; i < size; i++) buf[i] = byte_at(step, rank, k, i);
  if (use_stdio) {
    FILE *f = fopen(path, "w");
    if (!f) die("fopen", path);
    if (fwrite(buf, 1, size, f) != (size_t)size) die("fwrite", path);
    if (fclose(f) != 0) die("fclose", path);
  } else {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    if (fd < 0) die("open", path);
    long done = 0;
    while (done < size) {
      ssize_t w = write(fd, buf + done, size - done);
      if (w < 0) {
        fprintf(stderr, "rank %d: write %s failed: %s\n", rank, path, strerror(errno));
        break;
      }
      done += w;
    }
    if (close(fd) != 0) die("close", path);
  }
  free(buf);
}

static int check_file(const char *path, int step, int k) {
  struct stat st;
  if (stat(path, &st) != 0 || st.st_size != size) {
    fprintf(stderr, "rank %d: stat %s: %s (size %ld)\n", rank, path, strerror(errno), (long)st.st_size);
    return 0;
  }
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
    return 0;
  }
  unsigned char *buf = malloc(size);
  long got = 0;
  while (got < size) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r <= 0) break;
    got += r;
  }
  close(fd);
  int ok = got == size;
  for (long i = 0; ok && i < size; i++)
    if (buf[i] != byte_at(step, rank, k, i)) {
      fprintf(stderr, "rank %d: %s: byte %ld differs\n", rank, path, i);
      ok = 0;
    }
  free(buf);
  return ok;
}

static void write_meta(const char *path, int step) {
  char text[64];
  int n = snprintf(text, sizeof text, "step %d ranks %d\n", step, nranks);
  if (use_stdio) {
    FILE *f = fopen(path, "w");
    if (!f) die("fopen", path);
    if (fputs(text, f) < 0 || fclose(f) != 0) die("write", path);
  } else {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    if (fd < 0) die("open", path);
    if (write(fd, text, n) != n || close(fd) != 0) die("write", path);
  }
}

static int check_meta(const char *path, int step) {
  FILE *m = fopen(path, "r");
  int s = -1, n = -1;
  int ok = m && fscanf(m, "step %d ranks %d", &s, &n) == 2 && s == step && n == nranks;
  if (!ok) fprintf(stderr, "rank 0: bad %s: %s\n", path, m ? "wrong content" : strerror(errno));
  if (m) fclose(m);
  return ok;
}

static void checkpoint(int step, int fail_write) {
  char path[4096], tmp[4096];
  if (!strcmp(layout, "dir") || !strcmp(layout, "tmpfile") || !strcmp(layout, "tmpdir")) {
    if (rank == 0 || quiet_steps) {
      snprintf(path, sizeof path, "%s/ckpt.%d%s", dir, step, !strcmp(layout, "tmpdir") ? ".tmp" : "");
      if (mkdir(path, 0755) != 0 && errno != EEXIST) die("mkdir", path);
    }
    if (!quiet_steps) MPI_Barrier(MPI_COMM_WORLD);
  }
  struct rlimit saved;
  getrlimit(RLIMIT_FSIZE, &saved);
  if (fail_write) {
    /* make this rank's writes fail: a soft file size limit of 1 byte */
    struct rlimit rl = {1, saved.rlim_max};
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &rl);
  }
  int tmpname = !strcmp(layout, "tmpfile");
  for (int k = 0; k < nfiles(rank); k++) {
    file_name(path, sizeof path, step, rank, k, tmpname || !strcmp(layout, "tmpdir"));
    write_file(path, step, k);
    if (tmpname) {
      file_name(tmp, sizeof tmp, step, rank, k, 0);
      if (rename(path, tmp) != 0) die("rename", path);
    }
  }
  if (fail_write) setrlimit(RLIMIT_FSIZE, &saved);
  if (step == die_in_ckpt && rank == nranks - 1) {
    fprintf(stderr, "rank %d: DIE inside checkpoint %d\n", rank, step);
    _exit(9);
  }
  if (meta && rank == 0) {
    snprintf(path, sizeof path, "%s/ckpt.%d%s/meta.txt", dir, step, !strcmp(layout, "tmpdir") ? ".tmp" : "");
    FILE *f = fopen(path, "w");
    if (!f) die("fopen", path);
    fprintf(f, "step %d ranks %d\n", step, nranks);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (step == die_before_pointer && rank == 0) {
    fprintf(stderr, "rank %d: DIE before the pointer of checkpoint %d\n", rank, step);
    _exit(9);
  }
  if (step == die_in_meta && rank == 0) {
    /* a file of the complete checkpoint cut off mid-write: it must never join it */
    snprintf(path, sizeof path, "%s/ckpt.%d/meta", dir, step);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "step ", 5) != 5) die("write", path);
    fprintf(stderr, "rank %d: DIE inside the meta of checkpoint %d\n", rank, step);
    _exit(9);
  }
  if (rank == 0) {
    if (!strcmp(layout, "tmpdir")) {
      snprintf(tmp, sizeof tmp, "%s/ckpt.%d.tmp", dir, step);
      snprintf(path, sizeof path, "%s/ckpt.%d", dir, step);
      if (rename(tmp, path) != 0) die("rename", tmp);
    }
    if (meta_after) {
      /* a file written into the checkpoint after it completed (and, with the tmpdir layout,
       * after its directory was renamed into place): it must join the checkpoint */
      snprintf(tmp, sizeof tmp, "%s/ckpt.%d/meta.tmp", dir, step);
      snprintf(path, sizeof path, "%s/ckpt.%d/meta", dir, step);
      write_meta(tmp, step);
      if (rename(tmp, path) != 0) die("rename", tmp);
    }
    /* the pointer file: outside the patterns, written atomically */
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(tmp, "w");
    if (!f) die("fopen", tmp);
    fprintf(f, "%d\n", step);
    fclose(f);
    if (rename(tmp, path) != 0) die("rename", tmp);
    printf("CHECKPOINT %d\n", step);
    fflush(stdout);
  }
}

int main(int argc, char **argv) {
  int steps = 6, every = 2, crash_at = -1, fail_write = -1, no_finalize = 0, hang_at = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir")) dir = argv[++i];
    else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--every")) every = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--size")) size = atol(argv[++i]);
    else if (!strcmp(argv[i], "--layout")) layout = argv[++i];
    else if (!strcmp(argv[i], "--stdio")) use_stdio = 1;
    else if (!strcmp(argv[i], "--uneven")) uneven = 1;
    else if (!strcmp(argv[i], "--meta")) meta = 1;
    else if (!strcmp(argv[i], "--meta-after")) meta_after = 1;
    else if (!strcmp(argv[i], "--crash-at")) crash_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fail-write")) fail_write = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-finalize")) no_finalize = 1;
    else if (!strcmp(argv[i], "--quiet-steps")) quiet_steps = 1;
    else if (!strcmp(argv[i], "--hang-at")) hang_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--die-in-ckpt")) die_in_ckpt = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--die-before-pointer")) die_before_pointer = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--die-in-meta")) die_in_meta = atoi(argv[++i]);
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
    int ok = 1;
    for (int k = 0; k < nfiles(rank); k++) {
      file_name(path, sizeof path, start, rank, k, 0);
      ok &= check_file(path, start, k);
    }
    if (meta && rank == 0) {
      snprintf(path, sizeof path, "%s/ckpt.%d/meta.txt", dir, start);
      ok &= check_meta(path, start);
    }
    if (meta_after && rank == 0) {
      snprintf(path, sizeof path, "%s/ckpt.%d/meta", dir, start);
      ok &= check_meta(path, start);
    }
    int all = 0;
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
    if (step == hang_at && start == 0 && rank == nranks - 1) {
      fprintf(stderr, "rank %d: HANG at step %d\n", rank, step);
      for (;;) pause();
    }
    double sum = 0;
    x = x * 0.5 + step;
    if (!quiet_steps) MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (step % every == 0) checkpoint(step, step == fail_write && rank == 1);
  }
  if (no_finalize) {
    /* every rank is past the last checkpoint's completion before any leaves */
    MPI_Barrier(MPI_COMM_WORLD);
    exit(0);
  }
  if (rank == 0) printf("DONE\n");
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
