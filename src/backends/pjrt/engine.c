/* The lazy engine's executions through a PJRT plugin (docs/pjrt.md): the
 * "pjrt" backend (backend.h), made active by tt_pjrt_engine_enable.
 *
 * While it is active, a graph is emitted as StableHLO and compiled by the
 * plugin once, then
 * every execution copies the engine's input bytes to plugin buffers, runs,
 * and copies the results back into the engine's output memory. The cache is
 * keyed by the graph's structural hash and canonical key (the same key the
 * engine's own compile cache uses), so step N+1 reuses step N's executable;
 * entries live until tt_pjrt_engine_disable. A graph the plugin cannot run
 * is cached too, with its error, so it is not emitted and compiled again. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "runtime/runtime_internal.h"
#include "torchtpu/backend.h"
#include "torchtpu/metrics.h"
#include "torchtpu/pjrt.h"
#include "torchtpu/runtime.h"
#include "torchtpu/stablehlo.h"

#define TT_PJRT_ENGINE_BUCKETS 256

static const tt_backend_t tt_pjrt_backend_; /* at the end */

typedef struct tt_pjrt_entry_s {
  struct tt_pjrt_entry_s *next;
  uint64_t hash;
  uint8_t *key;
  size_t key_size;
  tt_pjrt_executable_t *exe; /* NULL when the plugin cannot run the graph */
  tt_status_t error;         /* why not (owned); NULL when exe is set */
} tt_pjrt_entry_t;

static pthread_mutex_t tt_pjrt_engine_lock_ = PTHREAD_MUTEX_INITIALIZER;
static tt_pjrt_client_t *tt_pjrt_engine_client_ = NULL; /* retained while routing */
static int tt_pjrt_engine_on_ = 0;                       /* read without the lock */
static int tt_pjrt_engine_fallback_ = 0;
static tt_pjrt_entry_t *tt_pjrt_engine_table_[TT_PJRT_ENGINE_BUCKETS];
static size_t tt_pjrt_engine_entries_ = 0;

static void tt_pjrt_entry_free(tt_pjrt_entry_t *en) {
  if (en->exe) tt_pjrt_executable_destroy(en->exe);
  tt_status_free(en->error);
  free(en->key);
  free(en);
}

/* Empties the table; the caller holds the lock. */
static void tt_pjrt_engine_clear_locked(void) {
  for (size_t b = 0; b < TT_PJRT_ENGINE_BUCKETS; ++b) {
    tt_pjrt_entry_t *en = tt_pjrt_engine_table_[b];
    while (en) {
      tt_pjrt_entry_t *next = en->next;
      tt_pjrt_entry_free(en);
      en = next;
    }
    tt_pjrt_engine_table_[b] = NULL;
  }
  tt_pjrt_engine_entries_ = 0;
}

void tt_pjrt_engine_enable(tt_pjrt_client_t *client, int fallback) {
  tt_pjrt_client_retain(client);
  pthread_mutex_lock(&tt_pjrt_engine_lock_);
  tt_pjrt_engine_clear_locked();
  if (tt_pjrt_engine_client_) tt_pjrt_client_release(tt_pjrt_engine_client_);
  tt_pjrt_engine_client_ = client;
  tt_pjrt_engine_fallback_ = fallback != 0;
  __atomic_store_n(&tt_pjrt_engine_on_, 1, __ATOMIC_RELEASE);
  tt_backend_set_active(&tt_pjrt_backend_);
  pthread_mutex_unlock(&tt_pjrt_engine_lock_);
}

void tt_pjrt_engine_disable(void) {
  pthread_mutex_lock(&tt_pjrt_engine_lock_);
  __atomic_store_n(&tt_pjrt_engine_on_, 0, __ATOMIC_RELEASE);
  tt_backend_set_active(NULL);
  tt_pjrt_engine_clear_locked();
  if (tt_pjrt_engine_client_) tt_pjrt_client_release(tt_pjrt_engine_client_);
  tt_pjrt_engine_client_ = NULL;
  pthread_mutex_unlock(&tt_pjrt_engine_lock_);
}

int tt_pjrt_engine_enabled(void) { return __atomic_load_n(&tt_pjrt_engine_on_, __ATOMIC_ACQUIRE); }

