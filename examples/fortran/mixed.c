/* mixed.c: the C half of a mixed C/Fortran program (test_api.F90 built with -DMIXED). After
 * the Fortran half called SCR_INIT, this C code asks the C API whether a restart is loaded; it
 * succeeds only if C and Fortran calls reach the same SCR runtime (a second, uninitialised
 * copy would answer "called before SCR_Init"). */
#include "scr.h"

void c_have_restart_(int* ok)
{
  int flag = 0;
  char name[SCR_MAX_FILENAME];
  *ok = SCR_Have_restart(&flag, name) == SCR_SUCCESS;
}
