/* torchtpu lazy core: lazy tensor handles, the live-tensor registry, graph
 * cuts and the compilation cache.
 *
 * A lazy tensor is either materialized (it holds a device buffer, possibly
 * still pending) or pending (it holds an IR node). Ops create new pending
 * tensors; nothing runs until a cut: tt_lazy_sync cuts every live pending
 * tensor of a device, tt_lazy_sync_tensors only what the given tensors need.
 * All functions are thread-safe (one engine lock).
 */
#ifndef TORCHTPU_LAZY_H_
#define TORCHTPU_LAZY_H_

#include "torchtpu/base.h"
#include "torchtpu/ir.h"
#include "torchtpu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_tensor_s tt_tensor_t;

/* New materialized tensor from host data (copied). *out owns one ref. */
tt_status_t tt_tensor_from_host(int32_t device, tt_dtype_t dtype,
                                const tt_shape_t *shape, const void *host,
                                tt_tensor_t **out);
/* New pending tensor holding a runtime scalar (0-d). */
tt_status_t tt_tensor_scalar(int32_t device, tt_dtype_t dtype, double value_f,
                             int64_t value_i, tt_tensor_t **out);
/* Records op over operand tensors (all on one device). device names the
 * device for ops with no operands (IOTA) and is ignored otherwise. Shape/
 * dtype errors come back as statuses naming the values. */
tt_status_t tt_tensor_op(tt_op_t op, int32_t device, tt_tensor_t *const *operands,
                         int32_t num_operands, const int64_t *iattrs,
                         int32_t num_iattrs, const double *fattrs,
                         int32_t num_fattrs, tt_tensor_t **out);
/* Copies t to another device (syncs t first). */
tt_status_t tt_tensor_to_device(tt_tensor_t *t, int32_t device, tt_tensor_t **out);
void tt_tensor_retain(tt_tensor_t *t);
void tt_tensor_release(tt_tensor_t *t);

int32_t tt_tensor_device(const tt_tensor_t *t);
tt_dtype_t tt_tensor_dtype(const tt_tensor_t *t);
const tt_shape_t *tt_tensor_shape(const tt_tensor_t *t);
int64_t tt_tensor_id(const tt_tensor_t *t);
int tt_tensor_is_pending(const tt_tensor_t *t);
/* Borrowed node of a pending tensor (NULL if materialized). */
tt_node_t *tt_tensor_node(const tt_tensor_t *t);

/* Cuts the given tensors' graph, runs it, then copies t's value to host
 * (nbytes must equal numel*size). */
tt_status_t tt_tensor_to_host(tt_tensor_t *t, void *host, size_t nbytes);

/* Sync every live pending tensor on device (all devices if device < 0).
 * If wait, also blocks until the work is done. name (may be NULL) labels
 * the graph in metrics and debug output. */
tt_status_t tt_lazy_sync(int32_t device, int wait, const char *name);
tt_status_t tt_lazy_sync_tensors(tt_tensor_t *const *tensors, int32_t n,
                                 int wait);

/* Number of live tensor handles. */
int64_t tt_lazy_live_tensors(void);
/* Number of graphs in the compilation cache. */
int64_t tt_lazy_cached_graphs(void);
/* Text (fmt 0) or dot (fmt 1) of the graph that would compute tensors. */
tt_status_t tt_lazy_graph_dump(tt_tensor_t *const *tensors, int32_t n, int fmt,
                               char **out_text);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_LAZY_H_ */
