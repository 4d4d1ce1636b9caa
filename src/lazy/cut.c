/* Graph cuts: tt_lazy_sync cuts every live pending tensor of a device (a
 * step boundary), tt_lazy_sync_tensors only what the given tensors need.
 * A cut builds and compiles the roots' graph (compile.c), queues it with
 * new pending output buffers, and turns its tensors into data. */
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "lazy/spmd_internal.h"
#include "torchtpu/metrics.h"
#include "torchtpu/debug.h"
#include "torchtpu/trace.h"

/* A live tensor derived from another one's new data by a movement (see
 * tt_derive_roots_). */
typedef struct {
  tt_tensor_t *tensor, *source;
  tt_op_t op;
  int32_t num_iattrs; /* op's attributes, encoded (op_attrs.h) */
  int64_t iattrs[TT_MAX_IATTRS];
  double fattrs[TT_MAX_FATTRS];
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
    int32_t rank = owners[b]->shape.rank;
    if (v->op == TT_OP_TRANSPOSE) {
      tt_transpose_attrs_t vt, inv = {.perm = {.n = rank}};
      TT_ATTRS(v, &vt);
      for (int32_t i = 0; i < rank; ++i) inv.perm.v[vt.perm.v[i]] = i; /* inverse permutation */
      tt_attrs_encode_valid(e->op, &inv, sizeof(inv), -1, e->iattrs, &e->num_iattrs, e->fattrs);
    } else {
      tt_dims_attrs_t to = {.dims = {.n = rank}};
      for (int32_t i = 0; i < rank; ++i) to.dims.v[i] = owners[b]->shape.dims[i];
      tt_attrs_encode_valid(e->op, &to, sizeof(to), -1, e->iattrs, &e->num_iattrs, e->fattrs);
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
    tt_shard_set_release(t->shards);
    t->shards = NULL;
    free(t->host);
    t->host = NULL;
    t->derived = 1;
  }
  if (nd) tt_counter_add("DerivedSyncTensor", nd);
}

/* derive: views' bases may stay pending (tt_derive_roots_). */
static int tt_alias_with_donor_; /* guarded by the engine lock */

void tt_lazy_set_alias_with_donor(int enable) {
  pthread_mutex_lock(&tt_lazy_lock);
  tt_alias_with_donor_ = enable != 0;
  pthread_mutex_unlock(&tt_lazy_lock);
}

