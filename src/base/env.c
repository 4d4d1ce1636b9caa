/* Reading the engine's environment variables. */
#include <errno.h>
#include <stdlib.h>

#include "torchtpu/base.h"

int64_t tt_env_positive(const char *name, int64_t dflt) {
  const char *env = getenv(name);
  if (!env || !*env) return dflt;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(env, &end, 10);
  return errno == 0 && end && *end == '\0' && v >= 1 ? (int64_t)v : dflt;
}