tt_pjrt_client_t *tt_pjrt_engine_client(void) {
  pthread_mutex_lock(&tt_pjrt_engine_lock_);
  tt_pjrt_client_t *c = tt_pjrt_engine_client_;
  pthread_mutex_unlock(&tt_pjrt_engine_lock_);
  return c;
}

size_t tt_pjrt_engine_cache_size(void) {
  pthread_mutex_lock(&tt_pjrt_engine_lock_);
  size_t n = tt_pjrt_engine_entries_;
  pthread_mutex_unlock(&tt_pjrt_engine_lock_);
  return n;
}

static tt_pjrt_entry_t *tt_pjrt_engine_find_locked(const tt_graph_t *g) {
  for (tt_pjrt_entry_t *en = tt_pjrt_engine_table_[g->hash % TT_PJRT_ENGINE_BUCKETS]; en;
       en = en->next) {
    if (en->hash == g->hash && en->key_size == g->key_size &&
        (g->key_size == 0 || memcmp(en->key, g->key, g->key_size) == 0))
      return en;
  }
  return NULL;
}

/* Appends " custom_call @a, @b" for each distinct call target in text, so a
 * compile error names the engine op the plugin has no implementation of. */
static void tt_pjrt_custom_calls(const char *text, char *out, size_t n) {
  static const char marker[] = "call_target_name = \"";
  size_t used = 0;
  out[0] = '\0';
  for (const char *p = strstr(text, marker); p; p = strstr(p, marker)) {
    p += sizeof(marker) - 1;
    const char *end = strchr(p, '"');
    if (!end) break;
    size_t len = (size_t)(end - p);
    char name[128];
    if (len >= sizeof(name)) len = sizeof(name) - 1;
    memcpy(name, p, len);
    name[len] = '\0';
    char quoted[136];
    snprintf(quoted, sizeof(quoted), "@%s", name);
    if (!strstr(out, quoted) && used + len + 8 < n)
      used += (size_t)snprintf(out + used, n - used, "%s%s", used ? ", " : "", quoted);
    p = end;
  }
}

/* Emits and compiles g. On failure the status says which graph and why
 * (the emitter's message names the op; the plugin's message is kept). */
