/* torchtpu trace service: a process-wide recorder of timed spans, written
 * out as Chrome trace JSON (loadable in Perfetto and chrome://tracing).
 *
 * The engine records spans for graph builds, compiles, executions (on the
 * device worker threads) and host<->device transfers; the Python front end
 * records host-side spans (torch_xla.debug.profiler.Trace / StepTrace)
 * through tt_trace_begin/tt_trace_end, so all of them share one timeline.
 *
 * Recording is off until tt_trace_start. When it is off every entry point
 * returns after one relaxed atomic load, so instrumented hot paths cost
 * nothing measurable:
 *
 *   int64_t t0 = tt_trace_now();           // 0 when not recording
 *   ... work ...
 *   tt_trace_complete("Compile", "compile", t0, "{\"hash\":\"%016llx\"}", h);
 *
 * All functions are thread-safe. Spans of one thread must nest (a span ends
 * before its parent does); spans of different threads are independent.
 */
#ifndef TORCHTPU_TRACE_H_
#define TORCHTPU_TRACE_H_

#include <stdint.h>

#include "torchtpu/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording: drops events of an earlier session, fixes the time
 * origin. TT_INVALID_ARGUMENT if a session is already recording. */
tt_status_t tt_trace_start(void);
/* Stops recording; the events stay readable until the next start.
 * TT_INVALID_ARGUMENT if no session is recording. */
tt_status_t tt_trace_stop(void);
/* 1 while a session records. */
int tt_trace_active(void);

/* tt_now_ns() while recording, else 0. Pass the result to tt_trace_complete. */
int64_t tt_trace_now(void);
/* Records a complete span [start_ns, now) named name (copied) in category
 * cat (copied) on the calling thread. No-op when start_ns is 0 or recording
 * stopped meanwhile. args_fmt (may be NULL) is a printf format producing a
 * JSON object, e.g. "{\"bytes\":%zu}"; the caller vouches it is valid JSON. */
void tt_trace_complete(const char *name, const char *cat, int64_t start_ns,
                       const char *args_fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Opens a span on the calling thread's stack (name, cat, args_json copied;
 * args_json may be NULL or a JSON object text). tt_trace_end closes the
 * innermost open span of the thread. A span opened while not recording, or
 * in an earlier session, is closed without being recorded. Depth is capped
 * at 256 per thread; deeper begins are counted and ignored by their ends. */
void tt_trace_begin(const char *name, const char *cat, const char *args_json);
void tt_trace_end(void);

/* Names the calling thread in the trace (copied; the last name wins). */
void tt_trace_set_thread_name(const char *name);

/* Serialises the current session as {"traceEvents":[...], ...}: complete
 * events ("ph":"X", ts/dur in microseconds from the session origin) plus
 * process/thread name metadata. *out_json is malloc'd; the caller frees. */
tt_status_t tt_trace_to_json(char **out_json);
/* Writes tt_trace_to_json's text to path atomically (temporary file in the
 * same directory, fsync, rename). TT_IO_ERROR names the path and errno. */
tt_status_t tt_trace_write_json(const char *path);

/* Read access for tests and tools. */
typedef struct tt_trace_event_s {
  const char *name;   /* valid until the next tt_trace_start */
  const char *cat;
  const char *args;   /* JSON object text or NULL */
  int64_t start_ns;   /* tt_now_ns() clock */
  int64_t dur_ns;
  int32_t tid;        /* small per-thread number, 1-based */
} tt_trace_event_t;
/* Number of recorded events, and how many were dropped past the cap. */
int64_t tt_trace_event_count(int64_t *out_dropped);
/* Copies event i (0 <= i < count) into *out; returns 0 if out of range. */
int tt_trace_get_event(int64_t i, tt_trace_event_t *out);
/* Name of trace thread tid (NULL if unnamed); valid until that thread is
 * renamed. */
const char *tt_trace_thread_name(int32_t tid);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_TRACE_H_ */
