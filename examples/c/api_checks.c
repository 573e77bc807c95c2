/*
 * api_checks: exercises parts of the SCR API that test_api does not, one mode per run.
 * Every rank prints nothing; rank 0 prints "CHECK <what> <result>" lines a test compares.
 *
 *   api_checks misuse    calls in the wrong order and bad arguments
 *   api_checks config    SCR_Config / SCR_Configf set, query, unset, sub-key query
 *   api_checks manage    SCR_Current, SCR_Delete, SCR_Drop over three checkpoints
 *   api_checks output    output datasets (OUTPUT and CHECKPOINT|OUTPUT)
 *   api_checks legacy    SCR_Start_checkpoint / SCR_Complete_checkpoint
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scr.h"

static int rank;

static void check(const char* what, int value)
{
  if (rank == 0) printf("CHECK %s %d\n", what, value);
  fflush(stdout);
}

static void checks(const char* what, const char* value)
{
  if (rank == 0) printf("CHECK %s %s\n", what, value ? value : "(null)");
  fflush(stdout);
}

static int write_file(const char* name, const char* text)
{
  char routed[SCR_MAX_FILENAME];
  if (SCR_Route_file(name, routed) != SCR_SUCCESS) return 0;
  FILE* f = fopen(routed, "w");
  if (!f) return 0;
  fputs(text, f);
  return fclose(f) == 0;
}

static int ckpt(const char* name, int flags)
{
  char file[256];
  SCR_Start_output(name, flags);
  snprintf(file, sizeof file, "%s/rank_%d", name, rank);
  int ok = write_file(file, name);
  return SCR_Complete_output(ok) == SCR_SUCCESS;
}

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* mode = argc > 1 ? argv[1] : "";

  if (!strcmp(mode, "misuse")) {
    int flag = 0;
    char buf[SCR_MAX_FILENAME];
    check("start_before_init", SCR_Start_output("x", SCR_FLAG_CHECKPOINT) == SCR_SUCCESS);
    check("init", SCR_Init() == SCR_SUCCESS);
    check("init_twice", SCR_Init() == SCR_SUCCESS);
    check("complete_without_start", SCR_Complete_output(1) == SCR_SUCCESS);
    check("start_restart_without_checkpoint", SCR_Start_restart(buf) == SCR_SUCCESS);
    check("complete_restart_without_start", SCR_Complete_restart(1) == SCR_SUCCESS);
    check("bad_flags", SCR_Start_output("x", 8) == SCR_SUCCESS);
    check("route_outside_phase_verbatim", SCR_Route_file("some/name", buf) == SCR_SUCCESS && !strcmp(buf, "some/name"));
    check("start", SCR_Start_output("ckpt.1", SCR_FLAG_CHECKPOINT) == SCR_SUCCESS);
    check("nested_start", SCR_Start_output("ckpt.2", SCR_FLAG_CHECKPOINT) == SCR_SUCCESS);
    check("need_inside_phase", SCR_Need_checkpoint(&flag) == SCR_SUCCESS);
    check("route_escape", SCR_Route_file("../../../etc/passwd", buf) == SCR_SUCCESS);
    check("route_scr_dir", SCR_Route_file(".scr/index.scr", buf) == SCR_SUCCESS);
    check("route_ok", SCR_Route_file("ckpt.1/../ckpt.1/f", buf) == SCR_SUCCESS);
    check("have_restart_inside_output", SCR_Have_restart(&flag, buf) == SCR_SUCCESS);
    check("complete", SCR_Complete_output(0) == SCR_SUCCESS);
    check("finalize", SCR_Finalize() == SCR_SUCCESS);
    check("finalize_twice", SCR_Finalize() == SCR_SUCCESS);
    check("call_after_finalize", SCR_Need_checkpoint(&flag) == SCR_SUCCESS);
  } else if (!strcmp(mode, "config")) {
    const char* v;
    checks("set_returns", SCR_Config("SCR_FLUSH=7"));
    v = SCR_Config("SCR_FLUSH"); checks("query_flush", v); free((void*) v);
    SCR_Configf("SCR_CACHE_SIZE=%d", 3);
    v = SCR_Config("SCR_CACHE_SIZE"); checks("query_configf", v); free((void*) v);
    SCR_Config("SCR_PREFIX_SIZE=\"4\"");
    v = SCR_Config("SCR_PREFIX_SIZE"); checks("query_quoted", v); free((void*) v);
    SCR_Config("SCR_FLUSH=");
    v = SCR_Config("SCR_FLUSH"); checks("query_after_unset", v); free((void*) v);
    SCR_Config("CKPT=0 TYPE=SINGLE INTERVAL=1");
    v = SCR_Config("CKPT=0 TYPE"); checks("query_subkey", v); free((void*) v);
    v = SCR_Config("SCR_DEBUG"); checks("query_env", v); free((void*) v);
    checks("bad_value", SCR_Config("SCR_FLUSH=often"));
    /* blanks around '=' and between items, as SCR's own configuration test writes them */
    SCR_Config("SCR_CHECKPOINT_INTERVAL =  5");
    v = SCR_Config("SCR_CHECKPOINT_INTERVAL"); checks("query_spaced", v); free((void*) v);
    SCR_Config("STORE= /dev/shm/foo GROUP = NODE COUNT  =1");
    v = SCR_Config("STORE = /dev/shm/foo  GROUP"); checks("query_store_group", v); free((void*) v);
    SCR_Config("STORE=");
    v = SCR_Config("STORE=/dev/shm/foo GROUP"); checks("query_store_after_unset", v); free((void*) v);
    /* an unknown key is reported and ignored: a query never returns it */
    SCR_Config("SCR_NOT_A_PARAMETER=1");
    v = SCR_Config("SCR_NOT_A_PARAMETER"); checks("query_unknown", v); free((void*) v);
    /* a 2 MB value: the error message quotes only its start and end, and says how long it was */
    {
      size_t n = 2u << 20;
      char* big = malloc(n + 32);
      strcpy(big, "SCR_CACHE_SIZE=");
      memset(big + strlen(big), '7', n);
      strcpy(big + 15 + n, "x");
      checks("big_value", SCR_Config(big));
      free(big);
    }
    check("init", SCR_Init() == SCR_SUCCESS);
    checks("set_after_init", SCR_Config("SCR_FLUSH=3"));
    v = SCR_Config("SCR_CACHE_SIZE"); checks("query_after_init", v); free((void*) v);
    SCR_Finalize();
  } else if (!strcmp(mode, "manage")) {
    char name[SCR_MAX_FILENAME];
    int flag = 0;
    check("init", SCR_Init() == SCR_SUCCESS);
    SCR_Have_restart(&flag, name);
    if (flag) {
      /* second run: SCR_Current chose ckpt.1 before restart */
      checks("restart_name", name);
    } else {
      check("ckpt1", ckpt("ckpt.1", SCR_FLAG_CHECKPOINT));
      check("ckpt2", ckpt("ckpt.2", SCR_FLAG_CHECKPOINT));
      check("ckpt3", ckpt("ckpt.3", SCR_FLAG_CHECKPOINT));
      check("delete_ckpt3", SCR_Delete("ckpt.3") == SCR_SUCCESS);
      check("delete_missing", SCR_Delete("nope") == SCR_SUCCESS);
      check("drop_ckpt2", SCR_Drop("ckpt.2") == SCR_SUCCESS);
      check("drop_again", SCR_Drop("ckpt.2") == SCR_SUCCESS);
      check("current_ckpt1", SCR_Current("ckpt.1") == SCR_SUCCESS);
      check("current_missing", SCR_Current("nope") == SCR_SUCCESS);
      SCR_Have_restart(&flag, name);
      checks("have_after_current", flag ? name : "none");
    }
    SCR_Finalize();
  } else if (!strcmp(mode, "output")) {
    check("init", SCR_Init() == SCR_SUCCESS);
    check("out1", ckpt("out.1", SCR_FLAG_OUTPUT));
    check("both2", ckpt("both.2", SCR_FLAG_CHECKPOINT | SCR_FLAG_OUTPUT));
    check("ckpt3", ckpt("ckpt.3", SCR_FLAG_CHECKPOINT));
    check("ckpt4", ckpt("ckpt.4", SCR_FLAG_CHECKPOINT));
    SCR_Finalize();
  } else if (!strcmp(mode, "legacy")) {
    char routed[SCR_MAX_FILENAME];
    check("init", SCR_Init() == SCR_SUCCESS);
    check("start_checkpoint", SCR_Start_checkpoint() == SCR_SUCCESS);
    char file[64];
    snprintf(file, sizeof file, "legacy_%d.ckpt", rank);
    check("route", SCR_Route_file(file, routed) == SCR_SUCCESS);
    FILE* f = fopen(routed, "w");
    fputs("legacy", f);
    fclose(f);
    check("complete_checkpoint", SCR_Complete_checkpoint(1) == SCR_SUCCESS);
    checks("version", SCR_Get_version());
    SCR_Finalize();
  } else {
    fprintf(stderr, "usage: api_checks misuse|config|manage|output|legacy\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return 0;
}
