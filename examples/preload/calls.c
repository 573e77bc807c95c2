/* Calls an application makes on its checkpoint files, one family per run, printing what it
 * sees; run with and without transparent mode, the printed lines must be the same. The
 * program knows nothing of SCR. Usage: calls FAMILY DIR
 *
 * Every rank writes DIR/ckpt.1/r<rank>/f (and, for some families, more), passes a barrier
 * (under transparent mode the checkpoint is complete and in cache there), exercises the
 * family on its files, passes another barrier (a sync point: SCR forms a new version) and
 * looks again. Families: truncate chmod utimes link readlink realpath statfs rename-out
 * listing tree, chdir (relative paths after chdir/fchdir and after renaming the working
 * directory), close-range (f2 written through two descriptors that close_range closes, one
 * of them as high as the descriptor limit allows, up to 70000), child (a shell lists, reads and removes the files), and panic (a file whose
 * name makes a test build of the preload panic inside its open hook). Lines: "r<rank> <what> <values>", paths relative to DIR. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

static int rank;
static char dir[2048], mine[3072], canon_dir[PATH_MAX];

#define OUT(...)                          \
  do {                                    \
    printf("r%d ", rank);                 \
    printf(__VA_ARGS__);                  \
    printf("\n");                         \
    fflush(stdout);                       \
  } while (0)

static const char *at(const char *leaf) {
  static char p[8][4096];
  static int k;
  k = (k + 1) % 8;
  snprintf(p[k], sizeof p[k], "%s/%s", mine, leaf);
  return p[k];
}

static void put(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) != 0) {
    fprintf(stderr, "r%d: writing %s: %s\n", rank, path, strerror(errno));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

/* size, mode and content of a file, or the errno of stat */
static void show(const char *what, const char *path) {
  struct stat st;
  errno = 0;
  if (stat(path, &st) != 0) {
    OUT("%s stat=-1 errno=%d", what, errno);
    return;
  }
  char buf[256] = {0};
  int fd = open(path, O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0) close(fd);
  OUT("%s size=%ld mode=%o nlink=%ld content=%.*s", what, (long)st.st_size, st.st_mode & 07777, (long)st.st_nlink,
      (int)(n > 0 ? n : 0), buf);
}

static void rc(const char *what, int r) { OUT("%s rc=%d errno=%d", what, r, r < 0 ? errno : 0); }

static int lsort(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* a directory's names (sorted) with type and size, through readdir */
static void list(const char *what, const char *path) {
  DIR *d = opendir(path);
  if (!d) {
    OUT("%s opendir errno=%d", what, errno);
    return;
  }
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 256) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char line[600], full[4096];
    struct stat st;
    snprintf(full, sizeof full, "%s/%s", path, e->d_name);
    stat(full, &st);
    snprintf(line, sizeof line, "%s:%s:%ld", e->d_name, e->d_type == DT_DIR ? "d" : e->d_type == DT_REG ? "f" : "?",
             e->d_type == DT_DIR ? 0L : (long)st.st_size);
    names[n++] = strdup(line);
  }
  closedir(d);
  qsort(names, n, sizeof names[0], lsort);
  printf("r%d %s", rank, what);
  for (int i = 0; i < n; i++) printf(" %s", names[i]), free(names[i]);
  printf("\n");
  fflush(stdout);
}

static int walk_cb(const char *p, const struct stat *st, int flag, struct FTW *f) {
  OUT("nftw %s flag=%d level=%d base=%s size=%ld", p + strlen(dir) + 1, flag, f->level, p + f->base,
      flag == FTW_F ? (long)st->st_size : 0L);
  return 0;
}

static int remove_cb(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)f, (void)flag;
  return remove(p);
}

/* f2 written through a descriptor and its duplicate at the highest number the descriptor limit
 * allows (up to 70000, above the preload's table of 65536 slots), both closed by close_range
 * only. A later open reuses the low number: the file it opens is not f2. */
