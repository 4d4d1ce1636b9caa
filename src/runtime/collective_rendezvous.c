/* The within-process transport of the collective layer: members of a
 * group are threads of this process. A group's state lives in a registry
 * keyed by its ids (rank order); one mutex guards the registry and every
 * group, one condition variable (on the monotonic clock, for the deadline)
 * wakes waiters. No thread spins.
 *
 * A round: each member publishes its call in its slot (WAITING). The last
 * to arrive checks the calls against rank 0's and either lets everyone go
 * (GO: the group enters its data phase) or fails every slot. Members run
 * the body outside the lock, reading the peers' published pointers, then
 * mark their slot DONE; the last one done returns every slot to IDLE and
 * wakes the others, so no member returns while a peer may still read or
 * write its buffers. A waiter whose deadline passes, or that sees an
 * abort, fails every slot still WAITING (the round ends for all). A
 * body may split its work into items the members claim from a counter
 * of the group (round.claim), so the members already running do the work
 * of one the scheduler has not woken yet. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/collective_internal.h"

enum { TT_SLOT_IDLE, TT_SLOT_WAITING, TT_SLOT_GO, TT_SLOT_FAILED, TT_SLOT_DONE };

typedef struct tt_coll_slot_s {
  int state;
  int64_t next_seq; /* sequence number of this member's next call */
  tt_coll_desc_t desc;
  tt_status_t err; /* FAILED: the round's error, owned */
} tt_coll_slot_t;

typedef struct tt_coll_group_state_s {
  struct tt_coll_group_state_s *next;
  int32_t n, arrived, done;
  int64_t *ids;
  tt_coll_slot_t *slots;
  const tt_coll_desc_t **peers; /* the data phase's view: &slots[q].desc */
  _Atomic int64_t claim;         /* the data phase's work items claimed (round.claim) */
} tt_coll_group_state_t;

static pthread_mutex_t tt_coll_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tt_coll_cond_;
static pthread_once_t tt_coll_once_ = PTHREAD_ONCE_INIT;
static tt_coll_group_state_t *tt_coll_groups_ = NULL;
static char *tt_coll_abort_reason_ = NULL; /* non-NULL: aborted */
static int32_t tt_coll_world_ = 1;

static void tt_coll_init_once(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&tt_coll_cond_, &attr);
  pthread_condattr_destroy(&attr);
}

static const char *const tt_coll_kind_names_[] = {
    [TT_COLL_ALL_REDUCE] = "all_reduce",   [TT_COLL_ALL_GATHER] = "all_gather",
    [TT_COLL_REDUCE_SCATTER] = "reduce_scatter", [TT_COLL_ALL_TO_ALL] = "all_to_all",
    [TT_COLL_PERMUTE] = "collective_permute",    [TT_COLL_BROADCAST] = "broadcast",
    [TT_COLL_BARRIER] = "barrier",
};

static const char *tt_coll_reduce_name(int32_t r) {
  switch (r) {
    case TT_RED_SUM: return "sum";
    case TT_RED_PROD: return "prod";
    case TT_RED_MIN: return "min";
    case TT_RED_MAX: return "max";
    case TT_RED_ALL: return "and";
    case TT_RED_ANY: return "or";
    default: return "?";
  }
}

void tt_coll_describe(const tt_coll_desc_t *d, char *buf, size_t size) {
  const char *kind = tt_coll_kind_names_[d->kind];
  if (d->kind == TT_COLL_BARRIER)
    snprintf(buf, size, "barrier #%lld", (long long)d->seq);
  else if (d->kind == TT_COLL_ALL_REDUCE || d->kind == TT_COLL_REDUCE_SCATTER)
    snprintf(buf, size, "%s(%s, %lld, %s) #%lld", kind, tt_dtype_name(d->dtype),
             (long long)d->count, tt_coll_reduce_name(d->reduce), (long long)d->seq);
  else if (d->kind == TT_COLL_BROADCAST)
    snprintf(buf, size, "broadcast(%s, %lld, root %d) #%lld", tt_dtype_name(d->dtype),
             (long long)d->count, (int)d->root, (long long)d->seq);
  else
    snprintf(buf, size, "%s(%s, %lld) #%lld", kind, tt_dtype_name(d->dtype),
             (long long)d->count, (long long)d->seq);
}

