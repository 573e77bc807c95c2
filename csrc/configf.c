/* The variadic half of SCR_Configf: format with vsnprintf, then hand the string to
 * SCR_Config. Rust cannot define a C-variadic function on stable, so the exported
 * SCR_Configf symbol is a naked jump (src/capi.rs) into this function, which leaves the
 * caller's registers and stack untouched. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char* SCR_Config(const char* config);
void scr_configf_report_truncated(int needed);

const char* scr_configf_impl(const char* format, ...)
{
  char stackbuf[1024];
  va_list ap;
  va_start(ap, format);
  int n = vsnprintf(stackbuf, sizeof(stackbuf), format, ap);
  va_end(ap);
  if (n < 0) {
    return NULL;
  }
  if ((size_t) n < sizeof(stackbuf)) {
    return SCR_Config(stackbuf);
  }
  char* heap = malloc((size_t) n + 1);
  if (heap == NULL) {
    scr_configf_report_truncated(n);
    return NULL;
  }
  va_start(ap, format);
  vsnprintf(heap, (size_t) n + 1, format, ap);
  va_end(ap);
  const char* ret = SCR_Config(heap);
  free(heap);
  return ret;
}
