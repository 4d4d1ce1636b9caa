/* The collective layer's parts (include/torchtpu/collective.h): what a
 * member publishes at a rendezvous, the within-process transport that
 * meets the members (collective_rendezvous.c) and the reductions
 * (collective_reduce.c). */
#ifndef TORCHTPU_RUNTIME_COLLECTIVE_INTERNAL_H_
#define TORCHTPU_RUNTIME_COLLECTIVE_INTERNAL_H_

#include <stdatomic.h>

#include "torchtpu/collective.h"

typedef enum tt_coll_kind_e {
  TT_COLL_ALL_REDUCE,
  TT_COLL_ALL_GATHER,
  TT_COLL_REDUCE_SCATTER,
  TT_COLL_ALL_TO_ALL,
  TT_COLL_PERMUTE,
  TT_COLL_BROADCAST,
  TT_COLL_BARRIER,
} tt_coll_kind_t;

/* One member's call: every field but in/out (and seq, set by the
 * rendezvous) must be equal across the members. */
typedef struct tt_coll_desc_s {
  tt_coll_kind_t kind;
  int32_t reduce; /* tt_reduce_op_t, reducing kinds; else 0 */
  tt_dtype_t dtype;
  int64_t count;  /* elements of in */
  tt_collective_blocks_t in_b, out_b; /* layouts; zero where unused */
  int32_t root;   /* broadcast */
  const int64_t *pairs; /* permute: (source, target) pairs */
  int32_t num_pairs;
  int64_t seq;    /* this member's sequence number on the group */
  const void *in;
  void *out;
} tt_coll_desc_t;

/* What the data phase of a round sees: this member's rank and every
 * member's published call, valid until the body returns. */
typedef struct tt_coll_round_s {
  int32_t rank, n;
  const int64_t *ids;
  const tt_coll_desc_t *const *peers;
  /* Shared by the round's members, 0 when the data phase starts: a body
   * whose work splits into items claims them with atomic_fetch_add, so
   * members that run take over the share of one not yet scheduled. */
  _Atomic int64_t *claim;
} tt_coll_round_t;

typedef void (*tt_coll_body_fn)(const tt_coll_round_t *round);

/* Meets the other members of `group` (device must be one), checks that
 * they issued the same call as *desc, runs body on every member at once,
 * and returns when all of them are done. Errors: abort, a mismatch, the
 * deadline (collective.h). A group of one runs body at once. */
tt_status_t tt_coll_rendezvous(int32_t device, tt_collective_group_t group, tt_coll_desc_t *desc,
                               tt_coll_body_fn body);

/* "all_reduce(float32, 1024, sum) #3": a call as the errors name it. */
void tt_coll_describe(const tt_coll_desc_t *d, char *buf, size_t size);

/* ---- reductions (collective_reduce.c) ----
 * A block of at most TT_COLL_BLOCK_BYTES reduced in an accumulator of the
 * dtype's accumulation type (f32 for f16/bf16, else the dtype itself;
 * complex64 as f32 pairs, count doubled by the caller). */
#define TT_COLL_BLOCK_BYTES 8192
/* Whether `reduce` applies to dtype (TT_TYPE_ERROR / TT_INVALID_ARGUMENT
 * naming the op otherwise). */
tt_status_t tt_coll_reduce_supported(const char *op, tt_reduce_op_t reduce, tt_dtype_t dtype);
/* Bytes of one accumulator element of dtype. */
size_t tt_coll_acc_size(tt_dtype_t dtype);
/* acc[0..k) = x[0..k) in the accumulation type. */
void tt_coll_acc_load(tt_dtype_t dtype, void *acc, const void *x, int64_t k);
/* acc[i] = reduce(acc[i], x[i]) for i < k. */
void tt_coll_acc_reduce(tt_dtype_t dtype, tt_reduce_op_t reduce, void *acc, const void *x,
                        int64_t k);
/* dst[0..k) = acc[0..k) in dtype. */
void tt_coll_acc_store(tt_dtype_t dtype, void *dst, const void *acc, int64_t k);

/* dst[q][0..k) = x[0][i] + x[1][i] + ... + x[n-1][i] (added in that order:
 * the bits of the accumulator path) for every q < n; stream: streaming
 * stores where every dst is 16-byte aligned, which need
 * tt_coll_stream_fence before another thread may read them. */
void tt_coll_f32_sum_to_all(const float *const *x, float *const *dst, int32_t n, int64_t k,
                            int stream);
void tt_coll_stream_fence(void);
/* A float32 sum all_reduce of at least this many bytes per member streams
 * its stores (collective.c; tests lower it to cover that path). */
extern size_t tt_coll_stream_bytes;

/* ---- several processes (collective_process.c) ---- */
/* Whether group holds ids of other processes. */
int tt_coll_spans_processes(tt_collective_group_t group);
/* The hierarchical forms of the operations (collective.h), for a group
 * spanning processes; `call` is the caller's call (checked across
 * processes), its pointers unused. */
tt_status_t tt_coll_xp_all_reduce(int32_t device, tt_collective_group_t group,
                                  const tt_coll_desc_t *call, const void *in, void *out);
tt_status_t tt_coll_xp_all_gather(int32_t device, tt_collective_group_t group,
                                  const tt_coll_desc_t *call, const void *in, void *out,
                                  tt_collective_blocks_t b);
tt_status_t tt_coll_xp_reduce_scatter(int32_t device, tt_collective_group_t group,
                                      const tt_coll_desc_t *call, const void *in, void *out);
tt_status_t tt_coll_xp_all_to_all(int32_t device, tt_collective_group_t group,
                                  const tt_coll_desc_t *call, const void *in, void *out);
tt_status_t tt_coll_xp_permute(int32_t device, tt_collective_group_t group,
                               const tt_coll_desc_t *call, const void *in, void *out);
tt_status_t tt_coll_xp_broadcast(int32_t device, tt_collective_group_t group,
                                 const tt_coll_desc_t *call, const void *in, void *out);
tt_status_t tt_coll_xp_barrier(int32_t device, tt_collective_group_t group,
                               const tt_coll_desc_t *call);

/* Copies one block of `total` elements from src (rows of `srow`, `sstride`
 * apart) to dst (rows of `drow`, `dstride` apart) (collective.c). */
void tt_coll_copy_block(const char *src, int64_t srow, int64_t sstride, char *dst, int64_t drow,
                        int64_t dstride, int64_t total, size_t esize);

#endif