/* Whether two members' calls agree (everything but the pointers). */
static int tt_coll_same(const tt_coll_desc_t *a, const tt_coll_desc_t *b) {
  if (a->kind != b->kind || a->reduce != b->reduce || a->dtype != b->dtype ||
      a->count != b->count || a->seq != b->seq || a->root != b->root ||
      a->in_b.rows != b->in_b.rows || a->in_b.row != b->in_b.row ||
      a->out_b.rows != b->out_b.rows || a->out_b.row != b->out_b.row ||
      a->num_pairs != b->num_pairs)
    return 0;
  for (int32_t i = 0; i < 2 * a->num_pairs; ++i)
    if (a->pairs[i] != b->pairs[i]) return 0;
  return 1;
}

static void tt_coll_put_ids(tt_strbuf_t *b, const int64_t *ids, int32_t n) {
  tt_strbuf_puts(b, "[");
  for (int32_t i = 0; i < n; ++i) tt_strbuf_printf(b, "%s%lld", i ? ", " : "", (long long)ids[i]);
  tt_strbuf_puts(b, "]");
}

/* The registry entry of group (created on first use); NULL when out of
 * memory. Under the lock. */
static tt_coll_group_state_t *tt_coll_find_locked(tt_collective_group_t group) {
  for (tt_coll_group_state_t *g = tt_coll_groups_; g; g = g->next)
    if (g->n == group.n && !memcmp(g->ids, group.ids, sizeof(int64_t) * (size_t)group.n))
      return g;
  tt_coll_group_state_t *g = calloc(1, sizeof(*g));
  if (!g) return NULL;
  g->n = group.n;
  g->ids = malloc(sizeof(int64_t) * (size_t)group.n);
  g->slots = calloc((size_t)group.n, sizeof(tt_coll_slot_t));
  g->peers = calloc((size_t)group.n, sizeof(*g->peers));
  if (!g->ids || !g->slots || !g->peers) {
    free(g->ids);
    free(g->slots);
    free(g->peers);
    free(g);
    return NULL;
  }
  memcpy(g->ids, group.ids, sizeof(int64_t) * (size_t)group.n);
  for (int32_t q = 0; q < group.n; ++q) g->peers[q] = &g->slots[q].desc;
  g->next = tt_coll_groups_;
  tt_coll_groups_ = g;
  return g;
}

/* Ends the round of g for every member still WAITING: each gets a copy of
 * message. Under the lock. */
static void tt_coll_fail_round_locked(tt_coll_group_state_t *g, tt_code_t code,
                                      const char *message) {
  for (int32_t q = 0; q < g->n; ++q) {
    tt_coll_slot_t *s = &g->slots[q];
    if (s->state != TT_SLOT_WAITING) continue;
    s->state = TT_SLOT_FAILED;
    s->err = tt_status_make(code, "%s", message);
  }
  g->arrived = 0;
  pthread_cond_broadcast(&tt_coll_cond_);
}

/* The last member arrived: checks every call against rank 0's and starts
 * the data phase, or fails the round naming both sides. Under the lock. */
