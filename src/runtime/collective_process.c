/* The collective layer across processes (include/torchtpu/collective.h,
 * "several processes"): the process layout, the hierarchical form of each
 * operation, and the request queue that hands each process's share to the
 * cross-process transport thread.
 *
 * Every operation over a group spanning processes has the same shape:
 * the members of this process (the local group, in the group's rank
 * order) meet through the within-process transport; the first of them,
 * the leader, queues one request and waits for the transport thread; the
 * local members then meet again to share the leader's result. Every
 * leader of the group queues the same requests in the same order (the
 * members issue the group's collectives in program order), so the
 * transport sees one sequence per group.
 *
 * A failed request (a mismatch across processes, a dead or stalled peer,
 * no transport) aborts this process's collectives (tt_collective_abort):
 * the local members waiting for the leader wake with the reason, and the
 * transport's state is unknown after a failure anyway.
 *
 * Ops with no cross-process primitive of their own move more data than
 * they need: reduce_scatter is an all_reduce of the whole input followed
 * by a local pick of the member's block, all_to_all and
 * collective_permute an all_gather of every input followed by a local
 * pick (docs/collectives.md). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/collective_internal.h"

static int32_t tt_xp_index_ = 0, tt_xp_count_ = 1, tt_xp_local_ = 1;

void tt_collective_set_process_layout(int32_t process_index, int32_t process_count,
                                      int32_t local_devices) {
  __atomic_store_n(&tt_xp_local_, local_devices >= 1 ? local_devices : 1, __ATOMIC_RELEASE);
  __atomic_store_n(&tt_xp_count_, process_count >= 1 ? process_count : 1, __ATOMIC_RELEASE);
  __atomic_store_n(&tt_xp_index_, process_index >= 0 ? process_index : 0, __ATOMIC_RELEASE);
}

int32_t tt_collective_device_base(void) {
  return __atomic_load_n(&tt_xp_index_, __ATOMIC_ACQUIRE) *
         __atomic_load_n(&tt_xp_local_, __ATOMIC_ACQUIRE);
}

static int32_t tt_xp_process_of(int64_t id) {
  return (int32_t)(id / __atomic_load_n(&tt_xp_local_, __ATOMIC_ACQUIRE));
}

int tt_coll_spans_processes(tt_collective_group_t group) {
  if (__atomic_load_n(&tt_xp_count_, __ATOMIC_ACQUIRE) <= 1) return 0;
  int32_t me = __atomic_load_n(&tt_xp_index_, __ATOMIC_ACQUIRE);
  for (int32_t i = 0; i < group.n; ++i)
    if (tt_xp_process_of(group.ids[i]) != me) return 1;
  return 0;
}

/* ---- the request queue ---- */

static pthread_mutex_t tt_xp_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tt_xp_cond_ = PTHREAD_COND_INITIALIZER;
static tt_collective_transport_request_t *tt_xp_head_ = NULL, *tt_xp_tail_ = NULL;
static int tt_xp_attached_ = 0, tt_xp_closed_ = 0;

void tt_collective_transport_attach(void) {
  pthread_mutex_lock(&tt_xp_lock_);
  tt_xp_attached_ = 1;
  tt_xp_closed_ = 0;
  pthread_mutex_unlock(&tt_xp_lock_);
}

tt_collective_transport_request_t *tt_collective_transport_next(void) {
  pthread_mutex_lock(&tt_xp_lock_);
  while (!tt_xp_head_ && !tt_xp_closed_) pthread_cond_wait(&tt_xp_cond_, &tt_xp_lock_);
  tt_collective_transport_request_t *rq = NULL;
  if (!tt_xp_closed_) {
    rq = tt_xp_head_;
    tt_xp_head_ = rq->next;
    if (!tt_xp_head_) tt_xp_tail_ = NULL;
    rq->next = NULL;
  }
  pthread_mutex_unlock(&tt_xp_lock_);
  return rq;
}

void tt_collective_transport_done(tt_collective_transport_request_t *rq, const char *error) {
  pthread_mutex_lock(&tt_xp_lock_);
  rq->error = error ? strdup(error) : NULL;
  if (error && !rq->error) rq->error = strdup("cross-process transport failed");
  rq->done = 1;
  pthread_cond_broadcast(&tt_xp_cond_);
  pthread_mutex_unlock(&tt_xp_lock_);
}

void tt_collective_transport_close(void) {
  pthread_mutex_lock(&tt_xp_lock_);
  tt_xp_closed_ = 1;
  tt_xp_attached_ = 0;
  /* Requests nobody will take fail now. */
  for (tt_collective_transport_request_t *rq = tt_xp_head_; rq; rq = rq->next) {
    rq->error = strdup("the cross-process transport was closed");
    rq->done = 1;
  }
  tt_xp_head_ = tt_xp_tail_ = NULL;
  pthread_cond_broadcast(&tt_xp_cond_);
  pthread_mutex_unlock(&tt_xp_lock_);
}

