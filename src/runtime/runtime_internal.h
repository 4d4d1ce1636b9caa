/* Internal runtime structures shared by the runtime's files. */
#ifndef TORCHTPU_RUNTIME_INTERNAL_H_
#define TORCHTPU_RUNTIME_INTERNAL_H_

#include <pthread.h>

#include "torchtpu/kernels.h"
#include "torchtpu/runtime.h"

struct tt_buffer_s {
  int32_t refcount; /* atomic */
  int32_t device;
  size_t nbytes;
  void *data;
  int ready;           /* guarded by the runtime lock */
  int donated;         /* data now belongs to an output buffer: not freed here */
  tt_status_t error;   /* producer's failure, owned */
  uint64_t id;         /* unique for the process: names these (immutable) bytes */
  int keyed;           /* atomic: id was handed to a kernel (tt_buffer_key) */
};

/* b's id for kernels that keep derived data across calls (packed GEMM
 * weights, blas_ext.c); what they keep is dropped with the buffer. */
uint64_t tt_buffer_key(tt_buffer_t *b);

/* Allocation accounting (bytes in use / peak) per device. */
void *tt_device_alloc(int32_t device, size_t nbytes);
void tt_device_free(int32_t device, void *data, size_t nbytes);
/* Marks a pending buffer ready (error may be NULL; ownership of error is
 * taken) and wakes waiters. */
void tt_buffer_mark_ready(tt_buffer_t *buffer, tt_status_t error);

/* Gives each output of a queued execution its memory (out_data receives
 * the pointers): the active backend's bind_outputs (backend.h; the CPU
 * backend donates inputs only this execution references), else one device
 * allocation per output. */
tt_status_t tt_executable_bind_outputs(tt_executable_t *exe, int32_t device,
                                       const tt_input_value_t *inputs,
                                       tt_buffer_t *const *outputs, void **out_data);

/* Executes exe on the calling thread with the active backend: inputs, and
 * output data pointers. */
tt_status_t tt_executable_execute(tt_executable_t *exe, int32_t device,
                                  const tt_input_value_t *inputs,
                                  void *const *output_data);
/* A runtime scalar stored as the 0-d value of its dtype (8 bytes hold
 * every dtype); bytes of an instruction's dense result. Shared by the
 * executable and the PJRT backend. */
void tt_store_scalar(tt_dtype_t dt, double f, int64_t i, void *dst);
size_t tt_instr_bytes(const tt_instr_t *in);

#endif
