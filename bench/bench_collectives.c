/* The collective layer's within-process all-reduce (torchtpu/collective.h):
 * latency and bandwidth of an f32 sum across N member threads, at 4 B,
 * 64 KiB, 4 MiB and 64 MiB, against a one-thread memcpy of the same bytes
 * (absolute numbers: ms per call, GB/s).
 *
 * Build and run from the repository root:
 *   cc -std=c11 -O3 -D_GNU_SOURCE -fno-trapping-math -fno-strict-aliasing
 *      -Iinclude -Isrc -pthread -o build/bench_collectives
 *      bench/bench_collectives.c src/base/[star].c src/runtime/collective[star].c -lm
 * (one line; [star] is the shell glob *).
 *   build/bench_collectives          # 2 and 4 members
 *   build/bench_collectives 8        # 8 members
 *
 * Each size runs ROUNDS rounds, each an all-reduce batch followed by a
 * memcpy batch (the same load for both); the columns are medians over the
 * rounds, "ratio" the median of the per-round memcpy time / all-reduce
 * time (the all-reduce's bandwidth as a fraction of memcpy's, measured in
 * the same run), "load" the 1-minute load average at the end.
 * "algbw" is the buffer's bytes over the time per call (what one member
 * sees); memcpy copies the same bytes once, one thread, between buffers
 * the size of the all-reduce's, so at 4 MiB it may run from cache while
 * the all-reduce's 2N buffers do not. Members are threads: with more
 * members than cores they take turns, and the time grows accordingly.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "torchtpu/collective.h"

#define MAX_MEMBERS 8
#define ROUNDS 7

typedef struct run_s {
  int rank, n, iters;
  int64_t count;
  const int64_t *ids;
  float *in, *out;
} run_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *member(void *arg) {
  run_t *r = arg;
  tt_collective_group_t g = {r->ids, r->n};
  for (int i = 0; i < r->iters; ++i) {
    tt_status_t st = tt_collective_all_reduce(r->rank, g, TT_RED_SUM, TT_F32, r->in, r->out,
                                              r->count);
    if (st) {
      fprintf(stderr, "all_reduce: %s\n", tt_status_message(st));
      exit(1);
    }
  }
  return NULL;
}

/* Seconds per all-reduce of `bytes` across n members (one timed batch). */
static double time_all_reduce(int n, size_t bytes, int iters, float **in, float **out) {
  static const int64_t ids[MAX_MEMBERS] = {0, 1, 2, 3, 4, 5, 6, 7};
  pthread_t th[MAX_MEMBERS];
  run_t runs[MAX_MEMBERS];
  for (int q = 0; q < n; ++q)
    runs[q] = (run_t){q, n, iters, (int64_t)(bytes / 4), ids, in[q], out[q]};
  double t0 = now_s();
  for (int q = 0; q < n; ++q) pthread_create(&th[q], NULL, member, &runs[q]);
  for (int q = 0; q < n; ++q) pthread_join(th[q], NULL);
  return (now_s() - t0) / iters;
}

static double time_memcpy(size_t bytes, int iters, float *dst, const float *src) {
  double t0 = now_s();
  for (int i = 0; i < iters; ++i) {
    memcpy(dst, src, bytes);
    __asm__ volatile("" : : "r"(dst) : "memory");
  }
  return (now_s() - t0) / iters;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int k) {
  qsort(v, (size_t)k, sizeof v[0], cmp_double);
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

static double load_average(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

int main(int argc, char **argv) {
  int counts[2] = {2, 4}, ncounts = 2;
  if (argc > 1) {
    counts[0] = atoi(argv[1]);
    ncounts = 1;
    if (counts[0] < 1 || counts[0] > MAX_MEMBERS) {
      fprintf(stderr, "members: 1 to %d\n", MAX_MEMBERS);
      return 2;
    }
  }
  static const size_t sizes[4] = {4, 64 << 10, 4 << 20, 64 << 20};
  printf("%-8s %-10s %12s %10s %12s %10s %8s %6s\n", "members", "bytes", "ms/call", "algbw GB/s",
         "memcpy ms", "GB/s", "ratio", "load");
  for (int c = 0; c < ncounts; ++c) {
    int n = counts[c];
    for (int s = 0; s < 4; ++s) {
      size_t bytes = sizes[s];
      float *in[MAX_MEMBERS], *out[MAX_MEMBERS];
      for (int q = 0; q < n; ++q) {
        in[q] = aligned_alloc(64, bytes < 64 ? 64 : bytes);
        out[q] = aligned_alloc(64, bytes < 64 ? 64 : bytes);
        for (size_t i = 0; i < bytes / 4; ++i) in[q][i] = (float)q;
        memset(out[q], 0, bytes);
      }
      int iters = bytes <= (64 << 10) ? 2000 : bytes <= (4 << 20) ? 50 : 5;
      /* Rounds alternate the all-reduce and the memcpy, so both see the
       * same load; medians over the rounds (the first round warms up). */
      double ts[ROUNDS], ms[ROUNDS], rs[ROUNDS];
      time_all_reduce(n, bytes, iters, in, out);
      for (int k = 0; k < ROUNDS; ++k) {
        ts[k] = time_all_reduce(n, bytes, iters, in, out);
        ms[k] = time_memcpy(bytes, iters, out[0], in[n > 1 ? 1 : 0]);
        rs[k] = ms[k] / ts[k];
      }
      double t = median(ts, ROUNDS), m = median(ms, ROUNDS), ratio = median(rs, ROUNDS);
      printf("%-8d %-10zu %12.4f %10.2f %12.4f %10.2f %8.2f %6.2f\n", n, bytes, t * 1e3,
             (double)bytes / t / 1e9, m * 1e3, (double)bytes / m / 1e9, ratio, load_average());
      for (int q = 0; q < n; ++q) {
        free(in[q]);
        free(out[q]);
      }
    }
  }
  return 0;
}
