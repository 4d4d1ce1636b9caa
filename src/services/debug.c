/* The debug service: PyTorch/XLA's PT_XLA_DEBUG analysis blocks, the
 * XLA_SAVE_TENSORS_FILE graph log, XLA_IR_DEBUG node frames, per-stage dumps
 * (TORCHTPU_DUMP_DIR) and recompilation diffs.
 *
 * Configuration lives in one struct under a mutex; what is on is mirrored in
 * an atomic flags word so the lazy core tests one int per cut. Python
 * frames arrive in thread-local storage set by the binding around engine
 * calls; a cut uses its own thread's frames. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "torchtpu/debug.h"

#define TT_DEBUG_RULE "================================================================================"
#define TT_DEBUG_DASH "--------------------------------------------------------------------------------"
#define TT_DEBUG_MAX_SITES 1024

/* ---- text buffers ---- */

typedef struct tt_text_s {
  char *data;
  size_t len, cap;
} tt_text_t;

static void tt_text_put(tt_text_t *t, const char *s, size_t n) {
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

static void tt_text_printf(tt_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tt_text_printf(tt_text_t *t, const char *fmt, ...) {
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
static char *tt_text_take(tt_text_t *t) {
  if (!t->data) return calloc(1, 1);
  return t->data;
}

static void tt_shape_text(const tt_shape_t *s, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int32_t d = 0; d < s->rank && len < n; ++d)
    len += (size_t)snprintf(buf + len, n - len, d ? ", %lld" : "%lld", (long long)s->dims[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

static int tt_ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ---- configuration ---- */

static pthread_mutex_t tt_debug_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tt_debug_once_ = PTHREAD_ONCE_INIT;
static int tt_debug_flags_ = 0; /* atomic mirror of the config */
static tt_debug_config_t tt_debug_config_;
static char *tt_debug_strings_[3]; /* owned copies of the config's strings */

static int tt_env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end = NULL;
  long x = strtol(v, &end, 10);
  return end && *end == 0 ? (int)x : dflt;
}

static int tt_env_true(const char *name) {
  const char *v = getenv(name);
  if (!v) return 0;
  return !strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
         !strcasecmp(v, "on") || !strcasecmp(v, "y");
}

static const char *tt_env_str(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

void tt_debug_config_from_env(tt_debug_config_t *out) {
  memset(out, 0, sizeof(*out));
  int level = tt_env_int("PT_XLA_DEBUG_LEVEL", -1);
  /* PT_XLA_DEBUG alone means "everything", as in PyTorch/XLA. */
  if (level < 0) level = tt_env_true("PT_XLA_DEBUG") ? 100 : 0;
  out->level = level;
  out->max_frames = tt_env_int("PT_XLA_DEBUG_MAX_FRAME", 8);
  if (out->max_frames < 0) out->max_frames = 8;
  out->local_rank = tt_env_int("PJRT_LOCAL_PROCESS_RANK", 0);
  out->ir_debug = tt_env_true("XLA_IR_DEBUG");
  const char *fmt = tt_env_str("XLA_SAVE_TENSORS_FMT");
  out->save_tensors_fmt = fmt && !strcasecmp(fmt, "dot") ? 1 : 0;
  out->debug_file = tt_env_str("PT_XLA_DEBUG_FILE");
  out->save_tensors_file = tt_env_str("XLA_SAVE_TENSORS_FILE");
  out->dump_dir = tt_env_str("TORCHTPU_DUMP_DIR");
}

static int tt_flags_of(const tt_debug_config_t *c) {
  int f = 0;
  if (c->level >= 1 && c->local_rank == 0) f |= TT_DEBUG_ANALYSIS;
  if (c->level >= 2 && c->local_rank == 0) f |= TT_DEBUG_EXEC_ANALYSIS;
  if (c->ir_debug) f |= TT_DEBUG_IR_FRAMES;
  if (c->save_tensors_file) f |= TT_DEBUG_SAVE_TENSORS;
  if (c->dump_dir) f |= TT_DEBUG_DUMP_DIR;
  return f;
}

static char *tt_strdup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

/* Lock held. */
static void tt_debug_install_locked(const tt_debug_config_t *c) {
  char *copies[3] = {tt_strdup_or_null(c->debug_file), tt_strdup_or_null(c->save_tensors_file),
                     tt_strdup_or_null(c->dump_dir)};
  for (int i = 0; i < 3; ++i) free(tt_debug_strings_[i]);
  memcpy(tt_debug_strings_, copies, sizeof(copies));
  tt_debug_config_ = *c;
  tt_debug_config_.debug_file = copies[0];
  tt_debug_config_.save_tensors_file = copies[1];
  tt_debug_config_.dump_dir = copies[2];
  __atomic_store_n(&tt_debug_flags_, tt_flags_of(&tt_debug_config_), __ATOMIC_RELEASE);
}

static void tt_debug_init_once(void) {
  tt_debug_config_t c;
  tt_debug_config_from_env(&c);
  const char *fmt = tt_env_str("XLA_SAVE_TENSORS_FMT");
  if (fmt && strcasecmp(fmt, "text") && strcasecmp(fmt, "dot"))
    fprintf(stderr, "torchtpu: XLA_SAVE_TENSORS_FMT=%s is not available (this engine has no HLO); "
            "writing text\n", fmt);
  pthread_mutex_lock(&tt_debug_lock_);
  tt_debug_install_locked(&c);
  pthread_mutex_unlock(&tt_debug_lock_);
}

int tt_debug_flags(void) {
  pthread_once(&tt_debug_once_, tt_debug_init_once);
  return __atomic_load_n(&tt_debug_flags_, __ATOMIC_RELAXED);
}

int tt_debug_wants_frames(void) {
  return (tt_debug_flags() & (TT_DEBUG_ANALYSIS | TT_DEBUG_SAVE_TENSORS)) != 0;
}

tt_status_t tt_debug_configure(const tt_debug_config_t *config) {
  if (config->max_frames < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "max_frames must be >= 0, got %d",
                          config->max_frames);
  if (config->save_tensors_fmt != 0 && config->save_tensors_fmt != 1)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "save_tensors_fmt must be 0 (text) or 1 (dot), got %d",
                          config->save_tensors_fmt);
  pthread_once(&tt_debug_once_, tt_debug_init_once);
  pthread_mutex_lock(&tt_debug_lock_);
  tt_debug_install_locked(config);
  pthread_mutex_unlock(&tt_debug_lock_);
  return NULL;
}

void tt_debug_get_config(tt_debug_config_t *out) {
  pthread_once(&tt_debug_once_, tt_debug_init_once);
  pthread_mutex_lock(&tt_debug_lock_);
  *out = tt_debug_config_;
  pthread_mutex_unlock(&tt_debug_lock_);
}

/* ---- thread-local context ---- */

typedef struct tt_frames_s {
  tt_debug_frame_t *frames; /* one block: the array, then the strings */
  int32_t n;
} tt_frames_t;

static _Thread_local tt_frames_t tt_ctx_frames_;
static _Thread_local char *tt_ctx_cause_;
static _Thread_local char *tt_ctx_graph_name_;
static _Thread_local char *tt_ctx_node_info_; /* "fn@file:line\n..." */

static void tt_frames_set(tt_frames_t *dst, const tt_debug_frame_t *frames, int32_t n) {
  free(dst->frames);
  dst->frames = NULL;
  dst->n = 0;
  if (!frames || n <= 0) return;
  size_t bytes = sizeof(tt_debug_frame_t) * (size_t)n;
  for (int32_t i = 0; i < n; ++i)
    bytes += strlen(frames[i].function ? frames[i].function : "") + 1 +
             strlen(frames[i].file ? frames[i].file : "") + 1;
  tt_debug_frame_t *block = malloc(bytes);
  if (!block) return;
  char *s = (char *)(block + n);
  for (int32_t i = 0; i < n; ++i) {
    const char *fn = frames[i].function ? frames[i].function : "";
    const char *file = frames[i].file ? frames[i].file : "";
    block[i] = frames[i];
    block[i].function = strcpy(s, fn);
    s += strlen(fn) + 1;
    block[i].file = strcpy(s, file);
    s += strlen(file) + 1;
  }
  dst->frames = block;
  dst->n = n;
}

void tt_debug_set_context(const tt_debug_frame_t *frames, int32_t num_frames, const char *cause) {
  tt_frames_set(&tt_ctx_frames_, frames, num_frames);
  free(tt_ctx_cause_);
  tt_ctx_cause_ = tt_strdup_or_null(cause);
}

void tt_debug_clear_context(void) { tt_debug_set_context(NULL, 0, NULL); }

void tt_debug_set_graph_name(const char *name) {
  free(tt_ctx_graph_name_);
  tt_ctx_graph_name_ = tt_strdup_or_null(name);
}

const char *tt_debug_graph_name(void) { return tt_ctx_graph_name_; }

void tt_debug_set_node_frames(const tt_debug_frame_t *frames, int32_t num_frames) {
  free(tt_ctx_node_info_);
  tt_ctx_node_info_ = NULL;
  if (!frames || num_frames <= 0) return;
  tt_text_t t = {0};
  for (int32_t i = 0; i < num_frames; ++i)
    tt_text_printf(&t, "%s%s@%s:%d", i ? "\n" : "", frames[i].function ? frames[i].function : "",
                   frames[i].file ? frames[i].file : "", frames[i].line);
  tt_ctx_node_info_ = t.data;
}

void tt_debug_clear_node_frames(void) { tt_debug_set_node_frames(NULL, 0); }

void tt_debug_attach_node_frames(tt_node_t *node) {
  if (!node || node->debug_info || !tt_ctx_node_info_) return;
  node->debug_info = strdup(tt_ctx_node_info_);
}

/* ---- output ---- */

static int tt_debug_io_warned_ = 0;

/* Appends text to path (NULL: stderr) as one write under the lock. */
static void tt_debug_emit(const char *path, const char *text) {
  if (!text || !*text) return;
  pthread_mutex_lock(&tt_debug_lock_);
  if (!path) {
    fputs(text, stderr);
    fflush(stderr);
  } else {
    FILE *f = fopen(path, "a");
    if (f) {
      fputs(text, f);
      fclose(f);
    } else if (!tt_debug_io_warned_) {
      tt_debug_io_warned_ = 1;
      fprintf(stderr, "torchtpu: cannot append debug output to %s: %s\n", path, strerror(errno));
    }
  }
  pthread_mutex_unlock(&tt_debug_lock_);
}

/* A copy of a config string (the config may change meanwhile); caller frees. */
static char *tt_debug_config_string(int which) {
  pthread_mutex_lock(&tt_debug_lock_);
  const char *s = which == 0   ? tt_debug_config_.debug_file
                  : which == 1 ? tt_debug_config_.save_tensors_file
                               : tt_debug_config_.dump_dir;
  char *copy = s ? strdup(s) : NULL;
  pthread_mutex_unlock(&tt_debug_lock_);
  return copy;
}

/* ---- graph clone and diff ---- */

tt_graph_t *tt_debug_graph_clone(const tt_graph_t *g) {
  size_t total_operands = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) total_operands += (size_t)g->instrs[i].num_operands;
  size_t bytes = sizeof(tt_instr_t) * (size_t)g->num_instrs + sizeof(int32_t) * total_operands +
                 sizeof(int32_t) * ((size_t)g->num_inputs + (size_t)g->num_outputs) + 16;
  tt_graph_t *c = calloc(1, sizeof(*c));
  uint8_t *arena = calloc(1, bytes);
  uint8_t *key = g->key_size ? malloc(g->key_size) : NULL;
  if (!c || !arena || (g->key_size && !key)) {
    free(c);
    free(arena);
    free(key);
    return NULL;
  }
  *c = *g;
  c->arena = arena;
  c->instrs = (tt_instr_t *)arena;
  memcpy(c->instrs, g->instrs, sizeof(tt_instr_t) * (size_t)g->num_instrs);
  int32_t *pool = (int32_t *)(arena + sizeof(tt_instr_t) * (size_t)g->num_instrs);
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    int32_t k = g->instrs[i].num_operands;
    memcpy(pool, g->instrs[i].operands, sizeof(int32_t) * (size_t)k);
    c->instrs[i].operands = pool;
    pool += k;
  }
  c->input_instr = pool;
  memcpy(pool, g->input_instr, sizeof(int32_t) * (size_t)g->num_inputs);
  pool += g->num_inputs;
  c->output_instr = pool;
  memcpy(pool, g->output_instr, sizeof(int32_t) * (size_t)g->num_outputs);
  if (key) memcpy(key, g->key, g->key_size);
  c->key = key;
  return c;
}

typedef struct tt_diff_s {
  tt_text_t text;
  int32_t items, max_items, extra;
} tt_diff_t;

static void tt_diff_add(tt_diff_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tt_diff_add(tt_diff_t *d, const char *fmt, ...) {
  if (d->items >= d->max_items) {
    d->extra++;
    return;
  }
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  tt_text_printf(&d->text, "%s\n", line);
  d->items++;
}

static const char *tt_input_kind(tt_op_t op) {
  return op == TT_OP_SCALAR ? "runtime scalar" : "device data";
}

/* dtype/shape differences of two values, named what (e.g. "input 1"). */
static void tt_diff_value(tt_diff_t *d, const char *what, const tt_instr_t *a, const tt_instr_t *b) {
  char sa[256], sb[256];
  if (a->dtype != b->dtype)
    tt_diff_add(d, "%s: dtype %s -> %s", what, tt_dtype_name(a->dtype), tt_dtype_name(b->dtype));
  if (!tt_shape_equal(&a->shape, &b->shape)) {
    tt_shape_text(&a->shape, sa, sizeof(sa));
    tt_shape_text(&b->shape, sb, sizeof(sb));
    tt_diff_add(d, "%s: shape %s -> %s", what, sa, sb);
  }
}

static void tt_attrs_text(const tt_instr_t *in, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int32_t k = 0; k < in->num_iattrs && len < n; ++k)
    len += (size_t)snprintf(buf + len, n - len, k ? ", %lld" : "%lld", (long long)in->iattrs[k]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

static void tt_operands_text(const tt_instr_t *in, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "(");
  for (int32_t k = 0; k < in->num_operands && len < n; ++k)
    len += (size_t)snprintf(buf + len, n - len, k ? ", %%%d" : "%%%d", in->operands[k]);
  if (len < n) snprintf(buf + len, n - len, ")");
}

/* 1 if a and b differ in op, attributes or wiring (reported). */
static int tt_diff_instr(tt_diff_t *d, int32_t i, const tt_instr_t *a, const tt_instr_t *b) {
  char sa[512], sb[512];
  if (a->op != b->op) {
    tt_diff_add(d, "instruction %%%d: op %s -> %s", i, tt_op_name(a->op), tt_op_name(b->op));
    return 1;
  }
  int found = 0;
  const char *op = tt_op_name(a->op);
  if (a->num_iattrs != b->num_iattrs) {
    tt_attrs_text(a, sa, sizeof(sa));
    tt_attrs_text(b, sb, sizeof(sb));
    tt_diff_add(d, "instruction %%%d (%s): attributes %s -> %s", i, op, sa, sb);
    found = 1;
  } else {
    for (int32_t k = 0; k < a->num_iattrs; ++k)
      if (a->iattrs[k] != b->iattrs[k]) {
        tt_diff_add(d, "instruction %%%d (%s): attribute i[%d] %lld -> %lld", i, op, k,
                    (long long)a->iattrs[k], (long long)b->iattrs[k]);
        found = 1;
      }
  }
  for (int32_t k = 0; k < TT_MAX_FATTRS; ++k)
    if (memcmp(&a->fattrs[k], &b->fattrs[k], sizeof(double)) != 0) {
      tt_diff_add(d, "instruction %%%d (%s): attribute f[%d] %g -> %g", i, op, k, a->fattrs[k],
                  b->fattrs[k]);
      found = 1;
    }
  int wiring = a->num_operands != b->num_operands;
  for (int32_t k = 0; !wiring && k < a->num_operands; ++k)
    wiring = a->operands[k] != b->operands[k];
  if (wiring) {
    tt_operands_text(a, sa, sizeof(sa));
    tt_operands_text(b, sb, sizeof(sb));
    tt_diff_add(d, "instruction %%%d (%s): operands %s -> %s", i, op, sa, sb);
    found = 1;
  }
  return found;
}

char *tt_debug_graph_diff(const tt_graph_t *a, const tt_graph_t *b, int32_t max_items) {
  tt_diff_t d = {{0}, 0, max_items > 0 ? max_items : 1, 0};
  char what[64];
  if (a->num_inputs != b->num_inputs)
    tt_diff_add(&d, "number of inputs: %d -> %d", a->num_inputs, b->num_inputs);
  int32_t ni = a->num_inputs < b->num_inputs ? a->num_inputs : b->num_inputs;
  for (int32_t i = 0; i < ni; ++i) {
    const tt_instr_t *x = &a->instrs[a->input_instr[i]], *y = &b->instrs[b->input_instr[i]];
    if (x->op != y->op)
      tt_diff_add(&d, "input %d: %s -> %s", i, tt_input_kind(x->op), tt_input_kind(y->op));
    snprintf(what, sizeof(what), "input %d", i);
    tt_diff_value(&d, what, x, y);
  }
  if (a->num_outputs != b->num_outputs)
    tt_diff_add(&d, "number of outputs: %d -> %d", a->num_outputs, b->num_outputs);
  int32_t no = a->num_outputs < b->num_outputs ? a->num_outputs : b->num_outputs;
  for (int32_t r = 0; r < no; ++r) {
    snprintf(what, sizeof(what), "output %d", r);
    tt_diff_value(&d, what, &a->instrs[a->output_instr[r]], &b->instrs[b->output_instr[r]]);
  }
  if (a->num_instrs != b->num_instrs)
    tt_diff_add(&d, "number of instructions: %d -> %d", a->num_instrs, b->num_instrs);
  int32_t n = a->num_instrs < b->num_instrs ? a->num_instrs : b->num_instrs;
  int structural = 0;
  for (int32_t i = 0; i < n; ++i)
    structural |= tt_diff_instr(&d, i, &a->instrs[i], &b->instrs[i]);
  if (!structural && d.items + d.extra == 0) {
    /* Same structure and interface: name the first value that changed. */
    for (int32_t i = 0; i < n && d.items == 0; ++i) {
      snprintf(what, sizeof(what), "instruction %%%d (%s)", i, tt_op_name(a->instrs[i].op));
      tt_diff_value(&d, what, &a->instrs[i], &b->instrs[i]);
    }
  }
  if (d.extra) tt_text_printf(&d.text, "... (%d more differences)\n", d.extra);
  return tt_text_take(&d.text);
}

/* ---- recompilation tracking: call site (or graph name) -> last graph ---- */

typedef struct tt_site_s {
  char *key;
  tt_graph_t *graph;
  uint64_t last_use;
} tt_site_t;

static tt_site_t tt_sites_[TT_DEBUG_MAX_SITES];
static int32_t tt_num_sites_ = 0;
static uint64_t tt_site_clock_ = 0;
static char *tt_last_recompile_ = NULL;

/* Returns the diff against the site's previous graph (caller frees; NULL
 * when the site is new) and records graph as the site's latest. Lock held. */
static char *tt_sites_update_locked(const char *key, const tt_graph_t *graph, uint64_t *out_prev) {
  tt_site_t *site = NULL;
  for (int32_t i = 0; i < tt_num_sites_ && !site; ++i)
    if (strcmp(tt_sites_[i].key, key) == 0) site = &tt_sites_[i];
  char *diff = NULL;
  tt_graph_t *copy = tt_debug_graph_clone(graph);
  if (!copy) return NULL;
  if (site) {
    if (site->graph->hash != graph->hash ||
        site->graph->key_size != graph->key_size ||
        memcmp(site->graph->key, graph->key, graph->key_size) != 0) {
      diff = tt_debug_graph_diff(site->graph, graph, 8);
      *out_prev = site->graph->hash;
    }
    tt_graph_destroy(site->graph);
  } else {
    if (tt_num_sites_ < TT_DEBUG_MAX_SITES) {
      site = &tt_sites_[tt_num_sites_++];
    } else { /* evict the least recently used site */
      site = &tt_sites_[0];
      for (int32_t i = 1; i < tt_num_sites_; ++i)
        if (tt_sites_[i].last_use < site->last_use) site = &tt_sites_[i];
      free(site->key);
      tt_graph_destroy(site->graph);
    }
    site->key = strdup(key);
    if (!site->key) {
      tt_graph_destroy(copy);
      *site = tt_sites_[--tt_num_sites_];
      return NULL;
    }
  }
  site->graph = copy;
  site->last_use = ++tt_site_clock_;
  return diff;
}

char *tt_debug_last_recompile(void) {
  pthread_mutex_lock(&tt_debug_lock_);
  char *r = tt_last_recompile_ ? strdup(tt_last_recompile_) : NULL;
  pthread_mutex_unlock(&tt_debug_lock_);
  return r;
}

/* ---- graph text with IR frames ---- */

/* The node of each instruction of graph, from the roots the graph was just
 * built from (visit_index holds the instruction index). Caller frees. */
static tt_node_t **tt_nodes_by_instr(const tt_graph_t *g, tt_node_t *const *roots) {
  if (!roots || g->num_instrs <= 0) return NULL;
  tt_node_t **by = calloc((size_t)g->num_instrs, sizeof(*by));
  size_t cap = 64, top = 0;
  tt_node_t **stack = malloc(cap * sizeof(*stack));
  if (!by || !stack) {
    free(by);
    free(stack);
    return NULL;
  }
  for (int32_t r = 0; r < g->num_outputs; ++r) {
    if (top == cap) {
      size_t ncap = cap * 2;
      tt_node_t **ns = realloc(stack, ncap * sizeof(*ns));
      if (!ns) break;
      stack = ns;
      cap = ncap;
    }
    stack[top++] = roots[r];
  }
  while (top) {
    tt_node_t *n = stack[--top];
    int32_t i = n->visit_index;
    if (i < 0 || i >= g->num_instrs || by[i]) continue;
    by[i] = n;
    for (int32_t k = 0; k < n->num_operands; ++k) {
      if (top == cap) {
        size_t ncap = cap * 2;
        tt_node_t **ns = realloc(stack, ncap * sizeof(*ns));
        if (!ns) break;
        stack = ns;
        cap = ncap;
      }
      stack[top++] = n->operands[k];
    }
  }
  free(stack);
  return by;
}

/* The first line of a node's debug_info, copied into buf. */
static const char *tt_node_location(const tt_node_t *n, char *buf, size_t size) {
  if (!n || !n->debug_info) return NULL;
  size_t len = strcspn(n->debug_info, "\n");
  if (len >= size) len = size - 1;
  memcpy(buf, n->debug_info, len);
  buf[len] = 0;
  for (char *p = buf; *p; ++p)
    if (*p == '"') *p = '\''; /* keeps dot labels well formed */
  return buf;
}

char *tt_debug_graph_text(const tt_graph_t *g, tt_node_t *const *roots, int fmt) {
  char *base = fmt == 1 ? tt_graph_to_dot(g) : tt_graph_to_text(g);
  if (!base) return calloc(1, 1);
  tt_node_t **by = tt_nodes_by_instr(g, roots);
  int any = 0;
  for (int32_t i = 0; by && i < g->num_instrs; ++i) any |= by[i] && by[i]->debug_info;
  if (!any) {
    free(by);
    return base;
  }
  tt_text_t out = {0};
  char loc[1024];
  int32_t line_no = 0;
  for (char *p = base; *p; ++line_no) {
    char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int32_t instr = -1;
    if (fmt == 1) {
      int k = -1;
      if (sscanf(p, "  node%d [label=", &k) == 1 && len >= 3 && strncmp(p + len - 3, "\"];", 3) == 0)
        instr = k;
    } else {
      instr = line_no - 1; /* line 0 is the "IR {" header */
    }
    const char *where = instr >= 0 && instr < g->num_instrs ? tt_node_location(by[instr], loc, sizeof(loc)) : NULL;
    if (where && fmt == 1) {
      tt_text_put(&out, p, len - 3);
      tt_text_printf(&out, "\\nlocation=%s\"];", where);
    } else {
      tt_text_put(&out, p, len);
      if (where) tt_text_printf(&out, ", location=%s", where);
    }
    if (e) tt_text_put(&out, "\n", 1);
    p = e ? e + 1 : p + len;
  }
  free(by);
  free(base);
  return tt_text_take(&out);
}

/* ---- per-stage dumps ---- */

static int64_t tt_dump_seq_ = 0;

int tt_debug_dump_enabled(void) { return (tt_debug_flags() & TT_DEBUG_DUMP_DIR) != 0; }

tt_status_t tt_debug_dump(uint64_t graph_hash, const char *stage, const char *ext, const char *text) {
  if (!tt_debug_dump_enabled()) return NULL;
  char *dir = tt_debug_config_string(2);
  if (!dir) return NULL;
  mkdir(dir, 0755); /* may exist; a real failure shows at open */
  int64_t seq = __atomic_add_fetch(&tt_dump_seq_, 1, __ATOMIC_RELAXED);
  size_t n = strlen(dir) + strlen(stage ? stage : "") + strlen(ext ? ext : "") + 96;
  char *path = malloc(n);
  tt_status_t st = NULL;
  if (!path) {
    free(dir);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (dump path)");
  }
  snprintf(path, n, "%s/%d-%06lld-%016llx-%s.%s", dir, (int)getpid(), (long long)seq,
           (unsigned long long)graph_hash, stage && *stage ? stage : "stage",
           ext && *ext ? ext : "txt");
  FILE *f = fopen(path, "w");
  if (!f) {
    st = tt_status_make(TT_IO_ERROR, "cannot write dump %s: %s", path, strerror(errno));
  } else {
    if (text) fputs(text, f);
    if (fclose(f) != 0)
      st = tt_status_make(TT_IO_ERROR, "writing dump %s: %s", path, strerror(errno));
  }
  free(path);
  free(dir);
  return st;
}

/* ---- analysis ---- */

static _Thread_local const char *tt_ctx_sync_name_; /* borrowed for one sync */

void tt_debug_set_sync_name(const char *name) { tt_ctx_sync_name_ = name; }

static const char *tt_cut_graph_name(void) {
  if (tt_ctx_sync_name_ && *tt_ctx_sync_name_) return tt_ctx_sync_name_;
  return tt_ctx_graph_name_;
}

static int tt_in_torch_xla_module(const char *file) {
  return tt_ends_with(file, "torch_xla/__init__.py") || tt_ends_with(file, "torch_xla.py");
}

static int tt_is_sync_frame(const tt_debug_frame_t *f) {
  if (!strcmp(f->function, "mark_step")) return 1;
  return (!strcmp(f->function, "sync") || !strcmp(f->function, "_sync_named")) &&
         tt_in_torch_xla_module(f->file);
}

/* PyTorch/XLA's cause wording, derived from the frames. */
static const char *tt_debug_cause(const tt_debug_frame_t *f, int32_t n, const char *graph_name) {
  if (graph_name && tt_ends_with(graph_name, "_clear_pending"))
    return "torch_xla.compile clear the pending graph prior calling the target function";
  if (n == 0) return "engine call without Python frames";
  if (tt_is_sync_frame(&f[0])) {
    int32_t k = 1;
    while (k < n && tt_is_sync_frame(&f[k])) ++k; /* mark_step -> sync */
    if (k < n) {
      const char *fn = f[k].function, *file = f[k].file;
      if ((!strcmp(fn, "next") || !strcmp(fn, "__next__")) && tt_ends_with(file, "parallel_loader.py"))
        return "mark_step in parallel loader at step end";
      if (!strcmp(fn, "__exit__") && tt_ends_with(file, "profiler.py"))
        return "mark_step when exiting a profiler StepTrace region";
      if ((!strcmp(fn, "extract_compiled_graph_helper") || !strcmp(fn, "extract_internal")) &&
          tt_ends_with(file, "dynamo_bridge.py"))
        return "mark_step when dynamo processing input graphs";
      if ((!strcmp(fn, "region") || !strcmp(fn, "compiled") || !strcmp(fn, "_compile") ||
           !strcmp(fn, "wrapped") || !strcmp(fn, "ctx")) &&
          tt_in_torch_xla_module(file))
        return "torch_xla.compile";
    }
    return "user mark_step";
  }
  if (!strcmp(f[0].function, "extract_graph_helper") && tt_ends_with(f[0].file, "dynamo_bridge.py"))
    return "dynamo is compiling a FX graph to HLO";
  return "most likely user code trying to access tensor value before mark_step";
}

static void tt_block_begin(tt_text_t *t, const char *prefix) {
  tt_text_printf(t, "\n%s%s\n", prefix, TT_DEBUG_RULE);
}

static void tt_block_end(tt_text_t *t, const char *prefix) {
  tt_text_printf(t, "%s%s\n%s%s\n", prefix, TT_DEBUG_DASH, prefix, TT_DEBUG_RULE);
}

static void tt_block_frames(tt_text_t *t, const char *prefix, int32_t max_frames) {
  tt_text_printf(t, "%sPython Frame Triggered Execution: \n", prefix);
  for (int32_t i = 0; i < tt_ctx_frames_.n; ++i) {
    if (i >= max_frames) {
      tt_text_printf(t, "%s  ..........\n", prefix);
      break;
    }
    const tt_debug_frame_t *f = &tt_ctx_frames_.frames[i];
    tt_text_printf(t, "%s  %s (%s:%d)\n", prefix, f->function, f->file, f->line);
  }
}

/* Cause, graph info (and, for a compile, the recompilation cause). */
static void tt_block_head(tt_text_t *t, const char *prefix, const char *title,
                          const tt_debug_cut_t *cut, const char *recompile) {
  const char *name = tt_cut_graph_name();
  tt_text_printf(t, "%s%s\n", prefix, title);
  tt_text_printf(t, "%s  %s\n", prefix,
                 tt_ctx_cause_ ? tt_ctx_cause_
                               : tt_debug_cause(tt_ctx_frames_.frames, tt_ctx_frames_.n, name));
  tt_text_printf(t, "%sGraph Info: \n", prefix);
  if (name) tt_text_printf(t, "%s  Graph Name: %s\n", prefix, name);
  tt_text_printf(t, "%s  Graph Hash: %016llx\n", prefix, (unsigned long long)cut->graph->hash);
  tt_text_printf(t, "%s  Number of Graph Inputs: %d\n", prefix, cut->graph->num_inputs);
  tt_text_printf(t, "%s  Number of Graph Outputs: %d\n", prefix, cut->graph->num_outputs);
  if (recompile) {
    tt_text_printf(t, "%sRecompilation Cause\n", prefix);
    for (const char *p = recompile; *p;) {
      const char *e = strchr(p, '\n');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      tt_text_printf(t, "%s  %.*s\n", prefix, (int)len, p);
      p = e ? e + 1 : p + len;
    }
  }
}

/* The key identifying "the same function" across compiles: the graph
 * name, else the innermost user frame (the call site of the sync or of the
 * value read). NULL when there is nothing to identify it by. */
static char *tt_site_key(void) {
  const char *name = tt_cut_graph_name();
  char buf[2048];
  if (name) {
    snprintf(buf, sizeof(buf), "graph %s", name);
    return strdup(buf);
  }
  const tt_debug_frame_t *site = NULL;
  for (int32_t i = 0; i < tt_ctx_frames_.n && !site; ++i)
    if (!tt_ctx_frames_.frames[i].library) site = &tt_ctx_frames_.frames[i];
  if (!site && tt_ctx_frames_.n) site = &tt_ctx_frames_.frames[0];
  if (!site) return NULL;
  snprintf(buf, sizeof(buf), "%s (%s:%d)", site->function, site->file, site->line);
  return strdup(buf);
}

static void tt_save_tensors(const tt_debug_cut_t *cut, int fmt) {
  char *path = tt_debug_config_string(1);
  if (!path) return;
  tt_text_t t = {0};
  tt_text_printf(&t, "[ScheduleSyncTensorsGraph]\nTensorsGraphInfo:\n");
  for (int32_t i = 0; i < tt_ctx_frames_.n; ++i) {
    const tt_debug_frame_t *f = &tt_ctx_frames_.frames[i];
    tt_text_printf(&t, "  %s (%s:%d)\n", f->function, f->file, f->line);
  }
  tt_text_printf(&t, "\nHashes: (%016llx)\n", (unsigned long long)cut->graph->hash);
  char *graph = tt_debug_graph_text(cut->graph, cut->roots, fmt);
  tt_text_printf(&t, "\n## BEGIN_GRAPH\n%s\n## END_GRAPH\n\n\n", graph);
  free(graph);
  tt_debug_emit(path, t.data);
  free(t.data);
  free(path);
}

void tt_debug_on_cut_built(const tt_debug_cut_t *cut) {
  int flags = tt_debug_flags();
  if (!flags) return;
  tt_debug_config_t cfg;
  tt_debug_get_config(&cfg);
  if (flags & TT_DEBUG_SAVE_TENSORS) tt_save_tensors(cut, cfg.save_tensors_fmt);
  if ((flags & TT_DEBUG_DUMP_DIR) && cut->cache_miss) {
    char *text = tt_debug_graph_text(cut->graph, cut->roots, 0);
    tt_status_t st = tt_debug_dump(cut->graph->hash, "build", "txt", text);
    if (st) {
      tt_debug_emit(NULL, tt_status_message(st));
      tt_debug_emit(NULL, "\n");
      tt_status_free(st);
    }
    free(text);
  }
  if (!(flags & TT_DEBUG_ANALYSIS) || !cut->cache_miss) return;
  char *recompile = NULL;
  char *key = tt_site_key();
  if (key) {
    uint64_t prev = 0;
    pthread_mutex_lock(&tt_debug_lock_);
    char *diff = tt_sites_update_locked(key, cut->graph, &prev);
    pthread_mutex_unlock(&tt_debug_lock_);
    if (diff) {
      tt_text_t r = {0};
      tt_text_printf(&r, "differs from graph %016llx compiled before for %s:\n%s",
                     (unsigned long long)prev, key, diff);
      recompile = tt_text_take(&r);
      free(diff);
      pthread_mutex_lock(&tt_debug_lock_);
      free(tt_last_recompile_);
      tt_last_recompile_ = strdup(recompile);
      pthread_mutex_unlock(&tt_debug_lock_);
    }
    free(key);
  }
  const char *prefix = "Compilation Analysis: ";
  tt_text_t t = {0};
  tt_block_begin(&t, prefix);
  tt_block_head(&t, prefix, "Compilation Cause", cut, recompile);
  tt_block_frames(&t, prefix, cfg.max_frames);
  tt_block_end(&t, prefix);
  char *out = tt_debug_config_string(0);
  tt_debug_emit(out, t.data);
  free(out);
  free(t.data);
  free(recompile);
}

/* Bytes of the instructions live at once outside inputs and outputs, by
 * the executor's rule: a value is freed after its last use. */
static int64_t tt_peak_intermediate_bytes(const tt_graph_t *g) {
  uint8_t *is_output = calloc((size_t)g->num_instrs + 1, 1);
  int64_t *free_at = calloc((size_t)g->num_instrs + 1, sizeof(int64_t));
  if (!is_output || !free_at) {
    free(is_output);
    free(free_at);
    return 0;
  }
  for (int32_t r = 0; r < g->num_outputs; ++r) is_output[g->output_instr[r]] = 1;
  int64_t live = 0, peak = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (in->op != TT_OP_PARAM && in->op != TT_OP_SCALAR && !is_output[i]) {
      int64_t bytes = tt_shape_numel(&in->shape) * (int64_t)tt_dtype_size(in->dtype);
      live += bytes;
      if (live > peak) peak = live;
      int32_t last = in->last_use > i && in->last_use < g->num_instrs ? in->last_use : i;
      free_at[last] += bytes;
    }
    live -= free_at[i];
  }
  free(is_output);
  free(free_at);
  return peak;
}

static double tt_gb(int64_t bytes) { return (double)bytes / 1024.0 / 1024.0 / 1024.0; }

void tt_debug_on_cut_scheduled(const tt_debug_cut_t *cut, const tt_graph_t *exec_graph) {
  int flags = tt_debug_flags();
  if (!(flags & TT_DEBUG_ANALYSIS)) return;
  tt_debug_config_t cfg;
  tt_debug_get_config(&cfg);
  tt_text_t t = {0};
  const tt_graph_t *g = exec_graph ? exec_graph : cut->graph;
  if (cut->cache_miss) {
    int64_t in_bytes = 0, out_bytes = 0, operands = 0;
    for (int32_t i = 0; i < g->num_inputs; ++i) {
      const tt_instr_t *in = &g->instrs[g->input_instr[i]];
      in_bytes += tt_shape_numel(&in->shape) * (int64_t)tt_dtype_size(in->dtype);
    }
    for (int32_t r = 0; r < g->num_outputs; ++r) {
      const tt_instr_t *in = &g->instrs[g->output_instr[r]];
      out_bytes += tt_shape_numel(&in->shape) * (int64_t)tt_dtype_size(in->dtype);
    }
    for (int32_t i = 0; i < g->num_instrs; ++i) operands += g->instrs[i].num_operands;
    int64_t program = (int64_t)sizeof(tt_instr_t) * g->num_instrs +
                      (int64_t)sizeof(int32_t) * (operands + g->num_inputs + g->num_outputs) +
                      (int64_t)g->key_size;
    const char *prefix = "Post Compilation Analysis: ";
    tt_text_printf(&t, "\nComputation hash: %016llx\n", (unsigned long long)g->hash);
    tt_block_begin(&t, prefix);
    tt_text_printf(&t, "%sGraph input size: %f GB\n", prefix, tt_gb(in_bytes));
    tt_text_printf(&t, "%sGraph output size: %f GB\n", prefix, tt_gb(out_bytes));
    tt_text_printf(&t, "%sAliased Input size: %f GB\n", prefix, tt_gb(0));
    tt_text_printf(&t, "%sIntermediate tensor size: %f GB\n", prefix,
                   tt_gb(tt_peak_intermediate_bytes(g)));
    tt_text_printf(&t, "%sCompiled program size: %f GB\n", prefix, tt_gb(program));
    tt_block_end(&t, prefix);
  }
  if (flags & TT_DEBUG_EXEC_ANALYSIS) {
    const char *prefix = "Execution Analysis: ";
    tt_block_begin(&t, prefix);
    tt_block_head(&t, prefix, "Execution Cause", cut, NULL);
    tt_block_frames(&t, prefix, cfg.max_frames);
    tt_block_end(&t, prefix);
  }
  char *out = tt_debug_config_string(0);
  tt_debug_emit(out, t.data);
  free(out);
  free(t.data);
}