static int tt_by_id_(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The runtime scalar values already sent to each device: PyTorch/XLA keeps
 * its scalar device data in a cache and transfers only values it has not
 * seen, so only those count as transfers here. A bounded set of 64-bit keys
 * (device, dtype, value), emptied when full. Guarded by the engine lock. */
#define TT_SCALAR_SEEN_SLOTS 4096 /* power of two */
static uint64_t tt_scalar_seen_[TT_SCALAR_SEEN_SLOTS]; /* 0: empty */
static int32_t tt_scalar_seen_count_;

static int tt_scalar_first_sent_(const tt_node_t *in, int32_t device) {
  uint64_t bits = 0;
  if (tt_dtype_is_float(in->dtype)) memcpy(&bits, &in->scalar_f, sizeof(bits));
  else bits = (uint64_t)in->scalar_i;
  uint64_t key = ((bits ^ 0xCBF29CE484222325ull) * 0x100000001B3ull) ^
                 ((uint64_t)in->dtype << 40 | (uint64_t)(uint32_t)device);
  key = (key * 0x9E3779B97F4A7C15ull) | 1; /* never 0 */
  uint32_t mask = TT_SCALAR_SEEN_SLOTS - 1, i = (uint32_t)(key >> 32) & mask;
  while (tt_scalar_seen_[i]) {
    if (tt_scalar_seen_[i] == key) return 0;
    i = (i + 1) & mask;
  }
  if (tt_scalar_seen_count_ >= TT_SCALAR_SEEN_SLOTS / 2) {
    memset(tt_scalar_seen_, 0, sizeof(tt_scalar_seen_));
    tt_scalar_seen_count_ = 0;
    i = (uint32_t)(key >> 32) & mask;
  }
  tt_scalar_seen_[i] = key;
  ++tt_scalar_seen_count_;
  return 1;
}

/* The (graph, donors) pairs already counted in InputOutputAliasCount:
 * PyTorch/XLA's donors are part of its graph's identity, so it compiles, and
 * samples the metric, once per pair. This engine's cache ignores donation,
 * so the pairs are remembered here (64-bit keys), until the metrics are
 * cleared (tt_lazy_forget_alias_samples). Guarded by the engine lock. */
#define TT_ALIAS_SEEN_BUCKETS 256
typedef struct tt_alias_seen_s {
  struct tt_alias_seen_s *next;
  uint64_t key;
} tt_alias_seen_t;
static tt_alias_seen_t *tt_alias_seen_[TT_ALIAS_SEEN_BUCKETS];

void tt_lazy_forget_alias_samples(void) {
  pthread_mutex_lock(&tt_lazy_lock);
  for (int32_t b = 0; b < TT_ALIAS_SEEN_BUCKETS; ++b) {
    while (tt_alias_seen_[b]) {
      tt_alias_seen_t *e = tt_alias_seen_[b];
      tt_alias_seen_[b] = e->next;
      free(e);
    }
  }
  pthread_mutex_unlock(&tt_lazy_lock);
}

/* 1 the first time key is seen (and remembers it; out of memory only means
 * it may be counted again). */
static int tt_alias_first_seen_(uint64_t key) {
  tt_alias_seen_t **head = &tt_alias_seen_[key % TT_ALIAS_SEEN_BUCKETS];
  for (tt_alias_seen_t *e = *head; e; e = e->next)
    if (e->key == key) return 0;
  tt_alias_seen_t *e = malloc(sizeof(*e));
  if (e) {
    e->key = key;
    e->next = *head;
    *head = e;
  }
  return 1;
}

/* PyTorch/XLA's buffer donors among a cut's graph inputs. At a step's
 * sync, those holding data that an output's in-place update replaces
 * (tt_tensor_propagate_alias); at a step's sync, or any sync while
 * tt_lazy_set_alias_with_donor is on, those the user marked
 * (tt_tensor_set_donation). Samples InputOutputAliasCount (their number)
 * the first time the graph runs with these donors, as PyTorch/XLA samples
 * it per compile. Returns the user-marked donors' buffers in *user_donated
 * (malloc'd, *n_user entries; the caller frees it): PyTorch/XLA deletes
 * those after the run. This engine itself also donates at run time
 * whenever the execution holds an input buffer's only reference
 * (src/backends/cpu/backend.c, whose counter of the same name counts
 * those). Partitioned cuts count theirs here too (spmd_cut.c). */
void tt_cut_count_alias_inputs_locked(uint64_t graph_hash, tt_node_t *const *inputs, int32_t ni,
                                      tt_tensor_t *const *owners, int32_t nr, int step,
                                      tt_buffer_t ***user_donated, int32_t *n_user) {
  int64_t aliased = 0;
  uint64_t key = graph_hash ^ 0x9E3779B97F4A7C15ull;
  int64_t *ids = step ? malloc(sizeof(int64_t) * ((size_t)nr + 1)) : NULL;
  if (ids) {
    for (int32_t r = 0; r < nr; ++r) ids[r] = owners[r]->alias_id;
    qsort(ids, (size_t)nr, sizeof(int64_t), tt_by_id_);
  }
  int user = step || tt_alias_with_donor_;
  *user_donated = NULL;
  *n_user = 0;
  for (int32_t i = 0; i < ni; ++i) {
    const tt_node_t *in = inputs[i];
    if (in->op != TT_OP_PARAM) continue;
    int by_user = user && in->donor;
    int donor = by_user || (ids && in->tensor_id &&
                            bsearch(&in->tensor_id, ids, (size_t)nr, sizeof(int64_t), tt_by_id_));
    if (!donor) continue;
    ++aliased;
    /* FNV-1a step per donor: its position and kind (a user's buffer donor
     * or an in-place update's input-output alias, which PyTorch/XLA's
     * graph identity tells apart). */
    key = (key ^ ((uint64_t)(i + 1) << 1 | (uint64_t)by_user)) * 0x100000001B3ull;
    if (!by_user || !in->buffer) continue; /* shards are not deleted (docs/spmd.md) */
    if (!*user_donated) *user_donated = malloc(sizeof(tt_buffer_t *) * (size_t)ni);
    if (*user_donated) (*user_donated)[(*n_user)++] = in->buffer;
  }
  free(ids);
  if (tt_alias_first_seen_(key))
    tt_metric_add("InputOutputAliasCount", TT_UNIT_COUNT, (double)aliased);
}

tt_status_t tt_cut_locked(tt_tensor_t **ts, int32_t n, int32_t device, int derive) {
  tt_node_t **roots = malloc(sizeof(*roots) * (size_t)(n ? n : 1));
  tt_tensor_t **owners = malloc(sizeof(*owners) * (size_t)(n ? n : 1));
  if (!roots || !owners) {
    free(roots);
    free(owners);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cut)");
  }
  int32_t nr = 0;
  int replicated = 0; /* an SPMD-mode execution (below) */
  for (int32_t i = 0; i < n; ++i) {
    tt_tensor_t *t = ts[i];
    if (!t->node) continue;
    if (t->node->op == TT_OP_PARAM) {
      /* An alias of existing data: no computation needed. */
      tt_buffer_t *b = t->node->buffer;
      if (b) tt_buffer_retain(b);
      tt_buffer_release(t->buffer);
      t->buffer = b;
      tt_shard_set_retain(t->node->shards);
      tt_shard_set_release(t->shards);
      t->shards = t->node->shards;
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
  /* In SPMD mode every execution is PyTorch/XLA's ExecuteReplicated (its
   * virtual device's programs are compiled partitioned): counted once and
   * sampled once in ExecuteReplicatedTime, whichever way it runs here. */
  replicated = tt_virtual_device_locked();
  if (replicated) tt_runtime_replicated_begin();
  if (tt_spmd_on_locked()) {
    /* SPMD mode: a sharded graph runs partitioned, one program per device. */
    int handled = 0;
    st = tt_spmd_cut_locked(roots, owners, nr, device, derive, &handled);
    if (!st && handled) tt_attach_derived_(derived, nderived);
    if (st || handled) goto done;
  }
  tt_graph_t *g = NULL;
  tt_node_t **inputs = NULL;
  tt_executable_t *exe = NULL;
  st = tt_lazy_compile_locked(roots, nr, device, &g, &inputs, &exe);
  if (st) goto done;
  const tt_graph_t *eg = tt_executable_graph(exe);
  int32_t ni = eg->num_inputs;
  tt_buffer_t **user_donated = NULL;
  int32_t n_user_donated = 0;
  tt_cut_count_alias_inputs_locked(g->hash, inputs, ni, owners, nr, derive, &user_donated,
                                   &n_user_donated);
  tt_input_value_t *vals = calloc((size_t)ni + 1, sizeof(*vals));
  tt_buffer_t **outs = calloc((size_t)nr + 1, sizeof(*outs));
  tt_buffer_t **assembled = NULL; /* per input: a buffer assembled from shards */
  if (!vals || !outs) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cut)");
  } else {
    /* PyTorch/XLA's timers of the same names: the graph's input buffers
     * taken from their nodes, the outputs given to their tensors. */
    int64_t unwrap_t0 = tt_now_ns();
    int64_t scalars = 0, scalar_bytes = 0;
    for (int32_t i = 0; i < ni; ++i) {
      tt_node_t *in = inputs[i];
      vals[i].buffer = in->op == TT_OP_PARAM ? in->buffer : NULL;
      if (in->op == TT_OP_PARAM && in->shards && !st) {
        /* Sharded storage read by a graph that runs whole: assembled on
         * this device by a queued program (released after the enqueue). */
        st = tt_spmd_assemble_locked(in->shards, &in->shape, in->dtype, device, &vals[i].buffer);
        if (!assembled) assembled = calloc((size_t)ni + 1, sizeof(*assembled));
        if (assembled) assembled[i] = vals[i].buffer;
        else if (!st) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cut)");
      }
      vals[i].scalar_f = in->scalar_f;
      vals[i].scalar_i = in->scalar_i;
      if (in->op != TT_OP_PARAM && tt_scalar_first_sent_(in, device)) {
        ++scalars;
        scalar_bytes += (int64_t)tt_dtype_size(in->dtype);
      }
    }
    int64_t unwrap_ns = tt_now_ns() - unwrap_t0;
    tt_metric_add("UnwrapXlaData", TT_UNIT_NANOSECONDS, (double)unwrap_ns);
    /* The runtime scalars (numbers, RNG keys) go to the device with the
     * execution: PyTorch/XLA makes each such value device data, a transfer
     * counted under these names the first time it sends a value
     * (tt_scalar_first_sent_). */
    if (scalars) {
      tt_counter_add("CreateDataHandles", scalars);
      tt_metric_add("OutboundData", TT_UNIT_BYTES, (double)scalar_bytes);
      tt_metric_add("TransferToDeviceTime", TT_UNIT_NANOSECONDS, (double)unwrap_ns);
    }
    for (int32_t r = 0; r < nr && !st; ++r) {
      tt_tensor_t *t = owners[r];
      size_t bytes = (size_t)tt_shape_numel(&t->shape) * tt_dtype_size(t->dtype);
      outs[r] = tt_buffer_create_pending(device, bytes);
      if (!outs[r]) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer)");
    }
    if (!st) st = tt_executable_enqueue_held(exe, device, vals, ni, outs, nr);
    if (!st) {
      int64_t wrap_t0 = tt_now_ns();
      for (int32_t r = 0; r < nr; ++r) {
        tt_tensor_t *t = owners[r];
        tt_buffer_release(t->buffer);
        t->buffer = outs[r];
        outs[r] = NULL;
        tt_shard_set_release(t->shards);
        t->shards = NULL;
        tt_node_release(t->data_node);
        t->data_node = NULL;
        /* Drop the IR only after the job holds its input buffers. */
        tt_node_t *old = t->node;
        t->node = NULL;
        t->derived = 0;
        t->cut_result = 1;
        tt_node_release(old);
      }
      tt_metric_add("WrapXlaData", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - wrap_t0));
      /* The job holds the user-donated buffers: the tensors holding them
       * (not given new values above) lose them and become placeholders,
       * as PyTorch/XLA deletes donated data. */
      for (int32_t k = 0; k < n_user_donated; ++k) tt_tensor_delete_donated_locked(user_donated[k]);
    }
    if (!st) tt_attach_derived_(derived, nderived);
    for (int32_t r = 0; r < nr; ++r) tt_buffer_release(outs[r]);
    /* The graph's IR is gone: let the job run (it may now own its inputs). */
    if (!st) tt_runtime_release_held(device);
  }
  if (assembled)
    for (int32_t i = 0; i < ni; ++i) tt_buffer_release(assembled[i]);
  free(assembled);
  free(user_donated);
  free(vals);
  free(outs);
  free(inputs);
  tt_graph_destroy(g);
  tt_executable_release(exe);
