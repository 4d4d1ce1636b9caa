/* The trace recorder: complete spans in one growable array under a mutex,
 * per-thread span stacks and thread names, Chrome trace JSON output.
 * Recording state is one atomic int so disabled call sites cost a load. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchtpu/metrics.h"
#include "torchtpu/trace.h"

#define TT_TRACE_MAX_EVENTS (1 << 21)
#define TT_TRACE_MAX_DEPTH 256

typedef struct tt_trace_rec_s {
  char *name;
  char *cat;
  char *args;
  int64_t start_ns, dur_ns;
  int32_t tid;
} tt_trace_rec_t;

static pthread_mutex_t tt_trace_lock_ = PTHREAD_MUTEX_INITIALIZER;
static int tt_trace_on_ = 0;          /* atomic */
static int64_t tt_trace_session_ = 0; /* atomic; bumped by every start */
static int64_t tt_trace_origin_ns_ = 0;
static tt_trace_rec_t *tt_trace_recs_ = NULL;
static int64_t tt_trace_count_ = 0, tt_trace_cap_ = 0, tt_trace_dropped_ = 0;

/* Thread registry: tid -> name. Names persist across sessions. */
static char **tt_trace_thread_names_ = NULL;
static int32_t tt_trace_num_threads_ = 0, tt_trace_thread_cap_ = 0;

typedef struct tt_trace_open_s {
  char *name, *cat, *args;
  int64_t start_ns;
  int64_t session; /* 0: opened while not recording */
} tt_trace_open_t;

static _Thread_local int32_t tt_trace_tid_ = 0;
static _Thread_local tt_trace_open_t tt_trace_stack_[TT_TRACE_MAX_DEPTH];
static _Thread_local int32_t tt_trace_depth_ = 0;    /* spans on the stack */
static _Thread_local int32_t tt_trace_overflow_ = 0; /* begins past the cap */

/* The calling thread's tid; registers the thread (lock held). */
static int32_t tt_trace_tid_locked(void) {
  if (tt_trace_tid_) return tt_trace_tid_;
  if (tt_trace_num_threads_ == tt_trace_thread_cap_) {
    int32_t ncap = tt_trace_thread_cap_ ? tt_trace_thread_cap_ * 2 : 16;
    char **n = realloc(tt_trace_thread_names_, sizeof(*n) * (size_t)ncap);
    if (!n) return 0;
    tt_trace_thread_names_ = n;
    tt_trace_thread_cap_ = ncap;
  }
  tt_trace_thread_names_[tt_trace_num_threads_] = NULL;
  tt_trace_tid_ = ++tt_trace_num_threads_;
  return tt_trace_tid_;
}

static void tt_trace_free_recs_locked(void) {
  for (int64_t i = 0; i < tt_trace_count_; ++i) {
    free(tt_trace_recs_[i].name);
    free(tt_trace_recs_[i].cat);
    free(tt_trace_recs_[i].args);
  }
  tt_trace_count_ = 0;
  tt_trace_dropped_ = 0;
}

tt_status_t tt_trace_start(void) {
  pthread_mutex_lock(&tt_trace_lock_);
  if (tt_trace_on_) {
    pthread_mutex_unlock(&tt_trace_lock_);
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "a trace is already being recorded; stop it before starting another");
  }
  tt_trace_free_recs_locked();
  tt_trace_origin_ns_ = tt_now_ns();
  __atomic_add_fetch(&tt_trace_session_, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&tt_trace_on_, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&tt_trace_lock_);
  return NULL;
}

tt_status_t tt_trace_stop(void) {
  pthread_mutex_lock(&tt_trace_lock_);
  int was = tt_trace_on_;
  __atomic_store_n(&tt_trace_on_, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&tt_trace_lock_);
  if (!was) return tt_status_make(TT_INVALID_ARGUMENT, "no trace is being recorded");
  return NULL;
}

int tt_trace_active(void) { return __atomic_load_n(&tt_trace_on_, __ATOMIC_RELAXED); }

int64_t tt_trace_now(void) { return tt_trace_active() ? tt_now_ns() : 0; }