/* Queues rq and waits for the transport thread. No deadline here: the
 * transport bounds every request by TORCHTPU_COLLECTIVE_TIMEOUT_S, and the
 * leader may not return while the transport still uses its buffers. */
static tt_status_t tt_xp_submit(tt_collective_transport_request_t *rq) {
  pthread_mutex_lock(&tt_xp_lock_);
  if (!tt_xp_attached_ || tt_xp_closed_) {
    pthread_mutex_unlock(&tt_xp_lock_);
    return tt_status_make(TT_INTERNAL,
                          "%s on a group spanning processes, but no cross-process transport is "
                          "running in this process", rq->desc);
  }
  rq->next = NULL;
  rq->done = 0;
  rq->error = NULL;
  if (tt_xp_tail_) tt_xp_tail_->next = rq;
  else tt_xp_head_ = rq;
  tt_xp_tail_ = rq;
  pthread_cond_broadcast(&tt_xp_cond_);
  while (!rq->done) pthread_cond_wait(&tt_xp_cond_, &tt_xp_lock_);
  pthread_mutex_unlock(&tt_xp_lock_);
  if (!rq->error) return NULL;
  tt_status_t st = tt_status_make(TT_INTERNAL, "%s", rq->error);
  /* The local members waiting for this leader fail with the reason. */
  tt_collective_abort(rq->error);
  free(rq->error);
  rq->error = NULL;
  return st;
}

/* ---- the hierarchy ---- */

/* This process's members of group, in rank order. */
typedef struct tt_xp_local_s {
  int64_t ids[TT_COLLECTIVE_MAX_MEMBERS];
  tt_collective_group_t group;
  int32_t rank; /* the caller's rank in group */
} tt_xp_local_t;

static void tt_xp_local_members(int32_t device, tt_collective_group_t g, tt_xp_local_t *l) {
  int32_t me = tt_xp_process_of(device);
  int32_t n = 0;
  l->rank = 0;
  for (int32_t i = 0; i < g.n; ++i) {
    if (g.ids[i] == device) l->rank = i;
    if (tt_xp_process_of(g.ids[i]) == me) l->ids[n++] = g.ids[i];
  }
  l->group = (tt_collective_group_t){l->ids, n};
}

static int tt_xp_is_leader(int32_t device, const tt_xp_local_t *l) {
  return l->ids[0] == device;
}

static void tt_xp_request(tt_collective_transport_request_t *rq, tt_collective_transport_op_t op,
                          int32_t device, tt_collective_group_t g, const tt_coll_desc_t *call,
                          int32_t local_members) {
  memset(rq, 0, sizeof(*rq));
  rq->op = op;
  rq->ids = g.ids;
  rq->n = g.n;
  rq->device = device;
  int64_t pairs_hash = 1469598103934665603LL;
  for (int32_t i = 0; i < 2 * call->num_pairs; ++i)
    pairs_hash = (pairs_hash ^ call->pairs[i]) * 1099511628211LL;
  int64_t sig[TT_XP_SIG_LEN] = {call->kind,      call->reduce,     call->dtype,
                                call->count,     call->in_b.rows,  call->in_b.row,
                                call->out_b.rows, call->out_b.row, call->root,
                                pairs_hash,      local_members};
  memcpy(rq->sig, sig, sizeof(sig));
  tt_coll_desc_t d = *call;
  d.seq = 0;
  tt_coll_describe(&d, rq->desc, sizeof(rq->desc));
  char *hash = strrchr(rq->desc, '#'); /* the transport numbers the calls itself */
  if (hash && hash > rq->desc) hash[-1] = '\0';
}

static tt_status_t tt_xp_oom(void) {
  return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (cross-process collective)");
}

tt_status_t tt_coll_xp_all_reduce(int32_t device, tt_collective_group_t g,
                                  const tt_coll_desc_t *call, const void *in, void *out) {
  tt_xp_local_t l;
  tt_xp_local_members(device, g, &l);
  tt_dtype_t dt = call->dtype;
  int64_t count = call->count;
  size_t bytes = (size_t)count * tt_dtype_size(dt);
  if (l.group.n > 1)
    TT_RETURN_IF_ERROR(tt_collective_all_reduce(device, l.group, (tt_reduce_op_t)call->reduce, dt,
                                                in, out, count));
  else if (bytes && in != out)
    memcpy(out, in, bytes);
  if (tt_xp_is_leader(device, &l)) {
    tt_collective_transport_request_t rq;
    tt_xp_request(&rq, TT_XP_ALL_REDUCE, device, g, call, l.group.n);
    rq.reduce = (tt_reduce_op_t)call->reduce;
    rq.dtype = dt;
    rq.send = out;
    rq.recv = out;
    rq.count = count;
    TT_RETURN_IF_ERROR(tt_xp_submit(&rq));
  }
  if (l.group.n > 1) return tt_collective_broadcast(device, l.group, 0, dt, out, out, count);
  return NULL;
}

