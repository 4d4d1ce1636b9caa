/* Lazy tensors, the live-tensor registry, graph cuts and the compilation
 * cache. One engine lock guards the registry, node bookkeeping during a
 * build and the cache; device work runs outside it on the device queues. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/lazy.h"
#include "torchtpu/metrics.h"
#include "torchtpu/debug.h"
#include "torchtpu/trace.h"
#include "torchtpu/codegen.h"
#include "torchtpu/passes.h"
#include "torchtpu/pjrt.h"

struct tt_tensor_s {
  int32_t refcount; /* atomic */
  int64_t id;
  int32_t device;
  tt_dtype_t dtype;
  tt_shape_t shape;
  tt_buffer_t *buffer;   /* materialized value (maybe still pending) */
  tt_node_t *node;       /* pending IR, owned */
  tt_node_t *data_node;  /* PARAM node over buffer, reused by later ops */
  tt_sharding_t *sharding; /* annotation (owned) given to node and data_node */
  /* node is a movement of another tensor's data, left pending by a step's
   * sync (tt_derive_roots_): later step syncs leave it so too. */
  uint8_t derived;
  tt_tensor_t *prev, *next;
};

static pthread_mutex_t tt_lazy_lock_ = PTHREAD_MUTEX_INITIALIZER;
static tt_tensor_t *tt_live_head_ = NULL;
static int64_t tt_live_count_ = 0;
static int64_t tt_next_id_ = 1;

/* ---- compilation cache ---- */
#define TT_CACHE_BUCKETS 1024
typedef struct tt_cache_entry_s {
  struct tt_cache_entry_s *next;
  uint64_t hash;
  tt_executable_t *exe;
} tt_cache_entry_t;
static tt_cache_entry_t *tt_cache_[TT_CACHE_BUCKETS];
static int64_t tt_cache_count_ = 0;

static tt_executable_t *tt_cache_lookup(const tt_graph_t *g) {
  for (tt_cache_entry_t *e = tt_cache_[g->hash % TT_CACHE_BUCKETS]; e; e = e->next) {
    const tt_graph_t *cg = tt_executable_graph(e->exe);
    if (e->hash == g->hash && cg->key_size == g->key_size &&
        memcmp(cg->key, g->key, g->key_size) == 0)
      return e->exe;
  }
  return NULL;
}

static void tt_cache_insert(tt_executable_t *exe) {
  const tt_graph_t *g = tt_executable_graph(exe);
  tt_cache_entry_t *e = malloc(sizeof(*e));
  if (!e) return; /* not cached: the next run compiles again */
  e->hash = g->hash;
  e->exe = exe;
  tt_executable_retain(exe);
  e->next = tt_cache_[g->hash % TT_CACHE_BUCKETS];
  tt_cache_[g->hash % TT_CACHE_BUCKETS] = e;
  tt_cache_count_++;
}

int64_t tt_lazy_cached_graphs(void) {
  pthread_mutex_lock(&tt_lazy_lock_);
  int64_t n = tt_cache_count_;
  pthread_mutex_unlock(&tt_lazy_lock_);
  return n;
}

/* ---- tensors ---- */

static tt_tensor_t *tt_tensor_new_locked(int32_t device, tt_dtype_t dtype,
                                         const tt_shape_t *shape) {
  tt_tensor_t *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  t->refcount = 1;
  t->id = tt_next_id_++;
  t->device = device;
  t->dtype = dtype;
  t->shape = *shape;
  t->next = tt_live_head_;
  if (tt_live_head_) tt_live_head_->prev = t;
  tt_live_head_ = t;
  tt_live_count_++;
  return t;
}

static tt_status_t tt_check_device(int32_t device) {
  int32_t n = tt_runtime_device_count();
  if (device < 0 || device >= n)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Invalid device xla:%d: the CPU backend has %d devices (xla:0..xla:%d)",
                          device, n, n - 1);
  return NULL;
}

tt_status_t tt_tensor_from_host(int32_t device, tt_dtype_t dtype, const tt_shape_t *shape,
                                const void *host, tt_tensor_t **out) {
  *out = NULL;
  TT_RETURN_IF_ERROR(tt_check_device(device));
  size_t nbytes = (size_t)tt_shape_numel(shape) * tt_dtype_size(dtype);
  tt_buffer_t *b = NULL;
  TT_RETURN_IF_ERROR(tt_buffer_from_host(device, host, nbytes, &b));
  pthread_mutex_lock(&tt_lazy_lock_);
  tt_tensor_t *t = tt_tensor_new_locked(device, dtype, shape);
  pthread_mutex_unlock(&tt_lazy_lock_);
  if (!t) {
    tt_buffer_release(b);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
  }
  t->buffer = b;
  tt_counter_add("CreateXlaTensor", 1);
  *out = t;
  return NULL;
}

tt_status_t tt_tensor_scalar(int32_t device, tt_dtype_t dtype, double value_f, int64_t value_i,
                             tt_tensor_t **out) {
  *out = NULL;
  TT_RETURN_IF_ERROR(tt_check_device(device));
  if ((unsigned)dtype >= TT_DTYPE_COUNT || tt_dtype_is_complex(dtype))
    return tt_status_make(TT_TYPE_ERROR, "scalar: %s scalars are not supported "
                          "(make a complex value from float32 pairs)", tt_dtype_name(dtype));
  tt_node_t *n = tt_node_create_scalar(dtype, value_f, value_i, device);
  if (!n) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (scalar)");
  if (tt_debug_flags() & TT_DEBUG_IR_FRAMES) tt_debug_attach_node_frames(n);
  pthread_mutex_lock(&tt_lazy_lock_);
  tt_tensor_t *t = tt_tensor_new_locked(device, dtype, &n->shape);
  pthread_mutex_unlock(&tt_lazy_lock_);
  if (!t) {
    tt_node_release(n);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
  }
  t->node = n;
  tt_counter_add("CreateXlaTensor", 1);
  *out = t;
  return NULL;
}

