/* Text helpers shared by the debug service's files (internal); their
 * buffers are base.h's tt_strbuf_t. */
#ifndef TORCHTPU_SERVICES_DEBUG_TEXT_H_
#define TORCHTPU_SERVICES_DEBUG_TEXT_H_

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/base.h"


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
