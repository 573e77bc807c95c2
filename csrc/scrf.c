/* scrf.c: the Fortran interface of SCR (include/scrf.h, user guide section 2.5), built into
 * libscrf.so and libscrf.a by scripts/libscrf.sh.
 *
 * Each SCR_* call is a subroutine with a trailing IERROR, named as gfortran (and ifort, flang)
 * name external procedures: lower case with one trailing underscore (scr_init_,
 * scr_route_file_, ...). String arguments carry hidden lengths, passed by value after the last
 * argument, of type size_t (gfortran 8 and later, ifort, flang on 64-bit Linux). An input
 * string loses its trailing blanks; an output string is blank-padded, and one that does not fit
 * its variable fails the call with a message rather than being cut silently. A blank dataset
 * name in SCR_START_OUTPUT asks for SCR's default name, as NULL does in C.
 *
 * Design: these are thin wrappers over the C API that libscr exports, in their own library
 * that depends on libscr; they hold no state. That is what keeps ONE SCR runtime per process:
 *  - shared: libscrf.so needs libscr.so (DT_NEEDED, RUNPATH $ORIGIN), and every call goes
 *    through the dynamic symbols SCR_*. A program mixing C and Fortran calls (-lscrf -lscr)
 *    reaches the same SCR_Init state from both; under LD_PRELOAD=libscr_preload.so (which
 *    exports the same API) both reach the preload's runtime, the one MPI_Init started.
 *  - static: libscrf.a holds this one C object and nothing else, so a static link names libscr.a
 *    (a Rust staticlib: the runtime plus its own copy of Rust's standard library) exactly once:
 *    mpif90 app.F90 libscrf.a libscr.a. Building the Fortran layer as a second Rust staticlib
 *    would put a second copy of Rust's std (and of the runtime) in the same link, whose
 *    symbols collide. SCR 3 itself compiles its whole runtime into libscrf, the duplication
 *    this layout avoids.
 * Two internal entry points of libscr serve this file: scr_rs_config (SCR_Config with a
 * return code, telling a failure from an unset parameter, and a query from a setting) and
 * scr_rs_error (messages in the library's format, with rank and node).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scr.h"

/* The type of a hidden Fortran string length. */
typedef size_t scr_flen;

#define SCRF_FAILURE 1

int scr_rs_config(const char* config, char** value);
void scr_rs_error(const char* msg);

static void report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char* fmt, ...)
{
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  scr_rs_error(msg);
}

/* A NUL-terminated copy of a Fortran string without its trailing blanks (the caller frees
 * it), or NULL (reported) when memory runs out. */
static char* cstr(const char* call, const char* f, scr_flen len)
{
  while (len > 0 && f[len - 1] == ' ') {
    len--;
  }
  char* c = malloc(len + 1);
  if (c == NULL) {
    report("%s: cannot allocate %zu bytes for a string argument", call, (size_t) len + 1);
    return NULL;
  }
  memcpy(c, f, len);
  c[len] = '\0';
  return c;
}

/* Store a C string in a Fortran variable of len characters, blank-padded. A string longer
 * than the variable is stored cut to its length and fails the call (reported). */
static int fstr(const char* call, const char* what, const char* c, char* f, scr_flen len)
{
  size_t n = strlen(c);
  if (n > len) {
    memcpy(f, c, len);
    report("%s: %s holds %zu characters, the result has %zu (%.40s%s); declare it "
           "CHARACTER(LEN=SCR_MAX_FILENAME)",
           call, what, (size_t) len, n, c, n > 40 ? "..." : "");
    return SCRF_FAILURE;
  }
  memcpy(f, c, n);
  memset(f + n, ' ', len - n);
  return SCR_SUCCESS;
}

void scr_init_(int* ierror)
{
  *ierror = SCR_Init();
}

void scr_finalize_(int* ierror)
{
  *ierror = SCR_Finalize();
}

/* SCR_CONFIG(CONFIG, VAL, IERROR): set ("KEY=VALUE"), unset ("KEY=") or query ("KEY",
 * "CKPT=0 TYPE"). A query stores the value in VAL (all blanks when the parameter is not set);
 * a set or unset leaves VAL alone (it may be a constant). */
void scr_config_(const char* config, char* val, int* ierror, scr_flen config_len, scr_flen val_len)
{
  char* c = cstr("SCR_CONFIG", config, config_len);
  if (c == NULL) {
    *ierror = SCRF_FAILURE;
    return;
  }
  char* v = NULL;
  *ierror = scr_rs_config(c, &v);
  free(c);
  if (*ierror == SCR_SUCCESS && v != NULL) {
    *ierror = fstr("SCR_CONFIG", "VAL", v, val, val_len);
  }
  free(v);
}

