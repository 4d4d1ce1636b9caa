/* Metrics and counters with PyTorch/XLA's names and report format.
 * A metric keeps its total sample count, accumulator, and a ring of the
 * most recent samples (for percentiles and rates). */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "torchtpu/base.h"
#include "torchtpu/metrics.h"

#define TT_METRIC_RING 1024

typedef struct tt_counter_s {
  char *name;
  int64_t value;
} tt_counter_t;

typedef struct tt_metric_s {
  char *name;
  tt_metric_unit_t unit;
  int64_t total;
  double accumulator;
  int64_t count; /* samples in ring */
  int64_t head;
  int64_t ts[TT_METRIC_RING];
  double val[TT_METRIC_RING];
} tt_metric_t;

static pthread_mutex_t tt_metrics_lock_ = PTHREAD_MUTEX_INITIALIZER;
static tt_counter_t *tt_counters_ = NULL;
static int64_t tt_num_counters_ = 0, tt_cap_counters_ = 0;
static tt_metric_t **tt_metrics_ = NULL;
static int64_t tt_num_metrics_ = 0, tt_cap_metrics_ = 0;

int64_t tt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static tt_counter_t *tt_find_counter(const char *name, int create) {
  for (int64_t i = 0; i < tt_num_counters_; ++i)
    if (strcmp(tt_counters_[i].name, name) == 0) return &tt_counters_[i];
  if (!create) return NULL;
  if (tt_num_counters_ == tt_cap_counters_) {
    int64_t ncap = tt_cap_counters_ ? tt_cap_counters_ * 2 : 64;
    tt_counter_t *n = realloc(tt_counters_, sizeof(*n) * (size_t)ncap);
    if (!n) return NULL;
    tt_counters_ = n;
    tt_cap_counters_ = ncap;
  }
  char *copy = strdup(name);
  if (!copy) return NULL;
  tt_counter_t *c = &tt_counters_[tt_num_counters_++];
  c->name = copy;
  c->value = 0;
  return c;
}

static tt_metric_t *tt_find_metric(const char *name, tt_metric_unit_t unit, int create) {
  for (int64_t i = 0; i < tt_num_metrics_; ++i)
    if (strcmp(tt_metrics_[i]->name, name) == 0) return tt_metrics_[i];
  if (!create) return NULL;
  if (tt_num_metrics_ == tt_cap_metrics_) {
    int64_t ncap = tt_cap_metrics_ ? tt_cap_metrics_ * 2 : 32;
    tt_metric_t **n = realloc(tt_metrics_, sizeof(*n) * (size_t)ncap);
    if (!n) return NULL;
    tt_metrics_ = n;
    tt_cap_metrics_ = ncap;
  }
  tt_metric_t *m = calloc(1, sizeof(*m));
  if (!m) return NULL;
  m->name = strdup(name);
  if (!m->name) {
    free(m);
    return NULL;
  }
  m->unit = unit;
  tt_metrics_[tt_num_metrics_++] = m;
  return m;
}

void tt_counter_add(const char *name, int64_t delta) {
  pthread_mutex_lock(&tt_metrics_lock_);
  tt_counter_t *c = tt_find_counter(name, 1);
  if (c) c->value += delta;
  pthread_mutex_unlock(&tt_metrics_lock_);
}

int64_t tt_counter_value(const char *name) {
  pthread_mutex_lock(&tt_metrics_lock_);
  tt_counter_t *c = tt_find_counter(name, 0);
  int64_t v = c ? c->value : 0;
  pthread_mutex_unlock(&tt_metrics_lock_);
  return v;
}

int tt_counter_lookup(const char *name, int64_t *out_value) {
  pthread_mutex_lock(&tt_metrics_lock_);
  tt_counter_t *c = tt_find_counter(name, 0);
  *out_value = c ? c->value : 0;
  pthread_mutex_unlock(&tt_metrics_lock_);
  return c != NULL;
}

