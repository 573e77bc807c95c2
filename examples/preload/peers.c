/* Every rank looks at every rank's checkpoint files, as applications do on a shared file
 * system: after the checkpoint's barrier each rank lists the checkpoint directory, stats and
 * reads every file; rank 0 checks that all ranks' files exist before it writes `latest`
 * (the pattern of a rank 0 that validates a checkpoint), and a restart with any number of
 * processes reads all of them. No SCR call: run it plain and under the preload and compare.
 *
 *   peers write PREFIX STEP     each rank writes ckpt.STEP/part.RANK (its own size and bytes,
 *                               mode 0640 on odd ranks; ranks from 4 on write nothing), then
 *                               looks at all of them
 *   peers read PREFIX           reads `latest` and every file of that checkpoint
 *   peers append PREFIX STEP    rank 1 appends 100 bytes to rank 0's file; every rank reads it
 *   peers overwrite PREFIX STEP rank 1 truncates rank 0's file, rank 2 its own, rank 3 renames
 *                               a new file over rank 1's; every rank reads the three
 *   peers shell PREFIX STEP     rank 0's shell lists ckpt.STEP, counts rank 1's bytes and
 *                               removes rank 3's file; then every rank lists the directory
 *   peers clean PREFIX STEP     rank 0 removes ckpt.STEP (every rank's files, then the
 *                               directory), then every rank lists the prefix
 *
 * Output, one line per fact, sorted by the test: LIST (names a rank sees), STAT (size and mode
 * bits), READ (bytes compared with what the writer wrote, or the errno). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank, nranks;

static size_t size_of(int writer) { return 1000 + 137 * (size_t)writer; }

static unsigned char byte_at(int writer, int step, size_t i) {
  return (unsigned char)(writer * 31 + step * 7 + i * 13);
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in DIR, sorted, as one line (from `opendir`, or from `fdopendir` with BYFD). */
static void names_of(const char *dir, int byfd, char *line, size_t cap, int *count) {
  DIR *d = byfd ? fdopendir(open(dir, O_RDONLY | O_DIRECTORY)) : opendir(dir);
  *count = -1;
  line[0] = 0;
  if (!d) {
    snprintf(line, cap, " errno=%d", errno);
    return;
  }
  char *names[4096];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 4096)
    if (e->d_name[0] != '.') /* (SCR's .scr directory too) */
      names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, n, sizeof names[0], cmp);
  for (int i = 0; i < n; i++) {
    strncat(line, " ", cap - strlen(line) - 1);
    strncat(line, names[i], cap - strlen(line) - 1);
    free(names[i]);
  }
  *count = n;
}

/* One LIST line: what opendir shows, and whether fdopendir shows the same. */
static void list(const char *dir, const char *tag) {
  static char a[65536], b[65536];
  int n, m;
  names_of(dir, 0, a, sizeof a, &n);
  names_of(dir, 1, b, sizeof b, &m);
  printf("LIST %s rank=%d n=%d:%s fdopendir=%s\n", tag, rank, n, a, n == m && !strcmp(a, b) ? "same" : b);
}

/* Replace FILE's bytes with LEN copies of BYTE through FLAGS (no O_CREAT: an existing file). */
static void rewrite(const char *file, int flags, int byte, int len) {
  int fd = open(file, flags, 0644);
  if (fd < 0) {
    printf("REWRITE rank=%d errno=%d\n", rank, errno);
    return;
  }
  unsigned char buf[64];
  memset(buf, byte, sizeof buf);
  printf("REWRITE rank=%d wrote=%zd\n", rank, write(fd, buf, len));
  close(fd);
}