void scr_need_checkpoint_(int* flag, int* ierror)
{
  *ierror = SCR_Need_checkpoint(flag);
}

void scr_start_output_(const char* name, const int* flags, int* ierror, scr_flen name_len)
{
  char* n = cstr("SCR_START_OUTPUT", name, name_len);
  if (n == NULL) {
    *ierror = SCRF_FAILURE;
    return;
  }
  *ierror = SCR_Start_output(n[0] != '\0' ? n : NULL, *flags);
  free(n);
}

/* SCR_ROUTE_FILE and SCR_ROUTE_SHARED_FILE: NAME in, FILE out. */
static void route(const char* call, int (*f)(const char*, char*), const char* name, char* file, int* ierror,
                  scr_flen name_len, scr_flen file_len)
{
  char routed[SCR_MAX_FILENAME];
  char* n = cstr(call, name, name_len);
  if (n == NULL) {
    *ierror = SCRF_FAILURE;
    return;
  }
  *ierror = f(n, routed);
  free(n);
  if (*ierror == SCR_SUCCESS) {
    *ierror = fstr(call, "FILE", routed, file, file_len);
  }
}

void scr_route_file_(const char* name, char* file, int* ierror, scr_flen name_len, scr_flen file_len)
{
  route("SCR_ROUTE_FILE", SCR_Route_file, name, file, ierror, name_len, file_len);
}

void scr_route_shared_file_(const char* name, char* file, int* ierror, scr_flen name_len, scr_flen file_len)
{
  route("SCR_ROUTE_SHARED_FILE", SCR_Route_shared_file, name, file, ierror, name_len, file_len);
}

void scr_complete_output_(const int* valid, int* ierror)
{
  *ierror = SCR_Complete_output(*valid);
}

void scr_start_checkpoint_(int* ierror)
{
  *ierror = SCR_Start_checkpoint();
}

void scr_complete_checkpoint_(const int* valid, int* ierror)
{
  *ierror = SCR_Complete_checkpoint(*valid);
}

/* SCR_HAVE_RESTART(FLAG, NAME, IERROR): NAME is all blanks when there is no checkpoint. */
void scr_have_restart_(int* flag, char* name, int* ierror, scr_flen name_len)
{
  char buf[SCR_MAX_FILENAME];
  *ierror = SCR_Have_restart(flag, buf);
  if (*ierror == SCR_SUCCESS) {
    *ierror = fstr("SCR_HAVE_RESTART", "NAME", *flag ? buf : "", name, name_len);
  }
}

void scr_start_restart_(char* name, int* ierror, scr_flen name_len)
{
  char buf[SCR_MAX_FILENAME];
  *ierror = SCR_Start_restart(buf);
  if (*ierror == SCR_SUCCESS) {
    *ierror = fstr("SCR_START_RESTART", "NAME", buf, name, name_len);
  }
}

void scr_complete_restart_(const int* valid, int* ierror)
{
  *ierror = SCR_Complete_restart(*valid);
}

void scr_restart_info_(int* ranks, int* nfiles, int* ierror)
{
  *ierror = SCR_Restart_info(ranks, nfiles);
}

/* SCR_RESTART_FILE(I, NAME, WRITER, IERROR): I counts from 0, as in C. */
void scr_restart_file_(const int* i, char* name, int* writer, int* ierror, scr_flen name_len)
{
  char buf[SCR_MAX_FILENAME];
  *ierror = SCR_Restart_file(*i, buf, writer);
  if (*ierror == SCR_SUCCESS) {
    *ierror = fstr("SCR_RESTART_FILE", "NAME", buf, name, name_len);
  }
}

void scr_get_version_(char* version, int* ierror, scr_flen version_len)
{
  *ierror = fstr("SCR_GET_VERSION", "VERSION", SCR_Get_version(), version, version_len);
}

void scr_should_exit_(int* flag, int* ierror)
{
  *ierror = SCR_Should_exit(flag);
}

/* SCR_CURRENT, SCR_DELETE and SCR_DROP take one name. */
#define SCRF_BY_NAME(fname, cfunc, call)                          \
  void fname(const char* name, int* ierror, scr_flen name_len)    \
  {                                                               \
    char* n = cstr(call, name, name_len);                         \
    *ierror = n != NULL ? cfunc(n) : SCRF_FAILURE;                \
    free(n);                                                      \
  }

SCRF_BY_NAME(scr_current_, SCR_Current, "SCR_CURRENT")
SCRF_BY_NAME(scr_delete_, SCR_Delete, "SCR_DELETE")
SCRF_BY_NAME(scr_drop_, SCR_Drop, "SCR_DROP")
