/* Mode bits, times and hard links of checkpoint files, as a program that knows nothing of SCR
 * sets and reads them (transparent mode keeps them through the flush and the fetch).
 * Usage: file_attrs write DIR | file_attrs read DIR
 *   write: every rank writes DIR/ckpt.1/a.<rank> and b.<rank> (bytes that depend on the rank),
 *          makes a 0640, sets b's access and modification times to fixed values, links
 *          c.<rank> to a, then calls MPI_Barrier (the checkpoint is complete) and prints
 *          "WROTE" (rank 0).
 *   read:  every rank prints "ATTRS rank=<r> a=<mode> nlink=<n> b=<mtime> c=<same inode as a>"
 *          from stat, and "BYTES rank=<r> ok|bad" after reading a, b and c back.
 * Exits non-zero on any failed call. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank;

static void die(const char* what, const char* path)
{
  fprintf(stderr, "rank %d: %s %s: %s\n", rank, what, path, strerror(errno));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void fill(char* buf, size_t n, int salt)
{
  for (size_t i = 0; i < n; i++) buf[i] = (char)((i * 7 + rank * 13 + salt) & 0xff);
}

static void name(char* out, const char* dir, char leaf)
{
  snprintf(out, 4096, "%s/ckpt.1/%c.%d", dir, leaf, rank);
}

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 3) {
    if (rank == 0) fprintf(stderr, "usage: file_attrs write|read DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char* dir = argv[2];
  char a[4096], b[4096], c[4096], d[4096];
  name(a, dir, 'a');
  name(b, dir, 'b');
  name(c, dir, 'c');
  enum { N = 5000 };
  char want_a[N], want_b[N], got[N];
  fill(want_a, N, 1);
  fill(want_b, N, 2);
  if (!strcmp(argv[1], "write")) {
    snprintf(d, sizeof d, "%s/ckpt.1", dir);
    if (mkdir(d, 0755) != 0 && errno != EEXIST) die("mkdir", d);
    const char* paths[2] = {a, b};
    const char* bytes[2] = {want_a, want_b};
    for (int i = 0; i < 2; i++) {
      int fd = open(paths[i], O_WRONLY | O_CREAT | O_TRUNC, 0666);
      if (fd < 0) die("open", paths[i]);
      if (write(fd, bytes[i], N) != N) die("write", paths[i]);
      if (close(fd) != 0) die("close", paths[i]);
    }
    if (chmod(a, 0640) != 0) die("chmod", a);
    struct timespec t[2] = {{1000000000, 123456789}, {1100000000 + rank, 987654321}};
    if (utimensat(AT_FDCWD, b, t, 0) != 0) die("utimensat", b);
    if (link(a, c) != 0) die("link", c);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("WROTE\n");
  } else {
    struct stat sa, sb, sc;
    if (stat(a, &sa) != 0) die("stat", a);
    if (stat(b, &sb) != 0) die("stat", b);
    if (stat(c, &sc) != 0) die("stat", c);
    printf("ATTRS rank=%d a=%o nlink=%lu b=%ld.%09ld c=%d\n", rank, (unsigned)(sa.st_mode & 07777),
           (unsigned long)sa.st_nlink, (long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec,
           sa.st_dev == sc.st_dev && sa.st_ino == sc.st_ino);
    int ok = 1;
    const char* paths[3] = {a, b, c};
    const char* bytes[3] = {want_a, want_b, want_a};
    for (int i = 0; i < 3; i++) {
      int fd = open(paths[i], O_RDONLY);
      if (fd < 0) die("open", paths[i]);
      ok = ok && read(fd, got, N) == N && !memcmp(got, bytes[i], N) && read(fd, got, 1) == 0;
      close(fd);
    }
    printf("BYTES rank=%d %s\n", rank, ok ? "ok" : "bad");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return 0;
}
