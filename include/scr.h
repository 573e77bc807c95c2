/*
 * scr.h: the SCR (Scalable Checkpoint/Restart) C API, source-compatible with SCR 3.0.
 * Implemented by scr-rs (libscr.so, and libscr_preload.so for transparent mode).
 *
 * All functions are collective over MPI_COMM_WORLD unless noted, and return SCR_SUCCESS
 * on success. See the SCR user guide, section "SCR API".
 */
#ifndef SCR_H
#define SCR_H

#ifdef __cplusplus
extern "C" {
#endif

#define SCR_VERSION "3.0 (scr-rs 0.1.0)"

#define SCR_SUCCESS (0)

/* Size of the buffers SCR_Route_file, SCR_Have_restart and SCR_Start_restart write to. */
#define SCR_MAX_FILENAME 1024

/* Dataset flags for SCR_Start_output (combine with |). */
#define SCR_FLAG_NONE       (0 << 0)
#define SCR_FLAG_CHECKPOINT (1 << 0)
#define SCR_FLAG_OUTPUT     (1 << 1)

/* Startup and shutdown */
int SCR_Init(void);
int SCR_Finalize(void);

/* Set ("KEY=VALUE", "CKPT=0 TYPE=XOR"), unset ("KEY=") or query ("KEY", "CKPT=0 TYPE")
 * a parameter. A query returns a malloc'ed string the caller frees, or NULL if unset. */
const char* SCR_Config(const char* config);
const char* SCR_Configf(const char* format, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 1, 2)))
#endif
  ;

/* Checkpoint and output */
int SCR_Need_checkpoint(int* flag);
int SCR_Start_output(const char* name, int flags);
int SCR_Route_file(const char* name, char* file);   /* local, not collective */

/* A file several ranks write in one output phase (scr-rs; N-to-1: pwrite at offsets, MPI-IO,
 * parallel HDF5): every rank that writes it calls this instead of SCR_Route_file and gets the
 * same path, in the prefix (the cache is bypassed for this file). Local, not collective. The
 * dataset is valid only if every writer reports it valid; a name several ranks route with
 * SCR_Route_file makes the dataset invalid. At restart every rank may route it. */
int SCR_Route_shared_file(const char* name, char* file);
int SCR_Complete_output(int valid);

/* Legacy checkpoint API (SCR 1.x/2.x): equivalent to SCR_Start_output(NULL,
 * SCR_FLAG_CHECKPOINT) and SCR_Complete_output(valid). */
int SCR_Start_checkpoint(void);
int SCR_Complete_checkpoint(int valid);

/* Restart */
int SCR_Have_restart(int* flag, char* name);
int SCR_Start_restart(char* name);
int SCR_Complete_restart(int valid);

/* The checkpoint being restarted (scr-rs; local, valid between SCR_Start_restart and
 * SCR_Complete_restart): how many processes wrote it (another number than this run's with
 * SCR_RESTART_ELASTIC=1) and how many files it has; then file i (0 <= i < nfiles): its path in
 * the prefix, the name to give SCR_Route_file, and the rank that wrote it (-1: a shared file).
 * Any rank may route any file of the checkpoint. */
int SCR_Restart_info(int* ranks, int* nfiles);
int SCR_Restart_file(int i, char* name, int* writer);

/* General */
char* SCR_Get_version(void);                        /* local; do not free */
int SCR_Should_exit(int* flag);

/* Dataset management */
int SCR_Current(const char* name);
int SCR_Delete(const char* name);
int SCR_Drop(const char* name);

#ifdef __cplusplus
}
#endif

#endif /* SCR_H */
