/*
 * test_api: an MPI application that checkpoints through the SCR API, in the spirit of SCR's
 * own examples/test_api.c. Each rank writes one file per checkpoint,
 * <prefix>/ckpt.<step>/rank_<rank>.ckpt, filled with a pattern that depends on rank and step,
 * and on restart reads it back and verifies every byte.
 *
 *   test_api [--size BYTES] [--steps N] [--flags ckpt|output|both]
 *            [--crash-after K] [--crash-after-count K] [--crash-rank R] [--crash-during K]
 *            [--pause-before K DIR] [--invalid-rank R] [--invalid-step K] [--uneven] [--files N]
 *            [--quiet]
 *            [--hang-rank R --hang-after K] [--compute-secs S] [--sleep-after-finalize S]
 *            [--crash-delay S] [--long-names]
 *
 * --crash-after K   every rank calls _exit(9) right after checkpoint K completes (a failure)
 * --crash-after-count K  the same after the K-th checkpoint this run wrote (every run fails)
 * --crash-rank R    only rank R crashes for --crash-after/--crash-after-count (the launcher
 *                   then ends the others)
 * --long-names      each rank's file name is 250 bytes long (rank_<r>_xxx...x.ckpt), the most a
 *                   temporary name with a suffix could not hold
 * --crash-delay S   the crash of --crash-after/--crash-after-count comes S seconds after the
 *                   checkpoint (the library's background work on it has time to finish)
 * --pause-before K DIR  in a run that did not restart, before step K (all ranks there) rank 0 creates
 *                   DIR/paused.K and waits until DIR/resume.K exists; if that file says
 *                   "crash", every rank calls _exit(9) (a test changes things meanwhile)
 * --crash-during K  rank 0 dies half-way through writing checkpoint K
 * --invalid-rank R  rank R reports valid=0 for every checkpoint
 * --invalid-step K  with --invalid-rank R: rank R reports valid=0 for checkpoint K only
 * --uneven          rank r writes r % 3 files (rank_<r>_<k>.ckpt; the second one empty) of
 *                   sizes that differ per rank
 * --files N         every rank writes N files per checkpoint (rank_<r>_<k>.ckpt, of --size
 *                   plus k % 13 + r bytes), closing each before it opens the next
 * --hang-rank R --hang-after K  in a run that did not restart, rank R hangs (sleeps in
 *                   pause(), no CPU) right after checkpoint K while the others go on into
 *                   the next step's collectives (for SCR_WATCHDOG_TIMEOUT)
 * --compute-secs S  every rank sleeps S seconds before each step but the first ("compute"),
 *                   whether the step checkpoints or not
 * --sleep-after-finalize S  every rank sleeps S seconds between SCR_Finalize and MPI_Finalize;
 *                   rank 0 then prints how many scr-watchdog threads the ranks had before
 *                   SCR_Finalize and have after it
 *
 * Output lines tests rely on (rank 0): "RESTARTED <name> step=<n>", "NO_RESTART",
 * "CHECKPOINT <name> ok=<0|1>", "DONE steps=<a>..<b>", "WATCHDOG_THREADS before=<n> after=<m>";
 * rank R: "HANG rank <R> after <name>".
 */
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scr.h"

#include <dirent.h>

static int rank, ranks;
static int quiet = 0;
static int uneven = 0;
static int many = 0;

/* Rank 0 announces it reached the gate before `step` and waits to be let through. The
 * barrier first: every rank has returned from the steps before, the library's synchronous
 * work after their last collective included (a node leader records a completed flush in its
 * flush.scr after the flush's agreement), so what a test inspects at the pause is settled. */
static void pause_gate(const char* dir, int step)
{
  int crash = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char path[4096];
    snprintf(path, sizeof path, "%s/paused.%d", dir, step);
    FILE* f = fopen(path, "w");
    if (f) fclose(f);
    printf("PAUSED before step %d\n", step);
    fflush(stdout);
    snprintf(path, sizeof path, "%s/resume.%d", dir, step);
    for (;;) {
      FILE* r = fopen(path, "r");
      if (r) {
        char buf[16] = {0};
        size_t n = fread(buf, 1, sizeof buf - 1, r);
        crash = n >= 5 && !strncmp(buf, "crash", 5);
        fclose(r);
        break;
      }
      usleep(20000);
    }
  }
  MPI_Bcast(&crash, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (crash) {
    if (rank == 0) printf("CRASH at the pause before step %d\n", step);
    fflush(stdout);
    /* nobody dies before rank 0's line is out (the launcher ends the rest at the first death) */
    MPI_Barrier(MPI_COMM_WORLD);
    _exit(9);
  }
}

