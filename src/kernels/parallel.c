/* The kernel thread pool behind tt_parallel_for.
 *
 * Persistent workers (TORCHTPU_NUM_THREADS - 1 of them; the caller is the
 * last thread) are started on the first call that has enough work.
 *
 * A call publishes its job and then claims chunks like any worker. Chunks
 * are claimed through one atomic word holding (job generation : 32 | chunk
 * count : 16 | next chunk : 16), advanced by compare-and-swap. A worker
 * that wakes up late still holding an old word cannot claim anything (the
 * count and the cursor it compares come from the same word), and a
 * successful claim pins the job: the caller cannot publish the next one
 * before every chunk of this one is done, so the job fields read after a
 * claim are always the right ones. The call returns as soon as all chunks
 * are done; it never waits for a worker that did not take part, which
 * matters on a busy machine where a worker may not be scheduled for a
 * while.
 *
 * Calls from several threads serialise on `call_mu`. A call made from
 * inside a chunk (nested parallelism) runs inline on the calling thread,
 * which is both deadlock-free and what the outer split already wants.
 * Workers and the caller spin briefly before sleeping on a condition
 * variable, so back-to-back kernels do not pay a wake-up each; inside a
 * tt_parallel_hold_begin/end burst (a graph execution) workers do not sleep
 * at all: a futex wake-up of an idle core costs 50-100 us on this machine,
 * and a training step's graph makes hundreds of parallel calls. After
 * fork() the child starts with no pool (the workers did not survive) and
 * builds a new one on demand.
 *
 * While no thread waits for the device, a call uses one thread fewer
 * (tt_parallel_width): the workers past the width sit the job out. On a
 * 2-core machine a training loop that records step k+1 while step k runs
 * otherwise has three runnable threads on two cores, and every kernel
 * split in two waits for whichever half lost its core to the recorder.
 * Such a job is still published, in chunks for the whole pool: when a
 * thread starts waiting for the device (tt_parallel_host_wait_begin) the
 * workers that sat out join the job in flight, so a long kernel started
 * while the host was busy does not keep a core idle to its end (a 40 ms
 * GEMM that began during the recording of the next step ran on one core
 * while the recorder, done, waited for the device); when the host stops
 * waiting they leave it again after their current chunk.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/kernel_util.h"

#define TT_POOL_MAX_THREADS 256
#define TT_POOL_SPIN 2000
#define TT_POOL_MAX_CHUNKS 0xffff /* the job word's 16-bit chunk count */

typedef struct tt_pool_s {
  pthread_mutex_t call_mu; /* held for the whole of one parallel call */
  pthread_mutex_t mu;      /* pairs with the condvars */
  pthread_cond_t work_cv;  /* a new job was published */
  pthread_cond_t done_cv;  /* the last chunk of the job finished */
  _Atomic int configured;  /* nthreads has been read from the environment */
  int nthreads;            /* including the calling thread */
  int nworkers;            /* started workers */
  int started;
  uint32_t last_gen;       /* generation of the last published job */
  _Atomic uint64_t job;    /* generation << 32 | nchunks << 16 | next */
  _Atomic int64_t done;    /* chunks finished in the current job */
  /* The current job; stable while any of its chunks is unfinished. */
  tt_range_fn_t fn;
  void *ctx;
  int64_t n, chunk;
  _Atomic int allowed; /* workers (by index) that may take part in the job */
} tt_pool_t;

typedef struct {
  tt_pool_t *pool;
  int index;
} tt_worker_arg_t;

static tt_pool_t tt_pool_ = {
    .call_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .work_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};
static pthread_mutex_t tt_pool_init_mu_ = PTHREAD_MUTEX_INITIALIZER;
/* Open tt_parallel_hold_begin calls. */
static _Atomic int tt_pool_holds_ = 0;
static _Thread_local int tt_in_parallel_ = 0;
/* Threads blocked waiting for the device (or running a graph themselves). */
static _Atomic int tt_host_waiters_ = 0;
static _Atomic int tt_host_core_ = -1; /* TORCHTPU_HOST_CORE, read once */

