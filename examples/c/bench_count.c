/* PMPI counting shim for scripts/bench-scale.sh (a benchmark tool, not part of the library).
 *
 * Built as a shared object and put in LD_PRELOAD of an MPI program, it counts per rank every
 * collective (and communicator constructor) and every point-to-point call the process makes,
 * with the payload bytes it sends and receives, whoever calls MPI: the application, C SCR and
 * its libraries (lwgrp and dtcmp build their collectives from point-to-point messages), or
 * scr-rs's libscr.so (which calls MPI through libmpi.so). At MPI_Finalize each rank writes
 * `$BENCH_COUNT_DIR/rank.<world rank>`: one line per operation used,
 *   <operation> <calls> <bytes sent> <bytes received>
 * and `restart.<world rank>` the same for the restart phase only (see phase() below; the shim
 * wraps SCR_Init, SCR_Have_restart and SCR_Complete_restart of whichever libscr.so follows it).
 * Payload convention: a rooted operation counts the root's full buffer (a gather's root
 * receives P pieces); a reduction counts one buffer each way; a receive counts the bytes that
 * arrived, except MPI_Irecv, which counts its buffer when posted. Without BENCH_COUNT_DIR it counts and writes nothing.
 *
 *   mpicc -O2 -shared -fPIC examples/c/bench_count.c -o bench_count.so -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum op {
    BARRIER, BCAST, REDUCE, ALLREDUCE, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV,
    ALLTOALL, ALLTOALLV, ALLTOALLW, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, SCAN, EXSCAN,
    IBARRIER, IBCAST, IREDUCE, IALLREDUCE, IGATHER, IALLGATHER,
    COMM_SPLIT, COMM_SPLIT_TYPE, COMM_DUP, COMM_CREATE, COMM_FREE,
    SEND, SSEND, ISEND, ISSEND, RECV, IRECV, SENDRECV, SENDRECV_REPLACE, PROBE, IPROBE,
    N_OPS
};
static const char *names[N_OPS] = {
    "MPI_Barrier", "MPI_Bcast", "MPI_Reduce", "MPI_Allreduce", "MPI_Gather", "MPI_Gatherv",
    "MPI_Scatter", "MPI_Scatterv", "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall",
    "MPI_Alltoallv", "MPI_Alltoallw", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block",
    "MPI_Scan", "MPI_Exscan", "MPI_Ibarrier", "MPI_Ibcast", "MPI_Ireduce", "MPI_Iallreduce",
    "MPI_Igather", "MPI_Iallgather", "MPI_Comm_split", "MPI_Comm_split_type", "MPI_Comm_dup",
    "MPI_Comm_create", "MPI_Comm_free", "MPI_Send", "MPI_Ssend", "MPI_Isend", "MPI_Issend",
    "MPI_Recv", "MPI_Irecv", "MPI_Sendrecv", "MPI_Sendrecv_replace", "MPI_Probe", "MPI_Iprobe",
};
static unsigned long long calls[N_OPS], sent[N_OPS], recvd[N_OPS];
/* the same, counted only inside SCR_Init and from SCR_Have_restart to SCR_Complete_restart */
static unsigned long long rcalls[N_OPS], rsent[N_OPS], rrecvd[N_OPS];
static int in_restart;

static unsigned long long bytes(int count, MPI_Datatype t)
{
    int size = 0;
    if (count <= 0 || t == MPI_DATATYPE_NULL) return 0;
    PMPI_Type_size(t, &size);
    return (unsigned long long)count * (unsigned long long)size;
}

static int comm_size(MPI_Comm c)
{
    int n = 1;
    PMPI_Comm_size(c, &n);
    return n;
}

static int comm_rank(MPI_Comm c)
{
    int r = 0;
    PMPI_Comm_rank(c, &r);
    return r;
}

static void add(enum op o, unsigned long long out, unsigned long long in)
{
    calls[o]++;
    sent[o] += out;
    recvd[o] += in;
    if (in_restart) {
        rcalls[o]++;
        rsent[o] += out;
        rrecvd[o] += in;
    }
}