static tt_status_t tt_pjrt_engine_compile(tt_pjrt_client_t *client, const tt_graph_t *g,
                                          tt_pjrt_executable_t **out_exe) {
  *out_exe = NULL;
  char *text = NULL;
  tt_status_t st = tt_stablehlo_emit_graph(g, NULL, &text);
  if (st) {
    tt_status_t wrapped = tt_status_make(tt_status_code(st),
                                         "PJRT backend: graph %016llx cannot be written as "
                                         "StableHLO for %s: %s",
                                         (unsigned long long)g->hash,
                                         tt_pjrt_client_library_path(client),
                                         tt_status_message(st));
    tt_status_free(st);
    return wrapped;
  }
  tt_pjrt_compile_config_t config = tt_pjrt_compile_config_default();
  config.portable = tt_pjrt_client_device_count(client) > 1;
  int64_t t0 = tt_now_ns();
  st = tt_pjrt_compile(client, text, strlen(text), "mlir", &config, out_exe);
  if (!st) {
    tt_counter_add("PjrtCompile", 1);
    tt_metric_add("PjrtCompileTime", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
    free(text);
    return NULL;
  }
  char calls[512];
  tt_pjrt_custom_calls(text, calls, sizeof(calls));
  tt_status_t wrapped;
  if (calls[0])
    wrapped = tt_status_make(tt_status_code(st),
                             "PJRT backend: the plugin %s cannot compile graph %016llx, which "
                             "uses engine ops written as custom_call %s (no StableHLO form; "
                             "docs/stablehlo.md); plugin error: %s",
                             tt_pjrt_client_library_path(client), (unsigned long long)g->hash,
                             calls, tt_status_message(st));
  else
    wrapped = tt_status_make(tt_status_code(st),
                             "PJRT backend: the plugin %s failed to compile graph %016llx "
                             "(%d instructions): %s",
                             tt_pjrt_client_library_path(client), (unsigned long long)g->hash,
                             g->num_instrs, tt_status_message(st));
  tt_status_free(st);
  free(text);
  return wrapped;
}

/* The cache entry for g, compiling it (outside the lock) on first sight.
 * Entries are never removed while routing is on, so the pointer stays
 * valid for the execution. */
static tt_pjrt_entry_t *tt_pjrt_engine_entry(tt_pjrt_client_t *client, const tt_graph_t *g,
                                             tt_status_t *out_alloc_error) {
  *out_alloc_error = NULL;
  pthread_mutex_lock(&tt_pjrt_engine_lock_);
  tt_pjrt_entry_t *en = tt_pjrt_engine_find_locked(g);
  pthread_mutex_unlock(&tt_pjrt_engine_lock_);
  if (en) return en;
  tt_pjrt_entry_t *made = calloc(1, sizeof(*made));
  uint8_t *key = g->key_size ? malloc(g->key_size) : NULL;
  if (!made || (g->key_size && !key)) {
    free(made);
    free(key);
    *out_alloc_error = tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT backend: out of memory");
    return NULL;
  }
  if (g->key_size) memcpy(key, g->key, g->key_size);
  made->hash = g->hash;
  made->key = key;
  made->key_size = g->key_size;
  made->error = tt_pjrt_engine_compile(client, g, &made->exe);
  pthread_mutex_lock(&tt_pjrt_engine_lock_);
  en = tt_pjrt_engine_find_locked(g); /* another device may have compiled it meanwhile */
  if (!en) {
    size_t b = g->hash % TT_PJRT_ENGINE_BUCKETS;
    made->next = tt_pjrt_engine_table_[b];
    tt_pjrt_engine_table_[b] = made;
    tt_pjrt_engine_entries_++;
    en = made;
    made = NULL;
  }
  pthread_mutex_unlock(&tt_pjrt_engine_lock_);
  if (made) tt_pjrt_entry_free(made);
  return en;
}

static tt_status_t tt_pjrt_engine_run(tt_pjrt_executable_t *pexe, const tt_graph_t *g,
                                      size_t device, const tt_input_value_t *inputs,
                                      void *const *output_data) {
  tt_pjrt_client_t *client = tt_pjrt_executable_client(pexe);
  size_t n_in = (size_t)g->num_inputs, n_out = (size_t)g->num_outputs;
  if (tt_pjrt_executable_num_outputs(pexe) != n_out)
    return tt_status_make(TT_INTERNAL, "PJRT backend: graph %016llx has %zu outputs, the "
                          "plugin's executable %zu", (unsigned long long)g->hash, n_out,
                          tt_pjrt_executable_num_outputs(pexe));
  tt_pjrt_buffer_t **args = calloc(n_in + 1, sizeof(*args));
  tt_pjrt_buffer_t **outs = calloc(n_out + 1, sizeof(*outs));
  tt_status_t st = NULL;
  if (!args || !outs) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "PJRT backend: out of memory");
    goto done;
  }
  for (size_t k = 0; k < n_in && !st; ++k) {
    const tt_instr_t *in = &g->instrs[g->input_instr[k]];
    int64_t scalar = 0;
    const void *data = &scalar;
    if (in->op == TT_OP_PARAM)
      data = tt_buffer_data(inputs[k].buffer);
    else
      tt_store_scalar(in->dtype, inputs[k].scalar_f, inputs[k].scalar_i, &scalar);
    st = tt_pjrt_buffer_from_host(client, device, in->dtype, &in->shape, data,
                                  tt_instr_bytes(in), &args[k]);
  }
  if (!st) st = tt_pjrt_execute(pexe, device, args, n_in, outs);
  for (size_t r = 0; r < n_out && !st; ++r) {
    const tt_instr_t *in = &g->instrs[g->output_instr[r]];
    size_t bytes = tt_instr_bytes(in);
    if (tt_pjrt_buffer_dtype(outs[r]) != in->dtype || tt_pjrt_buffer_nbytes(outs[r]) != bytes) {
      st = tt_status_make(TT_INTERNAL, "PJRT backend: output %zu of graph %016llx came back as "
                          "%s (%zu bytes), the graph says %s (%zu bytes)", r,
                          (unsigned long long)g->hash,
                          tt_dtype_name(tt_pjrt_buffer_dtype(outs[r])),
                          tt_pjrt_buffer_nbytes(outs[r]), tt_dtype_name(in->dtype), bytes);
      break;
    }
    if (bytes) st = tt_pjrt_buffer_to_host(outs[r], output_data[r], bytes);
  }
