/* The collective layer's operations (include/torchtpu/collective.h): the
 * argument checks, and each operation's data phase, which runs on every
 * member at once once the rendezvous (collective_rendezvous.c) has met
 * them. Members pull what they need from the peers' published inputs into
 * their own output, except the all_reduce: there the members claim chunks
 * of the result in turn, and the member reducing a chunk reads it from
 * every peer's input once and writes it into every member's output, so
 * the whole reduction reads each input and writes each output once. */
#include <string.h>

#include "runtime/collective_internal.h"

/* An all_reduce's work items: chunks of this many bytes (a multiple of
 * 64: no two members write one cache line). */
#define TT_COLL_CHUNK_BYTES ((size_t)256 << 10)
/* float32 sums over at most this many members take the fused path
 * (tt_coll_f32_sum_to_all), with streaming stores from this many bytes
 * per member on: past the caches, where the outputs would be read back
 * from memory anyway. */
#define TT_COLL_FUSED_MAX 64
#ifndef TT_COLL_STREAM_BYTES
#define TT_COLL_STREAM_BYTES ((size_t)16 << 20)
#endif
size_t tt_coll_stream_bytes = TT_COLL_STREAM_BYTES;

static tt_status_t tt_coll_check_group(const char *op, int32_t device,
                                       tt_collective_group_t group) {
  if (group.n < 1 || group.n > TT_COLLECTIVE_MAX_MEMBERS || !group.ids)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: a group has 1 to %d members, got %d", op,
                          TT_COLLECTIVE_MAX_MEMBERS, (int)group.n);
  int member = 0;
  for (int32_t i = 0; i < group.n; ++i) {
    if (group.ids[i] < 0)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: device id %lld is negative", op,
                            (long long)group.ids[i]);
    for (int32_t j = 0; j < i; ++j)
      if (group.ids[j] == group.ids[i])
        return tt_status_make(TT_INVALID_ARGUMENT, "%s: device %lld appears twice in the group",
                              op, (long long)group.ids[i]);
    member |= group.ids[i] == device;
  }
  if (!member)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: device %d is not in its group", op,
                          (int)device);
  return NULL;
}

static tt_status_t tt_coll_check_dtype(const char *op, tt_dtype_t dtype) {
  if ((unsigned)dtype >= TT_DTYPE_COUNT)
    return tt_status_make(TT_TYPE_ERROR, "%s: invalid dtype %d", op, (int)dtype);
  return NULL;
}

