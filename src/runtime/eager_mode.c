/* The engine's eager-mode setting (runtime.h: tt_set_eager_mode). One
 * process-wide flag, as PyTorch/XLA's graph executor has one: the compile
 * driver reads it when it compiles, an enqueue stamps it on the job so an
 * execution is sampled under the setting it was queued with. */
#include "torchtpu/runtime.h"

static int tt_eager_mode_ = 0; /* atomic */

void tt_set_eager_mode(int on) { __atomic_store_n(&tt_eager_mode_, on ? 1 : 0, __ATOMIC_RELAXED); }

int tt_eager_mode(void) { return __atomic_load_n(&tt_eager_mode_, __ATOMIC_RELAXED); }