done:
  if (args)
    for (size_t k = 0; k < n_in; ++k) tt_pjrt_buffer_destroy(args[k]);
  if (outs)
    for (size_t r = 0; r < n_out; ++r) tt_pjrt_buffer_destroy(outs[r]);
  free(args);
  free(outs);
  return st;
}

/* Runs exe through the routed plugin on device `device` (< 0: device 0).
 * Returns 1 when it handled the execution (*out_status is its result),
 * 0 when the CPU backend must run it: routing is off, or fallback is on
 * and the graph cannot run on the plugin. */
static int tt_pjrt_engine_execute(tt_executable_t *exe, int32_t device,
                                  const tt_input_value_t *inputs, void *const *output_data,
                                  tt_status_t *out_status) {
  *out_status = NULL;
  if (!tt_pjrt_engine_enabled()) return 0;
  pthread_mutex_lock(&tt_pjrt_engine_lock_);
  tt_pjrt_client_t *client = tt_pjrt_engine_client_;
  int fallback = tt_pjrt_engine_fallback_;
  pthread_mutex_unlock(&tt_pjrt_engine_lock_);
  if (!client) return 0;
  const tt_graph_t *g = tt_executable_graph(exe);
  size_t dev = device < 0 ? 0 : (size_t)device;
  if (dev >= tt_pjrt_client_device_count(client)) {
    *out_status = tt_status_make(TT_OUT_OF_RANGE, "PJRT backend: engine device %d has no "
                                 "plugin device (the plugin %s has %zu)", device,
                                 tt_pjrt_client_library_path(client),
                                 tt_pjrt_client_device_count(client));
    return 1;
  }
  tt_status_t alloc_error = NULL;
  tt_pjrt_entry_t *en = tt_pjrt_engine_entry(client, g, &alloc_error);
  if (!en) {
    *out_status = alloc_error;
    return 1;
  }
  if (!en->exe) {
    if (fallback) {
      tt_counter_add("PjrtFallback", 1);
      return 0;
    }
    *out_status = tt_status_make(tt_status_code(en->error), "%s", tt_status_message(en->error));
    return 1;
  }
  int64_t t0 = tt_now_ns();
  *out_status = tt_pjrt_engine_run(en->exe, g, dev, inputs, output_data);
  tt_metric_add("PjrtExecuteTime", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
  if (!*out_status) tt_counter_add("PjrtExecute", 1);
  return 1;
}

static void tt_pjrt_configure_passes(const tt_backend_t *self, tt_optimize_options_t *opts) {
  (void)self;
  opts->no_engine_forms = 1; /* graphs are emitted as StableHLO */
}

static tt_status_t tt_pjrt_backend_execute(const tt_backend_t *self, tt_executable_t *exe,
                                           int32_t device, const tt_input_value_t *inputs,
                                           void *const *output_data) {
  (void)self;
  tt_status_t st = NULL;
  if (tt_pjrt_engine_execute(exe, device, inputs, output_data, &st)) return st;
  const tt_backend_t *cpu = tt_backend_cpu(); /* routing off, or the fallback */
  return cpu->execute(cpu, exe, device, inputs, output_data);
}

/* Executables are prepared as the CPU backend prepares them (the plugin
 * compiles a graph at its first execution, cached by graph key above), so
 * the fallback and a later switch back to the CPU backend can run them;
 * outputs take donated inputs' memory as on the CPU backend (the inputs
 * are copied to the plugin before the outputs are written). */
static const tt_backend_t tt_pjrt_backend_ = {
    .name = "pjrt",
    .configure_passes = tt_pjrt_configure_passes,
    .prepare = tt_cpu_prepare,
    .release = tt_cpu_release,
    .execute = tt_pjrt_backend_execute,
    .bind_outputs = tt_cpu_bind_outputs,
};
