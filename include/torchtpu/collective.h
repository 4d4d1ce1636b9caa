/* The collective layer: collectives between the engine's devices, which
 * every backend's collective ops call (docs/collectives.md).
 *
 * A group is a list of global device ids in rank order (rank = position);
 * every member calls the same function with the same group, and each call
 * blocks until the whole group has arrived (a rendezvous), then moves the
 * data and returns once every member is done with the others' buffers, so
 * a caller may free or reuse its input and output as soon as it returns.
 *
 * Each rendezvous checks that every member issued the same collective:
 * the same kind, reduction, dtype, element count, layout and per-group
 * sequence number (the count of collectives this member issued on this
 * group before). Otherwise every member fails with TT_INVALID_ARGUMENT
 * naming both sides ("device 1 issued all_reduce(f32, 1024) #3 but device
 * 0 issued all_gather(f32, 1024) #3"). A member still waiting when the
 * deadline (TORCHTPU_COLLECTIVE_TIMEOUT_S seconds, default 300, from
 * tt_config) passes fails the round with TT_INTERNAL naming who arrived
 * and who did not (and where an absent member waits instead); every member present fails with it. After
 * tt_collective_abort every waiter, and every later call, fails with
 * TT_INTERNAL carrying the reason, until tt_collective_reset.
 *
 * Transport: the members are threads of this process (the CPU backend's
 * device workers). Each publishes pointers to its input and output; the
 * data moves between them directly (no staging copies beyond the
 * reduction's own blocks). A member's input and output must not overlap
 * (the all_reduce alone tolerates in == out).
 *
 * A group of one member returns after a local copy, with no rendezvous.
 * Buffers of `count` elements of `dtype`; and/or reductions take bool and
 * integer dtypes (logical for bool, bitwise for integers); complex64 takes
 * only sum. All functions are thread-safe. */
#ifndef TORCHTPU_COLLECTIVE_H_
#define TORCHTPU_COLLECTIVE_H_

#include <stdint.h>

