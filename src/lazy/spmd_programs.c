/* The data-movement programs of partitioned execution (spmd_internal.h):
 * slicing one buffer into shards (one program per partition, queued on
 * that partition's device) and assembling shards into one buffer. They are
 * ordinary engine programs, built from IR nodes, cached by their graph key
 * here (not in the compile cache: they are not the user's graphs and do
 * not count as compiles), and queued without waiting: the device workers
 * wait for their input buffers. */
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "lazy/spmd_internal.h"
#include "torchtpu/op_attrs.h"
#include "torchtpu/partition.h"
#include "torchtpu/passes.h"

typedef struct tt_move_entry_s {
  struct tt_move_entry_s *next;
  uint64_t hash;
  size_t key_size;
  uint8_t *key;
  tt_executable_t *exe;
} tt_move_entry_t;

#define TT_MOVE_BUCKETS 64
static tt_move_entry_t *tt_move_cache_[TT_MOVE_BUCKETS]; /* engine lock */

/* The executable of g (built from the program's nodes): cached, or
 * optimised and planned now. One reference for the caller. */
static tt_status_t tt_move_executable_(const tt_graph_t *g, tt_executable_t **out) {
  tt_move_entry_t **head = &tt_move_cache_[g->hash % TT_MOVE_BUCKETS];
  for (tt_move_entry_t *e = *head; e; e = e->next)
    if (e->hash == g->hash && e->key_size == g->key_size && !memcmp(e->key, g->key, g->key_size)) {
      tt_executable_retain(e->exe);
      *out = e->exe;
      return NULL;
    }
  tt_optimize_options_t opts;
  tt_optimize_options_from_env(&opts);
  tt_graph_t *opt = NULL;
  TT_RETURN_IF_ERROR(tt_graph_optimize(g, &opts, &opt));
  tt_executable_t *exe = NULL;
  tt_status_t st = tt_executable_create(opt, &exe);
  if (st) {
    tt_graph_destroy(opt);
    return st;
  }
  tt_move_entry_t *e = calloc(1, sizeof(*e));
  if (e) e->key = malloc(g->key_size ? g->key_size : 1);
  if (e && e->key) {
    memcpy(e->key, g->key, g->key_size);
    e->key_size = g->key_size;
    e->hash = g->hash;
    e->exe = exe;
    tt_executable_retain(exe);
    e->next = *head;
    *head = e;
  } else if (e) {
    free(e);
  }
  *out = exe;
  return NULL;
}

/* Builds the graph of root over params (np PARAM nodes, given bufs[k] at
 * run time) and queues it on device with output out. */
static tt_status_t tt_move_run_(tt_node_t *root, tt_node_t *const *params, tt_buffer_t *const *bufs,
                                int32_t np, int32_t device, tt_buffer_t *out) {
  tt_graph_t *g = NULL;
  tt_node_t **gin = NULL;
  TT_RETURN_IF_ERROR(tt_graph_build(&root, 1, &g, &gin));
  tt_executable_t *exe = NULL;
  tt_status_t st = tt_move_executable_(g, &exe);
  tt_input_value_t *vals = NULL;
  if (!st) {
    int32_t ni = tt_executable_graph(exe)->num_inputs;
    vals = calloc((size_t)ni + 1, sizeof(*vals));
    if (!vals) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (shards)");
    for (int32_t i = 0; i < ni && !st; ++i) {
      for (int32_t k = 0; k < np; ++k)
        if (gin[i] == params[k]) vals[i].buffer = bufs[k];
      if (!vals[i].buffer) st = tt_status_make(TT_INTERNAL, "shard program: input %d unbound", i);
    }
    if (!st) st = tt_executable_enqueue(exe, device, vals, ni, &out, 1);
  }
  free(vals);
  free(gin);
  tt_graph_destroy(g);
  tt_executable_release(exe);
  return st;
}

static tt_status_t tt_move_node_(tt_op_t op, tt_node_t *const *ops, int32_t nops, const void *attrs,
                                 size_t attrs_size, tt_node_t **out) {
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS] = {0};
  int32_t ni = 0;
  TT_RETURN_IF_ERROR(tt_attrs_encode(op, attrs, attrs_size, -1, ia, &ni, fa));
  return tt_node_create(op, 0, ops, nops, ia, ni, fa, TT_MAX_FATTRS, out);
}

/* x cropped or zero-padded: lo[d] elements off the front (>= 0), then
 * grown or cut at the end to size[d]. */
static tt_status_t tt_move_window_(tt_node_t *x, const int64_t *lo, const int64_t *size,
                                   tt_node_t **out) {
  int32_t rank = x->shape.rank, same = 1;
  tt_pad_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.lo.n = a.hi.n = rank;
  for (int32_t d = 0; d < rank; ++d) {
    a.lo.v[d] = -lo[d];
    a.hi.v[d] = size[d] - (x->shape.dims[d] - lo[d]);
    same &= a.lo.v[d] == 0 && a.hi.v[d] == 0;
  }
  if (same) {
    tt_node_retain(x);
    *out = x;
    return NULL;
  }
  return tt_move_node_(TT_OP_PAD, &x, 1, &a, sizeof(a), out);
}