/* Rank of process `p` among the group's processes, sorted by index (the
 * transport's order). */
static int32_t tt_xp_process_position(tt_collective_group_t g, int32_t p) {
  int32_t below = 0;
  for (int32_t i = 0; i < g.n; ++i) {
    int32_t q = tt_xp_process_of(g.ids[i]);
    if (q >= p) continue;
    int seen = 0; /* count each process once */
    for (int32_t j = 0; j < i; ++j) seen |= tt_xp_process_of(g.ids[j]) == q;
    below += !seen;
  }
  return below;
}

tt_status_t tt_coll_xp_all_gather(int32_t device, tt_collective_group_t g,
                                  const tt_coll_desc_t *call, const void *in, void *out,
                                  tt_collective_blocks_t b) {
  tt_xp_local_t l;
  tt_xp_local_members(device, g, &l);
  tt_dtype_t dt = call->dtype;
  size_t esize = tt_dtype_size(dt);
  int64_t each = b.rows * b.row; /* elements of one member's input */
  int32_t nl = l.group.n;
  /* The local inputs, concatenated in rank order, in out's first part. */
  if (nl > 1)
    TT_RETURN_IF_ERROR(tt_collective_all_gather(device, l.group, dt, in, out,
                                                (tt_collective_blocks_t){1, each}));
  else if (each)
    memcpy(out, in, (size_t)each * esize);
  if (tt_xp_is_leader(device, &l)) {
    if (g.n % nl) {
      tt_collective_abort("all_gather: unequal members per process");
      return tt_status_make(TT_UNIMPLEMENTED,
                            "%s: a group spanning processes needs the same number of members "
                            "in every process (%d here, %d in all)",
                            "all_gather", (int)nl, (int)g.n);
    }
    size_t part = (size_t)nl * (size_t)each * esize;
    char *recv = malloc(part * (size_t)(g.n / nl) + 1);
    if (!recv) return tt_xp_oom();
    tt_collective_transport_request_t rq;
    tt_xp_request(&rq, TT_XP_ALL_GATHER, device, g, call, nl);
    rq.dtype = dt;
    rq.send = out;
    rq.recv = recv;
    rq.count = nl * each;
    tt_status_t st = tt_xp_submit(&rq);
    if (st) {
      free(recv);
      return st;
    }
    /* recv holds the processes' parts by position; member r's input is
     * the k-th of its process's part, k its local index. */
    size_t row = (size_t)b.row * esize;
    for (int32_t r = 0; r < g.n; ++r) {
      int32_t p = tt_xp_process_of(g.ids[r]), k = 0;
      for (int32_t j = 0; j < r; ++j) k += tt_xp_process_of(g.ids[j]) == p;
      const char *src = recv + part * (size_t)tt_xp_process_position(g, p) +
                        (size_t)k * (size_t)each * esize;
      for (int64_t i = 0; i < b.rows && row; ++i)
        memcpy((char *)out + (size_t)(i * g.n + r) * row, src + (size_t)i * row, row);
    }
    free(recv);
  }
  if (nl > 1) return tt_collective_broadcast(device, l.group, 0, dt, out, out, each * g.n);
  return NULL;
}

tt_status_t tt_coll_xp_reduce_scatter(int32_t device, tt_collective_group_t g,
                                      const tt_coll_desc_t *call, const void *in, void *out) {
  size_t esize = tt_dtype_size(call->dtype);
  int64_t total = call->count; /* the whole input: rows x n blocks of row */
  char *all = malloc((size_t)total * esize + 1);
  if (!all) return tt_xp_oom();
  tt_status_t st = tt_coll_xp_all_reduce(device, g, call, in, all);
  if (!st) {
    int32_t rank = 0;
    while (g.ids[rank] != device) ++rank;
    size_t row = (size_t)call->in_b.row * esize;
    for (int64_t i = 0; i < call->in_b.rows && row; ++i)
      memcpy((char *)out + (size_t)i * row, all + (size_t)(i * g.n + rank) * row, row);
  }
  free(all);
  return st;
}

/* Every member's whole input (count elements each) into a new buffer,
 * member q's at q * count. */