static void tt_coll_complete_arrival_locked(tt_coll_group_state_t *g) {
  const tt_coll_desc_t *first = &g->slots[0].desc;
  for (int32_t q = 1; q < g->n; ++q) {
    const tt_coll_desc_t *d = &g->slots[q].desc;
    if (tt_coll_same(first, d)) continue;
    char mine[160], theirs[160];
    tt_coll_describe(d, mine, sizeof(mine));
    tt_coll_describe(first, theirs, sizeof(theirs));
    tt_strbuf_t b = {0};
    tt_strbuf_printf(&b, "collective mismatch on group ");
    tt_coll_put_ids(&b, g->ids, g->n);
    tt_strbuf_printf(&b, ": device %lld issued %s but device %lld issued %s",
                     (long long)g->ids[q], mine, (long long)g->ids[0], theirs);
    if (!strcmp(mine, theirs)) tt_strbuf_puts(&b, " (with a different layout or pairs)");
    char *text = tt_strbuf_take(&b);
    tt_coll_fail_round_locked(g, TT_INVALID_ARGUMENT, text ? text : "collective mismatch");
    free(text);
    return;
  }
  atomic_store_explicit(&g->claim, 0, memory_order_relaxed); /* published by the unlock */
  for (int32_t q = 0; q < g->n; ++q) g->slots[q].state = TT_SLOT_GO;
  g->done = 0;
  pthread_cond_broadcast(&tt_coll_cond_);
}

/* The deadline passed for rank `rank` of g: names who arrived, who did
 * not and where the absent members wait instead. Under the lock. */
static void tt_coll_time_out_locked(tt_coll_group_state_t *g, int32_t rank, double seconds) {
  char call[160];
  tt_coll_describe(&g->slots[rank].desc, call, sizeof(call));
  tt_strbuf_t b = {0};
  tt_strbuf_printf(&b, "%s on group ", call);
  tt_coll_put_ids(&b, g->ids, g->n);
  tt_strbuf_printf(&b, " timed out after %g s (TORCHTPU_COLLECTIVE_TIMEOUT_S): arrived:", seconds);
  for (int32_t q = 0; q < g->n; ++q)
    if (g->slots[q].state == TT_SLOT_WAITING) tt_strbuf_printf(&b, " %lld", (long long)g->ids[q]);
  tt_strbuf_puts(&b, "; not arrived:");
  for (int32_t q = 0; q < g->n; ++q)
    if (g->slots[q].state != TT_SLOT_WAITING) tt_strbuf_printf(&b, " %lld", (long long)g->ids[q]);
  /* An absent member waiting in another group's collective (a different
   * group, or collectives issued in different orders). */
  for (int32_t q = 0; q < g->n; ++q) {
    if (g->slots[q].state == TT_SLOT_WAITING) continue;
    for (tt_coll_group_state_t *o = tt_coll_groups_; o; o = o->next) {
      if (o == g) continue;
      for (int32_t k = 0; k < o->n; ++k) {
        if (o->ids[k] != g->ids[q] || o->slots[k].state != TT_SLOT_WAITING) continue;
        char other[160];
        tt_coll_describe(&o->slots[k].desc, other, sizeof(other));
        tt_strbuf_printf(&b, "; device %lld is waiting in %s on group ", (long long)g->ids[q],
                         other);
        tt_coll_put_ids(&b, o->ids, o->n);
      }
    }
  }
  char *text = tt_strbuf_take(&b);
  tt_coll_fail_round_locked(g, TT_INTERNAL, text ? text : "collective timed out");
  free(text);
}

static void tt_coll_deadline(double seconds, struct timespec *ts) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  double whole = (double)(int64_t)seconds;
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((seconds - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000L;
  }
}