/* The restart phase: SCR_Init, and SCR_Have_restart through SCR_Complete_restart (the
 * application's read of its files included). Entering and leaving it, the shim calls
 * access() on a path that does not exist, /scr-bench-phase/restart-begin and -end: a
 * marker in an strace of the process. */
static void phase(int on)
{
    in_restart = on;
    if (access(on ? "/scr-bench-phase/restart-begin" : "/scr-bench-phase/restart-end", F_OK) == 0)
        fprintf(stderr, "bench_count: a marker path exists\n");
}

static void *next(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "bench_count: no %s after the shim: %s\n", name, dlerror());
        abort();
    }
    return f;
}

int SCR_Init(void)
{
    phase(1);
    int rc = ((int (*)(void))next("SCR_Init"))();
    phase(0);
    return rc;
}

int SCR_Have_restart(int *flag, char *name)
{
    phase(1);
    int rc = ((int (*)(int *, char *))next("SCR_Have_restart"))(flag, name);
    if (rc != MPI_SUCCESS || *flag == 0) phase(0); /* no restart follows */
    return rc;
}

int SCR_Complete_restart(int valid)
{
    int rc = ((int (*)(int))next("SCR_Complete_restart"))(valid);
    phase(0);
    return rc;
}

static unsigned long long sum_counts(const int *counts, int n, MPI_Datatype t)
{
    unsigned long long s = 0;
    for (int i = 0; i < n; i++) s += bytes(counts[i], t);
    return s;
}

int MPI_Barrier(MPI_Comm c) { add(BARRIER, 0, 0); return PMPI_Barrier(c); }

int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c)
{
    int me = comm_rank(c) == root;
    add(BCAST, me ? bytes(n, t) : 0, me ? 0 : bytes(n, t));
    return PMPI_Bcast(b, n, t, root, c);
}

int MPI_Reduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c)
{
    add(REDUCE, bytes(n, t), comm_rank(c) == root ? bytes(n, t) : 0);
    return PMPI_Reduce(s, r, n, t, op, root, c);
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    add(ALLREDUCE, bytes(n, t), bytes(n, t));
    return PMPI_Allreduce(s, r, n, t, op, c);
}

int MPI_Gather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root,
               MPI_Comm c)
{
    int me = comm_rank(c) == root;
    add(GATHER, bytes(sn, st), me ? bytes(rn, rt) * comm_size(c) : 0);
    return PMPI_Gather(s, sn, st, r, rn, rt, root, c);
}

int MPI_Gatherv(const void *s, int sn, MPI_Datatype st, void *r, const int *rn, const int *d,
                MPI_Datatype rt, int root, MPI_Comm c)
{
    int me = comm_rank(c) == root;
    add(GATHERV, bytes(sn, st), me ? sum_counts(rn, comm_size(c), rt) : 0);
    return PMPI_Gatherv(s, sn, st, r, rn, d, rt, root, c);
}

int MPI_Scatter(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root,
                MPI_Comm c)
{
    int me = comm_rank(c) == root;
    add(SCATTER, me ? bytes(sn, st) * comm_size(c) : 0, bytes(rn, rt));
    return PMPI_Scatter(s, sn, st, r, rn, rt, root, c);
}

int MPI_Scatterv(const void *s, const int *sn, const int *d, MPI_Datatype st, void *r, int rn,
                 MPI_Datatype rt, int root, MPI_Comm c)
{
    int me = comm_rank(c) == root;
    add(SCATTERV, me ? sum_counts(sn, comm_size(c), st) : 0, bytes(rn, rt));
    return PMPI_Scatterv(s, sn, d, st, r, rn, rt, root, c);
}

int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c)
{
    add(ALLGATHER, bytes(sn, st), bytes(rn, rt) * comm_size(c));
    return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}

int MPI_Allgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int *rn, const int *d,
                   MPI_Datatype rt, MPI_Comm c)
{
    add(ALLGATHERV, bytes(sn, st), sum_counts(rn, comm_size(c), rt));
    return PMPI_Allgatherv(s, sn, st, r, rn, d, rt, c);
}

int MPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                 MPI_Comm c)
{
    int n = comm_size(c);
    add(ALLTOALL, bytes(sn, st) * n, bytes(rn, rt) * n);
    return PMPI_Alltoall(s, sn, st, r, rn, rt, c);
}

int MPI_Alltoallv(const void *s, const int *sn, const int *sd, MPI_Datatype st, void *r,
                  const int *rn, const int *rd, MPI_Datatype rt, MPI_Comm c)
{
    int n = comm_size(c);
    add(ALLTOALLV, sum_counts(sn, n, st), sum_counts(rn, n, rt));
    return PMPI_Alltoallv(s, sn, sd, st, r, rn, rd, rt, c);
}

int MPI_Alltoallw(const void *s, const int sn[], const int sd[], const MPI_Datatype st[], void *r,
                  const int rn[], const int rd[], const MPI_Datatype rt[], MPI_Comm c)
{
    int n = comm_size(c);
    unsigned long long o = 0, i = 0;
    for (int k = 0; k < n; k++) {
        o += bytes(sn[k], st[k]);
        i += bytes(rn[k], rt[k]);
    }
    add(ALLTOALLW, o, i);
    return PMPI_Alltoallw(s, sn, sd, st, r, rn, rd, rt, c);
}

int MPI_Reduce_scatter(const void *s, void *r, const int *rn, MPI_Datatype t, MPI_Op op,
                       MPI_Comm c)
{
    add(REDUCE_SCATTER, sum_counts(rn, comm_size(c), t), bytes(rn[comm_rank(c)], t));
    return PMPI_Reduce_scatter(s, r, rn, t, op, c);
}

int MPI_Reduce_scatter_block(const void *s, void *r, int rn, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    add(REDUCE_SCATTER_BLOCK, bytes(rn, t) * comm_size(c), bytes(rn, t));
    return PMPI_Reduce_scatter_block(s, r, rn, t, op, c);
}

int MPI_Scan(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    add(SCAN, bytes(n, t), bytes(n, t));
    return PMPI_Scan(s, r, n, t, op, c);
}

int MPI_Exscan(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    add(EXSCAN, bytes(n, t), bytes(n, t));
    return PMPI_Exscan(s, r, n, t, op, c);
}

int MPI_Ibarrier(MPI_Comm c, MPI_Request *q) { add(IBARRIER, 0, 0); return PMPI_Ibarrier(c, q); }

int MPI_Ibcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *q)
{
    int me = comm_rank(c) == root;
    add(IBCAST, me ? bytes(n, t) : 0, me ? 0 : bytes(n, t));
    return PMPI_Ibcast(b, n, t, root, c, q);
}

int MPI_Ireduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c,
                MPI_Request *q)
{
    add(IREDUCE, bytes(n, t), comm_rank(c) == root ? bytes(n, t) : 0);
    return PMPI_Ireduce(s, r, n, t, op, root, c, q);
}

int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request *q)
{
    add(IALLREDUCE, bytes(n, t), bytes(n, t));
    return PMPI_Iallreduce(s, r, n, t, op, c, q);
}

int MPI_Igather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root,
                MPI_Comm c, MPI_Request *q)
{
    int me = comm_rank(c) == root;
    add(IGATHER, bytes(sn, st), me ? bytes(rn, rt) * comm_size(c) : 0);
    return PMPI_Igather(s, sn, st, r, rn, rt, root, c, q);
}

int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                   MPI_Comm c, MPI_Request *q)
{
    add(IALLGATHER, bytes(sn, st), bytes(rn, rt) * comm_size(c));
    return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}

int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *out)
{
    add(COMM_SPLIT, 0, 0);
    return PMPI_Comm_split(c, color, key, out);
}

int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm *out)
{
    add(COMM_SPLIT_TYPE, 0, 0);
    return PMPI_Comm_split_type(c, type, key, info, out);
}

int MPI_Comm_dup(MPI_Comm c, MPI_Comm *out) { add(COMM_DUP, 0, 0); return PMPI_Comm_dup(c, out); }