static tt_status_t tt_coll_check_blocks(const char *op, const char *what,
                                        tt_collective_blocks_t b) {
  if (b.rows < 0 || b.row < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s layout has negative sizes", op, what);
  return NULL;
}

/* ---- data phases ---- */

static void tt_coll_all_reduce_body(const tt_coll_round_t *rd) {
  const tt_coll_desc_t *me = rd->peers[rd->rank];
  tt_dtype_t dt = me->dtype;
  tt_reduce_op_t red = (tt_reduce_op_t)me->reduce;
  int64_t count = me->count;
  size_t esize = tt_dtype_size(dt);
  if (dt == TT_C64) { /* a sum of f32 pairs */
    dt = TT_F32;
    count *= 2;
    esize = 4;
  }
  /* Chunks of TT_COLL_CHUNK_BYTES (64-byte aligned), claimed by whichever
   * member is running: on a loaded machine a member the scheduler has not
   * woken yet does not hold up its share of the result. */
  int64_t chunk = (int64_t)(TT_COLL_CHUNK_BYTES / esize);
  int64_t chunks = (count + chunk - 1) / chunk;
  int fused = dt == TT_F32 && red == TT_RED_SUM && rd->n <= TT_COLL_FUSED_MAX;
  int stream = fused && (size_t)count * esize >= tt_coll_stream_bytes;
  int64_t c;
  while ((c = atomic_fetch_add_explicit(rd->claim, 1, memory_order_relaxed)) < chunks) {
    int64_t lo = c * chunk, hi = lo + chunk < count ? lo + chunk : count;
    if (fused) {
      const float *x[TT_COLL_FUSED_MAX];
      float *dst[TT_COLL_FUSED_MAX];
      for (int32_t q = 0; q < rd->n; ++q) {
        x[q] = (const float *)rd->peers[q]->in + lo;
        dst[q] = (float *)rd->peers[q]->out + lo;
      }
      tt_coll_f32_sum_to_all(x, dst, rd->n, hi - lo, stream);
      continue;
    }
    _Alignas(64) unsigned char acc[TT_COLL_BLOCK_BYTES];
    int64_t block = TT_COLL_BLOCK_BYTES / (int64_t)tt_coll_acc_size(dt);
    for (int64_t b = lo; b < hi; b += block) {
      int64_t k = hi - b < block ? hi - b : block;
      size_t off = (size_t)b * esize;
      /* In rank order: every member's result is the same bits, whatever
       * member reduced the chunk. */
      tt_coll_acc_load(dt, acc, (const char *)rd->peers[0]->in + off, k);
      for (int32_t q = 1; q < rd->n; ++q)
        tt_coll_acc_reduce(dt, red, acc, (const char *)rd->peers[q]->in + off, k);
      for (int32_t q = 0; q < rd->n; ++q)
        tt_coll_acc_store(dt, (char *)rd->peers[q]->out + off, acc, k);
    }
  }
  if (stream) tt_coll_stream_fence();
}

static void tt_coll_all_gather_body(const tt_coll_round_t *rd) {
  const tt_coll_desc_t *me = rd->peers[rd->rank];
  size_t esize = tt_dtype_size(me->dtype);
  size_t row = (size_t)me->out_b.row * esize, stride = row * (size_t)rd->n;
  for (int32_t q = 0; q < rd->n; ++q) {
    const char *src = rd->peers[q]->in;
    char *dst = (char *)me->out + row * (size_t)q;
    for (int64_t r = 0; r < me->out_b.rows; ++r)
      if (row) memcpy(dst + stride * (size_t)r, src + row * (size_t)r, row);
  }
}

static void tt_coll_reduce_scatter_body(const tt_coll_round_t *rd) {
  const tt_coll_desc_t *me = rd->peers[rd->rank];
  tt_dtype_t dt = me->dtype;
  tt_reduce_op_t red = (tt_reduce_op_t)me->reduce;
  size_t esize = tt_dtype_size(dt);
  int64_t row = me->in_b.row;
  if (dt == TT_C64) {
    dt = TT_F32;
    row *= 2;
    esize = 4;
  }
  _Alignas(64) unsigned char acc[TT_COLL_BLOCK_BYTES];
  int64_t block = TT_COLL_BLOCK_BYTES / (int64_t)tt_coll_acc_size(dt);
  for (int64_t r = 0; r < me->in_b.rows; ++r) {
    /* Row r of block `rank`, in every member's input. */
    size_t src = ((size_t)r * (size_t)rd->n + (size_t)rd->rank) * (size_t)row * esize;
    char *dst = (char *)me->out + (size_t)r * (size_t)row * esize;
    for (int64_t b = 0; b < row; b += block) {
      int64_t k = row - b < block ? row - b : block;
      size_t off = (size_t)b * esize;
      tt_coll_acc_load(dt, acc, (const char *)rd->peers[0]->in + src + off, k);
      for (int32_t q = 1; q < rd->n; ++q)
        tt_coll_acc_reduce(dt, red, acc, (const char *)rd->peers[q]->in + src + off, k);
      tt_coll_acc_store(dt, dst + off, acc, k);
    }
  }
}

/* Copies one block from src (rows of `srow` elements, `sstride` apart) to
 * dst (rows of `drow` elements, `dstride` apart): the same elements in the
 * same order, chunked differently. */
void tt_coll_copy_block(const char *src, int64_t srow, int64_t sstride, char *dst, int64_t drow,
                        int64_t dstride, int64_t total, size_t esize) {
  int64_t done = 0;
  while (done < total) {
    int64_t si = done / srow, so = done % srow, di = done / drow, dof = done % drow;
    int64_t k = srow - so < drow - dof ? srow - so : drow - dof;
    memcpy(dst + (size_t)(di * dstride + dof) * esize, src + (size_t)(si * sstride + so) * esize,
           (size_t)k * esize);
    done += k;
  }
}

static void tt_coll_all_to_all_body(const tt_coll_round_t *rd) {
  const tt_coll_desc_t *me = rd->peers[rd->rank];
  size_t esize = tt_dtype_size(me->dtype);
  int64_t n = rd->n;
  tt_collective_blocks_t ib = me->in_b, ob = me->out_b;
  int64_t total = ib.rows * ib.row;
  if (!total) return;
  for (int32_t q = 0; q < rd->n; ++q)
    tt_coll_copy_block((const char *)rd->peers[q]->in + (size_t)(rd->rank * ib.row) * esize,
                       ib.row, n * ib.row, (char *)me->out + (size_t)(q * ob.row) * esize,
                       ob.row, n * ob.row, total, esize);
}

static void tt_coll_permute_body(const tt_coll_round_t *rd) {
  const tt_coll_desc_t *me = rd->peers[rd->rank];
  size_t bytes = (size_t)me->count * tt_dtype_size(me->dtype);
  int64_t self = rd->ids[rd->rank];
  for (int32_t p = 0; p < me->num_pairs; ++p) {
    if (me->pairs[2 * p + 1] != self) continue;
    for (int32_t q = 0; q < rd->n; ++q)
      if (rd->ids[q] == me->pairs[2 * p]) {
        if (bytes) memcpy(me->out, rd->peers[q]->in, bytes);
        return;
      }
  }
  if (bytes) memset(me->out, 0, bytes);
}

static void tt_coll_broadcast_body(const tt_coll_round_t *rd) {
  const tt_coll_desc_t *me = rd->peers[rd->rank];
  size_t bytes = (size_t)me->count * tt_dtype_size(me->dtype);
  const void *src = rd->peers[me->root]->in;
  if (bytes && src != me->out) memcpy(me->out, src, bytes);
}

static void tt_coll_barrier_body(const tt_coll_round_t *rd) { (void)rd; }

/* ---- the operations ---- */

tt_status_t tt_collective_all_reduce(int32_t device, tt_collective_group_t group,
                                     tt_reduce_op_t reduce, tt_dtype_t dtype, const void *in,
                                     void *out, int64_t count) {
  TT_RETURN_IF_ERROR(tt_coll_check_group("all_reduce", device, group));
  TT_RETURN_IF_ERROR(tt_coll_check_dtype("all_reduce", dtype));
  TT_RETURN_IF_ERROR(tt_coll_reduce_supported("all_reduce", reduce, dtype));
  if (count < 0) return tt_status_make(TT_INVALID_ARGUMENT, "all_reduce: negative count");
  tt_coll_desc_t d = {.kind = TT_COLL_ALL_REDUCE, .reduce = (int32_t)reduce, .dtype = dtype,
                      .count = count, .in = in, .out = out};
  if (tt_coll_spans_processes(group)) return tt_coll_xp_all_reduce(device, group, &d, in, out);
  return tt_coll_rendezvous(device, group, &d, tt_coll_all_reduce_body);
}

tt_status_t tt_collective_all_gather(int32_t device, tt_collective_group_t group,
                                     tt_dtype_t dtype, const void *in, void *out,
                                     tt_collective_blocks_t b) {
  TT_RETURN_IF_ERROR(tt_coll_check_group("all_gather", device, group));
  TT_RETURN_IF_ERROR(tt_coll_check_dtype("all_gather", dtype));
  TT_RETURN_IF_ERROR(tt_coll_check_blocks("all_gather", "output", b));
  tt_coll_desc_t d = {.kind = TT_COLL_ALL_GATHER, .dtype = dtype, .count = b.rows * b.row,
                      .out_b = b, .in = in, .out = out};
  if (tt_coll_spans_processes(group)) return tt_coll_xp_all_gather(device, group, &d, in, out, b);
  return tt_coll_rendezvous(device, group, &d, tt_coll_all_gather_body);
}

tt_status_t tt_collective_reduce_scatter(int32_t device, tt_collective_group_t group,
                                         tt_reduce_op_t reduce, tt_dtype_t dtype, const void *in,
                                         void *out, tt_collective_blocks_t b) {
  TT_RETURN_IF_ERROR(tt_coll_check_group("reduce_scatter", device, group));
  TT_RETURN_IF_ERROR(tt_coll_check_dtype("reduce_scatter", dtype));
  TT_RETURN_IF_ERROR(tt_coll_reduce_supported("reduce_scatter", reduce, dtype));
  TT_RETURN_IF_ERROR(tt_coll_check_blocks("reduce_scatter", "input", b));
  tt_coll_desc_t d = {.kind = TT_COLL_REDUCE_SCATTER, .reduce = (int32_t)reduce, .dtype = dtype,
                      .count = b.rows * b.row * group.n, .in_b = b, .in = in, .out = out};
  if (tt_coll_spans_processes(group)) return tt_coll_xp_reduce_scatter(device, group, &d, in, out);
  return tt_coll_rendezvous(device, group, &d, tt_coll_reduce_scatter_body);
}

tt_status_t tt_collective_all_to_all(int32_t device, tt_collective_group_t group,
                                     tt_dtype_t dtype, const void *in, void *out,
                                     tt_collective_blocks_t in_b, tt_collective_blocks_t out_b) {
  TT_RETURN_IF_ERROR(tt_coll_check_group("all_to_all", device, group));
  TT_RETURN_IF_ERROR(tt_coll_check_dtype("all_to_all", dtype));
  TT_RETURN_IF_ERROR(tt_coll_check_blocks("all_to_all", "input", in_b));
  TT_RETURN_IF_ERROR(tt_coll_check_blocks("all_to_all", "output", out_b));
  if (in_b.rows * in_b.row != out_b.rows * out_b.row || (in_b.rows * in_b.row != 0 && (!in_b.row || !out_b.row)))
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "all_to_all: input blocks of %lld x %lld and output blocks of %lld x "
                          "%lld elements differ in size", (long long)in_b.rows,
                          (long long)in_b.row, (long long)out_b.rows, (long long)out_b.row);
  tt_coll_desc_t d = {.kind = TT_COLL_ALL_TO_ALL, .dtype = dtype,
                      .count = in_b.rows * in_b.row * group.n, .in_b = in_b, .out_b = out_b,
                      .in = in, .out = out};
  if (tt_coll_spans_processes(group)) return tt_coll_xp_all_to_all(device, group, &d, in, out);
  return tt_coll_rendezvous(device, group, &d, tt_coll_all_to_all_body);
}

