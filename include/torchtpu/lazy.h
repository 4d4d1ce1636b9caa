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
/* As tt_tensor_from_host, but in SPMD mode (tt_lazy_set_virtual_device)
 * the copy stays on the host, as PyTorch/XLA's virtual device keeps data
 * copied to it: the first op reading it, a sharding annotation or a buffer
 * address request moves it to the device; reading it back copies from the
 * host. Outside SPMD mode the same as tt_tensor_from_host. */
tt_status_t tt_tensor_from_host_deferred(int32_t device, tt_dtype_t dtype,
                                         const tt_shape_t *shape, const void *host,
                                         tt_tensor_t **out);
/* t's value is held on the host, not yet moved to its device
 * (tt_tensor_from_host_deferred). */
int tt_tensor_on_host(const tt_tensor_t *t);
/* t's data has a node that ops read it through (PyTorch/XLA's device_data
 * IR value of a tensor holding data): made by the first op using it or by
 * a sharding annotation, dropped when the tensor takes a new value. */
int tt_tensor_has_data_node(const tt_tensor_t *t);
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
/* Annotates t with a copy of sharding (NULL clears it): t's pending IR node
 * and its data node now and every data node made for it later carry it, so
 * the annotation stays with the tensor across graph cuts (as PyTorch/XLA's
 * mark_sharding). The node of a pending tensor may be shared with other
 * tensors, which then see the annotation too. TT_INVALID_ARGUMENT when the
 * sharding does not fit t's shape (tt_sharding_validate). */
tt_status_t tt_tensor_set_sharding(tt_tensor_t *t, const tt_sharding_t *sharding);
/* t's annotation (borrowed; valid until the next set) or NULL. */
const tt_sharding_t *tt_tensor_sharding(const tt_tensor_t *t);

/* Records that output is an in-place update of input (PyTorch's
 * functionalization calls _propagate_xla_data for each in-place op): when
 * input holds data (materialized, or a pending alias of a tensor's data),
 * output's update replaces that data, else whatever input's own update
 * replaces. A step's sync counts the graph inputs whose data is replaced
 * this way (metric InputOutputAliasCount, as PyTorch/XLA's buffer
 * donors), once per compiled graph. */
void tt_tensor_propagate_alias(tt_tensor_t *input, tt_tensor_t *output);
/* Marks t's data for donation (PyTorch/XLA's _set_buffer_donation): counted
 * among a graph's aliased inputs at a step's sync, and at every sync while
 * tt_lazy_set_alias_with_donor is on. Returns 0 (and marks nothing) when t
 * holds no data (a pending value). */
int tt_tensor_set_donation(tt_tensor_t *t, int donate);
int tt_tensor_donation(const tt_tensor_t *t);
/* 1 when t's data was donated and deleted (PyTorch/XLA's placeholder): a
 * sync that donates user-marked data (a step's sync, or any sync while
 * tt_lazy_set_alias_with_donor is on) deletes it from the tensors holding
 * it, unless the sync gave them new values. Reading or using such a tensor
 * fails (TT_INVALID_ARGUMENT "... is deleted"). */
int tt_tensor_is_placeholder(const tt_tensor_t *t);
void tt_lazy_set_alias_with_donor(int enable);
/* InputOutputAliasCount is sampled the first time a graph runs with a given
 * set of donors (PyTorch/XLA samples it per compile, its donors being part
 * of the graph's identity). Called when the metrics are cleared: from then
 * on each (graph, donors) pair is sampled again on its next run. */
void tt_lazy_forget_alias_samples(void);

/* Address of the data of a tensor that holds a value, once that value is
 * ready (PyTorch/XLA's _unsafe_buffer_pointer; the runtime's buffers are
 * host memory). A pending tensor (IR, no value) is TT_INVALID_ARGUMENT: it
 * has no buffer until a sync. */
tt_status_t tt_tensor_buffer_address(tt_tensor_t *t, uintptr_t *out);

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