int MPI_Comm_create(MPI_Comm c, MPI_Group g, MPI_Comm *out)
{
    add(COMM_CREATE, 0, 0);
    return PMPI_Comm_create(c, g, out);
}

int MPI_Comm_free(MPI_Comm *c) { add(COMM_FREE, 0, 0); return PMPI_Comm_free(c); }

int MPI_Send(const void *b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c)
{
    add(SEND, bytes(n, t), 0);
    return PMPI_Send(b, n, t, d, tag, c);
}

int MPI_Ssend(const void *b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c)
{
    add(SSEND, bytes(n, t), 0);
    return PMPI_Ssend(b, n, t, d, tag, c);
}

int MPI_Isend(const void *b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c, MPI_Request *q)
{
    add(ISEND, bytes(n, t), 0);
    return PMPI_Isend(b, n, t, d, tag, c, q);
}

int MPI_Issend(const void *b, int n, MPI_Datatype t, int d, int tag, MPI_Comm c, MPI_Request *q)
{
    add(ISSEND, bytes(n, t), 0);
    return PMPI_Issend(b, n, t, d, tag, c, q);
}

/* A receive counts the bytes that arrived (its status), not the buffer's capacity. */
int MPI_Recv(void *b, int n, MPI_Datatype t, int s, int tag, MPI_Comm c, MPI_Status *st)
{
    MPI_Status mine;
    MPI_Status *use = st == MPI_STATUS_IGNORE ? &mine : st;
    int rc = PMPI_Recv(b, n, t, s, tag, c, use);
    int got = 0;
    PMPI_Get_count(use, t, &got);
    add(RECV, 0, got == MPI_UNDEFINED ? 0 : bytes(got, t));
    return rc;
}

int MPI_Irecv(void *b, int n, MPI_Datatype t, int s, int tag, MPI_Comm c, MPI_Request *q)
{
    add(IRECV, 0, bytes(n, t));
    return PMPI_Irecv(b, n, t, s, tag, c, q);
}

int MPI_Sendrecv(const void *sb, int sn, MPI_Datatype st, int d, int stag, void *rb, int rn,
                 MPI_Datatype rt, int s, int rtag, MPI_Comm c, MPI_Status *status)
{
    add(SENDRECV, bytes(sn, st), bytes(rn, rt));
    return PMPI_Sendrecv(sb, sn, st, d, stag, rb, rn, rt, s, rtag, c, status);
}

int MPI_Sendrecv_replace(void *b, int n, MPI_Datatype t, int d, int stag, int s, int rtag,
                         MPI_Comm c, MPI_Status *status)
{
    add(SENDRECV_REPLACE, bytes(n, t), bytes(n, t));
    return PMPI_Sendrecv_replace(b, n, t, d, stag, s, rtag, c, status);
}

int MPI_Probe(int s, int tag, MPI_Comm c, MPI_Status *st)
{
    add(PROBE, 0, 0);
    return PMPI_Probe(s, tag, c, st);
}

int MPI_Iprobe(int s, int tag, MPI_Comm c, int *flag, MPI_Status *st)
{
    add(IPROBE, 0, 0);
    return PMPI_Iprobe(s, tag, c, flag, st);
}

int MPI_Finalize(void)
{
    const char *dir = getenv("BENCH_COUNT_DIR");
    if (dir != NULL && *dir != '\0') {
        char path[4096];
        for (int r = 0; r < 2; r++) {
            snprintf(path, sizeof path, "%s/%s.%d", dir, r ? "restart" : "rank", comm_rank(MPI_COMM_WORLD));
            FILE *f = fopen(path, "w");
            if (f == NULL) {
                perror(path);
                continue;
            }
            for (int o = 0; o < N_OPS; o++) {
                if (r == 0 && calls[o] != 0)
                    fprintf(f, "%s %llu %llu %llu\n", names[o], calls[o], sent[o], recvd[o]);
                if (r == 1 && rcalls[o] != 0)
                    fprintf(f, "%s %llu %llu %llu\n", names[o], rcalls[o], rsent[o], rrecvd[o]);
            }
            fclose(f);
        }
    }
    return PMPI_Finalize();
}
