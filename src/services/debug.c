/* The debug service: PyTorch/XLA's PT_XLA_DEBUG analysis blocks, the
 * XLA_SAVE_TENSORS_FILE graph log, XLA_IR_DEBUG node frames, per-stage dumps
 * (TORCHTPU_DUMP_DIR) and recompilation diffs.
 *
 * Configuration lives in one struct under a mutex; what is on is mirrored in
 * an atomic flags word so the lazy core tests one int per cut. Python
 * frames arrive in thread-local storage set by the binding around engine
 * calls; a cut uses its own thread's frames. Graph copies, diffs and
 * annotated text are in debug_graph.c. */
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

#include "services/debug_text.h"
#include "torchtpu/debug.h"

#define TT_DEBUG_RULE "================================================================================"
#define TT_DEBUG_DASH "--------------------------------------------------------------------------------"
#define TT_DEBUG_MAX_SITES 1024

/* ---- configuration ---- */

static pthread_mutex_t tt_debug_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tt_debug_once_ = PTHREAD_ONCE_INIT;
static int tt_debug_flags_ = 0; /* atomic mirror of the config */
static tt_debug_config_t tt_debug_config_;
static char *tt_debug_strings_[3]; /* owned copies of the config's strings */

/* The debug settings of the engine's configuration (base/config.c). */
static void tt_debug_config_from(const tt_config_t *c, tt_debug_config_t *out) {
  memset(out, 0, sizeof(*out));
  out->level = c->debug_level;
  out->max_frames = c->debug_max_frames;
  out->local_rank = c->local_rank;
  out->ir_debug = c->ir_debug;
  out->save_tensors_fmt = c->save_tensors_dot;
  out->debug_file = c->debug_file;
  out->save_tensors_file = c->save_tensors_file;
  out->dump_dir = c->dump_dir;
}