/* Appends a record; takes ownership of name/cat/args (freed on failure). */
static void tt_trace_record(char *name, char *cat, char *args, int64_t start_ns,
                            int64_t end_ns, int64_t session) {
  pthread_mutex_lock(&tt_trace_lock_);
  int ok = tt_trace_on_ && session == tt_trace_session_ && name && cat;
  if (ok && tt_trace_count_ == tt_trace_cap_) {
    if (tt_trace_cap_ >= TT_TRACE_MAX_EVENTS) {
      tt_trace_dropped_++;
      ok = 0;
    } else {
      int64_t ncap = tt_trace_cap_ ? tt_trace_cap_ * 2 : 4096;
      tt_trace_rec_t *n = realloc(tt_trace_recs_, sizeof(*n) * (size_t)ncap);
      if (!n) {
        tt_trace_dropped_++;
        ok = 0;
      } else {
        tt_trace_recs_ = n;
        tt_trace_cap_ = ncap;
      }
    }
  }
  int32_t tid = ok ? tt_trace_tid_locked() : 0;
  if (ok && tid) {
    tt_trace_rec_t *r = &tt_trace_recs_[tt_trace_count_++];
    r->name = name;
    r->cat = cat;
    r->args = args;
    /* Spans that began before the session are clipped to its origin. */
    r->start_ns = start_ns < tt_trace_origin_ns_ ? tt_trace_origin_ns_ : start_ns;
    r->dur_ns = end_ns > r->start_ns ? end_ns - r->start_ns : 0;
    r->tid = tid;
    name = cat = args = NULL;
  }
  pthread_mutex_unlock(&tt_trace_lock_);
  free(name);
  free(cat);
  free(args);
}

void tt_trace_complete(const char *name, const char *cat, int64_t start_ns,
                       const char *args_fmt, ...) {
  if (!start_ns || !tt_trace_active()) return;
  int64_t end_ns = tt_now_ns();
  char *args = NULL;
  if (args_fmt) {
    va_list ap;
    va_start(ap, args_fmt);
    int n = vsnprintf(NULL, 0, args_fmt, ap);
    va_end(ap);
    if (n >= 0 && (args = malloc((size_t)n + 1))) {
      va_start(ap, args_fmt);
      vsnprintf(args, (size_t)n + 1, args_fmt, ap);
      va_end(ap);
    }
  }
  tt_trace_record(strdup(name), strdup(cat), args, start_ns, end_ns,
                  __atomic_load_n(&tt_trace_session_, __ATOMIC_RELAXED));
}

void tt_trace_begin(const char *name, const char *cat, const char *args_json) {
  if (tt_trace_depth_ >= TT_TRACE_MAX_DEPTH) {
    tt_trace_overflow_++;
    return;
  }
  tt_trace_open_t *o = &tt_trace_stack_[tt_trace_depth_++];
  memset(o, 0, sizeof(*o));
  if (!tt_trace_active()) return; /* closed unrecorded */
  o->session = __atomic_load_n(&tt_trace_session_, __ATOMIC_RELAXED);
  o->start_ns = tt_now_ns();
  o->name = strdup(name ? name : "");
  o->cat = strdup(cat ? cat : "user");
  o->args = args_json && *args_json ? strdup(args_json) : NULL;
}

void tt_trace_end(void) {
  if (tt_trace_overflow_) {
    tt_trace_overflow_--;
    return;
  }
  if (tt_trace_depth_ == 0) return; /* unbalanced end: ignored */
  tt_trace_open_t *o = &tt_trace_stack_[--tt_trace_depth_];
  if (!o->session) return;
  tt_trace_record(o->name, o->cat, o->args, o->start_ns, tt_now_ns(), o->session);
  memset(o, 0, sizeof(*o));
}

void tt_trace_set_thread_name(const char *name) {
  char *copy = strdup(name ? name : "");
  if (!copy) return;
  pthread_mutex_lock(&tt_trace_lock_);
  int32_t tid = tt_trace_tid_locked();
  if (tid) {
    free(tt_trace_thread_names_[tid - 1]);
    tt_trace_thread_names_[tid - 1] = copy;
    copy = NULL;
  }
  pthread_mutex_unlock(&tt_trace_lock_);
  free(copy);
}

const char *tt_trace_thread_name(int32_t tid) {
  pthread_mutex_lock(&tt_trace_lock_);
  const char *n = tid >= 1 && tid <= tt_trace_num_threads_ ? tt_trace_thread_names_[tid - 1] : NULL;
  pthread_mutex_unlock(&tt_trace_lock_);
  return n;
}

int64_t tt_trace_event_count(int64_t *out_dropped) {
  pthread_mutex_lock(&tt_trace_lock_);
  int64_t n = tt_trace_count_;
  if (out_dropped) *out_dropped = tt_trace_dropped_;
  pthread_mutex_unlock(&tt_trace_lock_);
  return n;
}