tt_status_t tt_collective_permute(int32_t device, tt_collective_group_t group,
                                  const int64_t *pairs, int32_t num_pairs, tt_dtype_t dtype,
                                  const void *in, void *out, int64_t count) {
  TT_RETURN_IF_ERROR(tt_coll_check_group("collective_permute", device, group));
  TT_RETURN_IF_ERROR(tt_coll_check_dtype("collective_permute", dtype));
  if (count < 0) return tt_status_make(TT_INVALID_ARGUMENT, "collective_permute: negative count");
  for (int32_t p = 0; p < 2 * num_pairs; ++p) {
    int found = 0;
    for (int32_t i = 0; i < group.n; ++i) found |= group.ids[i] == pairs[p];
    if (!found)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "collective_permute: pair (%lld, %lld) names device %lld, which is "
                            "not in the group", (long long)pairs[p & ~1],
                            (long long)pairs[p | 1], (long long)pairs[p]);
    for (int32_t k = p % 2; k < p; k += 2)
      if (pairs[k] == pairs[p])
        return tt_status_make(TT_INVALID_ARGUMENT, "collective_permute: device %lld is a %s twice",
                              (long long)pairs[p], p % 2 ? "target" : "source");
  }
  tt_coll_desc_t d = {.kind = TT_COLL_PERMUTE, .dtype = dtype, .count = count, .pairs = pairs,
                      .num_pairs = num_pairs, .in = in, .out = out};
  if (tt_coll_spans_processes(group)) return tt_coll_xp_permute(device, group, &d, in, out);
  return tt_coll_rendezvous(device, group, &d, tt_coll_permute_body);
}