/* The node that stands for t in a new op (engine lock held). */
static tt_node_t *tt_tensor_use_node(tt_tensor_t *t) {
  if (t->node) return t->node;
  if (!t->data_node) {
    t->data_node = tt_node_create_param(t->buffer, t->dtype, &t->shape, t->device);
    if (t->data_node && t->sharding) t->data_node->sharding = tt_sharding_copy(t->sharding);
  }
  return t->data_node;
}

tt_status_t tt_tensor_set_sharding(tt_tensor_t *t, const tt_sharding_t *sharding) {
  tt_sharding_t *copy = NULL;
  if (sharding) {
    TT_RETURN_IF_ERROR(tt_sharding_validate(sharding, &t->shape));
    copy = tt_sharding_copy(sharding);
    if (!copy) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding)");
  }
  tt_status_t st = NULL;
  pthread_mutex_lock(&tt_lazy_lock_);
  if (t->node) st = tt_node_set_sharding(t->node, sharding);
  if (!st && t->data_node) st = tt_node_set_sharding(t->data_node, sharding);
  if (!st) {
    free(t->sharding);
    t->sharding = copy;
    copy = NULL;
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  free(copy);
  return st;
}

const tt_sharding_t *tt_tensor_sharding(const tt_tensor_t *t) { return t->sharding; }

tt_status_t tt_tensor_op(tt_op_t op, int32_t device, tt_tensor_t *const *operands,
                         int32_t num_operands,
                         const int64_t *iattrs, int32_t num_iattrs, const double *fattrs,
                         int32_t num_fattrs, tt_tensor_t **out) {
  *out = NULL;
  tt_node_t *small[8];
  tt_node_t **nodes = num_operands <= 8 ? small : malloc(sizeof(*nodes) * (size_t)num_operands);
  if (!nodes) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  if (num_operands) device = operands[0]->device;
  tt_status_t st = tt_check_device(device);
  if (st) {
    if (nodes != small) free(nodes);
    return st;
  }
  pthread_mutex_lock(&tt_lazy_lock_);
  for (int32_t i = 0; i < num_operands; ++i) {
    nodes[i] = tt_tensor_use_node(operands[i]);
    if (!nodes[i]) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (node)");
  }
  tt_node_t *n = NULL;
  if (!st) st = tt_node_create(op, device, nodes, num_operands, iattrs, num_iattrs, fattrs,
                               num_fattrs, &n);
  tt_tensor_t *t = NULL;
  if (!st && (tt_debug_flags() & TT_DEBUG_IR_FRAMES)) tt_debug_attach_node_frames(n);
  if (!st) {
    t = tt_tensor_new_locked(device, n->dtype, &n->shape);
    if (!t) {
      tt_node_release(n);
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
    } else {
      t->node = n;
    }
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  if (nodes != small) free(nodes);
  if (st) return st;
  tt_counter_add("CreateXlaTensor", 1);
  *out = t;
  return NULL;
}

void tt_tensor_retain(tt_tensor_t *t) { __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED); }

void tt_tensor_release(tt_tensor_t *t) {
  if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_lock(&tt_lazy_lock_);
  if (t->prev) t->prev->next = t->next;
  else tt_live_head_ = t->next;
  if (t->next) t->next->prev = t->prev;
  tt_live_count_--;
  tt_node_t *node = t->node, *data_node = t->data_node;
  pthread_mutex_unlock(&tt_lazy_lock_);
  tt_node_release(node);
  tt_node_release(data_node);
  tt_buffer_release(t->buffer);
  free(t->sharding);
  free(t);
  tt_counter_add("DestroyXlaTensor", 1);
}

int32_t tt_tensor_device(const tt_tensor_t *t) { return t->device; }
tt_dtype_t tt_tensor_dtype(const tt_tensor_t *t) { return t->dtype; }
const tt_shape_t *tt_tensor_shape(const tt_tensor_t *t) { return &t->shape; }
int64_t tt_tensor_id(const tt_tensor_t *t) { return t->id; }
int tt_tensor_is_pending(const tt_tensor_t *t) { return t->node != NULL; }
tt_node_t *tt_tensor_node(const tt_tensor_t *t) { return t->node; }

int64_t tt_lazy_live_tensors(void) {
  pthread_mutex_lock(&tt_lazy_lock_);
  int64_t n = tt_live_count_;
  pthread_mutex_unlock(&tt_lazy_lock_);
  return n;
}

/* A live tensor derived from another one's new data by a movement (see
 * tt_derive_roots_). */
typedef struct {
  tt_tensor_t *tensor, *source;
  tt_op_t op;
  int32_t num_iattrs;
  int64_t iattrs[TT_MAX_RANK];
} tt_derived_t;

static int tt_by_node_(const void *a, const void *b) {
  const tt_node_t *x = *(tt_node_t *const *)a, *y = *(tt_node_t *const *)b;
  return x < y ? -1 : x > y;
}

/* A step's sync often finds a live tensor V whose pending value is a
 * transpose or reshape of another live tensor B's pending value: a
 * functional view and its base. Autograd leaves one behind for every
 * linear layer's weight gradient (the gradient is t() of the product
 * computed as [in, out], and the product is the view's base). Both are the
 * same elements up to a bijective movement, so only V is made an output:
 * B becomes the inverse movement of V's new data, still pending, costing
 * nothing unless it is read. With the product no longer an output by
 * itself, simplification also folds the transpose into its dot. Removes
 * the derived roots from roots/owners (returns the new count) and lists
 * them in *out (n_out entries; NULL when none or out of memory, which only
 * means nothing is derived). */