int tt_trace_get_event(int64_t i, tt_trace_event_t *out) {
  pthread_mutex_lock(&tt_trace_lock_);
  int ok = i >= 0 && i < tt_trace_count_;
  if (ok) {
    const tt_trace_rec_t *r = &tt_trace_recs_[i];
    out->name = r->name;
    out->cat = r->cat;
    out->args = r->args;
    out->start_ns = r->start_ns;
    out->dur_ns = r->dur_ns;
    out->tid = r->tid;
  }
  pthread_mutex_unlock(&tt_trace_lock_);
  return ok;
}

/* ---- JSON ---- */

/* A JSON string literal of s (quotes included). */
static void tt_json_string(tt_strbuf_t *b, const char *s) {
  tt_strbuf_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    switch (*p) {
      case '"': tt_strbuf_put(b, "\\\"", 2); break;
      case '\\': tt_strbuf_put(b, "\\\\", 2); break;
      case '\n': tt_strbuf_put(b, "\\n", 2); break;
      case '\r': tt_strbuf_put(b, "\\r", 2); break;
      case '\t': tt_strbuf_put(b, "\\t", 2); break;
      default:
        if (*p < 0x20) tt_strbuf_printf(b, "\\u%04x", *p);
        else tt_strbuf_put(b, (const char *)p, 1);
    }
  }
  tt_strbuf_put(b, "\"", 1);
}

/* Microseconds with nanosecond precision, so nesting survives rounding. */
static void tt_json_us(tt_strbuf_t *b, int64_t ns) {
  tt_strbuf_printf(b, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

tt_status_t tt_trace_to_json(char **out_json) {
  *out_json = NULL;
  tt_strbuf_t b = {0};
  int pid = (int)getpid();
  pthread_mutex_lock(&tt_trace_lock_);
  tt_strbuf_put(&b, "{\"traceEvents\":[\n", 17);
  tt_strbuf_printf(&b,
                 "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                 "\"args\":{\"name\":\"torchtpu (pid %d)\"}}",
                 pid, pid);
  for (int32_t t = 0; t < tt_trace_num_threads_; ++t) {
    tt_strbuf_printf(&b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                   pid, t + 1);
    char fallback[32];
    snprintf(fallback, sizeof(fallback), "thread %d", t + 1);
    tt_json_string(&b, tt_trace_thread_names_[t] ? tt_trace_thread_names_[t] : fallback);
    tt_strbuf_put(&b, "}}", 2);
  }
  for (int64_t i = 0; i < tt_trace_count_; ++i) {
    const tt_trace_rec_t *r = &tt_trace_recs_[i];
    tt_strbuf_put(&b, ",\n{\"name\":", 10);
    tt_json_string(&b, r->name);
    tt_strbuf_put(&b, ",\"cat\":", 7);
    tt_json_string(&b, r->cat);
    tt_strbuf_printf(&b, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", pid, r->tid);
    tt_json_us(&b, r->start_ns - tt_trace_origin_ns_);
    tt_strbuf_put(&b, ",\"dur\":", 7);
    tt_json_us(&b, r->dur_ns);
    if (r->args) {
      tt_strbuf_put(&b, ",\"args\":", 8);
      tt_strbuf_put(&b, r->args, strlen(r->args));
    }
    tt_strbuf_put(&b, "}", 1);
  }
  tt_strbuf_printf(&b, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"torchtpu\","
                 "\"dropped_events\":%lld}}\n", (long long)tt_trace_dropped_);
  pthread_mutex_unlock(&tt_trace_lock_);
  if (b.failed) {
    free(b.data);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory writing the trace JSON");
  }
  *out_json = b.data;
  return NULL;
}

tt_status_t tt_trace_write_json(const char *path) {
  char *json = NULL;
  TT_RETURN_IF_ERROR(tt_trace_to_json(&json));
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 64);
  if (!tmp) {
    free(json);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  }
  snprintf(tmp, plen + 64, "%s.tmp-%d", path, (int)getpid());
  tt_status_t st = NULL;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    st = tt_status_make(TT_IO_ERROR, "cannot write trace %s: %s", path, strerror(errno));
  } else {
    size_t len = strlen(json), off = 0;
    while (off < len && !st) {
      ssize_t w = write(fd, json + off, len - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) st = tt_status_make(TT_IO_ERROR, "writing trace %s: %s", path, strerror(errno));
      else off += (size_t)w;
    }
    if (!st && fsync(fd) != 0)
      st = tt_status_make(TT_IO_ERROR, "fsync of trace %s: %s", path, strerror(errno));
    close(fd);
    if (!st && rename(tmp, path) != 0)
      st = tt_status_make(TT_IO_ERROR, "cannot write trace %s: %s", path, strerror(errno));
    if (st) unlink(tmp);
  }
  free(tmp);
  free(json);
  return st;
}