/* Every rank: FILE holds LEN copies of BYTE. */
static void check_bytes(const char *tag, const char *file, int byte, int len) {
  unsigned char buf[4096];
  int fd = open(file, O_RDONLY);
  ssize_t k = fd < 0 ? -1 : read(fd, buf, sizeof buf);
  int ok = k == len;
  for (ssize_t i = 0; ok && i < k; i++)
    ok &= buf[i] == byte;
  if (fd >= 0)
    close(fd);
  printf("%s rank=%d bytes=%zd %s\n", tag, rank, k, ok ? "ok" : "WRONG");
}

/* Stat and read part.W of checkpoint STEP. */
static void look(const char *prefix, int step, int w) {
  char path[4096];
  snprintf(path, sizeof path, "%s/ckpt.%d/part.%d", prefix, step, w);
  struct stat st;
  if (stat(path, &st) != 0) {
    printf("STAT rank=%d part=%d errno=%d\n", rank, w, errno);
  } else {
    printf("STAT rank=%d part=%d size=%lld mode=%o reg=%d\n", rank, w, (long long)st.st_size,
           (unsigned)(st.st_mode & 07777), S_ISREG(st.st_mode));
  }
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    printf("READ rank=%d part=%d errno=%d\n", rank, w, errno);
    return;
  }
  size_t want = size_of(w), got = 0;
  unsigned char buf[8192];
  ssize_t k;
  int ok = 1;
  while ((k = read(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < k; i++)
      ok &= buf[i] == byte_at(w, step, got + i);
    got += k;
  }
  close(fd);
  printf("READ rank=%d part=%d bytes=%zu %s\n", rank, w, got, ok && got == want && k == 0 ? "ok" : "WRONG");
}