static int32_t tt_derive_roots_(tt_node_t **roots, tt_tensor_t **owners, int32_t nr,
                                tt_derived_t **out, int32_t *n_out) {
  *out = NULL;
  *n_out = 0;
  if (nr < 2) return nr;
  tt_node_t **sorted = malloc(sizeof(*sorted) * (size_t)nr);
  int32_t *src_of = malloc(sizeof(int32_t) * (size_t)nr);
  uint8_t *is_src = calloc((size_t)nr, 1);
  tt_derived_t *d = NULL;
  int32_t nd = 0;
  if (!sorted || !src_of || !is_src) goto done;
  memcpy(sorted, roots, sizeof(*sorted) * (size_t)nr);
  qsort(sorted, (size_t)nr, sizeof(*sorted), tt_by_node_);
  for (int32_t r = 0; r < nr; ++r) src_of[r] = -1;
  for (int32_t r = 0; r < nr; ++r) {
    const tt_node_t *v = roots[r];
    if ((v->op != TT_OP_TRANSPOSE && v->op != TT_OP_RESHAPE) || src_of[r] >= 0 ||
        owners[r]->sharding)
      continue;
    tt_node_t *o = v->operands[0];
    if (!bsearch(&o, sorted, (size_t)nr, sizeof(*sorted), tt_by_node_)) continue;
    for (int32_t b = 0; b < nr; ++b) {
      if (roots[b] != o || b == r || is_src[b] || src_of[b] >= 0 || owners[b]->sharding)
        continue;
      src_of[b] = r;
      is_src[r] = 1;
      ++nd;
    }
  }
  if (!nd) goto done;
  d = malloc(sizeof(*d) * (size_t)nd);
  if (!d) {
    nd = 0;
    goto done;
  }
  int32_t k = 0, j = 0;
  for (int32_t b = 0; b < nr; ++b) {
    if (src_of[b] < 0) continue;
    const tt_node_t *v = roots[src_of[b]];
    tt_derived_t *e = &d[k++];
    e->tensor = owners[b];
    e->source = owners[src_of[b]];
    e->op = v->op;
    e->num_iattrs = owners[b]->shape.rank;
    for (int32_t i = 0; i < e->num_iattrs; ++i) {
      if (v->op == TT_OP_TRANSPOSE) e->iattrs[v->iattrs[i]] = i; /* inverse permutation */
      else e->iattrs[i] = owners[b]->shape.dims[i];
    }
  }
  for (int32_t r = 0; r < nr; ++r) {
    if (src_of[r] >= 0) continue;
    roots[j] = roots[r];
    owners[j] = owners[r];
    ++j;
  }
  nr = j;
done:
  free(sorted);
  free(src_of);
  free(is_src);
  *out = d;
  *n_out = nd;
  return nr;
}

/* After the cut: each derived tensor's pending value becomes the inverse
 * movement of its source's new data (engine lock held). On failure it
 * keeps its old IR, which still computes the same value. */
static void tt_attach_derived_(const tt_derived_t *d, int32_t nd) {
  for (int32_t k = 0; k < nd; ++k) {
    tt_tensor_t *t = d[k].tensor;
    tt_node_t *src = tt_tensor_use_node(d[k].source), *n = NULL;
    if (!src) continue;
    tt_status_t st = tt_node_create(d[k].op, t->device, &src, 1, d[k].iattrs, d[k].num_iattrs,
                                    NULL, 0, &n);
    if (st) {
      tt_status_free(st);
      continue;
    }
    tt_node_release(t->node);
    t->node = n;
    tt_node_release(t->data_node);
    t->data_node = NULL;
    tt_buffer_release(t->buffer);
    t->buffer = NULL;
    t->derived = 1;
  }
  if (nd) tt_counter_add("DerivedSyncTensor", nd);
}

/* Cuts the pending tensors in ts (all on device) into one graph, compiles
 * or fetches it from the cache, and queues it. Engine lock held. derive:
 * a step's sync, which may leave views' bases pending (tt_derive_roots_). */