static tt_status_t tt_xp_gather_inputs(int32_t device, tt_collective_group_t g,
                                       const tt_coll_desc_t *call, const void *in, int64_t count,
                                       char **all) {
  *all = malloc((size_t)count * (size_t)g.n * tt_dtype_size(call->dtype) + 1);
  if (!*all) return tt_xp_oom();
  tt_status_t st = tt_coll_xp_all_gather(device, g, call, in, *all,
                                         (tt_collective_blocks_t){1, count});
  if (st) {
    free(*all);
    *all = NULL;
  }
  return st;
}

tt_status_t tt_coll_xp_all_to_all(int32_t device, tt_collective_group_t g,
                                  const tt_coll_desc_t *call, const void *in, void *out) {
  size_t esize = tt_dtype_size(call->dtype);
  tt_collective_blocks_t ib = call->in_b, ob = call->out_b;
  int64_t each = ib.rows * ib.row * g.n; /* one member's input */
  char *all;
  TT_RETURN_IF_ERROR(tt_xp_gather_inputs(device, g, call, in, each, &all));
  int32_t rank = 0;
  while (g.ids[rank] != device) ++rank;
  int64_t total = ib.rows * ib.row;
  for (int32_t q = 0; q < g.n && total; ++q)
    tt_coll_copy_block(all + ((size_t)q * (size_t)each + (size_t)(rank * ib.row)) * esize,
                       ib.row, g.n * ib.row, (char *)out + (size_t)(q * ob.row) * esize, ob.row,
                       g.n * ob.row, total, esize);
  free(all);
  return NULL;
}

tt_status_t tt_coll_xp_permute(int32_t device, tt_collective_group_t g,
                               const tt_coll_desc_t *call, const void *in, void *out) {
  size_t bytes = (size_t)call->count * tt_dtype_size(call->dtype);
  char *all;
  TT_RETURN_IF_ERROR(tt_xp_gather_inputs(device, g, call, in, call->count, &all));
  int found = 0;
  for (int32_t p = 0; p < call->num_pairs && !found; ++p) {
    if (call->pairs[2 * p + 1] != device) continue;
    for (int32_t q = 0; q < g.n; ++q)
      if (g.ids[q] == call->pairs[2 * p]) {
        if (bytes) memcpy(out, all + (size_t)q * bytes, bytes);
        found = 1;
        break;
      }
  }
  if (!found && bytes) memset(out, 0, bytes);
  free(all);
  return NULL;
}

tt_status_t tt_coll_xp_broadcast(int32_t device, tt_collective_group_t g,
                                 const tt_coll_desc_t *call, const void *in, void *out) {
  tt_xp_local_t l;
  tt_xp_local_members(device, g, &l);
  tt_dtype_t dt = call->dtype;
  int64_t count = call->count;
  int32_t root_process = tt_xp_process_of(g.ids[call->root]);
  int here = root_process == tt_xp_process_of(device);
  if (here) { /* the root's data to every local member first */
    int32_t local_root = 0;
    while (l.ids[local_root] != g.ids[call->root]) ++local_root;
    if (l.group.n > 1)
      TT_RETURN_IF_ERROR(tt_collective_broadcast(device, l.group, local_root, dt,
                                                 device == g.ids[call->root] ? in : out, out,
                                                 count));
    else if (count && in != out)
      memcpy(out, in, (size_t)count * tt_dtype_size(dt));
  }
  if (tt_xp_is_leader(device, &l)) {
    tt_collective_transport_request_t rq;
    tt_xp_request(&rq, TT_XP_BROADCAST, device, g, call, l.group.n);
    rq.dtype = dt;
    rq.send = out;
    rq.recv = out;
    rq.count = count;
    rq.root_process = root_process;
    TT_RETURN_IF_ERROR(tt_xp_submit(&rq));
  }
  if (!here && l.group.n > 1) return tt_collective_broadcast(device, l.group, 0, dt, out, out, count);
  return NULL;
}

tt_status_t tt_coll_xp_barrier(int32_t device, tt_collective_group_t g,
                               const tt_coll_desc_t *call) {
  tt_xp_local_t l;
  tt_xp_local_members(device, g, &l);
  if (l.group.n > 1) TT_RETURN_IF_ERROR(tt_collective_barrier(device, l.group));
  if (tt_xp_is_leader(device, &l)) {
    tt_collective_transport_request_t rq;
    tt_xp_request(&rq, TT_XP_BARRIER, device, g, call, l.group.n);
    TT_RETURN_IF_ERROR(tt_xp_submit(&rq));
  }
  if (l.group.n > 1) return tt_collective_barrier(device, l.group);
  return NULL;
}
