/* The kernel thread pool behind tt_parallel_for.
 *
 * Persistent workers (TORCHTPU_NUM_THREADS - 1 of them; the caller is the
 * last thread) are started on the first call that has enough work. A call
 * publishes a job under `mu`, bumps `generation`, works on chunks itself,
 * then waits until every worker has checked in for that generation, so the
 * job fields are never overwritten while a worker still reads them. Chunks
 * are claimed from an atomic counter, which balances uneven chunks.
 *
 * Calls from several threads serialise on `call_mu`. A call made from
 * inside a chunk (nested parallelism) runs inline on the calling thread,
 * which is both deadlock-free and what the outer split already wants.
 * Workers spin briefly before sleeping so back-to-back kernels do not pay a
 * wake-up each. After fork() the child starts with no pool (the workers
 * did not survive) and builds a new one on demand.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/kernel_util.h"

#define TT_POOL_MAX_THREADS 256
#define TT_POOL_SPIN 2000

typedef struct tt_pool_s {
  pthread_mutex_t call_mu; /* held for the whole of one parallel call */
  pthread_mutex_t mu;      /* guards the fields below and the condvars */
  pthread_cond_t work_cv;
  pthread_cond_t done_cv;
  _Atomic int configured;  /* nthreads has been read from the environment */
  int nthreads;            /* including the calling thread */
  int nworkers;            /* started workers */
  int started;
  _Atomic uint64_t generation;
  uint64_t start_generation; /* generation when the workers were started */
  int checked_in; /* workers done with the current generation */
  /* The current job. */
  tt_range_fn_t fn;
  void *ctx;
  int64_t n, chunk, nchunks;
  _Atomic int64_t next_chunk;
} tt_pool_t;

static tt_pool_t tt_pool_ = {
    .call_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .work_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};
static pthread_mutex_t tt_pool_init_mu_ = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int tt_in_parallel_ = 0;

static int tt_pool_read_nthreads_(void) {
  long n = 0;
  const char *env = getenv("TORCHTPU_NUM_THREADS");
  if (env && *env) {
    char *end = NULL;
    errno = 0;
    long v = strtol(env, &end, 10);
    if (errno == 0 && end && *end == '\0' && v >= 1) n = v;
  }
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n <= 0) n = 1;
  if (n > TT_POOL_MAX_THREADS) n = TT_POOL_MAX_THREADS;
  return (int)n;
}

static void tt_pool_after_fork_child_(void) {
  /* Only this thread exists in the child; reset to an unstarted pool. */
  pthread_mutex_init(&tt_pool_.call_mu, NULL);
  pthread_mutex_init(&tt_pool_.mu, NULL);
  pthread_cond_init(&tt_pool_.work_cv, NULL);
  pthread_cond_init(&tt_pool_.done_cv, NULL);
  pthread_mutex_init(&tt_pool_init_mu_, NULL);
  tt_pool_.started = 0;
  tt_pool_.nworkers = 0;
  tt_pool_.checked_in = 0;
  atomic_store(&tt_pool_.generation, 0);
  tt_in_parallel_ = 0;
}

static void tt_pool_configure_(void) {
  pthread_mutex_lock(&tt_pool_init_mu_);
  if (!tt_pool_.configured) {
    tt_pool_.nthreads = tt_pool_read_nthreads_();
    pthread_atfork(NULL, NULL, tt_pool_after_fork_child_);
    tt_pool_.configured = 1;
  }
  pthread_mutex_unlock(&tt_pool_init_mu_);
}

int tt_num_threads(void) {
  if (!tt_pool_.configured) tt_pool_configure_();
  return tt_pool_.nthreads;
}

static void tt_pool_run_chunks_(tt_pool_t *p) {
  for (;;) {
    int64_t c = atomic_fetch_add(&p->next_chunk, 1);
    if (c >= p->nchunks) return;
    int64_t begin = c * p->chunk;
    int64_t end = tt_min64(p->n, begin + p->chunk);
    p->fn(p->ctx, begin, end);
  }
}

static inline void tt_cpu_relax_(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *tt_pool_worker_(void *arg) {
  tt_pool_t *p = (tt_pool_t *)arg;
  tt_in_parallel_ = 1;
  uint64_t seen = p->start_generation;
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
           spins < TT_POOL_SPIN) {
      tt_cpu_relax_();
      ++spins;
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->generation) == seen) {
      pthread_cond_wait(&p->work_cv, &p->mu);
    }
    seen = atomic_load(&p->generation);
    pthread_mutex_unlock(&p->mu);

    tt_pool_run_chunks_(p);

    pthread_mutex_lock(&p->mu);
    if (++p->checked_in == p->nworkers) pthread_cond_signal(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
  }
  return NULL;
}

/* Starts the workers; called with call_mu held. */
static void tt_pool_start_(tt_pool_t *p) {
  p->started = 1;
  p->nworkers = 0;
  p->start_generation = atomic_load(&p->generation);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (int i = 0; i < p->nthreads - 1; ++i) {
    pthread_t th;
    pthread_mutex_lock(&p->mu);
    int rc = pthread_create(&th, &attr, tt_pool_worker_, p);
    if (rc == 0) ++p->nworkers;
    pthread_mutex_unlock(&p->mu);
    if (rc != 0) break; /* run with the workers we have */
  }
  pthread_attr_destroy(&attr);
}

void tt_parallel_for(int64_t n, int64_t grain, tt_range_fn_t fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int nthreads = tt_num_threads();
  if (tt_in_parallel_ || nthreads <= 1 || n <= grain) {
    fn(ctx, 0, n);
    return;
  }
  tt_pool_t *p = &tt_pool_;
  pthread_mutex_lock(&p->call_mu);
  if (!p->started) tt_pool_start_(p);
  if (p->nworkers == 0) {
    pthread_mutex_unlock(&p->call_mu);
    fn(ctx, 0, n);
    return;
  }
  int64_t nchunks = (n + grain - 1) / grain;
  int64_t max_chunks = (int64_t)(p->nworkers + 1) * 4;
  if (nchunks > max_chunks) nchunks = max_chunks;
  int64_t chunk = (n + nchunks - 1) / nchunks;
  nchunks = (n + chunk - 1) / chunk;

  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->chunk = chunk;
  p->nchunks = nchunks;
  p->checked_in = 0;
  atomic_store(&p->next_chunk, 0);
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);

  tt_in_parallel_ = 1;
  tt_pool_run_chunks_(p);
  tt_in_parallel_ = 0;

  pthread_mutex_lock(&p->mu);
  while (p->checked_in < p->nworkers) pthread_cond_wait(&p->done_cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->call_mu);
}