static tt_status_t tt_cut_locked(tt_tensor_t **ts, int32_t n, int32_t device, int derive) {
  tt_node_t **roots = malloc(sizeof(*roots) * (size_t)(n ? n : 1));
  tt_tensor_t **owners = malloc(sizeof(*owners) * (size_t)(n ? n : 1));
  if (!roots || !owners) {
    free(roots);
    free(owners);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cut)");
  }
  int32_t nr = 0;
  for (int32_t i = 0; i < n; ++i) {
    tt_tensor_t *t = ts[i];
    if (!t->node) continue;
    if (t->node->op == TT_OP_PARAM) {
      /* An alias of existing data: no computation needed. */
      tt_buffer_t *b = t->node->buffer;
      tt_buffer_retain(b);
      tt_buffer_release(t->buffer);
      t->buffer = b;
      tt_node_release(t->data_node);
      t->data_node = t->node;
      t->node = NULL;
      t->derived = 0;
      continue;
    }
    roots[nr] = t->node;
    owners[nr] = t;
    ++nr;
  }
  tt_status_t st = NULL;
  tt_derived_t *derived = NULL;
  int32_t nderived = 0;
  if (derive) nr = tt_derive_roots_(roots, owners, nr, &derived, &nderived);
  if (nr == 0) goto done;
  tt_graph_t *g = NULL;
  tt_node_t **inputs = NULL;
  int64_t t0 = tt_now_ns();
  int64_t trace_t0 = tt_trace_now();
  st = tt_graph_build(roots, nr, &g, &inputs);
  if (st) goto done;
  /* PyTorch/XLA's name for the node count of each synced graph. */
  tt_metric_add("TensorsGraphSize", TT_UNIT_COUNT, (double)g->num_instrs);
  tt_executable_t *exe = tt_cache_lookup(g);
  /* Debug output and trace spans (each a single flag test when off). */
  uint64_t graph_hash = g->hash;
  tt_trace_complete("BuildGraph", "lazy", trace_t0, "{\"hash\":\"%016llx\",\"cached\":%d}",
                    (unsigned long long)graph_hash, exe != NULL);
  tt_debug_cut_t debug_cut = {.graph = g, .roots = roots, .device = device, .cache_miss = !exe};
  if (tt_debug_flags()) tt_debug_on_cut_built(&debug_cut);
  int64_t compile_t0 = exe ? 0 : tt_trace_now();
  if (exe) {
    tt_executable_retain(exe);
    tt_counter_add("CachedCompile", 1);
    /* Tier 1 once a graph repeats. */
    if (tt_executable_count_run(exe) == 1 && tt_tier_mode() == TT_TIER_AUTO)
      tt_tier1_request(exe, 0);
  } else {
    /* Optimise (the result keeps g's cache key), then plan. */
    tt_optimize_options_t opts;
    tt_optimize_options_from_env(&opts);
    /* Graphs that run through a PJRT plugin are emitted as StableHLO. */
    opts.no_engine_forms = tt_pjrt_engine_enabled();
    tt_graph_t *opt = NULL;
    st = tt_graph_optimize(g, &opts, &opt);
    if (!st && tt_debug_dump_enabled()) {
      char *text = tt_graph_to_text(opt);
      if (text) tt_status_free(tt_debug_dump(g->hash, "optimized", "txt", text));
      free(text);
    }
    if (!st) st = tt_executable_create(opt, &exe);
    if (st) {
      tt_graph_destroy(opt);
      tt_graph_destroy(g);
      free(inputs);
      goto done;
    }
    tt_cache_insert(exe);
    tt_executable_count_run(exe);
    if (tt_tier_mode() == TT_TIER_1) tt_tier1_request(exe, 1);
    tt_counter_add("UncachedCompile", 1);
    tt_metric_add("CompileTime", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
  }
  tt_trace_complete("Compile", "compile", compile_t0, "{\"hash\":\"%016llx\"}",
                    (unsigned long long)graph_hash);
  if (tt_debug_flags()) tt_debug_on_cut_scheduled(&debug_cut, tt_executable_graph(exe));
  const tt_graph_t *eg = tt_executable_graph(exe);
  int32_t ni = eg->num_inputs;
  tt_input_value_t *vals = calloc((size_t)ni + 1, sizeof(*vals));
  tt_buffer_t **outs = calloc((size_t)nr + 1, sizeof(*outs));
  if (!vals || !outs) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cut)");
  } else {
    for (int32_t i = 0; i < ni; ++i) {
      tt_node_t *in = inputs[i];
      vals[i].buffer = in->op == TT_OP_PARAM ? in->buffer : NULL;
      vals[i].scalar_f = in->scalar_f;
      vals[i].scalar_i = in->scalar_i;
    }
    for (int32_t r = 0; r < nr; ++r) {
      tt_tensor_t *t = owners[r];
      size_t bytes = (size_t)tt_shape_numel(&t->shape) * tt_dtype_size(t->dtype);
      outs[r] = tt_buffer_create_pending(device, bytes);
      if (!outs[r]) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer)");
    }
    if (!st) st = tt_executable_enqueue_held(exe, device, vals, ni, outs, nr);
    if (!st) {
      for (int32_t r = 0; r < nr; ++r) {
        tt_tensor_t *t = owners[r];
        tt_buffer_release(t->buffer);
        t->buffer = outs[r];
        outs[r] = NULL;
        tt_node_release(t->data_node);
        t->data_node = NULL;
        /* Drop the IR only after the job holds its input buffers. */
        tt_node_t *old = t->node;
        t->node = NULL;
        t->derived = 0;
        tt_node_release(old);
      }
    }
    if (!st) tt_attach_derived_(derived, nderived);
    for (int32_t r = 0; r < nr; ++r) tt_buffer_release(outs[r]);
    /* The graph's IR is gone: let the job run (it may now own its inputs). */
    if (!st) tt_runtime_release_held(device);
  }
  free(vals);
  free(outs);
  free(inputs);
  tt_graph_destroy(g);
  tt_executable_release(exe);
done:
  free(roots);
  free(owners);
  free(derived);
  return st;
}

tt_status_t tt_lazy_sync(int32_t device, int wait, const char *name) {
  tt_status_t st = NULL;
  int64_t trace_t0 = tt_trace_now();
  int32_t ndev = tt_runtime_device_count();
  /* Before the engine lock: the device may need it to finish its work. */
  tt_runtime_throttle(device);
  pthread_mutex_lock(&tt_lazy_lock_);
  int64_t cap = tt_live_count_ + 1;
  tt_tensor_t **ts = malloc(sizeof(*ts) * (size_t)cap);
  if (!ts) {
    pthread_mutex_unlock(&tt_lazy_lock_);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sync)");
  }
  tt_debug_set_sync_name(name);
  for (int32_t d = 0; d < ndev && !st; ++d) {
    if (device >= 0 && d != device) continue;
    int32_t n = 0;
    for (tt_tensor_t *t = tt_live_head_; t; t = t->next)
      if (t->device == d && t->node && !t->derived) ts[n++] = t;
    if (n) st = tt_cut_locked(ts, n, d, 1);
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  tt_debug_set_sync_name(NULL);
  free(ts);
  if (!st && wait) tt_runtime_wait(device);
  tt_trace_complete("SyncTensorsGraph", "lazy", trace_t0, "{\"device\":%d,\"wait\":%d}", device,
                    wait);
  return st;
}

tt_status_t tt_lazy_sync_tensors(tt_tensor_t *const *tensors, int32_t n, int wait) {
  tt_status_t st = NULL;
  tt_tensor_t **ts = malloc(sizeof(*ts) * (size_t)(n ? n : 1));
  if (!ts) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sync)");
  int64_t trace_t0 = tt_trace_now();
  int32_t ndev = tt_runtime_device_count();
  pthread_mutex_lock(&tt_lazy_lock_);
  for (int32_t d = 0; d < ndev && !st; ++d) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; ++i) {
      int dup = 0;
      for (int32_t j = 0; j < k; ++j) dup |= ts[j] == tensors[i];
      if (!dup && tensors[i]->device == d && tensors[i]->node) ts[k++] = tensors[i];
    }
    if (k) st = tt_cut_locked(ts, k, d, 0);
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  free(ts);
  if (!st && wait)
    for (int32_t i = 0; i < n && !st; ++i)
      if (tensors[i]->buffer) st = tt_buffer_wait(tensors[i]->buffer);
  tt_trace_complete("SyncTensorsGraph", "lazy", trace_t0, "{\"tensors\":%d,\"wait\":%d}", n,
                    wait);
  return st;
}

