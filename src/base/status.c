/* Status words: NULL is OK; errors own a heap message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/base.h"

struct tt_status_s {
  tt_code_t code;
  int is_static;
  char message[];
};

static struct {
  tt_code_t code;
  int is_static;
  char message[32];
} tt_oom_status_ = {TT_RESOURCE_EXHAUSTED, 1, "out of memory (status)"};

tt_status_t tt_status_make(tt_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  struct tt_status_s *s = malloc(sizeof(*s) + (size_t)n + 1);
  if (!s) return (tt_status_t)&tt_oom_status_;
  s->code = code == TT_OK ? TT_INTERNAL : code;
  s->is_static = 0;
  va_start(ap, fmt);
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

tt_code_t tt_status_code(tt_status_t status) {
  return status ? status->code : TT_OK;
}

const char *tt_status_message(tt_status_t status) {
  return status ? status->message : "";
}

void tt_status_free(tt_status_t status) {
  if (status && !status->is_static) free(status);
}