/* ---- captured graphs (trace once, replay on new inputs) ----------------
 * A capture is the compiled graph that computes a set of output tensors
 * from a set of input tensors, kept so that it can run again on new input
 * tensors of the same dtypes and shapes with no re-tracing: this is what
 * torch.compile's backend (the dynamo bridge) calls once per FX graph.
 *
 * Graph inputs are classified once at capture: a PARAM over the buffer of
 * capture input j reads input j on replay; a SCALAR node that is the tensor
 * of capture input j (a pending 0-d runtime scalar) reads input j's scalar;
 * a SCALAR feeding an RNG op as its key is a "seed" slot filled by the
 * caller on every replay (so random ops draw new numbers each call); any
 * other PARAM or SCALAR is a constant kept (retained) by the capture. */
typedef struct tt_capture_s tt_capture_t;

/* Captures the graph computing outputs from inputs, then cuts that graph
 * like tt_lazy_sync_tensors(outputs) (compiling it through the shared
 * cache and queueing it), so the outputs hold the first call's values when
 * it returns. Each input must be materialized or a pending leaf (a PARAM
 * alias or a SCALAR); a pending computation as input is TT_INVALID_ARGUMENT
 * (sync inputs before tracing). All tensors must be on one device.
 * Outputs may repeat, may be inputs (passed through on replay) or other
 * materialized tensors (constants). *out_capture holds one reference
 * (tt_capture_release). Neither array is retained. */
tt_status_t tt_lazy_capture(tt_tensor_t *const *inputs, int32_t num_inputs,
                            tt_tensor_t *const *outputs, int32_t num_outputs,
                            tt_capture_t **out_capture);

/* 1 if inputs (count, device, dtypes, shapes, scalar slots) fit capture;
 * else 0, writing a reason naming the first mismatch into why (may be
 * NULL; at most why_size bytes, NUL-terminated). */
int tt_capture_matches(const tt_capture_t *capture, tt_tensor_t *const *inputs,
                       int32_t num_inputs, char *why, size_t why_size);

/* Runs capture on new inputs: inputs that are pending computations are
 * cut first (as tt_lazy_sync_tensors does), then the captured executable is
 * queued with their buffers and returns at once. seeds gives one RNG key
 * per seed slot (tt_capture_num_seeds). out_tensors (num_outputs entries,
 * caller-allocated) receive new references (tt_tensor_release): computed
 * outputs hold pending buffers that become ready when the execution ends.
 * A mismatch (see tt_capture_matches) or inputs that alias each other
 * differently than at capture are TT_INVALID_ARGUMENT naming the input. */
tt_status_t tt_lazy_replay(tt_capture_t *capture, tt_tensor_t *const *inputs,
                           int32_t num_inputs, const int64_t *seeds,
                           int32_t num_seeds, tt_tensor_t **out_tensors);

void tt_capture_retain(tt_capture_t *capture);
void tt_capture_release(tt_capture_t *capture);
int32_t tt_capture_num_inputs(const tt_capture_t *capture);
int32_t tt_capture_num_outputs(const tt_capture_t *capture);
/* Number of RNG key slots a replay must fill. */
int32_t tt_capture_num_seeds(const tt_capture_t *capture);
/* Inputs of the compiled graph (tensors, constants, scalars, seeds). */
int32_t tt_capture_num_graph_inputs(const tt_capture_t *capture);
/* Outputs computed by the graph (others are pass-through or constant). */
int32_t tt_capture_num_graph_outputs(const tt_capture_t *capture);
/* Where graph input k comes from on replay: 0 = capture input
 * *out_index, 1 = a constant, 2 = RNG seed slot *out_index; -1 if k is out
 * of range. */
int32_t tt_capture_graph_input_source(const tt_capture_t *capture, int32_t k,
                                      int32_t *out_index);
/* Structural hash of the captured graph (0 when nothing is computed). */
uint64_t tt_capture_hash(const tt_capture_t *capture);
/* Text of the compiled graph; *out_text is malloc'd (caller frees), ""
 * when nothing is computed. */
tt_status_t tt_capture_graph_text(const tt_capture_t *capture, char **out_text);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_LAZY_H_ */
