/* The CPU backend's table (backend.h) and the executable facts only it
 * has (runtime.h: tier-1 kernel slots, the buffer plan's sizes). */
#include "backends/cpu/cpu_internal.h"
#include "torchtpu/metrics.h"

static const tt_backend_t tt_cpu_backend_ = {
    .name = "cpu",
    .configure_passes = NULL, /* the pipeline's options as they are */
    .prepare = tt_cpu_prepare,
    .release = tt_cpu_release,
    .execute = tt_cpu_execute,
    .bind_outputs = tt_cpu_bind_outputs,
};

const tt_backend_t *tt_backend_cpu(void) { return &tt_cpu_backend_; }

tt_cpu_plan_t *tt_cpu_plan_of(const tt_executable_t *exe) {
  /* Every backend whose prepare is the CPU backend's (itself, and the
   * PJRT backend for its fallback) holds a CPU plan. */
  return tt_executable_backend(exe)->prepare == tt_cpu_prepare ? tt_executable_prepared(exe)
                                                               : NULL;
}

size_t tt_executable_arena_bytes(const tt_executable_t *exe) {
  const tt_cpu_plan_t *p = tt_cpu_plan_of(exe);
  return p ? p->arena_bytes : 0;
}

size_t tt_executable_planned_bytes(const tt_executable_t *exe) {
  const tt_cpu_plan_t *p = tt_cpu_plan_of(exe);
  return p ? p->planned_bytes : 0;
}

void tt_executable_install_kernel(tt_executable_t *exe, int32_t instr, tt_fused_fn_t fn) {
  tt_cpu_plan_t *p = tt_cpu_plan_of(exe);
  if (!p || instr < 0 || instr >= p->graph->num_instrs) return;
  __atomic_store_n(&p->kernels[instr], fn, __ATOMIC_RELEASE);
}

void tt_executable_adopt_library(tt_executable_t *exe, void *dl_handle) {
  tt_cpu_plan_t *p = tt_cpu_plan_of(exe);
  if (!p) return;
  void *old = __atomic_exchange_n(&p->dl_handle, dl_handle, __ATOMIC_ACQ_REL);
  (void)old; /* a second library would keep the first alive: never unloaded early */
}

int32_t tt_executable_num_kernels(const tt_executable_t *exe) {
  const tt_cpu_plan_t *p = tt_cpu_plan_of(exe);
  int32_t n = 0;
  for (int32_t i = 0; p && i < p->graph->num_instrs; ++i)
    n += __atomic_load_n(&p->kernels[i], __ATOMIC_ACQUIRE) != NULL;
  return n;
}

/* An input buffer the execution holds the only reference to, of the same
 * size, whose last reader is the elementwise instruction producing the
 * output (the plan's donor), is donated: the output takes its memory and
 * the update happens in place. Other outputs are allocated. */
tt_status_t tt_cpu_bind_outputs(const tt_backend_t *self, tt_executable_t *exe, int32_t device,
                                const tt_input_value_t *inputs, tt_buffer_t *const *outputs,
                                void **out_data) {
  (void)self;
  const tt_cpu_plan_t *e = tt_cpu_plan_of(exe);
  const tt_graph_t *g = tt_executable_graph(exe);
  for (int32_t r = 0; r < g->num_outputs; ++r) {
    tt_buffer_t *b = outputs[r];
    int32_t k = e ? e->donor[r] : -1;
    tt_buffer_t *in = k >= 0 ? inputs[k].buffer : NULL;
    /* Only this execution references the input: nobody can read it later. */
    if (in && !in->donated && in->nbytes == b->nbytes && in->device == device &&
        __atomic_load_n(&in->refcount, __ATOMIC_ACQUIRE) == 1) {
      in->donated = 1;
      b->data = in->data;
      tt_counter_add("InputOutputAliasCount", 1);
    } else {
      b->data = tt_device_alloc(device, b->nbytes);
      if (!b->data)
        return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of device memory allocating %zu bytes",
                              b->nbytes);
    }
    out_data[r] = b->data;
  }
  return NULL;
}
