/* The CPU backend's virtual devices: one FIFO queue and worker thread per
 * device, buffers with readiness, allocation accounting. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime_internal.h"
#include "torchtpu/kernels.h"
#include "torchtpu/metrics.h"
#include "torchtpu/trace.h"

/* The caching allocator. A step's intermediates and outputs have the same
 * sizes from one execution to the next; returning them to malloc makes
 * glibc hand large blocks back to the kernel, and every execution then
 * pays a page fault per 4 KiB page it writes. Blocks of at least
 * TT_ALLOC_MIN_CACHED bytes are rounded up to a size class (four classes
 * per power of two: at most 25% slack) and kept on a per-device free list
 * when freed, up to a cap (TORCHTPU_ALLOCATOR_CACHE_MB, default 1024; 0
 * disables caching). A failed allocation empties the cache and retries. */
#define TT_ALLOC_MIN_SHIFT 14 /* 16 KiB */
#define TT_ALLOC_MIN_CACHED ((size_t)1 << TT_ALLOC_MIN_SHIFT)
#define TT_ALLOC_BINS (4 * (48 - TT_ALLOC_MIN_SHIFT))

/* One replicated execution (tt_runtime_replicated_begin): its programs'
 * jobs, sampled together. Fields under tt_rt_lock_. */
typedef struct tt_replica_group_s {
  int32_t refs;  /* unfinished jobs, plus one while the group is open */
  int32_t jobs;  /* programs enqueued */
  int64_t start, end; /* first start, last end of an execution (0: none) */
} tt_replica_group_t;

static _Thread_local tt_replica_group_t *tt_open_group_ = NULL;

typedef struct tt_job_s {
  struct tt_job_s *next;
  int held; /* queued but not yet runnable (tt_runtime_release_held) */
  int eager; /* enqueued in eager mode: sampled in EagerOpExecuteTime */
  tt_replica_group_t *group; /* part of a replicated execution, or NULL */
  tt_executable_t *exe;
  int32_t num_inputs, num_outputs;
  tt_input_value_t *inputs;
  tt_buffer_t **outputs;
} tt_job_t;

typedef struct tt_device_s {
  int32_t index;
  pthread_t thread;
  tt_job_t *head, *tail;
  int64_t queued; /* jobs submitted and not yet finished */
  int64_t bytes_in_use, peak_bytes;
  /* Freed buffers kept for reuse, one stack per size class (see below). */
  pthread_mutex_t cache_lock;
  void *bins[TT_ALLOC_BINS];
  int64_t cached_bytes;
} tt_device_t;

static pthread_mutex_t tt_rt_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tt_rt_work_ = PTHREAD_COND_INITIALIZER;
static pthread_cond_t tt_rt_done_ = PTHREAD_COND_INITIALIZER;
static tt_device_t *tt_devices_ = NULL;
static int32_t tt_num_devices_ = 0;

static void *tt_device_worker(void *arg);

tt_status_t tt_runtime_init(int32_t num_devices) {
  pthread_mutex_lock(&tt_rt_lock_);
  if (tt_num_devices_) {
    int32_t have = tt_num_devices_;
    pthread_mutex_unlock(&tt_rt_lock_);
    if (have == num_devices) return NULL;
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "runtime already initialized with %d devices (asked for %d)", have,
                          num_devices);
  }
  if (num_devices < 1 || num_devices > 1024) {
    pthread_mutex_unlock(&tt_rt_lock_);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "number of CPU devices must be in [1, 1024], got %d", num_devices);
  }
  tt_devices_ = calloc((size_t)num_devices, sizeof(tt_device_t));
  if (!tt_devices_) {
    pthread_mutex_unlock(&tt_rt_lock_);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory creating devices");
  }
  for (int32_t i = 0; i < num_devices; ++i) {
    tt_devices_[i].index = i;
    pthread_mutex_init(&tt_devices_[i].cache_lock, NULL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 8u << 20);
    if (pthread_create(&tt_devices_[i].thread, &attr, tt_device_worker, &tt_devices_[i])) {
      pthread_attr_destroy(&attr);
      pthread_mutex_unlock(&tt_rt_lock_);
      return tt_status_make(TT_RESOURCE_EXHAUSTED, "could not start worker for device %d", i);
    }
    pthread_detach(tt_devices_[i].thread);
    pthread_attr_destroy(&attr);
  }
  tt_num_devices_ = num_devices;
  pthread_mutex_unlock(&tt_rt_lock_);
  return NULL;
}