static int tt_pool_read_nthreads_(void) {
  long n = (long)tt_config()->num_threads;
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
  tt_pool_.last_gen = 0;
  atomic_store(&tt_pool_.job, 0);
  atomic_store(&tt_pool_.done, 0);
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

int tt_in_parallel_region(void) { return tt_in_parallel_; }

int tt_num_threads(void) {
  if (!tt_pool_.configured) tt_pool_configure_();
  return tt_pool_.nthreads;
}

void tt_parallel_host_wait_begin(void) {
  atomic_fetch_add(&tt_host_waiters_, 1);
  /* Let the workers that sat out the job in flight join it. */
  tt_pool_t *p = &tt_pool_;
  if (atomic_load_explicit(&p->allowed, memory_order_acquire) >= TT_POOL_MAX_THREADS) return;
  pthread_mutex_lock(&p->mu);
  atomic_store_explicit(&p->allowed, TT_POOL_MAX_THREADS, memory_order_release);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
}
void tt_parallel_host_wait_end(void) {
  /* The host is back: workers past the width leave the job in flight after
   * their current chunk (three threads on two cores slowed whole kernels
   * by their stragglers: ResNet-18's throttled step 67 -> 95 ms). */
  if (atomic_fetch_sub(&tt_host_waiters_, 1) == 1)
    atomic_store_explicit(&tt_pool_.allowed, tt_parallel_width() - 1, memory_order_release);
}

int tt_parallel_width(void) {
  int n = tt_num_threads();
  if (n <= 1 || atomic_load_explicit(&tt_host_waiters_, memory_order_relaxed) > 0) return n;
  int on = atomic_load_explicit(&tt_host_core_, memory_order_relaxed);
  if (on < 0) {
    on = tt_config()->host_core;
    atomic_store_explicit(&tt_host_core_, on, memory_order_relaxed);
  }
  return on ? n - 1 : n;
}

static inline void tt_cpu_relax_(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Inside a held burst (tt_parallel_hold_begin): yields the core to
 * whatever else wants it (the Python thread tracing the next step) and
 * returns 1, so the caller keeps polling instead of going to sleep. */
static int tt_pool_yield_if_held_(void) {
  if (atomic_load_explicit(&tt_pool_holds_, memory_order_relaxed) <= 0) return 0;
  sched_yield();
  return 1;
}

static inline uint32_t tt_job_gen_(uint64_t word) { return (uint32_t)(word >> 32); }

/* Claims and runs chunks of job generation `gen` until none is left (a
 * worker, index >= 0: or until it is no longer allowed to take part). */
static void tt_pool_run_chunks_(tt_pool_t *p, uint32_t gen, int index) {
  for (;;) {
    uint64_t word = atomic_load_explicit(&p->job, memory_order_acquire);
    if (tt_job_gen_(word) != gen) return;
    if (index >= 0 && index >= atomic_load_explicit(&p->allowed, memory_order_acquire)) return;
    int64_t nchunks = (int64_t)((word >> 16) & 0xffffu), c = (int64_t)(word & 0xffffu);
    if (c >= nchunks) return;
    if (!atomic_compare_exchange_weak_explicit(&p->job, &word, word + 1,
                                               memory_order_acq_rel,
                                               memory_order_acquire)) {
      continue;
    }
    int64_t begin = c * p->chunk;
    p->fn(p->ctx, begin, tt_min64(p->n, begin + p->chunk));
    if (atomic_fetch_add(&p->done, 1) + 1 == nchunks) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done_cv);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

/* Whether worker `index` has a job to join: one it has not run, and it
 * may take part (the width can grow while the job runs). */
static int tt_pool_has_work_(tt_pool_t *p, int index, uint32_t seen) {
  return tt_job_gen_(atomic_load_explicit(&p->job, memory_order_acquire)) != seen &&
         index < atomic_load_explicit(&p->allowed, memory_order_acquire);
}

static void *tt_pool_worker_(void *arg) {
  tt_worker_arg_t *wa = (tt_worker_arg_t *)arg;
  tt_pool_t *p = wa->pool;
  const int index = wa->index;
  free(wa);
  tt_in_parallel_ = 1;
  uint32_t seen = tt_job_gen_(atomic_load(&p->job));
  for (;;) {
    for (int spins = 0; spins < TT_POOL_SPIN; ++spins) {
      if (tt_pool_has_work_(p, index, seen)) break;
      if (tt_pool_yield_if_held_()) {
        spins = 0; /* held: poll for as long as the burst lasts */
        continue;
      }
      tt_cpu_relax_();
    }
    pthread_mutex_lock(&p->mu);
    while (!tt_pool_has_work_(p, index, seen)) pthread_cond_wait(&p->work_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    seen = tt_job_gen_(atomic_load(&p->job));
    tt_pool_run_chunks_(p, seen, index);
  }
  return NULL;
}

/* Starts the workers; called with call_mu held and no job in flight. */
static void tt_pool_start_(tt_pool_t *p) {
  p->started = 1;
  p->nworkers = 0;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (int i = 0; i < p->nthreads - 1; ++i) {
    pthread_t th;
    tt_worker_arg_t *wa = malloc(sizeof(*wa));
    if (!wa) break; /* run with fewer */
    wa->pool = p;
    wa->index = i;
    if (pthread_create(&th, &attr, tt_pool_worker_, wa) != 0) {
      free(wa);
      break;
    }
    ++p->nworkers;
  }
  pthread_attr_destroy(&attr);
}

/* TORCHTPU_POOL_HOLD=0 turns holds off (workers sleep between kernels). */
static int tt_pool_hold_enabled_(void) {
  static _Atomic int on = -1;
  int v = atomic_load_explicit(&on, memory_order_relaxed);
  if (v < 0) {
    v = tt_config()->pool_hold;
    atomic_store_explicit(&on, v, memory_order_relaxed);
  }
  return v;
}

void tt_parallel_hold_begin(void) {
  if (tt_pool_hold_enabled_()) atomic_fetch_add(&tt_pool_holds_, 1);
}

void tt_parallel_hold_end(void) {
  if (tt_pool_hold_enabled_()) atomic_fetch_sub(&tt_pool_holds_, 1);
}

/* Runs [0, n) in chunks of at least `grain` items, at most `per_thread`
 * chunks a taking-part thread (and never more than the job word counts). */
static void tt_parallel_run_(int64_t n, int64_t grain, int64_t per_thread, tt_range_fn_t fn,
                             void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int nthreads = tt_parallel_width();
  if (tt_in_parallel_ || tt_num_threads() <= 1 || n <= grain) {
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
  /* Chunks for every thread of the pool, `workers` of them allowed now
   * (more may join: tt_parallel_host_wait_begin). */
  int workers = nthreads - 1 < p->nworkers ? nthreads - 1 : p->nworkers;
  int64_t nchunks = (n + grain - 1) / grain;
  int64_t max_chunks = (int64_t)(p->nworkers + 1) * per_thread;
  if (max_chunks > TT_POOL_MAX_CHUNKS) max_chunks = TT_POOL_MAX_CHUNKS;
  if (nchunks > max_chunks) nchunks = max_chunks;
  int64_t chunk = (n + nchunks - 1) / nchunks;
  nchunks = (n + chunk - 1) / chunk;

  /* No chunk of the previous job is running (it finished before its call
   * returned), so the fields are free to change. */
  p->fn = fn;
  p->ctx = ctx;
  p->n = n;
  p->chunk = chunk;
  atomic_store(&p->done, 0);
  atomic_store_explicit(&p->allowed, workers, memory_order_release);
  uint32_t gen = ++p->last_gen;
  pthread_mutex_lock(&p->mu);
  atomic_store_explicit(&p->job, (uint64_t)gen << 32 | (uint64_t)nchunks << 16,
                        memory_order_release);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);

  tt_in_parallel_ = 1;
  tt_pool_run_chunks_(p, gen, -1);
  tt_in_parallel_ = 0;

  for (int spins = 0; atomic_load(&p->done) < nchunks && spins < TT_POOL_SPIN; ++spins) {
    if (tt_pool_yield_if_held_()) {
      spins = 0;
      continue;
    }
    tt_cpu_relax_();
  }
  if (atomic_load(&p->done) < nchunks) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->done) < nchunks) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&p->call_mu);
}

void tt_parallel_for(int64_t n, int64_t grain, tt_range_fn_t fn, void *ctx) {
  tt_parallel_run_(n, grain, 4, fn, ctx);
}

void tt_parallel_for_items(int64_t n, tt_range_fn_t fn, void *ctx) {
  tt_parallel_run_(n, 1, TT_POOL_MAX_CHUNKS, fn, ctx);
}