done:
  if (replicated && tt_runtime_replicated_end() > 0) tt_counter_add("ExecuteReplicated", 1);
  free(roots);
  free(owners);
  free(derived);
  return st;
}

tt_status_t tt_lazy_sync(int32_t device, int wait, const char *name) {
  tt_status_t st = NULL;
  int64_t trace_t0 = tt_trace_now();
  int32_t ndev = tt_runtime_device_count();
  /* Before the engine lock: the device may need it to finish its work.
   * PyTorch/XLA's DeviceLockWait: the time a step's sync waits for the
   * device (earlier steps in flight) and the engine. */
  int64_t lock_t0 = tt_now_ns();
  /* In SPMD mode a step's programs run on every device (spmd_cut.c): the
   * step boundary paces, and a waiting sync waits for, all of them. */
  int spmd = tt_lazy_spmd_partitioning();
  tt_runtime_throttle(spmd ? -1 : device);
  pthread_mutex_lock(&tt_lazy_lock);
  tt_metric_add("DeviceLockWait", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - lock_t0));
  int64_t cap = tt_lazy_live_count_locked() + 1;
  tt_tensor_t **ts = malloc(sizeof(*ts) * (size_t)cap);
  if (!ts) {
    pthread_mutex_unlock(&tt_lazy_lock);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sync)");
  }
  tt_debug_set_sync_name(name);
  for (int32_t d = 0; d < ndev && !st; ++d) {
    if (device >= 0 && d != device) continue;
    int32_t n = tt_lazy_pending_on_locked(d, ts);
    if (n) st = tt_cut_locked(ts, n, d, 1);
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  tt_debug_set_sync_name(NULL);
  free(ts);
  if (!st && wait) tt_runtime_wait(spmd ? -1 : device);
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
  pthread_mutex_lock(&tt_lazy_lock);
  for (int32_t d = 0; d < ndev && !st; ++d) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; ++i) {
      int dup = 0;
      for (int32_t j = 0; j < k; ++j) dup |= ts[j] == tensors[i];
      if (!dup && tensors[i]->device == d && tensors[i]->node) ts[k++] = tensors[i];
    }
    if (k) st = tt_cut_locked(ts, k, d, 0);
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  free(ts);
  if (!st && wait)
    for (int32_t i = 0; i < n && !st; ++i)
      if (tensors[i]->buffer) st = tt_buffer_wait(tensors[i]->buffer);
  tt_trace_complete("SyncTensorsGraph", "lazy", trace_t0, "{\"tensors\":%d,\"wait\":%d}", n,
                    wait);
  return st;
}

tt_status_t tt_lazy_graph_dump(tt_tensor_t *const *tensors, int32_t n, int fmt, char **out_text) {
  *out_text = NULL;
  tt_node_t **roots = malloc(sizeof(*roots) * (size_t)(n ? n : 1));
  if (!roots) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_lock(&tt_lazy_lock);
  int32_t nr = 0;
  for (int32_t i = 0; i < n; ++i) {
    tt_node_t *node = tt_tensor_use_node(tensors[i]);
    if (node) roots[nr++] = node;
  }
  tt_graph_t *g = NULL;
  tt_status_t st = tt_graph_build(roots, nr, &g, NULL);
  pthread_mutex_unlock(&tt_lazy_lock);
  free(roots);
  if (st) return st;
  *out_text = fmt == 1 ? tt_graph_to_dot(g) : tt_graph_to_text(g);
  tt_graph_destroy(g);
  return NULL;
}