#include "torchtpu/base.h"
#include "torchtpu/kernels.h" /* tt_reduce_op_t */

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many members in a group (the engine's device limit). */
#define TT_COLLECTIVE_MAX_MEMBERS 1024

typedef struct tt_collective_group_s {
  const int64_t *ids; /* global device ids, rank order, no repeats */
  int32_t n;
} tt_collective_group_t;

/* A buffer seen as `rows` rows of n blocks of `row` elements each: block q
 * is rows x row elements at element q * row, rows n * row apart. rows 1:
 * n contiguous blocks of `row` elements (the common case). */
typedef struct tt_collective_blocks_s {
  int64_t rows, row;
} tt_collective_blocks_t;

/* out = reduce over the members of in (count elements each); every
 * member gets the same result. reduce: TT_RED_SUM, PROD, MIN, MAX, ALL
 * (and), ANY (or). */
tt_status_t tt_collective_all_reduce(int32_t device, tt_collective_group_t group,
                                     tt_reduce_op_t reduce, tt_dtype_t dtype, const void *in,
                                     void *out, int64_t count);

/* out block q (layout `b`: out holds n blocks) = member q's in, which is
 * b.rows * b.row contiguous elements. */
tt_status_t tt_collective_all_gather(int32_t device, tt_collective_group_t group,
                                     tt_dtype_t dtype, const void *in, void *out,
                                     tt_collective_blocks_t b);

/* out (b.rows * b.row contiguous elements) = reduce over members q of
 * block r of q's in (layout `b`), r being this member's rank. */
tt_status_t tt_collective_reduce_scatter(int32_t device, tt_collective_group_t group,
                                         tt_reduce_op_t reduce, tt_dtype_t dtype, const void *in,
                                         void *out, tt_collective_blocks_t b);

/* out's block q (layout out_b) = block r of member q's in (layout in_b),
 * r being this member's rank; a block holds the same elements in both
 * layouts (in_b.rows * in_b.row == out_b.rows * out_b.row), in order. */
tt_status_t tt_collective_all_to_all(int32_t device, tt_collective_group_t group,
                                     tt_dtype_t dtype, const void *in, void *out,
                                     tt_collective_blocks_t in_b, tt_collective_blocks_t out_b);

/* (source, target) pairs of global ids, pairs[2k] -> pairs[2k + 1]: out =
 * in of the member whose pair targets this one, zeros when none does. The
 * group is every member taking part (each source and target is one); no
 * id is a source twice or a target twice. */
tt_status_t tt_collective_permute(int32_t device, tt_collective_group_t group,
                                  const int64_t *pairs, int32_t num_pairs, tt_dtype_t dtype,
                                  const void *in, void *out, int64_t count);

/* out = in of the member of rank `root` (root's own in may equal out). */
tt_status_t tt_collective_broadcast(int32_t device, tt_collective_group_t group, int32_t root,
                                    tt_dtype_t dtype, const void *in, void *out, int64_t count);

/* Returns once every member has arrived. */
tt_status_t tt_collective_barrier(int32_t device, tt_collective_group_t group);

/* Fails every waiting and later collective with TT_INTERNAL "collectives
 * aborted: <reason>" until tt_collective_reset; the first reason is kept. */
void tt_collective_abort(const char *reason);
/* Ends an abort and forgets every group's sequence numbers (a new launch:
 * call it when no collective is in flight). */
void tt_collective_reset(void);

/* The replica count of the current launch: the members of a collective
 * whose replica groups are left empty (every replica). 1 (default)
 * outside a launch, where such a collective has the executing device as
 * its only member. Set by the launcher around its replicas. */
void tt_collective_set_world_size(int32_t n);
int32_t tt_collective_world_size(void);


/* ---- several processes (src/runtime/collective_process.c) ----
 * A launch may span processes (torchrun): process p of P drives L local
 * devices, whose global ids are p * L .. p * L + L - 1. A group holding
 * ids of other processes runs hierarchically: the members of this process
 * meet through the within-process transport, one of them (its first
 * member in rank order, the process's leader) exchanges the process's
 * share with the other processes through the cross-process transport, and
 * the result is shared among the local members again. Default layout:
 * process 0 of 1 (no cross-process collective). */
void tt_collective_set_process_layout(int32_t process_index, int32_t process_count,
                                      int32_t local_devices);
/* The global id of this process's local device 0 (process_index * L). */
int32_t tt_collective_device_base(void);
/* The job's process count (1 outside a multi-process launch). */
int32_t tt_collective_process_count(void);

/* The cross-process transport is driven by a transport thread outside the
 * engine (the Python front end's Gloo transport): a leader queues a
 * request and blocks until the transport thread completes it. Every leader
 * of a group queues the same op (same group, same sequence of requests);
 * the transport checks that the original calls agree across processes
 * (sig, desc) before moving data. */
typedef enum tt_collective_transport_op_e {
  TT_XP_ALL_REDUCE, /* recv[0..count) = reduce over processes of send (send may be recv) */
  TT_XP_ALL_GATHER, /* recv = the processes' send (count each), by process index */
  TT_XP_BROADCAST,  /* recv[0..count) = send of process root_process (send may be recv) */
  TT_XP_BARRIER,    /* no data: only the check */
  /* send holds one chunk of count elements per process of the group (by
   * position: processes sorted by index); recv[0..count) = the reduction
   * over processes of their chunk for this process (each process sends
   * each peer only that peer's chunk). */
  TT_XP_REDUCE_SCATTER,
  /* send and recv hold one chunk of count elements per process (by
   * position): recv chunk q = process q's send chunk for this process. */
  TT_XP_ALL_TO_ALL,
  /* Point-to-point transfers (xfers): sends of parts of send to peer
   * processes and receives into parts of recv; nothing else moves. */
  TT_XP_PERMUTE,
} tt_collective_transport_op_t;

/* One point-to-point transfer of TT_XP_PERMUTE: 5 int64s. */
enum {
  TT_XP_XFER_DIR,    /* 0: send from send + offset; 1: receive into recv + offset */
  TT_XP_XFER_PEER,   /* the peer's process position in the group */
  TT_XP_XFER_TAG,    /* equal on the sending and receiving side */
  TT_XP_XFER_OFFSET, /* bytes */
  TT_XP_XFER_BYTES,
  TT_XP_XFER_LEN
};

#define TT_XP_SIG_LEN 11
typedef struct tt_collective_transport_request_s {
  tt_collective_transport_op_t op;
  const int64_t *ids; /* the global group, rank order */
  int32_t n;
  /* The original call, equal on every process: kind, reduce, dtype, count,
   * in rows, in row, out rows, out row, root, pairs hash, local members. */
  int64_t sig[TT_XP_SIG_LEN];
  char desc[160]; /* "all_reduce(float32, 1024, sum)" (no sequence number) */
  int32_t device; /* the leader's global id */
  tt_reduce_op_t reduce;
  tt_dtype_t dtype;
  const void *send;
  void *recv;
  int64_t count; /* elements of send */
  int32_t root_process;
  const int64_t *xfers; /* TT_XP_PERMUTE: num_xfers x TT_XP_XFER_LEN */
  int32_t num_xfers;
  /* completion (collective_process.c) */
  struct tt_collective_transport_request_s *next;
  int done;
  char *error;
} tt_collective_transport_request_t;

/* Marks a transport thread as attached: until one is, a group spanning
 * processes fails at once instead of waiting. */
void tt_collective_transport_attach(void);
/* The next queued request (blocks); NULL after tt_collective_transport_close. */
tt_collective_transport_request_t *tt_collective_transport_next(void);
/* Completes rq: error NULL on success, else the message the leader's
 * collective fails with (copied). */
void tt_collective_transport_done(tt_collective_transport_request_t *rq, const char *error);
/* Wakes tt_collective_transport_next with NULL; later cross-process
 * collectives fail at once. */
void tt_collective_transport_close(void);

/* A transport the leader calls on its own thread instead of queueing (the
 * optional c10d extension, python/torchtpu/_c10d_transport.cpp): serve
 * runs rq to completion, bounded by TORCHTPU_COLLECTIVE_TIMEOUT_S, and
 * returns NULL on success or a malloc'd message the leader's collective
 * fails with (the engine frees it). Attaching one marks the transport
 * attached; tt_collective_transport_close detaches it. Requests of
 * different groups may be served concurrently (one leader thread each). */
typedef char *(*tt_collective_transport_serve_fn)(tt_collective_transport_request_t *rq);
void tt_collective_transport_attach_direct(tt_collective_transport_serve_fn serve);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_COLLECTIVE_H_ */
