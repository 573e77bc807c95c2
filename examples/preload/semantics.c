/* POSIX semantics a program must keep under transparent mode, checked on every rank on
 * files that match the checkpoint pattern "ckpt.*" directories (the program knows nothing of SCR).
 * Prints "OK <name>" or "FAIL <name>: why" per check (rank 0 for the world), then
 * "SEMANTICS <failures>". Usage: semantics DIR
 * Build it also with -D_FILE_OFFSET_BITS=64 -D_FORTIFY_SOURCE=2 to reach the *64 and
 * fortified entry points. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int rank, failures;
static char dir[2048];

#define CHECK(name, cond)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      failures++;                                                                      \
      fprintf(stderr, "rank %d: FAIL %s (errno %d %s)\n", rank, name, errno, strerror(errno)); \
    } else if (rank == 0) {                                                            \
      printf("OK %s\n", name);                                                         \
    }                                                                                  \
  } while (0)

static void path(char *out, const char *leaf) { snprintf(out, 4096, "%s/ckpt.1/%s.%d", dir, leaf, rank); }

static void *thread_main(void *arg) {
  long t = (long)arg;
  char a[4096], b[4096];
  for (int i = 0; i < 50; i++) {
    snprintf(a, sizeof a, "%s/ckpt.1/t%ld.%d.tmp", dir, t, rank);
    snprintf(b, sizeof b, "%s/ckpt.1/t%ld.%d", dir, t, rank);
    int fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, &i, sizeof i) != sizeof i || close(fd) != 0 || rename(a, b) != 0) return (void *)1;
    struct stat st;
    if (stat(b, &st) != 0 || st.st_size != sizeof i) return (void *)1;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  snprintf(dir, sizeof dir, "%s", argv[1]);
  char p[4096], q[4096];
  if (rank == 0) {
    snprintf(p, sizeof p, "%s/ckpt.1", dir);
    mkdir(p, 0755);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* errno: failures report the right value, successes leave it alone */
  path(p, "missing");
  errno = 0;
  CHECK("open-missing-ENOENT", open(p, O_RDONLY) == -1 && errno == ENOENT);
  errno = 0;
  CHECK("open-rdwr-missing-ENOENT", open(p, O_RDWR) == -1 && errno == ENOENT);
  path(p, "a");
  errno = 12345;
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0640);
  CHECK("open-create-keeps-errno", fd >= 0 && errno == 12345);
  CHECK("write", write(fd, "hello", 5) == 5);
  /* metadata of a file still open agrees with the descriptor */
  struct stat s1, s2;
  CHECK("stat-open-file", stat(p, &s1) == 0 && fstat(fd, &s2) == 0 && s1.st_ino == s2.st_ino && s1.st_dev == s2.st_dev &&
                              s1.st_size == 5);
  CHECK("access-open-file", access(p, F_OK) == 0);
  errno = 12345;
  CHECK("close-keeps-errno", close(fd) == 0 && errno == 12345);
  /* O_EXCL sees the cached file */
  errno = 0;
  CHECK("excl-existing-EEXIST", open(p, O_WRONLY | O_CREAT | O_EXCL, 0600) == -1 && errno == EEXIST);
  path(q, "fresh");
  fd = open(q, O_WRONLY | O_CREAT | O_EXCL, 0600);
  CHECK("excl-fresh", fd >= 0 && close(fd) == 0);
  /* update in place keeps untouched bytes */
  fd = open(p, O_WRONLY);
  CHECK("update-in-place", fd >= 0 && pwrite(fd, "J", 1, 0) == 1 && close(fd) == 0);
  /* flags the compiler cannot see: with _FORTIFY_SOURCE this is __open_2 / __open64_2 */
  int ro = argc > 100 ? O_RDWR : O_RDONLY;
  fd = open(p, ro);
  char one = 0;
  CHECK("open-nonconstant-flags", fd >= 0 && read(fd, &one, 1) == 1 && one == 'J' && close(fd) == 0);
  FILE *f = fopen(p, "r");
  char buf[16] = {0};
  CHECK("read-back", f && fread(buf, 1, 5, f) == 5 && !strcmp(buf, "Jello") && fclose(f) == 0);
  f = fopen(p, "a");
  CHECK("append", f && fputs("!", f) >= 0 && fclose(f) == 0 && stat(p, &s1) == 0 && s1.st_size == 6);
  /* dup2 onto a tracked descriptor closes it implicitly; the copy survives the original */
  fd = open(p, O_WRONLY | O_APPEND);
  int fd2 = open(q, O_WRONLY);
  CHECK("dup2", fd >= 0 && fd2 >= 0 && dup2(fd, 100) == 100 && close(fd) == 0 && write(100, "?", 1) == 1 &&
                    dup2(fd2, 100) == 100 && close(100) == 0 && close(fd2) == 0);
  CHECK("dup2-wrote", stat(p, &s1) == 0 && s1.st_size == 7);
  /* rename: replace, no-replace, missing source */
  errno = 12345;
  CHECK("rename-keeps-errno", rename(q, p) == 0 && errno == 12345 && stat(p, &s1) == 0 && s1.st_size == 0);
  errno = 0;
  CHECK("rename-missing-ENOENT", rename(q, p) == -1 && errno == ENOENT);
  path(q, "b");
  fd = creat(q, 0600);
  close(fd);
  errno = 0;
  CHECK("renameat2-noreplace-EEXIST", renameat2(AT_FDCWD, q, AT_FDCWD, p, RENAME_NOREPLACE) == -1 && errno == EEXIST);
  /* unlink of a cached file, then it is gone everywhere */
  CHECK("unlink", unlink(q) == 0 && stat(q, &s1) == -1 && errno == ENOENT && access(q, F_OK) == -1);
  errno = 0;
  CHECK("unlink-again-ENOENT", unlink(q) == -1 && errno == ENOENT);
  /* a forked child is inert: its file goes to the prefix as written */
  pid_t child = fork();
  if (child == 0) {
    char c[4096];
    snprintf(c, sizeof c, "%s/ckpt.1/child.%d", dir, rank);
    int cfd = open(c, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    _exit(cfd >= 0 && write(cfd, "c", 1) == 1 && close(cfd) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK("fork-child", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* a posix_spawn child (glibc spawns with vfork semantics) runs a shell that is inert */
  snprintf(q, sizeof q, "echo s > %s/ckpt.1/spawned.%d", dir, rank);
  char *sh[] = {"/bin/sh", "-c", q, NULL};
  pid_t sp;
  CHECK("posix-spawn-child", posix_spawn(&sp, "/bin/sh", NULL, NULL, sh, environ) == 0 && waitpid(sp, &status, 0) == sp &&
                                 WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* O_TMPFILE names a directory: never redirected, and the mode argument arrives intact */
  snprintf(q, sizeof q, "%s/ckpt.1", dir);
  fd = open(q, O_TMPFILE | O_RDWR, 0600);
  CHECK("o-tmpfile-mode", (fd >= 0 && fstat(fd, &s1) == 0 && (s1.st_mode & 0777) == 0600 && close(fd) == 0) ||
                              (fd < 0 && errno == EOPNOTSUPP));
  /* threads */
  pthread_t th[8];
  for (long t = 0; t < 8; t++) pthread_create(&th[t], NULL, thread_main, (void *)t);
  int tfail = 0;
  for (int t = 0; t < 8; t++) {
    void *r;
    pthread_join(th[t], &r);
    tfail |= r != NULL;
  }
  CHECK("threads", !tfail);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("SEMANTICS %d\n", total);
  MPI_Finalize();
  return 0;
}