tt_status_t tt_spmd_slice_locked(tt_buffer_t *full, const tt_shape_t *shape, tt_dtype_t dtype,
                                 const tt_sharding_t *layout, tt_shard_set_t **out) {
  *out = NULL;
  tt_shard_set_t *s = tt_shard_set_new(layout);
  if (!s) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (shards)");
  tt_status_t st = NULL;
  int32_t base = tt_spmd_device_base();
  for (int32_t p = 0; p < s->num && !st; ++p) {
    if (!tt_spmd_is_local(p)) continue; /* another process's shard */
    int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK];
    tt_shape_t ss;
    st = tt_partition_tile(layout, shape, p, off, valid, &ss);
    if (st) break;
    for (int32_t d = 0; d < shape->rank; ++d)
      if (off[d] > shape->dims[d]) off[d] = shape->dims[d];
    s->buffers[p] =
        tt_buffer_create_pending(p - base, (size_t)tt_shape_numel(&ss) * tt_dtype_size(dtype));
    tt_node_t *x = tt_node_create_param(full, dtype, shape, 0), *y = NULL;
    if (!s->buffers[p] || !x) {
      tt_node_release(x);
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (shards)");
      break;
    }
    st = tt_move_window_(x, off, ss.dims, &y);
    if (!st) st = tt_move_run_(y, &x, &full, 1, p - base, s->buffers[p]);
    tt_node_release(y);
    tt_node_release(x);
  }
  if (st) {
    tt_shard_set_release(s);
    return st;
  }
  *out = s;
  return NULL;
}

/* The tiles of the grid box [first[d], first[d] + 1) for dims < d0 and
 * whole for dims >= d0, concatenated: tile_of[] maps a tile's row-major
 * grid index to the partition holding it. */
static tt_status_t tt_move_grid_(tt_node_t *const *tiles, const int64_t *grid, int32_t rank,
                                 int32_t d0, int64_t base, tt_node_t **out) {
  if (d0 == rank) {
    tt_node_retain(tiles[base]);
    *out = tiles[base];
    return NULL;
  }
  int64_t stride = 1;
  for (int32_t d = d0 + 1; d < rank; ++d) stride *= grid[d];
  tt_node_t *parts[64];
  int32_t n = 0;
  tt_status_t st = NULL;
  for (int64_t i = 0; i < grid[d0] && !st; ++i) {
    tt_node_t *x = NULL;
    st = tt_move_grid_(tiles, grid, rank, d0 + 1, base + i * stride, &x);
    if (st) break;
    if (x->shape.dims[d0] == 0) {
      tt_node_release(x); /* a tile wholly past the end */
      continue;
    }
    parts[n++] = x;
  }
  if (!st && n == 1) {
    *out = parts[0];
    return NULL;
  }
  if (!st) {
    tt_concat_attrs_t a = {.dim = d0};
    st = tt_move_node_(TT_OP_CONCAT, parts, n, &a, sizeof(a), out);
  }
  for (int32_t k = 0; k < n; ++k) tt_node_release(parts[k]);
  return st;
}

tt_status_t tt_spmd_assemble_locked(tt_shard_set_t *s, const tt_shape_t *shape,
                                    tt_dtype_t dtype, int32_t device, tt_buffer_t **out) {
  *out = NULL;
  int32_t rank = shape->rank, n = s->num;
  int64_t grid[TT_MAX_RANK], ntiles = 1;
  for (int32_t d = 0; d < rank; ++d) ntiles *= grid[d] = s->layout->tile_dims[d];
  if (ntiles > 64)
    return tt_status_make(TT_UNIMPLEMENTED, "assembling %lld tiles (at most 64)",
                          (long long)ntiles);
  tt_node_t *params[64] = {NULL}, *tiles[64] = {NULL};
  tt_buffer_t *bufs[64] = {NULL};
  tt_status_t st = NULL;
  int32_t np = 0;
  for (int32_t p = 0; p < n && !st; ++p) {
    int64_t off[TT_MAX_RANK], valid[TT_MAX_RANK], zero[TT_MAX_RANK] = {0};
    tt_shape_t ss;
    st = tt_partition_tile(s->layout, shape, p, off, valid, &ss);
    if (st) break;
    int64_t t = 0;
    for (int32_t d = 0; d < rank; ++d) {
      int64_t chunk = ss.dims[d];
      t = t * grid[d] + (chunk ? off[d] / chunk : 0);
    }
    if (tiles[t]) continue; /* a replica of a tile already taken */
    if (!s->buffers[p]) continue; /* another process's (a replica may be here) */
    params[np] = tt_node_create_param(s->buffers[p], dtype, &ss, 0);
    bufs[np] = s->buffers[p];
    if (!params[np]) {
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (shards)");
      break;
    }
    st = tt_move_window_(params[np], zero, valid, &tiles[t]);
    ++np;
  }
  for (int64_t t = 0; t < ntiles && !st; ++t)
    if (!tiles[t])
      st = tt_status_make(TT_UNIMPLEMENTED,
                          "assembling shards: tile %lld is held only by other processes (a "
                          "layout change of a value sharded over several processes)",
                          (long long)t);
  tt_node_t *root = NULL;
  if (!st) st = tt_move_grid_(tiles, grid, rank, 0, 0, &root);
  tt_buffer_t *b = NULL;
  if (!st) {
    b = tt_buffer_create_pending(device, (size_t)tt_shape_numel(shape) * tt_dtype_size(dtype));
    if (!b) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer)");
  }
  if (!st && root->op == TT_OP_PARAM) /* shard sets hold more than one tile */
    st = tt_status_make(TT_INTERNAL, "assembling shards: one tile");
  if (!st) st = tt_move_run_(root, params, bufs, np, device, b);
  tt_node_release(root);
  for (int64_t t = 0; t < ntiles; ++t) tt_node_release(tiles[t]);
  for (int32_t k = 0; k < np; ++k) tt_node_release(params[k]);
  if (st) {
    tt_buffer_release(b);
    return st;
  }
  *out = b;
  return NULL;
}