tt_status_t tt_tensor_to_host(tt_tensor_t *t, void *host, size_t nbytes) {
  TT_RETURN_IF_ERROR(tt_lazy_sync_tensors(&t, 1, 0));
  pthread_mutex_lock(&tt_lazy_lock_);
  tt_buffer_t *b = t->buffer;
  if (b) tt_buffer_retain(b);
  pthread_mutex_unlock(&tt_lazy_lock_);
  if (!b) return tt_status_make(TT_INTERNAL, "tensor %lld has no value after sync", (long long)t->id);
  tt_status_t st = tt_buffer_to_host(b, host, nbytes);
  tt_buffer_release(b);
  return st;
}

tt_status_t tt_tensor_to_device(tt_tensor_t *t, int32_t device, tt_tensor_t **out) {
  *out = NULL;
  TT_RETURN_IF_ERROR(tt_check_device(device));
  size_t nbytes = (size_t)tt_shape_numel(&t->shape) * tt_dtype_size(t->dtype);
  void *tmp = malloc(nbytes ? nbytes : 1);
  if (!tmp) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (transfer)");
  tt_status_t st = tt_tensor_to_host(t, tmp, nbytes);
  if (!st) st = tt_tensor_from_host(device, t->dtype, &t->shape, tmp, out);
  free(tmp);
  return st;
}

tt_status_t tt_lazy_graph_dump(tt_tensor_t *const *tensors, int32_t n, int fmt, char **out_text) {
  *out_text = NULL;
  tt_node_t **roots = malloc(sizeof(*roots) * (size_t)(n ? n : 1));
  if (!roots) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_lock(&tt_lazy_lock_);
  int32_t nr = 0;
  for (int32_t i = 0; i < n; ++i) {
    tt_node_t *node = tt_tensor_use_node(tensors[i]);
    if (node) roots[nr++] = node;
  }
  tt_graph_t *g = NULL;
  tt_status_t st = tt_graph_build(roots, nr, &g, NULL);
  pthread_mutex_unlock(&tt_lazy_lock_);
  free(roots);
  if (st) return st;
  *out_text = fmt == 1 ? tt_graph_to_dot(g) : tt_graph_to_text(g);
  tt_graph_destroy(g);
  return NULL;
}

/* ---- captured graphs: trace once, replay on new inputs ----
 * Used by the dynamo bridge. A capture records, for each input of the
 * compiled graph, where its value comes from on replay, and for each
 * requested output, whether the graph computes it, it passes an input
 * through, or it is a constant. The executable itself comes from the shared
 * compilation cache: capturing cuts the traced graph exactly as a sync
 * would, so it is compiled (and optimised) by the same path. */
#include <stdio.h> /* snprintf for capture mismatch messages */

enum { TT_CAP_SRC_INPUT = 0, TT_CAP_SRC_CONST = 1, TT_CAP_SRC_SEED = 2 };
enum { TT_CAP_OUT_GRAPH = 0, TT_CAP_OUT_INPUT = 1, TT_CAP_OUT_CONST = 2 };

struct tt_capture_s {
  int32_t refcount; /* atomic */
  int32_t device;
  tt_executable_t *exe; /* NULL when no output needs computing */
  uint64_t hash;
  int32_t num_inputs;
  tt_dtype_t *in_dtype;
  tt_shape_t *in_shape;
  uint8_t *in_is_scalar;  /* the slot takes a pending SCALAR tensor */
  int32_t *in_alias_of;   /* an earlier input with the same buffer, or -1 */
  int32_t num_graph_inputs;
  int32_t *gin_src;       /* TT_CAP_SRC_* */
  int32_t *gin_index;     /* input or seed index */
  tt_input_value_t *gin_const; /* constants: retained buffer or scalar */
  int32_t num_seeds;
  int32_t num_graph_outputs;
  int32_t num_outputs;
  int32_t *out_src;       /* TT_CAP_OUT_* */
  int32_t *out_index;     /* graph output or input index */
  tt_buffer_t **out_const;
  tt_dtype_t *out_dtype;
  tt_shape_t *out_shape;
};

static void tt_capture_free(tt_capture_t *c) {
  if (!c) return;
  tt_executable_release(c->exe);
  for (int32_t i = 0; c->gin_const && i < c->num_graph_inputs; ++i)
    tt_buffer_release(c->gin_const[i].buffer);
  for (int32_t i = 0; c->out_const && i < c->num_outputs; ++i) tt_buffer_release(c->out_const[i]);
  free(c->in_dtype);
  free(c->in_shape);
  free(c->in_is_scalar);
  free(c->in_alias_of);
  free(c->gin_src);
  free(c->gin_index);
  free(c->gin_const);
  free(c->out_src);
  free(c->out_index);
  free(c->out_const);
  free(c->out_dtype);
  free(c->out_shape);
  free(c);
}

void tt_capture_retain(tt_capture_t *c) { __atomic_add_fetch(&c->refcount, 1, __ATOMIC_RELAXED); }