tt_status_t tt_coll_rendezvous(int32_t device, tt_collective_group_t group, tt_coll_desc_t *desc,
                               tt_coll_body_fn body) {
  pthread_once(&tt_coll_once_, tt_coll_init_once);
  double seconds = tt_config()->collective_timeout_s;
  pthread_mutex_lock(&tt_coll_lock_);
  if (tt_coll_abort_reason_) {
    tt_status_t st = tt_status_make(TT_INTERNAL, "collectives aborted: %s", tt_coll_abort_reason_);
    pthread_mutex_unlock(&tt_coll_lock_);
    return st;
  }
  tt_coll_group_state_t *g = tt_coll_find_locked(group);
  if (!g) {
    pthread_mutex_unlock(&tt_coll_lock_);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (collective group)");
  }
  int32_t rank = 0;
  while (g->ids[rank] != device) ++rank; /* the caller checked membership */
  tt_coll_slot_t *s = &g->slots[rank];
  if (s->state != TT_SLOT_IDLE) {
    pthread_mutex_unlock(&tt_coll_lock_);
    return tt_status_make(TT_INTERNAL, "device %d issued a collective on a group while its "
                          "previous one there is in flight", (int)device);
  }
  desc->seq = s->next_seq++;
  s->desc = *desc;
  s->state = TT_SLOT_WAITING;
  if (++g->arrived == g->n) tt_coll_complete_arrival_locked(g);
  struct timespec deadline;
  tt_coll_deadline(seconds, &deadline);
  while (s->state == TT_SLOT_WAITING) {
    if (tt_coll_abort_reason_) {
      tt_strbuf_t b = {0};
      tt_strbuf_printf(&b, "collectives aborted: %s", tt_coll_abort_reason_);
      char *text = tt_strbuf_take(&b);
      tt_coll_fail_round_locked(g, TT_INTERNAL, text ? text : "collectives aborted");
      free(text);
      break;
    }
    if (pthread_cond_timedwait(&tt_coll_cond_, &tt_coll_lock_, &deadline) == ETIMEDOUT &&
        s->state == TT_SLOT_WAITING)
      tt_coll_time_out_locked(g, rank, seconds);
  }
  if (s->state == TT_SLOT_FAILED) {
    tt_status_t st = s->err;
    s->err = NULL;
    s->state = TT_SLOT_IDLE;
    pthread_mutex_unlock(&tt_coll_lock_);
    return st;
  }
  pthread_mutex_unlock(&tt_coll_lock_);

  tt_coll_round_t round = {rank, g->n, g->ids, g->peers, &g->claim};
  body(&round);

  pthread_mutex_lock(&tt_coll_lock_);
  s->state = TT_SLOT_DONE;
  if (++g->done == g->n) {
    for (int32_t q = 0; q < g->n; ++q) g->slots[q].state = TT_SLOT_IDLE;
    g->arrived = 0;
    pthread_cond_broadcast(&tt_coll_cond_);
  }
  /* Peers may still read this member's buffers: no deadline or abort
   * here (the body never blocks, so the wait is short). */
  while (s->state == TT_SLOT_DONE) pthread_cond_wait(&tt_coll_cond_, &tt_coll_lock_);
  pthread_mutex_unlock(&tt_coll_lock_);
  return NULL;
}

void tt_collective_abort(const char *reason) {
  pthread_once(&tt_coll_once_, tt_coll_init_once);
  pthread_mutex_lock(&tt_coll_lock_);
  if (!tt_coll_abort_reason_) {
    tt_coll_abort_reason_ = strdup(reason && *reason ? reason : "aborted");
    if (!tt_coll_abort_reason_) tt_coll_abort_reason_ = (char *)"aborted (out of memory)";
  }
  pthread_cond_broadcast(&tt_coll_cond_);
  pthread_mutex_unlock(&tt_coll_lock_);
}

void tt_collective_reset(void) {
  pthread_once(&tt_coll_once_, tt_coll_init_once);
  pthread_mutex_lock(&tt_coll_lock_);
  if (tt_coll_abort_reason_ && strcmp(tt_coll_abort_reason_, "aborted (out of memory)"))
    free(tt_coll_abort_reason_);
  tt_coll_abort_reason_ = NULL;
  /* Groups with nobody in flight start again from sequence number 0. */
  for (tt_coll_group_state_t *g = tt_coll_groups_; g; g = g->next) {
    int busy = 0;
    for (int32_t q = 0; q < g->n; ++q) busy |= g->slots[q].state != TT_SLOT_IDLE;
    if (!busy)
      for (int32_t q = 0; q < g->n; ++q) g->slots[q].next_seq = 0;
  }
  pthread_mutex_unlock(&tt_coll_lock_);
}

void tt_collective_set_world_size(int32_t n) {
  __atomic_store_n(&tt_coll_world_, n >= 1 ? n : 1, __ATOMIC_RELEASE);
}

int32_t tt_collective_world_size(void) {
  return __atomic_load_n(&tt_coll_world_, __ATOMIC_ACQUIRE);
}