void tt_metric_add(const char *name, tt_metric_unit_t unit, double value) {
  int64_t now = tt_now_ns();
  pthread_mutex_lock(&tt_metrics_lock_);
  tt_metric_t *m = tt_find_metric(name, unit, 1);
  if (m) {
    m->total++;
    m->accumulator += value;
    m->ts[m->head] = now;
    m->val[m->head] = value;
    m->head = (m->head + 1) % TT_METRIC_RING;
    if (m->count < TT_METRIC_RING) m->count++;
  }
  pthread_mutex_unlock(&tt_metrics_lock_);
}

/* Time as PyTorch/XLA prints it: 02s384ms437.513us. */
static void tt_format_time(tt_strbuf_t *b, double ns) {
  static const struct { const char *suffix; double scale; int width, prec; } parts[] = {
      {"d", 86400e9, 2, 0}, {"h", 3600e9, 2, 0}, {"m", 60e9, 2, 0},
      {"s", 1e9, 2, 0},     {"ms", 1e6, 3, 0},   {"us", 1e3, 7, 3},
  };
  int started = 0;
  size_t np = sizeof(parts) / sizeof(parts[0]);
  for (size_t i = 0; i < np; ++i) {
    double v = ns / parts[i].scale;
    int last = i + 1 == np;
    if (v >= 1.0 || started || last) {
      if (last) {
        tt_strbuf_printf(b, "%0*.*f%s", parts[i].width, parts[i].prec, v, parts[i].suffix);
      } else {
        double whole = floor(v);
        tt_strbuf_printf(b, "%0*.0f%s", parts[i].width, whole, parts[i].suffix);
        ns -= whole * parts[i].scale;
      }
      started = 1;
    }
  }
}