static void close_range_write(void) {
  struct rlimit rl;
  rlim_t want = 70001;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  int high = (int)(rl.rlim_cur < want ? rl.rlim_cur : want) - 1;
  int fd = open(at("f2"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int hi = fd >= 0 ? dup2(fd, high) : -1;
  int ok = fd >= 0 && hi == high && write(fd, "through-", 8) == 8 && write(hi, "close_range", 11) == 11;
  /* nothing but `hi` lies above it; the low range is the one descriptor */
  rc("close_range-low", close_range(fd, fd, 0));
  rc("close_range-high", close_range(high - 1, ~0U, 0)); /* a range that starts below it */
  OUT("close_range written=%d", ok);
  /* the lowest free number again: a file outside the patterns */
  int again = open(at("after.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ok = again >= 0 && write(again, "other", 5) == 5 && close(again) == 0;
  OUT("reused written=%d", ok);
}

static void family(const char *fam, int after) {
  const char *f = at("f");
  if (!strcmp(fam, "truncate")) {
    if (!after) rc("truncate", truncate(f, 3)), rc("truncate-missing", truncate(at("missing"), 1));
    show("f", f);
  } else if (!strcmp(fam, "chmod")) {
    if (!after) {
      rc("chmod", chmod(f, 0600));
      show("f-chmod", f);
      int dfd = open(mine, O_RDONLY | O_DIRECTORY);
      rc("fchmodat", fchmodat(dfd, "f", 0640, 0));
      rc("fchmodat-missing", fchmodat(dfd, "missing", 0640, 0));
      close(dfd);
    }
    show("f", f);
  } else if (!strcmp(fam, "utimes")) {
    if (!after) {
      struct timespec ts[2] = {{1000, 0}, {2000, 0}}; /* access, modification */
      rc("utimensat", utimensat(AT_FDCWD, f, ts, 0));
      struct timeval tv[2] = {{3000, 0}, {4000, 0}};
      rc("utimes", utimes(at("g"), tv));
      int dfd = open(mine, O_RDONLY | O_DIRECTORY);
      struct timeval tv2[2] = {{5000, 0}, {6000, 0}};
      rc("futimesat", futimesat(dfd, "h", tv2));
      struct timespec ts2[2] = {{7000, 0}, {8000, 0}};
      rc("utimensat-dirfd", utimensat(dfd, "i", ts2, 0));
      close(dfd);
    }
    const char *leaves[] = {"f", "g", "h", "i"};
    for (int i = 0; i < 4; i++) {
      struct stat st;
      int r = stat(at(leaves[i]), &st);
      /* (not the access time: SCR itself reads cached files, for CRCs, redundancy, flushes) */
      OUT("%s stat=%d mtime=%ld", leaves[i], r, (long)st.st_mtime);
    }
  } else if (!strcmp(fam, "link")) {
    if (!after) {
      rc("link", link(f, at("g")));
      int dfd = open(mine, O_RDONLY | O_DIRECTORY);
      rc("linkat", linkat(dfd, "f", dfd, "h", 0));
      rc("link-exists", link(f, at("g")));
      rc("link-missing", link(at("missing"), at("x")));
      close(dfd);
      struct stat a, b;
      stat(f, &a), stat(at("g"), &b);
      OUT("same-inode %d", a.st_ino == b.st_ino);
      /* writes through one name show through the other */
      put(at("g"), "via-g");
    }
    show("f", f), show("g", at("g")), show("h", at("h"));
  } else if (!strcmp(fam, "readlink")) {
    char buf[256];
    errno = 0;
    ssize_t n = readlink(f, buf, sizeof buf);
    OUT("readlink rc=%zd errno=%d", n, n < 0 ? errno : 0);
    int dfd = open(mine, O_RDONLY | O_DIRECTORY);
    errno = 0;
    n = readlinkat(dfd, "f", buf, sizeof buf);
    OUT("readlinkat rc=%zd errno=%d", n, n < 0 ? errno : 0);
    close(dfd);
    errno = 0;
    n = readlink(at("missing"), buf, sizeof buf);
    OUT("readlink-missing rc=%zd errno=%d", n, n < 0 ? errno : 0);
  } else if (!strcmp(fam, "realpath")) {
    char rel[4096], out[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/./f", mine);
    char *r = realpath(rel, out);
    OUT("realpath %s", r ? r + strlen(canon_dir) : "NULL");
    char *m = realpath(f, NULL);
    OUT("realpath-malloc %s", m ? m + strlen(canon_dir) : "NULL");
    free(m);
    m = canonicalize_file_name(f);
    OUT("canonicalize %s", m ? m + strlen(canon_dir) : "NULL");
    free(m);
    errno = 0;
    r = realpath(at("missing"), out);
    OUT("realpath-missing %s errno=%d", r ? r : "NULL", errno);
  } else if (!strcmp(fam, "statfs")) {
    struct statfs a, b;
    struct statvfs c, d;
    int ra = statfs(f, &a), rb = statfs(dir, &b), rc1 = statvfs(f, &c), rd = statvfs(dir, &d);
    OUT("statfs %d same-type=%d same-bsize=%d", ra, a.f_type == b.f_type, a.f_bsize == b.f_bsize);
    OUT("statvfs %d same-fsid=%d", rc1, rb == 0 && rd == 0 && c.f_fsid == d.f_fsid);
    errno = 0;
    int r = statfs(at("missing"), &a);
    OUT("statfs-missing %d errno=%d", r, errno);
  } else if (!strcmp(fam, "rename-out")) {
    char keep[4096];
    snprintf(keep, sizeof keep, "%s/keep.%d", dir, rank);
    if (!after) rc("rename-out", rename(f, keep));
    show("f", f);
    show("keep", keep);
    list("ls", mine);
  } else if (!strcmp(fam, "listing")) {
    list("ls", mine);
    list("ls-sub", at("sub"));
    struct dirent **nl;
    int n = scandir(mine, &nl, NULL, alphasort);
    printf("r%d scandir %d", rank, n);
    for (int i = 0; i < n; i++) printf(" %s", nl[i]->d_name), free(nl[i]);
    printf("\n");
    if (n >= 0) free(nl);
    nftw(mine, walk_cb, 8, FTW_PHYS);
    int dfd = open(mine, O_RDONLY | O_DIRECTORY);
    DIR *d = fdopendir(dfd);
    int count = 0;
    while (d && readdir(d)) count++;
    rewinddir(d);
    int again = 0;
    while (d && readdir(d)) again++;
    OUT("fdopendir entries=%d after-rewind=%d", count, again);
    if (d) closedir(d);
  } else if (!strcmp(fam, "close-range")) {
    show("f2", at("f2"));
    show("after", at("after.txt"));
  } else if (!strcmp(fam, "child")) {
    if (!after) {
      char cmd[8192], line[512];
      snprintf(cmd, sizeof cmd, "ls -1 %s; cat %s/f; echo; wc -c < %s/sub/c; find %s -type f | sort", mine, mine, mine,
               mine);
      FILE *p = popen(cmd, "r");
      while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        OUT("child %s", strncmp(line, dir, strlen(dir)) ? line : line + strlen(dir) + 1);
      }
      if (p) pclose(p);
      snprintf(cmd, sizeof cmd, "rm -r %s", mine);
      rc("system-rm", system(cmd));
    }
    show("f", f);
    show("sub/c", at("sub/c"));
    list("ls-ckpt", at(".."));
  } else if (!strcmp(fam, "panic")) {
    if (!after) put(at("SCR_TEST_PANIC"), "still written");
    show("panic", at("SCR_TEST_PANIC"));
  } else if (!strcmp(fam, "chdir")) {
    /* relative paths after each change of the working directory: into the rank's directory,
     * into a new subdirectory that is then renamed while it is the working directory, out of
     * the prefix (where the same relative names must not reach the checkpoint) and back */
    char rel[4096];
    snprintf(rel, sizeof rel, "ckpt.1/r%d/f", rank);
    if (!after) {
      rc("chdir-dir", chdir(dir));
      int home = open(".", O_RDONLY | O_DIRECTORY);
      show("f-rel-home", rel);
      rc("chdir-mine", chdir(mine));
      show("f-rel-mine", "f");
      put("rel", "via-chdir");
      rc("mkdir-sub2", mkdir("sub2", 0755));
      rc("chdir-sub2", chdir("sub2"));
      put("deep", "deep");
      rc("rename-cwd", rename(at("sub2"), at("moved")));
      put("after-move", "moved");
      show("after-move-rel", "after-move");
      rc("chdir-root", chdir("/"));
      show("f-rel-root", rel);
      show("f-leaf-root", "f");
      rc("fchdir-home", fchdir(home));
      show("f-rel-back", rel);
      close(home);
    }
    show("rel", at("rel"));
    show("deep", at("moved/deep"));
    show("after-move", at("moved/after-move"));
    show("sub2-deep", at("sub2/deep"));
  } else if (!strcmp(fam, "tree")) {
    if (!after) rc("remove-tree", nftw(mine, remove_cb, 8, FTW_DEPTH | FTW_PHYS));
    show("f", f);
    show("sub/c", at("sub/c"));
    struct stat st;
    errno = 0;
    int r = stat(mine, &st);
    OUT("dir stat=%d errno=%d", r, errno);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 3) {
    fprintf(stderr, "usage: calls FAMILY DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *fam = argv[1];
  snprintf(dir, sizeof dir, "%s", argv[2]);
  if (!realpath(dir, canon_dir)) canon_dir[0] = 0;
  snprintf(mine, sizeof mine, "%s/ckpt.1/r%d", dir, rank);
  char p[4096];
  if (rank == 0) {
    snprintf(p, sizeof p, "%s/ckpt.1", dir);
    mkdir(p, 0755);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  mkdir(mine, 0755);
  mkdir(at("sub"), 0755);
  put(at("f"), "checkpoint");
  if (!strcmp(fam, "utimes"))
    put(at("g"), "g"), put(at("h"), "h"), put(at("i"), "i");
  if (!strcmp(fam, "close-range")) close_range_write();
  if (!strcmp(fam, "listing") || !strcmp(fam, "tree") || !strcmp(fam, "child")) {
    put(at("a"), "aa"), put(at("sub/c"), "ccc");
    put(at("notes.txt"), "not a checkpoint file");
  }
  MPI_Barrier(MPI_COMM_WORLD); /* the checkpoint is complete */
  family(fam, 0);
  MPI_Barrier(MPI_COMM_WORLD); /* a sync point: changes form a new version */
  family(fam, 1);
  MPI_Finalize();
  return 0;
}