/* Threads of this process named scr-watchdog (the library's hang detector). */
static int watchdog_threads(void)
{
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f) && !strncmp(comm, "scr-watchdog\n", 13)) n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

/* Files per rank: one, or with --uneven rank % 3 of them (none, one, or two of which the
 * second is empty), with sizes that differ per rank and are not multiples of anything. */
static int nfiles(void) { return many ? many : uneven ? rank % 3 : 1; }
static size_t fsize(size_t size, int k)
{
  if (many) return size + (size_t) (k % 13) + (size_t) rank;
  return !uneven ? size : k == 1 ? 0 : size + 1237 * (size_t) rank + 17 * (size_t) k;
}
static int fseed(int k) { return many ? rank * 7 + k : uneven ? rank * 8 + k : rank; }
static int long_names = 0;
static void fname(char* out, size_t n, int step, int k)
{
  if (long_names) {
    char pad[251];
    int head = snprintf(pad, sizeof pad, "rank_%d_", rank);
    memset(pad + head, 'x', 250 - 5 - (size_t) head);
    memcpy(pad + 245, ".ckpt", 6);
    snprintf(out, n, "ckpt.%d/%s", step, pad);
  }
  else if (uneven || many) snprintf(out, n, "ckpt.%d/rank_%d_%d.ckpt", step, rank, k);
  else snprintf(out, n, "ckpt.%d/rank_%d.ckpt", step, rank);
}

static unsigned char pattern(int r, int step, size_t i)
{
  return (unsigned char) ((r * 31 + step * 17 + i * 7 + (i >> 12)) & 0xff);
}

static int write_all(int fd, const unsigned char* buf, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    buf += w;
    n -= (size_t) w;
  }
  return 0;
}

/* Write the checkpoint file; die half-way through if asked. */
static int write_ckpt(const char* path, int seed, int step, size_t size, int die_midway)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
    return 0;
  }
  size_t chunk = 1 << 20;
  unsigned char* buf = malloc(chunk);
  size_t done = 0;
  int ok = 1;
  while (done < size) {
    size_t n = size - done < chunk ? size - done : chunk;
    for (size_t i = 0; i < n; i++) buf[i] = pattern(seed, step, done + i);
    if (write_all(fd, buf, n) != 0) { ok = 0; break; }
    done += n;
    if (die_midway && done >= size / 2) {
      fprintf(stdout, "CRASH rank %d during step %d\n", rank, step);
      fflush(stdout);
      _exit(9);
    }
  }
  free(buf);
  if (close(fd) != 0) ok = 0;
  return ok;
}

static int read_ckpt(const char* path, int seed, int step, size_t size)
{
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    fprintf(stderr, "rank %d: open %s: %s\n", rank, path, strerror(errno));
    return 0;
  }
  size_t chunk = 1 << 20;
  unsigned char* buf = malloc(chunk);
  size_t done = 0;
  int ok = 1;
  while (done < size && ok) {
    ssize_t n = read(fd, buf, chunk);
    if (n <= 0) { ok = 0; break; }
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != pattern(seed, step, done + (size_t) i)) {
        fprintf(stderr, "rank %d: %s: byte %zu is wrong\n", rank, path, done + (size_t) i);
        ok = 0;
        break;
      }
    }
    done += (size_t) n;
  }
  char extra;
  if (ok && read(fd, &extra, 1) != 0) ok = 0;
  close(fd);
  free(buf);
  return ok && done == size;
}