static void tt_format_value(tt_strbuf_t *b, tt_metric_unit_t unit, double v) {
  if (unit == TT_UNIT_NANOSECONDS) {
    tt_format_time(b, v);
  } else if (unit == TT_UNIT_BYTES) {
    static const char *sfx[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int k = 0;
    while (fabs(v) >= 1024.0 && k < 5) {
      v /= 1024.0;
      ++k;
    }
    tt_strbuf_printf(b, "%.2f%s", v, sfx[k]);
  } else {
    tt_strbuf_printf(b, "%f", v);
  }
}

static int tt_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int tt_name_in(const char *name, const char *names) {
  if (!names) return 1;
  size_t len = strlen(name);
  for (const char *p = names; *p;) {
    const char *e = strchr(p, '\n');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == len && strncmp(p, name, len) == 0) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

static void tt_report_metric(tt_strbuf_t *b, const tt_metric_t *m) {
  tt_strbuf_printf(b, "Metric: %s\n  TotalSamples: %lld\n  Accumulator: ", m->name,
                 (long long)m->total);
  tt_format_value(b, m->unit, m->accumulator);
  /* Rates over the window the ring covers. */
  int64_t first = m->ts[(m->head - m->count + TT_METRIC_RING) % TT_METRIC_RING];
  int64_t last = m->ts[(m->head - 1 + TT_METRIC_RING) % TT_METRIC_RING];
  double secs = (double)(last - first) / 1e9;
  double sum = 0;
  for (int64_t i = 0; i < m->count; ++i) sum += m->val[i];
  tt_strbuf_printf(b, "\n  ValueRate: ");
  tt_format_value(b, m->unit, secs > 0 ? sum / secs : 0.0);
  tt_strbuf_printf(b, " / second\n  Rate: %g / second\n  Percentiles: ",
                 secs > 0 ? (double)m->count / secs : 0.0);
  double *sorted = malloc(sizeof(double) * (size_t)(m->count ? m->count : 1));
  if (sorted) {
    memcpy(sorted, m->val, sizeof(double) * (size_t)m->count);
    qsort(sorted, (size_t)m->count, sizeof(double), tt_cmp_double);
    static const double pct[] = {0.01, 0.05, 0.10, 0.20, 0.50, 0.80, 0.90, 0.95, 0.99};
    for (int i = 0; i < 9; ++i) {
      int64_t k = (int64_t)(pct[i] * (double)m->count);
      if (k >= m->count) k = m->count - 1;
      if (k < 0) k = 0;
      tt_strbuf_printf(b, "%s%d%%=", i ? "; " : "", (int)lround(pct[i] * 100));
      tt_format_value(b, m->unit, m->count ? sorted[k] : 0.0);
    }
    free(sorted);
  }
  tt_strbuf_printf(b, "\n");
}

char *tt_metrics_report(const char *names) {
  tt_strbuf_t b = {0};
  pthread_mutex_lock(&tt_metrics_lock_);
  for (int64_t i = 0; i < tt_num_metrics_; ++i)
    if (tt_metrics_[i]->total && tt_name_in(tt_metrics_[i]->name, names))
      tt_report_metric(&b, tt_metrics_[i]);
  for (int64_t i = 0; i < tt_num_counters_; ++i) {
    const tt_counter_t *c = &tt_counters_[i];
    int is_fallback = strncmp(c->name, "aten::", 6) == 0;
    if (c->value && (tt_name_in(c->name, names) || (names && is_fallback)))
      tt_strbuf_printf(&b, "Counter: %s\n  Value: %lld\n", c->name, (long long)c->value);
  }
  pthread_mutex_unlock(&tt_metrics_lock_);
  return tt_strbuf_take(&b);
}

char *tt_counter_names(void) {
  tt_strbuf_t b = {0};
  pthread_mutex_lock(&tt_metrics_lock_);
  for (int64_t i = 0; i < tt_num_counters_; ++i)
    if (tt_counters_[i].value) tt_strbuf_printf(&b, "%s\n", tt_counters_[i].name);
  pthread_mutex_unlock(&tt_metrics_lock_);
  return tt_strbuf_take(&b);
}

char *tt_metric_names(void) {
  tt_strbuf_t b = {0};
  pthread_mutex_lock(&tt_metrics_lock_);
  for (int64_t i = 0; i < tt_num_metrics_; ++i)
    if (tt_metrics_[i]->total) tt_strbuf_printf(&b, "%s\n", tt_metrics_[i]->name);
  pthread_mutex_unlock(&tt_metrics_lock_);
  return tt_strbuf_take(&b);
}

int tt_metric_data(const char *name, int64_t *out_total, double *out_acc,
                   int64_t *out_num, int64_t *timestamps, double *values, int64_t max) {
  pthread_mutex_lock(&tt_metrics_lock_);
  tt_metric_t *m = tt_find_metric(name, TT_UNIT_COUNT, 0);
  if (!m || !m->total) {
    pthread_mutex_unlock(&tt_metrics_lock_);
    return 0;
  }
  *out_total = m->total;
  *out_acc = m->accumulator;
  int64_t n = m->count < max ? m->count : max;
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = (m->head - n + i + TT_METRIC_RING) % TT_METRIC_RING;
    timestamps[i] = m->ts[k];
    values[i] = m->val[k];
  }
  *out_num = n;
  pthread_mutex_unlock(&tt_metrics_lock_);
  return 1;
}

void tt_counters_clear(void) {
  pthread_mutex_lock(&tt_metrics_lock_);
  for (int64_t i = 0; i < tt_num_counters_; ++i) tt_counters_[i].value = 0;
  pthread_mutex_unlock(&tt_metrics_lock_);
}

void tt_metrics_clear(void) {
  pthread_mutex_lock(&tt_metrics_lock_);
  for (int64_t i = 0; i < tt_num_metrics_; ++i) {
    tt_metric_t *m = tt_metrics_[i];
    m->total = 0;
    m->accumulator = 0;
    m->count = 0;
    m->head = 0;
  }
  pthread_mutex_unlock(&tt_metrics_lock_);
}