int32_t tt_runtime_device_count(void) {
  return __atomic_load_n(&tt_num_devices_, __ATOMIC_ACQUIRE);
}

static int64_t tt_alloc_cache_cap_ = -1;

static int64_t tt_alloc_cache_cap(void) {
  int64_t cap = __atomic_load_n(&tt_alloc_cache_cap_, __ATOMIC_RELAXED);
  if (cap < 0) {
    cap = tt_config()->allocator_cache_bytes; /* TORCHTPU_ALLOCATOR_CACHE_MB */
    __atomic_store_n(&tt_alloc_cache_cap_, cap, __ATOMIC_RELAXED);
  }
  return cap;
}

/* Size class of a cached block: returns the class and its rounded size,
 * or -1 for blocks too small or too large to cache. */
static int tt_alloc_class(size_t nbytes, size_t *rounded) {
  if (nbytes < TT_ALLOC_MIN_CACHED) return -1;
  int b = 63 - __builtin_clzll((unsigned long long)nbytes); /* 2^b <= n */
  size_t base = (size_t)1 << b, step = base >> 2;
  size_t q = (nbytes - base + step - 1) / step; /* 0..4 */
  int cls = (b - TT_ALLOC_MIN_SHIFT) * 4 + (int)q;
  if (cls >= TT_ALLOC_BINS) return -1;
  *rounded = base + q * step;
  return cls;
}

/* Frees every cached block of device d. */
static void tt_alloc_cache_flush(tt_device_t *d) {
  pthread_mutex_lock(&d->cache_lock);
  for (int c = 0; c < TT_ALLOC_BINS; ++c) {
    void *p = d->bins[c];
    while (p) {
      void *next = *(void **)p;
      free(p);
      p = next;
    }
    d->bins[c] = NULL;
  }
  d->cached_bytes = 0;
  pthread_mutex_unlock(&d->cache_lock);
}

