/* Executables: an optimised graph and what the backend that prepared it
 * made of it (backend.h). The runtime holds them, counts their runs and
 * hands them to the active backend to execute; how a graph runs is the
 * backend's business (the CPU backend: src/backends/cpu/). */
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime_internal.h"
#include "torchtpu/backend.h"

struct tt_executable_s {
  int32_t refcount;
  tt_graph_t *graph;
  const tt_backend_t *backend; /* prepared it; its release frees `prepared` */
  void *prepared;
  int64_t runs;
};

tt_status_t tt_executable_create(tt_graph_t *graph, tt_executable_t **out_exe) {
  *out_exe = NULL;
  tt_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (executable)");
  const tt_backend_t *b = tt_backend_active();
  tt_status_t st = b->prepare(b, graph, &e->prepared);
  if (st) {
    free(e); /* the graph stays the caller's */
    return st;
  }
  e->refcount = 1;
  e->graph = graph;
  e->backend = b;
  *out_exe = e;
  return NULL;
}

void tt_executable_retain(tt_executable_t *e) {
  __atomic_add_fetch(&e->refcount, 1, __ATOMIC_RELAXED);
}

void tt_executable_release(tt_executable_t *e) {
  if (!e || __atomic_sub_fetch(&e->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  e->backend->release(e->backend, e->prepared);
  if (e->graph) tt_graph_destroy(e->graph);
  free(e);
}

const tt_graph_t *tt_executable_graph(const tt_executable_t *e) { return e->graph; }
const tt_backend_t *tt_executable_backend(const tt_executable_t *e) { return e->backend; }
void *tt_executable_prepared(const tt_executable_t *e) { return e->prepared; }

int64_t tt_executable_count_run(tt_executable_t *e) {
  return __atomic_fetch_add(&e->runs, 1, __ATOMIC_RELAXED);
}

tt_status_t tt_executable_bind_outputs(tt_executable_t *e, int32_t device,
                                       const tt_input_value_t *inputs,
                                       tt_buffer_t *const *outputs, void **out_data) {
  const tt_backend_t *b = tt_backend_active();
  if (b->bind_outputs) return b->bind_outputs(b, e, device, inputs, outputs, out_data);
  for (int32_t r = 0; r < e->graph->num_outputs; ++r) {
    tt_buffer_t *buf = outputs[r];
    buf->data = tt_device_alloc(device, buf->nbytes);
    if (!buf->data)
      return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of device memory allocating %zu bytes",
                            buf->nbytes);
    out_data[r] = buf->data;
  }
  return NULL;
}

tt_status_t tt_executable_execute(tt_executable_t *e, int32_t device,
                                  const tt_input_value_t *inputs, void *const *output_data) {
  const tt_backend_t *b = tt_backend_active();
  return b->execute(b, e, device, inputs, output_data);
}

tt_status_t tt_executable_run(tt_executable_t *e, const tt_input_value_t *inputs,
                              void *const *outputs) {
  tt_parallel_host_wait_begin(); /* run on the calling thread: no one else records */
  tt_status_t st = tt_executable_execute(e, -1, inputs, outputs);
  tt_parallel_host_wait_end();
  return st;
}

void tt_store_scalar(tt_dtype_t dt, double f, int64_t i, void *dst) {
  switch (dt) {
    case TT_F32: *(float *)dst = (float)f; break;
    case TT_F64: *(double *)dst = f; break;
    case TT_F16: *(uint16_t *)dst = tt_f32_to_f16((float)f); break;
    case TT_BF16: *(uint16_t *)dst = tt_f32_to_bf16((float)f); break;
    case TT_I8: *(int8_t *)dst = (int8_t)i; break;
    case TT_U8: *(uint8_t *)dst = (uint8_t)i; break;
    case TT_I16: *(int16_t *)dst = (int16_t)i; break;
    case TT_I32: *(int32_t *)dst = (int32_t)i; break;
    case TT_I64: *(int64_t *)dst = i; break;
    case TT_BOOL: *(uint8_t *)dst = i != 0; break;
    default: break;
  }
}

size_t tt_instr_bytes(const tt_instr_t *in) {
  return (size_t)tt_shape_numel(&in->shape) * tt_dtype_size(in->dtype);
}
