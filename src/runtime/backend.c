/* The active backend (backend.h): the CPU backend unless another was made
 * active. Read on every compile and execution, so one atomic pointer. */
#include "torchtpu/backend.h"

static const tt_backend_t *tt_backend_active_ = NULL; /* NULL: the CPU backend */

const tt_backend_t *tt_backend_active(void) {
  const tt_backend_t *b = __atomic_load_n(&tt_backend_active_, __ATOMIC_ACQUIRE);
  return b ? b : tt_backend_cpu();
}

void tt_backend_set_active(const tt_backend_t *backend) {
  __atomic_store_n(&tt_backend_active_, backend, __ATOMIC_RELEASE);
}