static int latest(const char *prefix) {
  char path[4096];
  snprintf(path, sizeof path, "%s/latest", prefix);
  FILE *f = fopen(path, "r");
  int step = -1;
  if (f) {
    if (fscanf(f, "%d", &step) != 1)
      step = -1;
    fclose(f);
  }
  return step;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (argc < 3) {
    fprintf(stderr, "usage: peers write|read|append|overwrite|shell|clean PREFIX [STEP]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *mode = argv[1], *prefix = argv[2];
  int step = argc > 3 ? atoi(argv[3]) : 0;
  char dir[4096], path[4096];
  if (!strcmp(mode, "write")) {
    snprintf(dir, sizeof dir, "%s/ckpt.%d", prefix, step);
    if (rank == 0)
      mkdir(dir, 0755);
    MPI_Barrier(MPI_COMM_WORLD);
    snprintf(path, sizeof path, "%s/part.%d", dir, rank);
    if (rank < 4) { /* (ranks beyond 4 write nothing: they only look) */
      FILE *f = fopen(path, "w");
      for (size_t i = 0; i < size_of(rank); i++)
        fputc(byte_at(rank, step, i), f);
      fclose(f);
      if (rank % 2)
        chmod(path, 0640);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* the checkpoint completes here */
    int writers = nranks < 4 ? nranks : 4;
    list(dir, "ckpt");
    for (int w = 0; w < writers; w++)
      look(prefix, step, w);
    if (rank == 0) {
      /* write `latest` only once every rank's file is there, with its size */
      int all = 1;
      for (int w = 0; w < writers; w++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/part.%d", dir, w);
        all &= stat(path, &st) == 0 && (size_t)st.st_size == size_of(w);
      }
      printf("CHECKED all=%d\n", all);
      if (all) {
        snprintf(path, sizeof path, "%s/latest", prefix);
        FILE *l = fopen(path, "w");
        fprintf(l, "%d\n", step);
        fclose(l);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("WROTE rank=%d\n", rank);
  } else if (!strcmp(mode, "read")) {
    int s = latest(prefix);
    printf("LATEST rank=%d step=%d\n", rank, s);
    snprintf(dir, sizeof dir, "%s/ckpt.%d", prefix, s);
    list(dir, "restart");
    /* the writers: as many as files listed (the checkpoint may come from another size) */
    DIR *d = opendir(dir);
    int writers = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
      writers += !strncmp(e->d_name, "part.", 5);
    if (d)
      closedir(d);
    for (int w = 0; w < writers; w++)
      look(prefix, s, w);
  } else if (!strcmp(mode, "append")) {
    /* rank 1 appends to rank 0's file of checkpoint STEP; then every rank reads it */
    snprintf(path, sizeof path, "%s/ckpt.%d/part.0", prefix, step);
    if (rank == 1 % nranks) {
      FILE *f = fopen(path, "a");
      for (int i = 0; i < 100; i++)
        fputc(0xAB, f);
      printf("APPENDED rank=%d closed=%d\n", rank, f && fclose(f) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int fd = open(path, O_RDONLY), ok = fd >= 0;
    unsigned char buf[2048];
    ssize_t k = ok ? read(fd, buf, sizeof buf) : -1;
    ok &= k == 1100;
    for (ssize_t i = 0; ok && i < k; i++)
      ok &= buf[i] == (i < 1000 ? byte_at(0, step, i) : 0xAB);
    if (fd >= 0)
      close(fd);
    printf("APPEND rank=%d bytes=%zd %s\n", rank, k, ok ? "ok" : "WRONG");
  } else if (!strcmp(mode, "shell")) {
    /* rank 0's shell lists checkpoint STEP, shows rank 1's file and removes rank 3's */
    snprintf(dir, sizeof dir, "%s/ckpt.%d", prefix, step);
    if (rank == 0) {
      char cmd[8192], line[4096], all[8192] = "";
      snprintf(cmd, sizeof cmd, "ls '%s' && cmp -s '%s/part.1' '%s/part.1.copy' || wc -c < '%s/part.1'", dir, dir,
               dir, dir);
      FILE *p = popen(cmd, "r");
      while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        strncat(all, " ", sizeof all - strlen(all) - 1);
        strncat(all, line, sizeof all - strlen(all) - 1);
      }
      printf("SHELL status=%d:%s\n", p ? pclose(p) : -1, all);
      snprintf(cmd, sizeof cmd, "rm '%s/part.3'", dir);
      printf("SHELL rm=%d\n", system(cmd));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    list(dir, "after-shell");
  } else if (!strcmp(mode, "overwrite")) {
    /* rank 1 truncates rank 0's file (O_TRUNC, no O_CREAT), rank 2 its own the same way, rank 3
     * renames a new file over rank 1's; then every rank reads the three */
    char p0[4096], p1[4096], p2[4096], tmp[4096];
    snprintf(p0, sizeof p0, "%s/ckpt.%d/part.0", prefix, step);
    snprintf(p1, sizeof p1, "%s/ckpt.%d/part.1", prefix, step);
    snprintf(p2, sizeof p2, "%s/ckpt.%d/part.2", prefix, step);
    if (rank == 1)
      rewrite(p0, O_WRONLY | O_TRUNC, 'T', 10);
    if (rank == 2)
      rewrite(p2, O_WRONLY | O_TRUNC, 'U', 20);
    if (rank == 3) {
      snprintf(tmp, sizeof tmp, "%s.tmp", p1);
      rewrite(tmp, O_WRONLY | O_CREAT | O_TRUNC, 'R', 27);
      printf("RENAMED rank=%d rc=%d\n", rank, rename(tmp, p1));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    check_bytes("OVER0", p0, 'T', 10);
    check_bytes("OVER1", p1, 'R', 27);
    check_bytes("OVER2", p2, 'U', 20);
  } else if (!strcmp(mode, "clean")) {
    snprintf(dir, sizeof dir, "%s/ckpt.%d", prefix, step);
    if (rank == 0) {
      int removed = 0;
      for (int w = 0; w < nranks; w++) {
        snprintf(path, sizeof path, "%s/part.%d", dir, w);
        removed += unlink(path) == 0;
      }
      printf("CLEAN unlinked=%d rmdir=%d\n", removed, rmdir(dir) == 0 ? 0 : errno);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    list(prefix, "after-clean");
  }
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
