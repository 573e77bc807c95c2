/* A second thread's file calls while a sync point completes a checkpoint (transparent mode
 * under LD_PRELOAD; the program knows nothing of SCR). Usage: thread_during_flush PREFIX
 * (run from PREFIX with the pattern "ckpt.*" and a synchronous flush of every checkpoint).
 *
 * Rank 0's side thread takes the prefix index's lock (PREFIX/.scr/index.scr.lock, an
 * open-file-description lock as SCR takes it) before the checkpoint. Every rank writes
 * ckpt.1/rank_<r>.dat and passes MPI_Barrier: a sync point that completes ckpt.1 and flushes
 * it, and rank 0's flush waits for the index lock. Once /proc/locks shows that wait, the side
 * thread stats, opens and reads input.dat (a file under the prefix that no checkpoint takes),
 * checks that the flush still waits, and only then releases the lock. A library that held
 * its file table through the flush would make the side thread's calls wait for the flush,
 * which waits for the side thread: SIGALRM ends the run after 60 s.
 * Prints (stderr, in this order) "SIDE holds the index lock", "SIDE the flush waits for the
 * index lock", "SIDE input.dat <ok|FAILED> while the flush waited: <still waiting|NOT
 * WAITING>", "SIDE released the index lock", "MAIN ckpt.1 complete". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define INPUT "input bytes the side thread reads during the flush\n"
#define SIZE (1 << 20)

static const char *dir;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int locked;

/* Whether /proc/locks lists a request blocked on a lock of inode `ino` (its "->" lines). */
static int waiting_on(unsigned long ino) {
  FILE *f = fopen("/proc/locks", "r");
  if (!f) return 0;
  char line[512];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    if (!strstr(line, "->")) continue;
    for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n")) {
      char *c1 = strchr(tok, ':');
      char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      if (c2 && strtoul(c2 + 1, NULL, 10) == ino) found = 1;
    }
  }
  fclose(f);
  return found;
}

static void *side(void *arg) {
  (void)arg;
  char scr[4096], lk[4096];
  snprintf(scr, sizeof scr, "%s/.scr", dir);
  snprintf(lk, sizeof lk, "%s/.scr/index.scr.lock", dir);
  /* raw system calls: the library's own files, not the calls under test */
  syscall(SYS_mkdirat, AT_FDCWD, scr, 0755);
  int fd = (int)syscall(SYS_openat, AT_FDCWD, lk, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  struct stat st;
  if (fd < 0 || syscall(SYS_fcntl, fd, F_OFD_SETLKW, &fl) != 0 || fstat(fd, &st) != 0) {
    fprintf(stderr, "SIDE cannot lock %s: %s\n", lk, strerror(errno));
    exit(2);
  }
  fprintf(stderr, "SIDE holds the index lock\n");
  pthread_mutex_lock(&mu);
  locked = 1;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);

  while (!waiting_on((unsigned long)st.st_ino)) usleep(2000);
  fprintf(stderr, "SIDE the flush waits for the index lock\n");

  /* the calls under test, on a file the completion does not take */
  struct stat in;
  char buf[256];
  int ok = stat("input.dat", &in) == 0 && in.st_size == (off_t)strlen(INPUT);
  int rd = open("input.dat", O_RDONLY);
  ssize_t n = rd < 0 ? -1 : read(rd, buf, sizeof buf);
  ok = ok && rd >= 0 && close(rd) == 0 && n == (ssize_t)strlen(INPUT) && memcmp(buf, INPUT, n) == 0;
  int still = waiting_on((unsigned long)st.st_ino);
  fprintf(stderr, "SIDE input.dat %s while the flush waited: %s\n", ok ? "ok" : "FAILED",
          still ? "still waiting" : "NOT WAITING");

  fl.l_type = F_UNLCK;
  syscall(SYS_fcntl, fd, F_OFD_SETLK, &fl);
  syscall(SYS_close, fd);
  fprintf(stderr, "SIDE released the index lock\n");
  return NULL;
}

int main(int argc, char **argv) {
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc < 2) {
    fprintf(stderr, "usage: thread_during_flush PREFIX\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  dir = argv[1];
  pthread_t th;
  if (rank == 0) {
    FILE *f = fopen("input.dat", "w");
    if (!f || fputs(INPUT, f) < 0 || fclose(f) != 0) {
      perror("input.dat");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    mkdir("ckpt.1", 0755);
    /* a side call that waited for the flush would never return: the flush waits for it */
    alarm(60);
    pthread_create(&th, NULL, side, NULL);
    pthread_mutex_lock(&mu);
    while (!locked) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  char name[64];
  snprintf(name, sizeof name, "ckpt.1/rank_%d.dat", rank);
  unsigned char *data = malloc(SIZE);
  for (int i = 0; i < SIZE; i++) data[i] = (unsigned char)(i * 7 + rank);
  FILE *f = fopen(name, "w");
  if (!f || fwrite(data, 1, SIZE, f) != SIZE || fclose(f) != 0) {
    perror(name);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  free(data);
  /* a sync point: ckpt.1 completes and is flushed before it returns */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    pthread_join(th, NULL);
    alarm(0);
    fprintf(stderr, "MAIN ckpt.1 complete\n");
  }
  MPI_Finalize();
  return 0;
}
