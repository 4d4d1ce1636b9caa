/* What the lazy core's files share (not a public interface).
 *
 * tensor.c   tensors and the live-tensor registry
 * cut.c      graph cuts (tt_lazy_sync*) and the step sync's derived views
 * compile.c  the compilation cache and the compile driver
 * capture.c  captured graphs (trace once, replay)
 *
 * One engine lock (tt_lazy_lock) guards the registry, node bookkeeping
 * during a build and the cache; functions named *_locked expect it held.
 * Device work runs outside it on the device queues. */
#ifndef TORCHTPU_LAZY_INTERNAL_H_
#define TORCHTPU_LAZY_INTERNAL_H_

#include <pthread.h>

#include "torchtpu/lazy.h"

struct tt_tensor_s {
  int32_t refcount; /* atomic */
  int64_t id;
  /* The tensor whose data an in-place update of this tensor replaces
   * (tt_tensor_propagate_alias); its own id otherwise. A step's sync counts
   * its graph inputs that hold such data (InputOutputAliasCount). */
  int64_t alias_id;
  uint8_t donor; /* the user marked this tensor's data for donation */
  int32_t device;
  tt_dtype_t dtype;
  tt_shape_t shape;
  tt_buffer_t *buffer;   /* materialized value (maybe still pending) */
  /* Or, in SPMD mode, the value still on the host (malloc'd; buffer,
   * shards, node and data_node NULL): PyTorch/XLA's virtual device keeps
   * data copied to it there until an op reads it or it is sharded
   * (tt_tensor_upload_host_locked moves it to the device). */
  void *host;
  /* Or the value held as shards (spmd_exec.h; buffer NULL): SPMD mode's
   * tiled values, one shard per device. */
  struct tt_shard_set_s *shards;
  tt_node_t *node;       /* pending IR, owned */
  tt_node_t *data_node;  /* PARAM node over buffer, reused by later ops */
  tt_sharding_t *sharding; /* annotation (owned) given to node and data_node */
  /* node is a movement of another tensor's data, left pending by a step's
   * sync (tt_derive_roots_ in cut.c): later step syncs leave it so too. */
  uint8_t derived;
  /* PyTorch/XLA's placeholder: the data was donated to a computation and
   * deleted (tt_tensor_delete_donated_locked); no buffer, node or data
   * node, and any use is refused. */
  uint8_t deleted;
  /* The value was written by a graph cut (not uploaded, not loaded as
   * shards): tt_tensor_result_layout reports it replicated when one buffer. */
  uint8_t cut_result;
  tt_tensor_t *prev, *next;
};

/* The engine lock. */
extern pthread_mutex_t tt_lazy_lock;

/* ---- tensor.c ---- */
/* New registered tensor with no value yet (refcount 1); NULL when out of
 * memory. */
tt_tensor_t *tt_tensor_new_locked(int32_t device, tt_dtype_t dtype, const tt_shape_t *shape);
/* Moves a host-held value (t->host) to t's device: the transfer and its
 * metrics (TransferToDeviceTime, OutboundData, CreateDataHandles); nothing
 * when t holds no host value. Engine lock held. */
tt_status_t tt_tensor_upload_host_locked(tt_tensor_t *t);
/* The node that stands for t in a new op: its pending node, else a PARAM
 * over its buffer made once (NULL when out of memory). */
tt_node_t *tt_tensor_use_node(tt_tensor_t *t);
/* Deletes buffer b's data from every live materialized tensor holding it
 * (they become placeholders, tt_tensor_is_placeholder): b was donated to an
 * execution that now holds it. Engine lock held. */
void tt_tensor_delete_donated_locked(const tt_buffer_t *b);
/* The error for using a placeholder tensor t (a RuntimeError in Python). */
tt_status_t tt_tensor_deleted_error(const tt_tensor_t *t);
/* Number of live tensors. */
int64_t tt_lazy_live_count_locked(void);
/* Writes the live tensors of device that a step's sync cuts (pending, not
 * derived) into out (room for tt_lazy_live_count_locked() entries);
 * returns how many. */
int32_t tt_lazy_pending_on_locked(int32_t device, tt_tensor_t **out);

/* ---- cut.c ---- */
/* Cuts the pending tensors in ts (all on device) into one graph, compiles
 * or fetches it from the cache, and queues it. derive: a step's sync,
 * which may leave views' bases pending. */
tt_status_t tt_cut_locked(tt_tensor_t **ts, int32_t n, int32_t device, int derive);

/* PyTorch/XLA's buffer donors among a cut's graph inputs: samples
 * InputOutputAliasCount once per (graph, donors) and returns the
 * user-marked donors' buffers (*user_donated, malloc'd; PARAMs over shards
 * are not listed). step: a step's sync. Defined in cut.c. */
void tt_cut_count_alias_inputs_locked(uint64_t graph_hash, tt_node_t *const *inputs, int32_t ni,
                                      tt_tensor_t *const *owners, int32_t nr, int step,
                                      tt_buffer_t ***user_donated, int32_t *n_user);

/* ---- compile.c ---- */
/* The cached executable of a graph with g's key, or NULL (borrowed). */
tt_executable_t *tt_cache_lookup_locked(const tt_graph_t *g);
/* The compile driver: builds the graph of roots (nr > 0, all on device),
 * takes its executable from the cache or optimises, plans and caches it,
 * and asks for tier 1 when the tier mode says so. On success *out_graph
 * is the built graph (caller destroys), *out_inputs its input nodes in
 * input order (caller frees) and *out_exe holds one reference; on failure
 * all three are NULL. Counts the compile in the metrics, the trace and
 * the debug output. */
tt_status_t tt_lazy_compile_locked(tt_node_t **roots, int32_t nr, int32_t device,
                                   tt_graph_t **out_graph, tt_node_t ***out_inputs,
                                   tt_executable_t **out_exe);

#endif /* TORCHTPU_LAZY_INTERNAL_H_ */
