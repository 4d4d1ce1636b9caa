/* Growable text buffers shared by the debug service's files (internal). */
#ifndef TORCHTPU_SERVICES_DEBUG_TEXT_H_
#define TORCHTPU_SERVICES_DEBUG_TEXT_H_

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/base.h"


typedef struct tt_text_s {
  char *data;
  size_t len, cap;
} tt_text_t;

static inline void tt_text_put(tt_text_t *t, const char *s, size_t n) {
  if (t->len + n + 1 > t->cap) {
    size_t ncap = t->cap ? t->cap * 2 : 1024;
    while (ncap < t->len + n + 1) ncap *= 2;
    char *nd = realloc(t->data, ncap);
    if (!nd) return; /* output is best effort: a short block, never a crash */
    t->data = nd;
    t->cap = ncap;
  }
  memcpy(t->data + t->len, s, n);
  t->len += n;
  t->data[t->len] = 0;
}

static inline void tt_text_printf(tt_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void tt_text_printf(tt_text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  char small[512];
  char *buf = (size_t)n < sizeof(small) ? small : malloc((size_t)n + 1);
  if (!buf) return;
  va_start(ap, fmt);
  vsnprintf(buf, (size_t)n + 1, fmt, ap);
  va_end(ap);
  tt_text_put(t, buf, (size_t)n);
  if (buf != small) free(buf);
}

/* Never NULL (an empty string when nothing was written or out of memory). */
static inline char *tt_text_take(tt_text_t *t) {
  if (!t->data) return calloc(1, 1);
  return t->data;
}

static inline void tt_shape_text(const tt_shape_t *s, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int32_t d = 0; d < s->rank && len < n; ++d)
    len += (size_t)snprintf(buf + len, n - len, d ? ", %lld" : "%lld", (long long)s->dims[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

static inline int tt_ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

#endif /* TORCHTPU_SERVICES_DEBUG_TEXT_H_ */
