/* Lazy tensors, the live-tensor registry, graph cuts and the compilation
 * cache. One engine lock guards the registry, node bookkeeping during a
 * build and the cache; device work runs outside it on the device queues. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/lazy.h"
#include "torchtpu/metrics.h"
#include "torchtpu/passes.h"

struct tt_tensor_s {
  int32_t refcount; /* atomic */
  int64_t id;
  int32_t device;
  tt_dtype_t dtype;
  tt_shape_t shape;
  tt_buffer_t *buffer;   /* materialized value (maybe still pending) */
  tt_node_t *node;       /* pending IR, owned */
  tt_node_t *data_node;  /* PARAM node over buffer, reused by later ops */
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
  tt_node_t *n = tt_node_create_scalar(dtype, value_f, value_i, device);
  if (!n) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (scalar)");
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
  if (!t->data_node) t->data_node = tt_node_create_param(t->buffer, t->dtype, &t->shape, t->device);
  return t->data_node;
}

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

/* Cuts the pending tensors in ts (all on device) into one graph, compiles
 * or fetches it from the cache, and queues it. Engine lock held. */
static tt_status_t tt_cut_locked(tt_tensor_t **ts, int32_t n, int32_t device) {
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
      continue;
    }
    roots[nr] = t->node;
    owners[nr] = t;
    ++nr;
  }
  tt_status_t st = NULL;
  if (nr == 0) goto done;
  tt_graph_t *g = NULL;
  tt_node_t **inputs = NULL;
  int64_t t0 = tt_now_ns();
  st = tt_graph_build(roots, nr, &g, &inputs);
  if (st) goto done;
  tt_executable_t *exe = tt_cache_lookup(g);
  if (exe) {
    tt_executable_retain(exe);
    tt_counter_add("CachedCompile", 1);
  } else {
    /* Optimise (the result keeps g's cache key), then plan. */
    tt_optimize_options_t opts;
    tt_optimize_options_from_env(&opts);
    tt_graph_t *opt = NULL;
    st = tt_graph_optimize(g, &opts, &opt);
    if (!st) st = tt_executable_create(opt, &exe);
    if (st) {
      tt_graph_destroy(opt);
      tt_graph_destroy(g);
      free(inputs);
      goto done;
    }
    tt_cache_insert(exe);
    tt_counter_add("UncachedCompile", 1);
    tt_metric_add("CompileTime", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
  }
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
    if (!st) st = tt_executable_enqueue(exe, device, vals, ni, outs, nr);
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
        tt_node_release(old);
      }
    }
    for (int32_t r = 0; r < nr; ++r) tt_buffer_release(outs[r]);
  }
  free(vals);
  free(outs);
  free(inputs);
  tt_graph_destroy(g);
  tt_executable_release(exe);
done:
  free(roots);
  free(owners);
  return st;
}

tt_status_t tt_lazy_sync(int32_t device, int wait, const char *name) {
  (void)name;
  tt_status_t st = NULL;
  int32_t ndev = tt_runtime_device_count();
  pthread_mutex_lock(&tt_lazy_lock_);
  int64_t cap = tt_live_count_ + 1;
  tt_tensor_t **ts = malloc(sizeof(*ts) * (size_t)cap);
  if (!ts) {
    pthread_mutex_unlock(&tt_lazy_lock_);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sync)");
  }
  for (int32_t d = 0; d < ndev && !st; ++d) {
    if (device >= 0 && d != device) continue;
    int32_t n = 0;
    for (tt_tensor_t *t = tt_live_head_; t; t = t->next)
      if (t->device == d && t->node) ts[n++] = t;
    if (n) st = tt_cut_locked(ts, n, d);
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  free(ts);
  if (!st && wait) tt_runtime_wait(device);
  return st;
}

tt_status_t tt_lazy_sync_tensors(tt_tensor_t *const *tensors, int32_t n, int wait) {
  tt_status_t st = NULL;
  tt_tensor_t **ts = malloc(sizeof(*ts) * (size_t)(n ? n : 1));
  if (!ts) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sync)");
  int32_t ndev = tt_runtime_device_count();
  pthread_mutex_lock(&tt_lazy_lock_);
  for (int32_t d = 0; d < ndev && !st; ++d) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; ++i) {
      int dup = 0;
      for (int32_t j = 0; j < k; ++j) dup |= ts[j] == tensors[i];
      if (!dup && tensors[i]->device == d && tensors[i]->node) ts[k++] = tensors[i];
    }
    if (k) st = tt_cut_locked(ts, k, d);
  }
  pthread_mutex_unlock(&tt_lazy_lock_);
  free(ts);
  if (!st && wait)
    for (int32_t i = 0; i < n && !st; ++i)
      if (tensors[i]->buffer) st = tt_buffer_wait(tensors[i]->buffer);
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
