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
 * Each op moves across processes only what its peers need:
 * reduce_scatter and all_to_all exchange one chunk per pair of processes
 * (the chunk holds what the receiving process's members need from the
 * sending process's members), collective_permute sends each pair that
 * crosses processes once, point to point (docs/collectives.md). */
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

int32_t tt_collective_process_count(void) {
  return __atomic_load_n(&tt_xp_count_, __ATOMIC_ACQUIRE);
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
static tt_collective_transport_serve_fn tt_xp_direct_ = NULL;

void tt_collective_transport_attach_direct(tt_collective_transport_serve_fn serve) {
  pthread_mutex_lock(&tt_xp_lock_);
  tt_xp_direct_ = serve;
  tt_xp_attached_ = serve != NULL;
  tt_xp_closed_ = 0;
  pthread_mutex_unlock(&tt_xp_lock_);
}

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
  tt_xp_direct_ = NULL;
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
  tt_collective_transport_serve_fn direct = tt_xp_direct_;
  if (direct) { /* served on this thread: no queue, no hand-off */
    pthread_mutex_unlock(&tt_xp_lock_);
    rq->error = direct(rq);
    rq->done = 1;
  } else {
    if (tt_xp_tail_) tt_xp_tail_->next = rq;
    else tt_xp_head_ = rq;
    tt_xp_tail_ = rq;
    pthread_cond_broadcast(&tt_xp_cond_);
    while (!rq->done) pthread_cond_wait(&tt_xp_cond_, &tt_xp_lock_);
    pthread_mutex_unlock(&tt_xp_lock_);
  }
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

/* The group's processes in position order (ascending index); returns
 * how many. */
static int32_t tt_xp_processes(tt_collective_group_t g, int32_t *procs) {
  int32_t np = 0;
  for (int32_t i = 0; i < g.n; ++i) {
    int32_t p = tt_xp_process_of(g.ids[i]), at = np;
    int seen = 0;
    for (int32_t j = 0; j < np; ++j) seen |= procs[j] == p;
    if (seen) continue;
    while (at > 0 && procs[at - 1] > p) {
      procs[at] = procs[at - 1];
      --at;
    }
    procs[at] = p;
    ++np;
  }
  return np;
}

/* The ranks of process p's members of g, in rank order; returns how many. */
static int32_t tt_xp_ranks_of(tt_collective_group_t g, int32_t p, int32_t *ranks) {
  int32_t n = 0;
  for (int32_t i = 0; i < g.n; ++i)
    if (tt_xp_process_of(g.ids[i]) == p) ranks[n++] = i;
  return n;
}

/* The ops that exchange per-process chunks need the same member count in
 * every process of the group. Every member of every process computes the
 * same answer from the group alone, so all fail at once, before any
 * rendezvous. */
static tt_status_t tt_xp_check_even(tt_collective_group_t g, int32_t nl, const char *op) {
  for (int32_t i = 0; i < g.n; ++i) {
    int32_t p = tt_xp_process_of(g.ids[i]), m = 0;
    for (int32_t j = 0; j < g.n; ++j) m += tt_xp_process_of(g.ids[j]) == p;
    if (m != nl)
      return tt_status_make(TT_UNIMPLEMENTED,
                            "%s: a group spanning processes needs the same number of members "
                            "in every process (%d in one, %d in another)",
                            op, (int)nl, (int)m);
  }
  return NULL;
}

static int32_t tt_xp_local_index(int32_t device, const tt_xp_local_t *l) {
  int32_t j = 0;
  while (l->ids[j] != device) ++j;
  return j;
}

/* reduce_scatter: the local members reduce their whole inputs locally;
 * the leader packs, for each process of the group, the blocks of that
 * process's members (in rank order) into one chunk, and the transport
 * sends each peer only its chunk and reduces the chunks it receives
 * (TT_XP_REDUCE_SCATTER); the local members then share the process's
 * reduced chunk and each keeps its block. Each process sends (P - 1) / P
 * of its input, not the whole of it twice as an all_reduce would. */
tt_status_t tt_coll_xp_reduce_scatter(int32_t device, tt_collective_group_t g,
                                      const tt_coll_desc_t *call, const void *in, void *out) {
  tt_xp_local_t l;
  tt_xp_local_members(device, g, &l);
  int32_t nl = l.group.n;
  TT_RETURN_IF_ERROR(tt_xp_check_even(g, nl, "reduce_scatter"));
  tt_dtype_t dt = call->dtype;
  size_t esize = tt_dtype_size(dt);
  tt_collective_blocks_t b = call->in_b;
  int64_t B = b.rows * b.row, chunk = (int64_t)nl * B;
  const char *src = in;
  char *sum = NULL, *mine = out;
  tt_status_t st = NULL;
  if (nl > 1) {
    sum = malloc((size_t)call->count * esize + 1);
    mine = malloc((size_t)chunk * esize + 1);
    if (!sum || !mine) {
      free(sum);
      free(mine);
      return tt_xp_oom();
    }
    st = tt_collective_all_reduce(device, l.group, (tt_reduce_op_t)call->reduce, dt, in, sum,
                                  call->count);
    src = sum;
  }
  if (!st && tt_xp_is_leader(device, &l)) {
    int32_t procs[TT_COLLECTIVE_MAX_MEMBERS], ranks[TT_COLLECTIVE_MAX_MEMBERS];
    int32_t np = tt_xp_processes(g, procs);
    char *send = malloc((size_t)(np * chunk) * esize + 1);
    if (!send) st = tt_xp_oom();
    for (int32_t P = 0; !st && P < np; ++P) {
      int32_t nr = tt_xp_ranks_of(g, procs[P], ranks);
      for (int32_t j = 0; j < nr; ++j)
        tt_coll_copy_block(src + (size_t)(ranks[j] * b.row) * esize, b.row, g.n * b.row,
                           send + (size_t)(P * chunk + j * B) * esize, b.row, b.row, B, esize);
    }
    if (!st) {
      tt_collective_transport_request_t rq;
      tt_xp_request(&rq, TT_XP_REDUCE_SCATTER, device, g, call, nl);
      rq.reduce = (tt_reduce_op_t)call->reduce;
      rq.dtype = dt;
      rq.send = send;
      rq.recv = mine;
      rq.count = chunk;
      st = tt_xp_submit(&rq);
    }
    free(send);
  }
  if (!st && nl > 1) {
    st = tt_collective_broadcast(device, l.group, 0, dt, mine, mine, chunk);
    if (!st && B)
      memcpy(out, mine + (size_t)(tt_xp_local_index(device, &l) * B) * esize, (size_t)B * esize);
  }
  if (nl > 1) {
    free(sum);
    free(mine);
  }
  return st;
}

/* all_to_all: the leader holds its process's inputs (a local gather) and
 * packs, for each process of the group, the blocks its members get from
 * this process's members: chunk P is, for each member j of P and each
 * local member k (both in rank order), block rank(j) of k's input. The
 * transport exchanges the chunks (TT_XP_ALL_TO_ALL: each peer gets only
 * its chunk); the local members share what arrived and each copies its
 * blocks into place. */
tt_status_t tt_coll_xp_all_to_all(int32_t device, tt_collective_group_t g,
                                  const tt_coll_desc_t *call, const void *in, void *out) {
  tt_xp_local_t l;
  tt_xp_local_members(device, g, &l);
  int32_t nl = l.group.n, n = g.n;
  TT_RETURN_IF_ERROR(tt_xp_check_even(g, nl, "all_to_all"));
  tt_dtype_t dt = call->dtype;
  size_t esize = tt_dtype_size(dt);
  tt_collective_blocks_t ib = call->in_b, ob = call->out_b;
  int64_t B = ib.rows * ib.row, each = B * n, chunk = (int64_t)nl * nl * B;
  int32_t procs[TT_COLLECTIVE_MAX_MEMBERS], ranks[TT_COLLECTIVE_MAX_MEMBERS];
  int32_t np = tt_xp_processes(g, procs);
  const char *loc = in;
  char *gathered = NULL, *recv = malloc((size_t)(np * chunk) * esize + 1);
  tt_status_t st = NULL;
  if (!recv) return tt_xp_oom();
  if (nl > 1) {
    gathered = malloc((size_t)(nl * each) * esize + 1);
    if (!gathered) {
      free(recv);
      return tt_xp_oom();
    }
    st = tt_collective_all_gather(device, l.group, dt, in, gathered,
                                  (tt_collective_blocks_t){1, each});
    loc = gathered;
  }
  if (!st && tt_xp_is_leader(device, &l)) {
    char *send = malloc((size_t)(np * chunk) * esize + 1);
    if (!send) st = tt_xp_oom();
    for (int32_t P = 0; !st && P < np; ++P) {
      int32_t nr = tt_xp_ranks_of(g, procs[P], ranks);
      for (int32_t j = 0; j < nr; ++j)
        for (int32_t k = 0; k < nl; ++k)
          tt_coll_copy_block(loc + (size_t)(k * each + ranks[j] * ib.row) * esize, ib.row,
                             n * ib.row, send + (size_t)(P * chunk + (j * nl + k) * B) * esize,
                             ib.row, ib.row, B, esize);
    }
    if (!st) {
      tt_collective_transport_request_t rq;
      tt_xp_request(&rq, TT_XP_ALL_TO_ALL, device, g, call, nl);
      rq.dtype = dt;
      rq.send = send;
      rq.recv = recv;
      rq.count = chunk;
      st = tt_xp_submit(&rq);
    }
    free(send);
  }
  if (!st && nl > 1) st = tt_collective_broadcast(device, l.group, 0, dt, recv, recv, np * chunk);
  if (!st && B) {
    int32_t j0 = tt_xp_local_index(device, &l);
    for (int32_t S = 0; S < np; ++S) {
      int32_t nr = tt_xp_ranks_of(g, procs[S], ranks);
      for (int32_t k = 0; k < nr; ++k)
        tt_coll_copy_block(recv + (size_t)(S * chunk + (j0 * nl + k) * B) * esize, ob.row,
                           ob.row, (char *)out + (size_t)(ranks[k] * ob.row) * esize, ob.row,
                           n * ob.row, B, esize);
    }
  }
  free(gathered);
  free(recv);
  return st;
}

/* collective_permute: the leader holds its process's inputs (a local
 * gather); a pair within this process is a local copy, a pair leaving or
 * entering it one point-to-point transfer (TT_XP_PERMUTE, tagged with the
 * pair's index), so only the data of pairs crossing processes moves, once.
 * The local members then share the process's outputs (zeros where no pair
 * targets a member). */
tt_status_t tt_coll_xp_permute(int32_t device, tt_collective_group_t g,
                               const tt_coll_desc_t *call, const void *in, void *out) {
  tt_xp_local_t l;
  tt_xp_local_members(device, g, &l);
  int32_t nl = l.group.n, me = tt_xp_process_of(device);
  tt_dtype_t dt = call->dtype;
  size_t esize = tt_dtype_size(dt), bytes = (size_t)call->count * esize;
  const char *loc = in;
  char *gathered = NULL, *rbuf = out;
  tt_status_t st = NULL;
  if (nl > 1) {
    gathered = malloc((size_t)nl * bytes + 1);
    rbuf = malloc((size_t)nl * bytes + 1);
    if (!gathered || !rbuf) {
      free(gathered);
      free(rbuf);
      return tt_xp_oom();
    }
    st = tt_collective_all_gather(device, l.group, dt, in, gathered,
                                  (tt_collective_blocks_t){1, call->count});
    loc = gathered;
  }
  if (!st && tt_xp_is_leader(device, &l)) {
    int64_t *xfers = malloc(sizeof(int64_t) * TT_XP_XFER_LEN * (size_t)(call->num_pairs + 1));
    int32_t nx = 0;
    if (!xfers) st = tt_xp_oom();
    if (!st && bytes) memset(rbuf, 0, (size_t)nl * bytes);
    for (int32_t p = 0; !st && p < call->num_pairs; ++p) {
      int64_t s = call->pairs[2 * p], t = call->pairs[2 * p + 1];
      int32_t ps = tt_xp_process_of(s), pt = tt_xp_process_of(t), ks = 0, kt = 0;
      for (int32_t j = 0; j < nl; ++j) {
        if (l.ids[j] == s) ks = j;
        if (l.ids[j] == t) kt = j;
      }
      if (ps != me && pt != me) continue;
      if (ps == me && pt == me) {
        if (bytes) memcpy(rbuf + (size_t)kt * bytes, loc + (size_t)ks * bytes, bytes);
        continue;
      }
      int64_t *x = xfers + (size_t)nx++ * TT_XP_XFER_LEN;
      x[TT_XP_XFER_DIR] = ps == me ? 0 : 1;
      x[TT_XP_XFER_PEER] = tt_xp_process_position(g, ps == me ? pt : ps);
      x[TT_XP_XFER_TAG] = p;
      x[TT_XP_XFER_OFFSET] = (int64_t)((ps == me ? (size_t)ks : (size_t)kt) * bytes);
      x[TT_XP_XFER_BYTES] = (int64_t)bytes;
    }
    if (!st) {
      tt_collective_transport_request_t rq;
      tt_xp_request(&rq, TT_XP_PERMUTE, device, g, call, nl);
      rq.dtype = dt;
      rq.send = loc;
      rq.recv = rbuf;
      rq.count = call->count;
      rq.xfers = xfers;
      rq.num_xfers = nx;
      st = tt_xp_submit(&rq);
    }
    free(xfers);
  }
  if (!st && nl > 1) {
    st = tt_collective_broadcast(device, l.group, 0, dt, rbuf, rbuf, (int64_t)nl * call->count);
    if (!st && bytes)
      memcpy(out, rbuf + (size_t)tt_xp_local_index(device, &l) * bytes, bytes);
  }
  if (nl > 1) {
    free(gathered);
    free(rbuf);
  }
  return st;
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
