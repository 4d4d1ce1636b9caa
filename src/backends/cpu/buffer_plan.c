/* Liveness-based buffer planning: one arena per executable, each
 * intermediate at a fixed offset, computed once when the executable is
 * made. Buffers are placed greedily by decreasing size; each goes into the
 * smallest gap (best fit) between the already placed buffers whose
 * lifetimes overlap its own, or after the last of them. */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/runtime.h"

#define TT_PLAN_ALIGN 64

typedef struct tt_plan_item_s {
  size_t size, offset;
  int32_t start, end, index;
} tt_plan_item_t;

static int tt_by_size_desc(const void *a, const void *b) {
  const tt_plan_item_t *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  return x->start < y->start ? -1 : x->start > y->start; /* stable, earliest first */
}

static int tt_by_offset(const void *a, const void *b) {
  const tt_plan_item_t *x = *(const tt_plan_item_t *const *)a;
  const tt_plan_item_t *y = *(const tt_plan_item_t *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

tt_status_t tt_buffer_plan(int32_t n, const size_t *sizes, const int32_t *start,
                           const int32_t *end, size_t *out_offsets, size_t *out_arena_bytes) {
  *out_arena_bytes = 0;
  if (n <= 0) return NULL;
  tt_plan_item_t *items = malloc(sizeof(tt_plan_item_t) * (size_t)n);
  tt_plan_item_t **live = malloc(sizeof(tt_plan_item_t *) * (size_t)n);
  if (!items || !live) {
    free(items);
    free(live);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer plan of %d buffers)", n);
  }
  for (int32_t i = 0; i < n; ++i) {
    items[i].size = (sizes[i] + TT_PLAN_ALIGN - 1) / TT_PLAN_ALIGN * TT_PLAN_ALIGN;
    items[i].start = start[i];
    items[i].end = end[i];
    items[i].index = i;
    items[i].offset = 0;
  }
  qsort(items, (size_t)n, sizeof(tt_plan_item_t), tt_by_size_desc);
  size_t arena = 0;
  for (int32_t i = 0; i < n; ++i) {
    tt_plan_item_t *it = &items[i];
    int32_t nl = 0;
    for (int32_t j = 0; j < i; ++j)
      if (items[j].start <= it->end && it->start <= items[j].end) live[nl++] = &items[j];
    qsort(live, (size_t)nl, sizeof(tt_plan_item_t *), tt_by_offset);
    size_t best = (size_t)-1, best_gap = (size_t)-1, cur = 0;
    for (int32_t j = 0; j < nl; ++j) {
      if (live[j]->offset >= cur) {
        size_t gap = live[j]->offset - cur;
        if (gap >= it->size && gap < best_gap) {
          best = cur;
          best_gap = gap;
        }
      }
      size_t top = live[j]->offset + live[j]->size;
      if (top > cur) cur = top;
    }
    it->offset = best != (size_t)-1 ? best : cur;
    if (it->offset + it->size > arena) arena = it->offset + it->size;
  }
  for (int32_t i = 0; i < n; ++i) out_offsets[items[i].index] = items[i].offset;
  free(items);
  free(live);
  *out_arena_bytes = arena;
  return NULL;
}
