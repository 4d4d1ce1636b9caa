/* The growable string and byte buffer (see base.h). Appends never fail
 * loudly: out of memory sets `failed` and later appends do nothing, so a
 * writer checks once at the end. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/base.h"

static int tt_strbuf_reserve(tt_strbuf_t *b, size_t n) {
  if (b->failed) return 0;
  if (b->len + n + 1 <= b->cap) return 1;
  size_t ncap = b->cap ? b->cap * 2 : 1024;
  while (ncap < b->len + n + 1) ncap *= 2;
  char *nd = realloc(b->data, ncap);
  if (!nd) {
    b->failed = 1;
    return 0;
  }
  b->data = nd;
  b->cap = ncap;
  return 1;
}

void tt_strbuf_put(tt_strbuf_t *b, const void *bytes, size_t n) {
  if (!tt_strbuf_reserve(b, n)) return;
  if (n) memcpy(b->data + b->len, bytes, n);
  b->len += n;
  b->data[b->len] = 0;
}

void tt_strbuf_puts(tt_strbuf_t *b, const char *s) { tt_strbuf_put(b, s, strlen(s)); }

void tt_strbuf_vprintf(tt_strbuf_t *b, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (n < 0) {
    b->failed = 1;
    return;
  }
  if (!tt_strbuf_reserve(b, (size_t)n)) return;
  vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
  b->len += (size_t)n;
}

void tt_strbuf_printf(tt_strbuf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tt_strbuf_vprintf(b, fmt, ap);
  va_end(ap);
}

char *tt_strbuf_take(tt_strbuf_t *b) {
  char *s = b->data ? b->data : calloc(1, 1);
  memset(b, 0, sizeof(*b));
  return s;
}

void tt_strbuf_release(tt_strbuf_t *b) {
  free(b->data);
  memset(b, 0, sizeof(*b));
}