void *tt_device_alloc(int32_t device, size_t nbytes) {
  tt_device_t *d = device >= 0 && device < tt_num_devices_ ? &tt_devices_[device] : NULL;
  void *p = NULL;
  size_t rounded = nbytes;
  int cls = d && tt_alloc_cache_cap() > 0 ? tt_alloc_class(nbytes, &rounded) : -1;
  if (cls >= 0) {
    pthread_mutex_lock(&d->cache_lock);
    p = d->bins[cls];
    if (p) {
      d->bins[cls] = *(void **)p;
      d->cached_bytes -= (int64_t)rounded;
    }
    pthread_mutex_unlock(&d->cache_lock);
  }
  /* 64-byte alignment for vector kernels. */
  if (!p && posix_memalign(&p, 64, rounded ? rounded : 1)) {
    p = NULL;
    if (d) {
      tt_alloc_cache_flush(d);
      if (posix_memalign(&p, 64, rounded ? rounded : 1)) return NULL;
    }
    if (!p) return NULL;
  }
  if (d) {
    int64_t now = __atomic_add_fetch(&d->bytes_in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
    int64_t peak = __atomic_load_n(&d->peak_bytes, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&d->peak_bytes, &peak, now, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
  }
  return p;
}

void tt_device_free(int32_t device, void *data, size_t nbytes) {
  if (!data) return;
  tt_device_t *d = device >= 0 && device < tt_num_devices_ ? &tt_devices_[device] : NULL;
  if (d) __atomic_sub_fetch(&d->bytes_in_use, (int64_t)nbytes, __ATOMIC_RELAXED);
  size_t rounded = nbytes;
  int64_t cap = d ? tt_alloc_cache_cap() : 0;
  int cls = cap > 0 ? tt_alloc_class(nbytes, &rounded) : -1;
  if (cls >= 0) {
    pthread_mutex_lock(&d->cache_lock);
    if (d->cached_bytes + (int64_t)rounded <= cap) {
      *(void **)data = d->bins[cls];
      d->bins[cls] = data;
      d->cached_bytes += (int64_t)rounded;
      data = NULL;
    }
    pthread_mutex_unlock(&d->cache_lock);
  }
  free(data);
}

void tt_runtime_memory_stats(int32_t device, int64_t *out_bytes_in_use,
                             int64_t *out_peak_bytes) {
  *out_bytes_in_use = 0;
  *out_peak_bytes = 0;
  if (device < 0 || device >= tt_num_devices_) return;
  *out_bytes_in_use = __atomic_load_n(&tt_devices_[device].bytes_in_use, __ATOMIC_RELAXED);
  *out_peak_bytes = __atomic_load_n(&tt_devices_[device].peak_bytes, __ATOMIC_RELAXED);
}

/* ---- buffers ---- */

static uint64_t tt_buffer_next_id_(void) {
  static uint64_t next = 0;
  return __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}

uint64_t tt_buffer_key(tt_buffer_t *b) {
  if (!__atomic_load_n(&b->keyed, __ATOMIC_RELAXED)) __atomic_store_n(&b->keyed, 1, __ATOMIC_RELAXED);
  return b->id;
}

tt_status_t tt_buffer_from_host(int32_t device, const void *host, size_t nbytes,
                                tt_buffer_t **out_buffer) {
  *out_buffer = NULL;
  if (device < 0 || device >= tt_num_devices_)
    return tt_status_make(TT_INVALID_ARGUMENT, "device xla:%d does not exist (%d devices)",
                          device, tt_num_devices_);
  int64_t t0 = tt_now_ns();
  int64_t trace_t0 = tt_trace_now();
  tt_buffer_t *b = calloc(1, sizeof(*b));
  if (!b) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer)");
  b->data = tt_device_alloc(device, nbytes);
  if (!b->data) {
    free(b);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of device memory allocating %zu bytes",
                          nbytes);
  }
  if (nbytes) memcpy(b->data, host, nbytes);
  b->refcount = 1;
  b->device = device;
  b->nbytes = nbytes;
  b->ready = 1;
  b->id = tt_buffer_next_id_();
  tt_metric_add("TransferToDeviceTime", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
  tt_trace_complete("TransferToDevice", "transfer", trace_t0, "{\"bytes\":%zu,\"device\":%d}",
                    nbytes, device);
  *out_buffer = b;
  return NULL;
}

tt_buffer_t *tt_buffer_create_pending(int32_t device, size_t nbytes) {
  tt_buffer_t *b = calloc(1, sizeof(*b));
  if (!b) return NULL;
  b->id = tt_buffer_next_id_();
  b->refcount = 1;
  b->device = device;
  b->nbytes = nbytes;
  return b;
}

void tt_buffer_retain(tt_buffer_t *b) { __atomic_add_fetch(&b->refcount, 1, __ATOMIC_RELAXED); }

void tt_buffer_release(tt_buffer_t *b) {
  if (!b) return;
  if (__atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (__atomic_load_n(&b->keyed, __ATOMIC_RELAXED)) tt_blas_forget(b->id);
  if (!b->donated) tt_device_free(b->device, b->data, b->nbytes);
  tt_status_free(b->error);
  free(b);
}

int32_t tt_buffer_device(const tt_buffer_t *b) { return b->device; }
size_t tt_buffer_size(const tt_buffer_t *b) { return b->nbytes; }
void *tt_buffer_data(tt_buffer_t *b) { return b->data; }

void tt_buffer_mark_ready(tt_buffer_t *b, tt_status_t error) {
  pthread_mutex_lock(&tt_rt_lock_);
  b->ready = 1;
  b->error = error;
  pthread_cond_broadcast(&tt_rt_done_);
  pthread_mutex_unlock(&tt_rt_lock_);
}

tt_status_t tt_buffer_wait(tt_buffer_t *b) {
  pthread_mutex_lock(&tt_rt_lock_);
  if (!b->ready) {
    tt_parallel_host_wait_begin(); /* the kernels may take every core */
    while (!b->ready) pthread_cond_wait(&tt_rt_done_, &tt_rt_lock_);
    tt_parallel_host_wait_end();
  }
  tt_status_t err = b->error ? tt_status_make(tt_status_code(b->error), "%s",
                                              tt_status_message(b->error))
                             : NULL;
  pthread_mutex_unlock(&tt_rt_lock_);
  return err;
}

tt_status_t tt_buffer_to_host(tt_buffer_t *b, void *host, size_t nbytes) {
  TT_RETURN_IF_ERROR(tt_buffer_wait(b));
  if (nbytes != b->nbytes)
    return tt_status_make(TT_INVALID_ARGUMENT, "copy to host: %zu bytes asked, buffer has %zu",
                          nbytes, b->nbytes);
  int64_t t0 = tt_now_ns();
  int64_t trace_t0 = tt_trace_now();
  if (nbytes) memcpy(host, b->data, nbytes);
  tt_metric_add("TransferFromDeviceTime", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
  tt_trace_complete("TransferFromDevice", "transfer", trace_t0, "{\"bytes\":%zu,\"device\":%d}",
                    nbytes, b->device);
  return NULL;
}

/* ---- queues ---- */

static tt_status_t tt_enqueue(tt_executable_t *exe, int32_t device,
                              const tt_input_value_t *inputs, int32_t num_inputs,
                              tt_buffer_t *const *outputs, int32_t num_outputs, int held) {
  if (device < 0 || device >= tt_num_devices_)
    return tt_status_make(TT_INVALID_ARGUMENT, "device xla:%d does not exist", device);
  tt_job_t *job = calloc(1, sizeof(*job));
  if (!job) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (job)");
  job->inputs = calloc((size_t)num_inputs + 1, sizeof(*job->inputs));
  job->outputs = calloc((size_t)num_outputs + 1, sizeof(*job->outputs));
  if (!job->inputs || !job->outputs) {
    free(job->inputs);
    free(job->outputs);
    free(job);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (job)");
  }
  tt_executable_retain(exe);
  job->exe = exe;
  job->held = held;
  job->eager = tt_eager_mode();
  job->group = tt_open_group_;
  job->num_inputs = num_inputs;
  job->num_outputs = num_outputs;
  for (int32_t i = 0; i < num_inputs; ++i) {
    job->inputs[i] = inputs[i];
    if (inputs[i].buffer) tt_buffer_retain(inputs[i].buffer);
  }
  for (int32_t i = 0; i < num_outputs; ++i) {
    job->outputs[i] = outputs[i];
    tt_buffer_retain(outputs[i]);
  }
  pthread_mutex_lock(&tt_rt_lock_);
  if (job->group) {
    job->group->refs++;
    job->group->jobs++;
  }
  tt_device_t *d = &tt_devices_[device];
  if (d->tail)
    d->tail->next = job;
  else
    d->head = job;
  d->tail = job;
  d->queued++;
  pthread_cond_broadcast(&tt_rt_work_);
  pthread_mutex_unlock(&tt_rt_lock_);
  return NULL;
}

tt_status_t tt_executable_enqueue(tt_executable_t *exe, int32_t device,
                                  const tt_input_value_t *inputs, int32_t num_inputs,
                                  tt_buffer_t *const *outputs, int32_t num_outputs) {
  return tt_enqueue(exe, device, inputs, num_inputs, outputs, num_outputs, 0);
}

tt_status_t tt_executable_enqueue_held(tt_executable_t *exe, int32_t device,
                                       const tt_input_value_t *inputs, int32_t num_inputs,
                                       tt_buffer_t *const *outputs, int32_t num_outputs) {
  return tt_enqueue(exe, device, inputs, num_inputs, outputs, num_outputs, 1);
}

void tt_runtime_replicated_begin(void) {
  tt_replica_group_t *g = calloc(1, sizeof(*g));
  if (g) g->refs = 1; /* out of memory: its programs are sampled one by one */
  tt_open_group_ = g;
}

/* Drops one reference to g; the last samples it (outside tt_rt_lock_). */
static void tt_replica_group_release_(tt_replica_group_t *g) {
  pthread_mutex_lock(&tt_rt_lock_);
  int last = --g->refs == 0;
  pthread_mutex_unlock(&tt_rt_lock_);
  if (!last) return;
  if (g->end > 0) tt_metric_add("ExecuteReplicatedTime", TT_UNIT_NANOSECONDS,
                                (double)(g->end - g->start));
  free(g);
}

int32_t tt_runtime_replicated_end(void) {
  tt_replica_group_t *g = tt_open_group_;
  tt_open_group_ = NULL;
  if (!g) return 0;
  pthread_mutex_lock(&tt_rt_lock_);
  int32_t jobs = g->jobs;
  pthread_mutex_unlock(&tt_rt_lock_);
  tt_replica_group_release_(g);
  return jobs;
}

void tt_runtime_release_held(int32_t device) {
  if (device < 0 || device >= tt_num_devices_) return;
  pthread_mutex_lock(&tt_rt_lock_);
  for (tt_job_t *j = tt_devices_[device].head; j; j = j->next) j->held = 0;
  pthread_cond_broadcast(&tt_rt_work_);
  pthread_mutex_unlock(&tt_rt_lock_);
}

static void tt_job_run(tt_device_t *d, tt_job_t *job) {
  tt_status_t err = NULL;
  /* Inputs produced by other queued work must be ready first. */
  for (int32_t i = 0; i < job->num_inputs && !err; ++i)
    if (job->inputs[i].buffer) err = tt_buffer_wait(job->inputs[i].buffer);
  void **out_data = calloc((size_t)job->num_outputs + 1, sizeof(void *));
  if (!err && !out_data) err = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  if (!err) err = tt_executable_bind_outputs(job->exe, d->index, job->inputs, job->outputs,
                                             out_data);
  if (!err) {
    int64_t t0 = tt_now_ns();
    int64_t trace_t0 = tt_trace_now();
    err = tt_executable_execute(job->exe, d->index, job->inputs, out_data);
    int64_t t1 = tt_now_ns();
    if (job->group) { /* sampled once for the whole execution */
      pthread_mutex_lock(&tt_rt_lock_);
      if (!job->group->end || t0 < job->group->start) job->group->start = t0;
      if (t1 > job->group->end) job->group->end = t1;
      pthread_mutex_unlock(&tt_rt_lock_);
    } else {
      /* PyTorch/XLA samples an eager op's execution in EagerOpExecuteTime only. */
      tt_metric_add(job->eager ? "EagerOpExecuteTime" : "ExecuteTime", TT_UNIT_NANOSECONDS,
                    (double)(t1 - t0));
    }
    tt_trace_complete("Execute", "execute", trace_t0, "{\"hash\":\"%016llx\",\"device\":%d}",
                      (unsigned long long)tt_executable_graph(job->exe)->hash, d->index);
  }
  free(out_data);
  /* Before the outputs are ready: a reader of them sees the sample. */
  if (job->group) tt_replica_group_release_(job->group);
  for (int32_t i = 0; i < job->num_outputs; ++i) {
    tt_status_t e = err ? tt_status_make(tt_status_code(err), "%s", tt_status_message(err)) : NULL;
    tt_buffer_mark_ready(job->outputs[i], e);
    tt_buffer_release(job->outputs[i]);
  }
  tt_status_free(err);
  for (int32_t i = 0; i < job->num_inputs; ++i)
    if (job->inputs[i].buffer) tt_buffer_release(job->inputs[i].buffer);
  tt_executable_release(job->exe);
  free(job->inputs);
  free(job->outputs);
  free(job);
}

static void *tt_device_worker(void *arg) {
  tt_device_t *d = arg;
  char thread_name[32];
  snprintf(thread_name, sizeof(thread_name), "xla:%d", d->index);
  tt_trace_set_thread_name(thread_name);
  for (;;) {
    pthread_mutex_lock(&tt_rt_lock_);
    while (!d->head || d->head->held) pthread_cond_wait(&tt_rt_work_, &tt_rt_lock_);
    tt_job_t *job = d->head;
    d->head = job->next;
    if (!d->head) d->tail = NULL;
    pthread_mutex_unlock(&tt_rt_lock_);
    tt_job_run(d, job);
    pthread_mutex_lock(&tt_rt_lock_);
    d->queued--;
    pthread_cond_broadcast(&tt_rt_done_);
    pthread_mutex_unlock(&tt_rt_lock_);
  }
  return NULL;
}

/* Blocks until device (every device when < 0) has fewer than `limit`
 * executions queued or running; returns whether it had to wait. While it
 * waits the kernels may take every core. */
static int tt_runtime_wait_below_(int32_t device, int64_t limit) {
  int waited = 0;
  pthread_mutex_lock(&tt_rt_lock_);
  for (int32_t i = 0; i < tt_num_devices_; ++i) {
    if (device >= 0 && i != device) continue;
    if (tt_devices_[i].queued < limit) continue;
    waited = 1;
    tt_parallel_host_wait_begin();
    while (tt_devices_[i].queued >= limit) pthread_cond_wait(&tt_rt_done_, &tt_rt_lock_);
    tt_parallel_host_wait_end();
  }
  pthread_mutex_unlock(&tt_rt_lock_);
  return waited;
}

void tt_runtime_throttle(int32_t device) {
  /* TORCHTPU_MAX_INFLIGHT, read once (default 2). */
  static _Atomic int64_t limit = 0;
  int64_t n = atomic_load_explicit(&limit, memory_order_relaxed);
  if (n <= 0) {
    n = tt_config()->max_inflight;
    atomic_store_explicit(&limit, n, memory_order_relaxed);
  }
  if (tt_runtime_wait_below_(device, n)) tt_counter_add("DeviceQueueWait", 1);
}

void tt_runtime_wait(int32_t device) { tt_runtime_wait_below_(device, 1); }
