/* The engine's configuration, read from the environment in one place.
 *
 * Readers get a pointer to an immutable snapshot. A reload builds a new
 * snapshot and publishes it with one atomic store; the old one is kept
 * (linked from the new) rather than freed, because another thread may still
 * be reading it and reloads are rare (start-up, a test, a debug switch). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "torchtpu/base.h"

typedef struct tt_config_snapshot_s {
  tt_config_t config; /* first: a snapshot is handed out as its config */
  char *strings[5];   /* owned copies: cc, save_tensors_fmt, debug_file, ... */
  struct tt_config_snapshot_s *previous;
} tt_config_snapshot_t;

static tt_config_snapshot_t *tt_config_current_ = NULL;
static pthread_once_t tt_config_once_ = PTHREAD_ONCE_INIT;
static pthread_mutex_t tt_config_reload_lock_ = PTHREAD_MUTEX_INITIALIZER;
/* Used when out of memory: the defaults, as with every variable unset. */
static tt_config_snapshot_t tt_config_fallback_;

/* A positive decimal integer, else dflt (unset, empty, zero, negative or
 * not a number). */
static int64_t tt_env_positive(const char *name, int64_t dflt) {
  const char *env = getenv(name);
  if (!env || !*env) return dflt;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(env, &end, 10);
  return errno == 0 && end && *end == '\0' && v >= 1 ? (int64_t)v : dflt;
}

/* A positive decimal number (fractions allowed), else dflt. */
static double tt_env_positive_real(const char *name, double dflt) {
  const char *env = getenv(name);
  if (!env || !*env) return dflt;
  char *end = NULL;
  errno = 0;
  double v = strtod(env, &end);
  return errno == 0 && end && *end == '\0' && v > 0 ? v : dflt;
}

/* Any whole decimal integer, else dflt (the debug service's variables). */
static int tt_env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  return end && *end == 0 ? (int)x : dflt;
}

/* PyTorch/XLA's spelling of true: 1, true, yes, on, y (any case). */
static int tt_env_true(const char *name) {
  const char *v = getenv(name);
  if (!v) return 0;
  return !strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
         !strcasecmp(v, "on") || !strcasecmp(v, "y");
}

/* The engine's switches are on unless set to exactly "0". */
static int tt_env_not_zero(const char *name) {
  const char *v = getenv(name);
  return !(v && strcmp(v, "0") == 0);
}