tt_status_t tt_collective_broadcast(int32_t device, tt_collective_group_t group, int32_t root,
                                    tt_dtype_t dtype, const void *in, void *out, int64_t count) {
  TT_RETURN_IF_ERROR(tt_coll_check_group("broadcast", device, group));
  TT_RETURN_IF_ERROR(tt_coll_check_dtype("broadcast", dtype));
  if (root < 0 || root >= group.n)
    return tt_status_make(TT_INVALID_ARGUMENT, "broadcast: root rank %d outside a group of %d",
                          (int)root, (int)group.n);
  if (count < 0) return tt_status_make(TT_INVALID_ARGUMENT, "broadcast: negative count");
  tt_coll_desc_t d = {.kind = TT_COLL_BROADCAST, .dtype = dtype, .count = count, .root = root,
                      .in = in, .out = out};
  if (tt_coll_spans_processes(group)) return tt_coll_xp_broadcast(device, group, &d, in, out);
  return tt_coll_rendezvous(device, group, &d, tt_coll_broadcast_body);
}

tt_status_t tt_collective_barrier(int32_t device, tt_collective_group_t group) {
  TT_RETURN_IF_ERROR(tt_coll_check_group("barrier", device, group));
  tt_coll_desc_t d = {.kind = TT_COLL_BARRIER};
  if (tt_coll_spans_processes(group)) return tt_coll_xp_barrier(device, group, &d);
  return tt_coll_rendezvous(device, group, &d, tt_coll_barrier_body);
}
