/* torchtpu metrics and counters, with PyTorch/XLA's names and report
 * format. Thread-safe. Names are copied. */
#ifndef TORCHTPU_METRICS_H_
#define TORCHTPU_METRICS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tt_metric_unit_e {
  TT_UNIT_NANOSECONDS = 0, /* reported as time (e.g. "1s234ms") */
  TT_UNIT_BYTES = 1,       /* reported as sizes (e.g. "12.00MB") */
  TT_UNIT_COUNT = 2,       /* plain numbers */
} tt_metric_unit_t;

void tt_counter_add(const char *name, int64_t delta);
int64_t tt_counter_value(const char *name); /* 0 if absent */
/* 1 and the value if the counter was ever created (even if cleared to 0). */
int tt_counter_lookup(const char *name, int64_t *out_value);
void tt_metric_add(const char *name, tt_metric_unit_t unit, double value);

/* Monotonic clock in nanoseconds. */
int64_t tt_now_ns(void);

/* Newline-separated names (caller frees). Counters with value 0 are
 * omitted from counter names, as PyTorch/XLA does. */
char *tt_counter_names(void);
char *tt_metric_names(void);
/* For a metric: total samples, accumulator and up to max_samples of the
 * most recent (timestamp_ns, value) pairs. Returns 0 if absent. */
int tt_metric_data(const char *name, int64_t *out_total_samples,
                   double *out_accumulator, int64_t *out_num_samples,
                   int64_t *timestamps_ns, double *values, int64_t max_samples);
/* Full report text in PyTorch/XLA's format (caller frees). If names is not
 * NULL, only those metrics and counters (newline-separated). */
char *tt_metrics_report(const char *names);
void tt_counters_clear(void);
void tt_metrics_clear(void);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_METRICS_H_ */