static const char *tt_env_str(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static void tt_config_defaults(tt_config_t *c) {
  memset(c, 0, sizeof(*c));
  c->allocator_cache_bytes = (int64_t)1024 << 20;
  c->max_inflight = 2;
  c->collective_timeout_s = 300;
  c->conv_epilogue = c->attention_keep_probs = c->buffer_plan = 1;
  c->host_core = c->pool_hold = 1;
  c->fusion = c->reduce_fusion = c->movement_collapse = 1;
  c->tier = -1;
  c->cc = "cc";
  c->debug_max_frames = 8;
}

/* Copies a string into the snapshot; 0 when out of memory. */
static int tt_config_keep(tt_config_snapshot_t *s, int slot, const char *v, const char **field) {
  if (!v) {
    *field = NULL;
    return 1;
  }
  s->strings[slot] = strdup(v);
  *field = s->strings[slot];
  return s->strings[slot] != NULL;
}

static void tt_config_snapshot_free(tt_config_snapshot_t *s) {
  for (int i = 0; i < 5; ++i) free(s->strings[i]);
  free(s);
}

/* A snapshot of the environment now; NULL when out of memory. */
static tt_config_snapshot_t *tt_config_read(void) {
  tt_config_snapshot_t *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  tt_config_t *c = &s->config;
  tt_config_defaults(c);

  const char *mb = getenv("TORCHTPU_ALLOCATOR_CACHE_MB");
  long long cache_mb = mb && *mb ? atoll(mb) : 1024;
  c->allocator_cache_bytes = cache_mb > 0 ? (int64_t)cache_mb << 20 : 0;
  c->max_inflight = tt_env_positive("TORCHTPU_MAX_INFLIGHT", 2);
  c->collective_timeout_s = tt_env_positive_real("TORCHTPU_COLLECTIVE_TIMEOUT_S", 300);
  c->conv_epilogue = tt_env_not_zero("TORCHTPU_CONV_EPILOGUE");
  c->attention_keep_probs = tt_env_not_zero("TORCHTPU_ATTENTION_KEEP_PROBS");
  c->buffer_plan = tt_env_not_zero("TORCHTPU_BUFFER_PLAN");
  const char *profile = getenv("TORCHTPU_EXEC_PROFILE");
  c->exec_profile = !profile || !profile[0] || strcmp(profile, "0") == 0 ? 0
                    : strcmp(profile, "shapes") == 0                       ? 2
                                                                           : 1;

  c->num_threads = tt_env_positive("TORCHTPU_NUM_THREADS", 0);
  c->host_core = tt_env_not_zero("TORCHTPU_HOST_CORE");
  c->pool_hold = tt_env_not_zero("TORCHTPU_POOL_HOLD");

  c->fusion = tt_env_not_zero("TORCHTPU_FUSION");
  c->reduce_fusion = tt_env_not_zero("TORCHTPU_REDUCE_FUSION");
  c->movement_collapse = tt_env_not_zero("TORCHTPU_MOVEMENT_COLLAPSE");
  const char *verify = getenv("TORCHTPU_VERIFY_IR");
  c->verify_ir = verify && strcmp(verify, "1") == 0;

  const char *tier = getenv("TORCHTPU_TIER");
  c->tier = tier && strcmp(tier, "0") == 0 ? 0 : tier && strcmp(tier, "1") == 0 ? 1 : -1;
  const char *cc = tt_env_str("TORCHTPU_CC");

  int level = tt_env_int("PT_XLA_DEBUG_LEVEL", -1);
  /* PT_XLA_DEBUG alone means "everything", as in PyTorch/XLA. */
  if (level < 0) level = tt_env_true("PT_XLA_DEBUG") ? 100 : 0;
  c->debug_level = level;
  c->debug_max_frames = tt_env_int("PT_XLA_DEBUG_MAX_FRAME", 8);
  if (c->debug_max_frames < 0) c->debug_max_frames = 8;
  c->local_rank = tt_env_int("PJRT_LOCAL_PROCESS_RANK", 0);
  c->ir_debug = tt_env_true("XLA_IR_DEBUG");
  const char *fmt = tt_env_str("XLA_SAVE_TENSORS_FMT");
  c->save_tensors_dot = fmt && !strcasecmp(fmt, "dot");

  int ok = tt_config_keep(s, 0, cc ? cc : "cc", &c->cc) &&
           tt_config_keep(s, 1, fmt, &c->save_tensors_fmt) &&
           tt_config_keep(s, 2, tt_env_str("PT_XLA_DEBUG_FILE"), &c->debug_file) &&
           tt_config_keep(s, 3, tt_env_str("XLA_SAVE_TENSORS_FILE"), &c->save_tensors_file) &&
           tt_config_keep(s, 4, tt_env_str("TORCHTPU_DUMP_DIR"), &c->dump_dir);
  if (!ok) {
    tt_config_snapshot_free(s);
    return NULL;
  }
  return s;
}

static void tt_config_publish(tt_config_snapshot_t *s) {
  if (!s) {
    if (__atomic_load_n(&tt_config_current_, __ATOMIC_ACQUIRE)) return; /* keep the last */
    tt_config_defaults(&tt_config_fallback_.config);
    s = &tt_config_fallback_;
  } else {
    s->previous = tt_config_current_;
  }
  __atomic_store_n(&tt_config_current_, s, __ATOMIC_RELEASE);
}

static void tt_config_init_once(void) {
  pthread_mutex_lock(&tt_config_reload_lock_);
  tt_config_publish(tt_config_read());
  pthread_mutex_unlock(&tt_config_reload_lock_);
}

const tt_config_t *tt_config(void) {
  pthread_once(&tt_config_once_, tt_config_init_once);
  return &__atomic_load_n(&tt_config_current_, __ATOMIC_ACQUIRE)->config;
}

void tt_config_reload(void) {
  pthread_once(&tt_config_once_, tt_config_init_once);
  pthread_mutex_lock(&tt_config_reload_lock_);
  tt_config_publish(tt_config_read());
  pthread_mutex_unlock(&tt_config_reload_lock_);
}