void tt_debug_config_from_env(tt_debug_config_t *out) {
  tt_config_reload();
  tt_debug_config_from(tt_config(), out);
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
  tt_debug_config_from(tt_config(), &c);
  const char *fmt = tt_config()->save_tensors_fmt;
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
static _Thread_local char *tt_ctx_cause_;      /* compilation cause */
static _Thread_local char *tt_ctx_exec_cause_; /* execution cause, NULL: tt_ctx_cause_ */
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
  free(tt_ctx_exec_cause_);
  tt_ctx_cause_ = tt_strdup_or_null(cause);
  tt_ctx_exec_cause_ = NULL;
  char *nl = tt_ctx_cause_ ? strchr(tt_ctx_cause_, '\n') : NULL;
  if (nl) { /* "compile cause\nexecution cause" */
    *nl = '\0';
    tt_ctx_exec_cause_ = tt_strdup_or_null(nl + 1);
  }
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
  tt_strbuf_t t = {0};
  for (int32_t i = 0; i < num_frames; ++i)
    tt_strbuf_printf(&t, "%s%s@%s:%d", i ? "\n" : "", frames[i].function ? frames[i].function : "",
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

static int tt_debug_eager_ = 0; /* atomic */

void tt_debug_set_eager(int eager) { __atomic_store_n(&tt_debug_eager_, eager ? 1 : 0, __ATOMIC_RELAXED); }

static int tt_debug_eager(void) { return __atomic_load_n(&tt_debug_eager_, __ATOMIC_RELAXED); }

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

/* PyTorch/XLA's cause wording, derived from the frames. As PyTorch/XLA,
 * a sync's cause is named by the first frame below it that marks a known
 * caller (the parallel loader, a StepTrace exit, dynamo, torch_xla.compile)
 * wherever it is on the stack: wrappers such as mark_step's deprecation
 * shim sit between the sync and its caller. */
static const char *tt_debug_cause(const tt_debug_frame_t *f, int32_t n, const char *graph_name) {
  if (graph_name && tt_ends_with(graph_name, "_clear_pending"))
    return "torch_xla.compile clear the pending graph prior calling the target function";
  if (n == 0) return "engine call without Python frames";
  if (tt_is_sync_frame(&f[0])) {
    for (int32_t k = 1; k < n; ++k) {
      const char *fn = f[k].function, *file = f[k].file;
      if ((!strcmp(fn, "next") || !strcmp(fn, "__next__")) && tt_ends_with(file, "parallel_loader.py"))
        return "torch_xla.sync in parallel loader at step end";
      if (!strcmp(fn, "__exit__") && tt_ends_with(file, "profiler.py"))
        return "torch_xla.sync when exiting a profiler StepTrace region";
      if ((!strcmp(fn, "extract_compiled_graph_helper") || !strcmp(fn, "extract_internal")) &&
          tt_ends_with(file, "dynamo_bridge.py"))
        return "torch_xla.sync when dynamo processing input graphs";
      if ((!strcmp(fn, "region") || !strcmp(fn, "compiled") || !strcmp(fn, "_compile") ||
           !strcmp(fn, "wrapped") || !strcmp(fn, "ctx")) &&
          tt_in_torch_xla_module(file))
        return "torch_xla.compile";
    }
    return "user torch_xla.sync";
  }
  if (!strcmp(f[0].function, "extract_graph_helper") && tt_ends_with(f[0].file, "dynamo_bridge.py"))
    return "dynamo is compiling a FX graph to HLO";
  return "most likely user code trying to access tensor value before torch_xla.sync";
}

static void tt_block_begin(tt_strbuf_t *t, const char *prefix) {
  tt_strbuf_printf(t, "\n%s%s\n", prefix, TT_DEBUG_RULE);
}

static void tt_block_end(tt_strbuf_t *t, const char *prefix) {
  tt_strbuf_printf(t, "%s%s\n%s%s\n", prefix, TT_DEBUG_DASH, prefix, TT_DEBUG_RULE);
}

static void tt_block_frames(tt_strbuf_t *t, const char *prefix, int32_t max_frames) {
  tt_strbuf_printf(t, "%sPython Frame Triggered Execution: \n", prefix);
  for (int32_t i = 0; i < tt_ctx_frames_.n; ++i) {
    if (i >= max_frames) {
      tt_strbuf_printf(t, "%s  ..........\n", prefix);
      break;
    }
    const tt_debug_frame_t *f = &tt_ctx_frames_.frames[i];
    tt_strbuf_printf(t, "%s  %s (%s:%d)\n", prefix, f->function, f->file, f->line);
  }
}

/* Cause, graph info (and, for a compile, the recompilation cause). */
static void tt_block_head(tt_strbuf_t *t, const char *prefix, const char *title,
                          const tt_debug_cut_t *cut, const char *recompile) {
  const char *name = tt_cut_graph_name();
  const char *cause = tt_ctx_cause_;
  if (cause && tt_ctx_exec_cause_ && !strcmp(title, "Execution Cause")) cause = tt_ctx_exec_cause_;
  tt_strbuf_printf(t, "%s%s\n", prefix, title);
  tt_strbuf_printf(t, "%s  %s\n", prefix,
                 cause ? cause : tt_debug_cause(tt_ctx_frames_.frames, tt_ctx_frames_.n, name));
  tt_strbuf_printf(t, "%sGraph Info: \n", prefix);
  if (name) tt_strbuf_printf(t, "%s  Graph Name: %s\n", prefix, name);
  tt_strbuf_printf(t, "%s  Graph Hash: %016llx\n", prefix, (unsigned long long)cut->graph->hash);
  tt_strbuf_printf(t, "%s  Number of Graph Inputs: %d\n", prefix, cut->graph->num_inputs);
  tt_strbuf_printf(t, "%s  Number of Graph Outputs: %d\n", prefix, cut->graph->num_outputs);
  if (recompile) {
    tt_strbuf_printf(t, "%sRecompilation Cause\n", prefix);
    for (const char *p = recompile; *p;) {
      const char *e = strchr(p, '\n');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      tt_strbuf_printf(t, "%s  %.*s\n", prefix, (int)len, p);
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

/* The graph log of the cut's device: XLA_SAVE_TENSORS_FILE with ".<device
 * ordinal>" appended, as PyTorch/XLA names it (each replica thread of a
 * launch then writes its own file). */
static void tt_save_tensors(const tt_debug_cut_t *cut, int fmt) {
  char *base = tt_debug_config_string(1);
  if (!base) return;
  size_t n = strlen(base) + 16;
  char *path = malloc(n);
  if (!path) {
    free(base);
    return;
  }
  snprintf(path, n, "%s.%d", base, (int)(cut->device < 0 ? 0 : cut->device));
  free(base);
  tt_strbuf_t t = {0};
  tt_strbuf_printf(&t, "[ScheduleSyncTensorsGraph]\nTensorsGraphInfo:\n");
  for (int32_t i = 0; i < tt_ctx_frames_.n; ++i) {
    const tt_debug_frame_t *f = &tt_ctx_frames_.frames[i];
    tt_strbuf_printf(&t, "  %s (%s:%d)\n", f->function, f->file, f->line);
  }
  tt_strbuf_printf(&t, "\nHashes: (%016llx)\n", (unsigned long long)cut->graph->hash);
  char *graph = tt_debug_graph_text(cut->graph, cut->roots, fmt);
  tt_strbuf_printf(&t, "\n## BEGIN_GRAPH\n%s\n## END_GRAPH\n\n\n", graph);
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
  if (!(flags & TT_DEBUG_ANALYSIS) || !cut->cache_miss || tt_debug_eager()) return;
  char *recompile = NULL;
  char *key = tt_site_key();
  if (key) {
    uint64_t prev = 0;
    pthread_mutex_lock(&tt_debug_lock_);
    char *diff = tt_sites_update_locked(key, cut->graph, &prev);
    pthread_mutex_unlock(&tt_debug_lock_);
    if (diff) {
      tt_strbuf_t r = {0};
      tt_strbuf_printf(&r, "differs from graph %016llx compiled before for %s:\n%s",
                     (unsigned long long)prev, key, diff);
      recompile = tt_strbuf_take(&r);
      free(diff);
      pthread_mutex_lock(&tt_debug_lock_);
      free(tt_last_recompile_);
      tt_last_recompile_ = strdup(recompile);
      pthread_mutex_unlock(&tt_debug_lock_);
    }
    free(key);
  }
  const char *prefix = "Compilation Analysis: ";
  tt_strbuf_t t = {0};
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
  int eager = tt_debug_eager();
  if (eager && !tt_ctx_cause_) return;
  tt_strbuf_t t = {0};
  const tt_graph_t *g = exec_graph ? exec_graph : cut->graph;
  if (cut->cache_miss && !eager) {
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
    tt_strbuf_printf(&t, "\nComputation hash: %016llx\n", (unsigned long long)g->hash);
    tt_block_begin(&t, prefix);
    tt_strbuf_printf(&t, "%sGraph input size: %f GB\n", prefix, tt_gb(in_bytes));
    tt_strbuf_printf(&t, "%sGraph output size: %f GB\n", prefix, tt_gb(out_bytes));
    tt_strbuf_printf(&t, "%sAliased Input size: %f GB\n", prefix, tt_gb(0));
    tt_strbuf_printf(&t, "%sIntermediate tensor size: %f GB\n", prefix,
                   tt_gb(tt_peak_intermediate_bytes(g)));
    tt_strbuf_printf(&t, "%sCompiled program size: %f GB\n", prefix, tt_gb(program));
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