void tt_capture_release(tt_capture_t *c) {
  if (!c || __atomic_sub_fetch(&c->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  tt_capture_free(c);
}

int32_t tt_capture_num_inputs(const tt_capture_t *c) { return c->num_inputs; }
int32_t tt_capture_num_outputs(const tt_capture_t *c) { return c->num_outputs; }
int32_t tt_capture_num_seeds(const tt_capture_t *c) { return c->num_seeds; }
int32_t tt_capture_num_graph_inputs(const tt_capture_t *c) { return c->num_graph_inputs; }
int32_t tt_capture_num_graph_outputs(const tt_capture_t *c) { return c->num_graph_outputs; }
uint64_t tt_capture_hash(const tt_capture_t *c) { return c->hash; }

int32_t tt_capture_graph_input_source(const tt_capture_t *c, int32_t k, int32_t *out_index) {
  if (k < 0 || k >= c->num_graph_inputs) return -1;
  *out_index = c->gin_index[k];
  return c->gin_src[k];
}

tt_status_t tt_capture_graph_text(const tt_capture_t *c, char **out_text) {
  *out_text = c->exe ? tt_graph_to_text(tt_executable_graph(c->exe)) : calloc(1, 1);
  if (!*out_text) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (graph text)");
  return NULL;
}

/* The buffer a materialized tensor or a PARAM alias stands for (lock held). */
static tt_buffer_t *tt_tensor_value_buffer(const tt_tensor_t *t) {
  if (!t->node) return t->buffer;
  return t->node->op == TT_OP_PARAM ? t->node->buffer : NULL;
}

static void tt_shape_str(const tt_shape_t *s, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  len += (size_t)snprintf(buf, n, "[");
  for (int32_t d = 0; d < s->rank && len < n; ++d)
    len += (size_t)snprintf(buf + len, n - len, d ? ", %lld" : "%lld", (long long)s->dims[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

tt_status_t tt_lazy_capture(tt_tensor_t *const *inputs, int32_t num_inputs,
                            tt_tensor_t *const *outputs, int32_t num_outputs,
                            tt_capture_t **out_capture) {
  *out_capture = NULL;
  if (num_inputs < 0 || num_outputs < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "capture: negative counts (%d inputs, %d outputs)",
                          num_inputs, num_outputs);
  tt_capture_t *c = calloc(1, sizeof(*c));
  size_t ni = (size_t)num_inputs + 1, no = (size_t)num_outputs + 1;
  tt_buffer_t **in_buf = calloc(ni, sizeof(*in_buf));
  tt_tensor_t **roots = calloc(no, sizeof(*roots));
  int32_t *root_of = calloc(no, sizeof(*root_of));
  if (c) {
    c->refcount = 1;
    c->num_inputs = num_inputs;
    c->num_outputs = num_outputs;
    c->in_dtype = calloc(ni, sizeof(*c->in_dtype));
    c->in_shape = calloc(ni, sizeof(*c->in_shape));
    c->in_is_scalar = calloc(ni, sizeof(*c->in_is_scalar));
    c->in_alias_of = calloc(ni, sizeof(*c->in_alias_of));
    c->out_src = calloc(no, sizeof(*c->out_src));
    c->out_index = calloc(no, sizeof(*c->out_index));
    c->out_const = calloc(no, sizeof(*c->out_const));
    c->out_dtype = calloc(no, sizeof(*c->out_dtype));
    c->out_shape = calloc(no, sizeof(*c->out_shape));
  }
  if (!c || !in_buf || !roots || !root_of || !c->in_dtype || !c->in_shape || !c->in_is_scalar ||
      !c->in_alias_of || !c->out_src || !c->out_index || !c->out_const || !c->out_dtype ||
      !c->out_shape) {
    tt_capture_free(c);
    free(in_buf);
    free(roots);
    free(root_of);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (capture)");
  }
  tt_status_t st = NULL;
  tt_graph_t *g = NULL;
  tt_node_t **gin = NULL;
  c->device = num_outputs ? outputs[0]->device : (num_inputs ? inputs[0]->device : 0);
  pthread_mutex_lock(&tt_lazy_lock_);
  for (int32_t j = 0; j < num_inputs && !st; ++j) {
    const tt_tensor_t *t = inputs[j];
    if (t->device != c->device)
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "capture: input %d is on xla:%d, expected xla:%d like the others", j,
                          t->device, c->device);
    else if (t->node && t->node->op != TT_OP_PARAM && t->node->op != TT_OP_SCALAR)
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "capture: input %d (tensor %lld) has pending computation (%s); sync the "
                          "inputs before tracing",
                          j, (long long)t->id, tt_op_name(t->node->op));
    c->in_dtype[j] = t->dtype;
    c->in_shape[j] = t->shape;
    c->in_is_scalar[j] = t->node && t->node->op == TT_OP_SCALAR;
    in_buf[j] = c->in_is_scalar[j] ? NULL : tt_tensor_value_buffer(t);
    c->in_alias_of[j] = -1;
    for (int32_t k = 0; k < j && in_buf[j]; ++k)
      if (in_buf[k] == in_buf[j]) {
        c->in_alias_of[j] = k;
        break;
      }
  }
  /* Roots: the pending outputs, deduplicated, as a cut would take them. */
  int32_t nr = 0;
  for (int32_t i = 0; i < num_outputs && !st; ++i) {
    tt_tensor_t *t = outputs[i];
    root_of[i] = -1;
    c->out_dtype[i] = t->dtype;
    c->out_shape[i] = t->shape;
    if (t->device != c->device) {
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "capture: output %d is on xla:%d, expected xla:%d like the others", i,
                          t->device, c->device);
      break;
    }
    if (!t->node || t->node->op == TT_OP_PARAM) continue;
    for (int32_t r = 0; r < nr; ++r)
      if (roots[r] == t) root_of[i] = r;
    if (root_of[i] < 0) {
      root_of[i] = nr;
      roots[nr++] = t;
    }
  }
  if (!st && nr > 0) {
    tt_node_t **nodes = malloc(sizeof(*nodes) * (size_t)nr);
    if (!nodes) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (capture)");
    for (int32_t r = 0; r < nr && !st; ++r) nodes[r] = roots[r]->node;
    if (!st) st = tt_graph_build(nodes, nr, &g, &gin);
    free(nodes);
  }
  if (!st && g) {
    int32_t n = g->num_inputs;
    c->num_graph_inputs = n;
    c->num_graph_outputs = nr;
    c->hash = g->hash;
    c->gin_src = calloc((size_t)n + 1, sizeof(*c->gin_src));
    c->gin_index = calloc((size_t)n + 1, sizeof(*c->gin_index));
    c->gin_const = calloc((size_t)n + 1, sizeof(*c->gin_const));
    uint8_t *is_seed = calloc((size_t)n + 1, 1);
    if (!c->gin_src || !c->gin_index || !c->gin_const || !is_seed) {
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (capture)");
    } else {
      /* A SCALAR read as the key of an RNG op is a seed slot. */
      for (int32_t i = 0; i < g->num_instrs; ++i) {
        const tt_instr_t *in = &g->instrs[i];
        if (in->op != TT_OP_RNG || in->num_operands < 1) continue;
        const tt_instr_t *key = &g->instrs[in->operands[0]];
        if (key->op == TT_OP_SCALAR) is_seed[key->input_index] = 1;
      }
      for (int32_t k = 0; k < n; ++k) {
        tt_node_t *node = gin[k];
        int32_t src = -1;
        for (int32_t j = 0; j < num_inputs && src < 0; ++j) {
          if (node->op == TT_OP_PARAM && !c->in_is_scalar[j] && in_buf[j] == node->buffer) src = j;
          if (node->op == TT_OP_SCALAR && c->in_is_scalar[j] && inputs[j]->node == node) src = j;
        }
        if (src >= 0) {
          c->gin_src[k] = TT_CAP_SRC_INPUT;
          c->gin_index[k] = src;
        } else if (node->op == TT_OP_SCALAR && is_seed[k]) {
          c->gin_src[k] = TT_CAP_SRC_SEED;
          c->gin_index[k] = c->num_seeds++;
        } else {
          c->gin_src[k] = TT_CAP_SRC_CONST;
          c->gin_const[k].buffer = node->op == TT_OP_PARAM ? node->buffer : NULL;
          if (c->gin_const[k].buffer) tt_buffer_retain(c->gin_const[k].buffer);
          c->gin_const[k].scalar_f = node->scalar_f;
          c->gin_const[k].scalar_i = node->scalar_i;
        }
      }
    }
    free(is_seed);
  }
  free(gin);
  /* Compile and run the first call through the ordinary cut. */
  if (!st && nr > 0) st = tt_cut_locked(roots, nr, c->device, 0);
  if (!st && g) {
    c->exe = tt_cache_lookup(g);
    if (c->exe) {
      tt_executable_retain(c->exe);
    } else {
      /* Not cached (cache insert ran out of memory): plan our own copy. */
      st = tt_executable_create(g, &c->exe);
      if (!st) g = NULL;
    }
    if (!st && tt_executable_graph(c->exe)->num_inputs != c->num_graph_inputs)
      st = tt_status_make(TT_INTERNAL, "capture: compiled graph has %d inputs, traced graph %d",
                          tt_executable_graph(c->exe)->num_inputs, c->num_graph_inputs);
  }
  for (int32_t i = 0; i < num_outputs && !st; ++i) {
    if (root_of[i] >= 0) {
      c->out_src[i] = TT_CAP_OUT_GRAPH;
      c->out_index[i] = root_of[i];
      continue;
    }
    tt_buffer_t *b = tt_tensor_value_buffer(outputs[i]);
    int32_t src = -1;
    for (int32_t j = 0; j < num_inputs && src < 0; ++j)
      if (b && in_buf[j] == b) src = j;
    if (src < 0 && outputs[i]->node && outputs[i]->node->op == TT_OP_SCALAR)
      for (int32_t j = 0; j < num_inputs && src < 0; ++j)
        if (inputs[j] == outputs[i]) src = j;
    if (src >= 0) {
      c->out_src[i] = TT_CAP_OUT_INPUT;
      c->out_index[i] = src;
    } else if (b) {
      c->out_src[i] = TT_CAP_OUT_CONST;
      c->out_const[i] = b;
      tt_buffer_retain(b);
    } else {
      st = tt_status_make(TT_INTERNAL, "capture: output %d has no value after the cut", i);
    }
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  tt_graph_destroy(g);
  free(in_buf);
  free(roots);
  free(root_of);
  if (st) {
    tt_capture_free(c);
    return st;
  }
  *out_capture = c;
  return NULL;
}

int tt_capture_matches(const tt_capture_t *c, tt_tensor_t *const *inputs, int32_t num_inputs,
                       char *why, size_t why_size) {
  char a[160], b[160];
  if (why && why_size) why[0] = 0;
  if (num_inputs != c->num_inputs) {
    if (why) snprintf(why, why_size, "expected %d inputs, got %d", c->num_inputs, num_inputs);
    return 0;
  }
  for (int32_t j = 0; j < num_inputs; ++j) {
    const tt_tensor_t *t = inputs[j];
    if (t->device != c->device) {
      if (why)
        snprintf(why, why_size, "input %d is on xla:%d, the graph was captured on xla:%d", j,
                 t->device, c->device);
      return 0;
    }
    if (t->dtype != c->in_dtype[j] || !tt_shape_equal(&t->shape, &c->in_shape[j])) {
      if (why) {
        tt_shape_str(&t->shape, a, sizeof(a));
        tt_shape_str(&c->in_shape[j], b, sizeof(b));
        snprintf(why, why_size, "input %d is %s%s, the graph was captured for %s%s", j,
                 tt_dtype_name(t->dtype), a, tt_dtype_name(c->in_dtype[j]), b);
      }
      return 0;
    }
    /* Read without the engine lock: a racing cut can only turn a pending
     * scalar into data, which tt_lazy_replay checks again under the lock. */
    tt_node_t *node = __atomic_load_n(&t->node, __ATOMIC_ACQUIRE);
    int is_scalar = node && node->op == TT_OP_SCALAR;
    if (is_scalar != (int)c->in_is_scalar[j]) {
      if (why)
        snprintf(why, why_size, "input %d is %s, the graph was captured with %s", j,
                 is_scalar ? "a runtime scalar" : "device data",
                 c->in_is_scalar[j] ? "a runtime scalar" : "device data");
      return 0;
    }
  }
  return 1;
}

tt_status_t tt_lazy_replay(tt_capture_t *c, tt_tensor_t *const *inputs, int32_t num_inputs,
                           const int64_t *seeds, int32_t num_seeds, tt_tensor_t **out_tensors) {
  char why[256];
  for (int32_t i = 0; i < c->num_outputs; ++i) out_tensors[i] = NULL;
  if (!tt_capture_matches(c, inputs, num_inputs, why, sizeof(why)))
    return tt_status_make(TT_INVALID_ARGUMENT, "replay: %s", why);
  if (num_seeds != c->num_seeds)
    return tt_status_make(TT_INVALID_ARGUMENT, "replay: the graph takes %d RNG seeds, got %d",
                          c->num_seeds, num_seeds);
  /* Inputs still being computed lazily are cut first. */
  tt_tensor_t **pend = malloc(sizeof(*pend) * ((size_t)num_inputs + 1));
  tt_input_value_t *vals = calloc((size_t)c->num_graph_inputs + 1, sizeof(*vals));
  tt_buffer_t **outs = calloc((size_t)c->num_graph_outputs + 1, sizeof(*outs));
  if (!pend || !vals || !outs) {
    free(pend);
    free(vals);
    free(outs);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (replay)");
  }
  int32_t np = 0;
  pthread_mutex_lock(&tt_lazy_lock_);
  for (int32_t j = 0; j < num_inputs; ++j)
    if (!c->in_is_scalar[j] && inputs[j]->node && inputs[j]->node->op != TT_OP_PARAM)
      pend[np++] = inputs[j];
  pthread_mutex_unlock(&tt_lazy_lock_);
  tt_status_t st = np ? tt_lazy_sync_tensors(pend, np, 0) : NULL;
  free(pend);
  if (st) {
    free(vals);
    free(outs);
    return st;
  }
  pthread_mutex_lock(&tt_lazy_lock_);
  for (int32_t j = 0; j < num_inputs && !st; ++j) {
    if (c->in_is_scalar[j]) {
      if (!inputs[j]->node || inputs[j]->node->op != TT_OP_SCALAR)
        st = tt_status_make(TT_INVALID_ARGUMENT, "replay: input %d is no longer a runtime scalar",
                            j);
      continue;
    }
    if (!tt_tensor_value_buffer(inputs[j]))
      st = tt_status_make(TT_INVALID_ARGUMENT, "replay: input %d was given new pending work "
                          "while the graph was being queued", j);
    else if (c->in_alias_of[j] >= 0 &&
             tt_tensor_value_buffer(inputs[c->in_alias_of[j]]) != tt_tensor_value_buffer(inputs[j]))
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "replay: inputs %d and %d were the same data at capture but differ now",
                          c->in_alias_of[j], j);
  }
  for (int32_t k = 0; k < c->num_graph_inputs && !st; ++k) {
    int32_t idx = c->gin_index[k];
    if (c->gin_src[k] == TT_CAP_SRC_CONST) {
      vals[k] = c->gin_const[k];
    } else if (c->gin_src[k] == TT_CAP_SRC_SEED) {
      vals[k].scalar_i = seeds[idx];
      vals[k].scalar_f = (double)seeds[idx];
    } else if (c->in_is_scalar[idx]) {
      vals[k].scalar_f = inputs[idx]->node->scalar_f;
      vals[k].scalar_i = inputs[idx]->node->scalar_i;
    } else {
      vals[k].buffer = tt_tensor_value_buffer(inputs[idx]);
    }
  }
  if (!st && c->exe) {
    const tt_graph_t *eg = tt_executable_graph(c->exe);
    for (int32_t r = 0; r < c->num_graph_outputs && !st; ++r) {
      const tt_instr_t *in = &eg->instrs[eg->output_instr[r]];
      outs[r] = tt_buffer_create_pending(c->device,
                                         (size_t)tt_shape_numel(&in->shape) * tt_dtype_size(in->dtype));
      if (!outs[r]) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer)");
    }
    if (!st)
      st = tt_executable_enqueue(c->exe, c->device, vals, c->num_graph_inputs, outs,
                                 c->num_graph_outputs);
    /* A replayed graph repeats by definition: ask for tier 1 as a cut of a
     * repeating graph does (the capture's cut was the first run). */
    if (!st && tt_executable_count_run(c->exe) == 1 && tt_tier_mode() == TT_TIER_AUTO)
      tt_tier1_request(c->exe, 0);
  }
  int32_t created = 0;
  for (int32_t i = 0; i < c->num_outputs && !st; ++i) {
    if (c->out_src[i] == TT_CAP_OUT_INPUT) {
      tt_tensor_retain(inputs[c->out_index[i]]);
      out_tensors[i] = inputs[c->out_index[i]];
      continue;
    }
    tt_buffer_t *b = c->out_src[i] == TT_CAP_OUT_GRAPH ? outs[c->out_index[i]] : c->out_const[i];
    tt_tensor_t *t = tt_tensor_new_locked(c->device, c->out_dtype[i], &c->out_shape[i]);
    if (!t) {
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
      break;
    }
    ++created;
    tt_buffer_retain(b);
    t->buffer = b;
    out_tensors[i] = t;
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  for (int32_t r = 0; r < c->num_graph_outputs; ++r) tt_buffer_release(outs[r]);
  free(vals);
  free(outs);
  if (st) {
    for (int32_t i = 0; i < c->num_outputs; ++i) {
      tt_tensor_release(out_tensors[i]);
      out_tensors[i] = NULL;
    }
    return st;
  }
  tt_counter_add("CreateXlaTensor", created);
  return NULL;
}
