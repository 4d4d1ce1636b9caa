/* The kernels' scratch allocator: size-classed blocks kept for reuse
 * (kernel_util.h). */
#include "kernels/kernel_util.h"

#include <pthread.h>
#include <stdlib.h>

/* Each block carries a 64-byte header holding its size class, so frees need
 * no size. Classes: four per power of two from 16 KiB; at most
 * TT_SCRATCH_CACHE_CAP bytes are kept. */
#define TT_SCRATCH_HDR 64
#define TT_SCRATCH_MIN_SHIFT 14
#define TT_SCRATCH_BINS (4 * (48 - TT_SCRATCH_MIN_SHIFT))
#define TT_SCRATCH_CACHE_CAP ((int64_t)256 << 20)

static pthread_mutex_t tt_scratch_lock_ = PTHREAD_MUTEX_INITIALIZER;
static void *tt_scratch_bins_[TT_SCRATCH_BINS];
static int64_t tt_scratch_cached_ = 0;

static int tt_scratch_class_(size_t bytes, size_t *rounded) {
  *rounded = bytes;
  if (bytes < ((size_t)1 << TT_SCRATCH_MIN_SHIFT)) return -1;
  int b = 63 - __builtin_clzll((unsigned long long)bytes);
  size_t base = (size_t)1 << b, step = base >> 2;
  size_t q = (bytes - base + step - 1) / step;
  int cls = (b - TT_SCRATCH_MIN_SHIFT) * 4 + (int)q;
  if (cls >= TT_SCRATCH_BINS) return -1;
  *rounded = base + q * step;
  return cls;
}

void *tt_scratch_alloc(size_t bytes) {
  size_t rounded;
  int cls = tt_scratch_class_(bytes ? bytes : 1, &rounded);
  char *blk = NULL;
  if (cls >= 0) {
    pthread_mutex_lock(&tt_scratch_lock_);
    blk = (char *)tt_scratch_bins_[cls];
    if (blk) {
      tt_scratch_bins_[cls] = *(void **)(blk + TT_SCRATCH_HDR);
      tt_scratch_cached_ -= (int64_t)rounded;
    }
    pthread_mutex_unlock(&tt_scratch_lock_);
  }
  if (!blk) {
    blk = (char *)aligned_alloc(64, (rounded + TT_SCRATCH_HDR + 63) / 64 * 64);
    if (!blk) return NULL;
  }
  *(int *)blk = cls;
  *(size_t *)(blk + 8) = rounded;
  return blk + TT_SCRATCH_HDR;
}

void tt_scratch_free(void *p) {
  if (!p) return;
  char *blk = (char *)p - TT_SCRATCH_HDR;
  int cls = *(int *)blk;
  size_t rounded = *(size_t *)(blk + 8);
  if (cls >= 0) {
    pthread_mutex_lock(&tt_scratch_lock_);
    if (tt_scratch_cached_ + (int64_t)rounded <= TT_SCRATCH_CACHE_CAP) {
      *(void **)p = tt_scratch_bins_[cls];
      tt_scratch_bins_[cls] = blk;
      tt_scratch_cached_ += (int64_t)rounded;
      blk = NULL;
    }
    pthread_mutex_unlock(&tt_scratch_lock_);
  }
  free(blk);
}