int main(int argc, char** argv)
{
  size_t size = 1 << 20;
  int steps = 3, crash_after = -1, crash_during = -1, invalid_rank = -1;
  int crash_count = -1, crash_rank = -1, pause_before = -1, taken = 0;
  int hang_rank = -1, hang_after = -1, compute_secs = 0, sleep_after = -1, crash_delay = 0;
  int invalid_step = -1;
  const char* gate = NULL;
  int flags = SCR_FLAG_CHECKPOINT;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--crash-after") && i + 1 < argc) crash_after = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--crash-during") && i + 1 < argc) crash_during = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--crash-after-count") && i + 1 < argc) crash_count = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--crash-rank") && i + 1 < argc) crash_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--crash-delay") && i + 1 < argc) crash_delay = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--pause-before") && i + 2 < argc) {
      pause_before = atoi(argv[++i]);
      gate = argv[++i];
    }
    else if (!strcmp(argv[i], "--invalid-rank") && i + 1 < argc) invalid_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--invalid-step") && i + 1 < argc) invalid_step = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hang-rank") && i + 1 < argc) hang_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hang-after") && i + 1 < argc) hang_after = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--compute-secs") && i + 1 < argc) compute_secs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sleep-after-finalize") && i + 1 < argc) sleep_after = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quiet")) quiet = 1;
    else if (!strcmp(argv[i], "--uneven")) uneven = 1;
    else if (!strcmp(argv[i], "--long-names")) long_names = 1;
    else if (!strcmp(argv[i], "--files") && i + 1 < argc) many = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--flags") && i + 1 < argc) {
      const char* f = argv[++i];
      flags = !strcmp(f, "output") ? SCR_FLAG_OUTPUT
            : !strcmp(f, "both") ? (SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT) : SCR_FLAG_CHECKPOINT;
    } else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (SCR_Init() != SCR_SUCCESS) {
    if (rank == 0) printf("SCR_INIT_FAILED\n");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  /* Restart: loop until a checkpoint reads back correctly or none is left. */
  int start = 0;
  int have = 0;
  char name[SCR_MAX_FILENAME];
  while (SCR_Have_restart(&have, name) == SCR_SUCCESS && have) {
    SCR_Start_restart(name);
    int step = -1;
    sscanf(name, "ckpt.%d", &step);
    char path[SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
    int valid = step >= 0;
    for (int k = 0; k < nfiles() && valid; k++) {
      fname(path, sizeof path, step, k);
      valid = SCR_Route_file(path, routed) == SCR_SUCCESS && read_ckpt(routed, fseed(k), step, fsize(size, k));
    }
    if (SCR_Complete_restart(valid) == SCR_SUCCESS) {
      start = step;
      if (rank == 0) printf("RESTARTED %s step=%d\n", name, step);
      break;
    }
    if (rank == 0) printf("RESTART_FAILED %s\n", name);
  }
  if (start == 0 && rank == 0) printf("NO_RESTART\n");

  for (int step = start + 1; step <= start + steps; step++) {
    if (compute_secs > 0 && step > start + 1) sleep((unsigned) compute_secs);
    if (step == pause_before && start == 0) pause_gate(gate, step);
    int need = 0;
    SCR_Need_checkpoint(&need);
    if (!need) continue;
    char ckname[64], path[SCR_MAX_FILENAME], routed[SCR_MAX_FILENAME];
    snprintf(ckname, sizeof ckname, "ckpt.%d", step);
    SCR_Start_output(ckname, flags);
    int valid = 1;
    for (int k = 0; k < nfiles() && valid; k++) {
      fname(path, sizeof path, step, k);
      valid = SCR_Route_file(path, routed) == SCR_SUCCESS;
      valid = valid && write_ckpt(routed, fseed(k), step, fsize(size, k), step == crash_during && rank == 0);
    }
    if (rank == invalid_rank && (invalid_step < 0 || step == invalid_step)) valid = 0;
    int rc = SCR_Complete_output(valid);
    if (rank == 0) printf("CHECKPOINT %s ok=%d\n", ckname, rc == SCR_SUCCESS);
    fflush(stdout);
    if (rc == SCR_SUCCESS) taken++;
    if (step == crash_after || taken == crash_count) {
      if (crash_delay > 0) sleep((unsigned) crash_delay);
      if (rank == 0) printf("CRASH after %s\n", ckname);
      fflush(stdout);
      MPI_Barrier(MPI_COMM_WORLD);
      if (crash_rank < 0 || rank == crash_rank) _exit(9);
      if (crash_rank >= 0) {
        /* the others wait for the launcher to end them */
        MPI_Barrier(MPI_COMM_WORLD);
      }
    }
    if (step == hang_after && rank == hang_rank && start == 0) {
      printf("HANG rank %d after %s\n", rank, ckname);
      fflush(stdout);
      for (;;) pause();
    }
    int exit_now = 0;
    SCR_Should_exit(&exit_now);
    if (exit_now) {
      if (rank == 0) printf("SHOULD_EXIT at %s\n", ckname);
      break;
    }
  }
  if (rank == 0) printf("DONE steps=%d..%d\n", start + 1, start + steps);
  fflush(stdout);
  int threads[2] = {watchdog_threads(), 0};
  SCR_Finalize();
  if (sleep_after >= 0) {
    sleep((unsigned) sleep_after);
    threads[1] = watchdog_threads();
    int sum[2] = {0, 0};
    MPI_Reduce(threads, sum, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("WATCHDOG_THREADS before=%d after=%d\n", sum[0], sum[1]);
  }
  MPI_Finalize();
  return 0;
}
