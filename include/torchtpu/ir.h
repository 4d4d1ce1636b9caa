/* torchtpu graph IR: HLO-like nodes with shapes, dtypes and attributes.
 *
 * Lazy tensors point at IR nodes; nodes are immutable once made (but for
 * their sharding annotation, see tt_node_set_sharding) and shared
 * by reference count (a node lives while a lazy tensor or another node uses
 * it). At a graph cut the reachable nodes are linearised into a tt_graph_t,
 * an arena-allocated instruction list freed in one call; its structural hash
 * covers ops, shapes, dtypes, attributes, shardings and operand wiring, never
 * the values of parameters or runtime scalars.
 */
#ifndef TORCHTPU_IR_H_
#define TORCHTPU_IR_H_

#include "torchtpu/base.h"
#include "torchtpu/kernels.h"
#include "torchtpu/op_attrs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op codes: TT_OP_<id> for each row of torchtpu/ops.def, in its
 * order (the numbering is part of the Python binding's contract: append
 * only). The rows' comments give each op's operands and attributes. */
typedef enum tt_op_e {
#define TT_OP(id, ...) TT_OP_##id,
#include "torchtpu/ops.def"
  TT_OP_COUNT
} tt_op_t;

const char *tt_op_name(tt_op_t op);

typedef struct tt_sharding_s tt_sharding_t; /* below */

/* iattrs before a collective's replica-group ids. */
#define TT_COLLECTIVE_HEADER 5
static inline int tt_op_is_collective(tt_op_t op) {
  return op == TT_OP_ALL_REDUCE || op == TT_OP_ALL_GATHER || op == TT_OP_REDUCE_SCATTER ||
         op == TT_OP_ALL_TO_ALL || op == TT_OP_COLLECTIVE_PERMUTE;
}
/* Checks a collective's attributes, `attrs` being its decoded attribute
 * struct (tt_all_reduce_attrs_t, ..., op_attrs.h; tt_attrs_decode checked
 * the layout): channel id >= 0, group_size >= 1, ids a whole number of
 * groups, ids >= 0 and distinct within the op, a valid reduce code, dims
 * in range of rank, shard/split counts that match the groups and divide
 * the dims they split. TT_INVALID_ARGUMENT naming the values. Shared by
 * shape inference and the verifier (src/ir/infer_collective.c). */
tt_status_t tt_collective_check(tt_op_t op, const void *attrs, const tt_shape_t *x_shape);
/* The result shape of collective op over an operand of x_shape (attrs
 * decoded as above and already checked). */
tt_shape_t tt_collective_shape(tt_op_t op, const void *attrs, const tt_shape_t *x_shape);

static inline int tt_op_is_spmd_manual(tt_op_t op) {
  return op == TT_OP_SPMD_FULL_TO_SHARD || op == TT_OP_SPMD_SHARD_TO_FULL;
}
/* Decodes the tiled sharding of a manual-region op's attributes (raw, as
 * stored; decoded through the codec) into *out
 * (room for tt_sharding_size(TT_MAX_IATTRS) bytes) and checks the operand
 * shape against it; *out_shape is the result's shape. TT_INVALID_ARGUMENT
 * naming the values for malformed attributes or a shard shape that is not
 * ceil(full dim / tiles). */
tt_status_t tt_spmd_manual_check(tt_op_t op, const int64_t *iattrs, int32_t num_iattrs,
                                 const tt_shape_t *x_shape, tt_sharding_t *out,
                                 tt_shape_t *out_shape);


typedef struct tt_buffer_s tt_buffer_t;

/* ---- sharding annotations (src/ir/sharding.c) ----------------------
 * How a tensor is laid out over the devices of an SPMD program, in XLA's
 * HloSharding terms. An annotation never changes a value: the engine's own
 * backend computes the program unpartitioned; the StableHLO emitter writes
 * it for a partitioner (XLA's, through a PJRT plugin). docs/stablehlo.md.
 *
 * TILED: the tensor is cut into a grid of tile_dims[0..rank-1] tiles; tile
 * (i0, .., ir-1) lives on devices[i0 * tile_dims[1] * .. + ir-1] (row-major
 * over tile_dims). With last_tile_dim_replicate, tile_dims has rank + 1
 * entries and each tile is replicated on the tile_dims[rank] devices of the
 * last grid axis ("partial replication"). num_devices is the product of
 * tile_dims. REPLICATED and MANUAL have no tile dims; num_devices is the
 * partition count the annotation was made for (0: unknown). */
typedef enum tt_sharding_kind_e {
  TT_SHARDING_REPLICATED = 0,
  TT_SHARDING_TILED = 1,
  TT_SHARDING_MANUAL = 2,
} tt_sharding_kind_t;

#define TT_SHARDING_MAX_DEVICES 4096

typedef struct tt_sharding_s {
  tt_sharding_kind_t kind;
  int32_t num_tile_dims;
  int64_t tile_dims[TT_MAX_RANK + 1];
  int32_t last_tile_dim_replicate;
  int32_t num_devices;
  int32_t devices[]; /* TILED: num_devices entries (the tile assignment) */
} tt_sharding_t;

/* Bytes a sharding with num_devices tile-assignment entries occupies. */
size_t tt_sharding_size(int32_t num_devices);
/* Checks s against a tensor of the given shape: the tile dims' rank is the
 * tensor's (+1 with last_tile_dim_replicate), every tile dim >= 1, their
 * product is num_devices, device ids are distinct and in [0, num_devices).
 * A tensor dim need not divide by its tile count (XLA pads the last
 * shard). TT_INVALID_ARGUMENT naming the values otherwise. */
tt_status_t tt_sharding_validate(const tt_sharding_t *s, const tt_shape_t *shape);
/* A malloc'd copy of s (NULL when out of memory); caller frees with free(). */
tt_sharding_t *tt_sharding_copy(const tt_sharding_t *s);
/* 1 when a and b say the same thing (both NULL counts as equal). */
int tt_sharding_equal(const tt_sharding_t *a, const tt_sharding_t *b);
/* XLA's HloSharding text: "{replicated}", "{manual}",
 * "{devices=[2,4]0,1,2,3,4,5,6,7}", "{devices=[2,1,4]0,..,7
 * last_tile_dim_replicate}". A malloc'd string the caller frees; NULL when
 * out of memory. */
char *tt_sharding_to_text(const tt_sharding_t *s);

typedef struct tt_node_s tt_node_t;
struct tt_node_s {
  int32_t refcount; /* atomic */
  tt_op_t op;
  tt_dtype_t dtype;
  tt_shape_t shape;
  int32_t device;
  int32_t num_operands;
  tt_node_t **operands; /* owned refs */
  int32_t num_iattrs;
  int64_t iattrs[TT_MAX_IATTRS];
  double fattrs[TT_MAX_FATTRS];
  /* PARAM: the device buffer (owned ref). SCALAR: the value. */
  tt_buffer_t *buffer;
  /* PARAM made for a lazy tensor's data: that tensor's id (0: none), and
   * whether the user marked the data for donation (torch_xla's
   * _set_buffer_donation). Not part of the graph's identity. */
  int64_t tensor_id;
  uint8_t donor;
  double scalar_f;
  int64_t scalar_i;
  /* Bookkeeping for a graph cut (guarded by the engine lock). */
  uint64_t visit_epoch;
  int32_t visit_index;
  /* Optional Python frames (XLA_IR_DEBUG); owned C string or NULL. */
  char *debug_info;
  /* Optional sharding annotation (owned, NULL = none). The one field that
   * may change after creation: tt_node_set_sharding, under the engine lock,
   * as PyTorch/XLA's mark_sharding annotates the tensor's IR value. */
  tt_sharding_t *sharding;
  /* PARAM over sharded storage (torchtpu/spmd_exec.h: a tt_shard_set_t,
   * one owned reference; buffer is then NULL): only a partitioned cut
   * reads it per partition, every other reader assembles it. NULL
   * otherwise. */
  struct tt_shard_set_s *shards;
};

/* Makes a node for op with the given operands (retained) and attributes,
 * inferring its shape and dtype. On a user's mistake (shape mismatch,
 * bad dim) returns an error status naming the values and sets *out_node to
 * NULL. *out_node holds one reference the caller must release. */
tt_status_t tt_node_create(tt_op_t op, int32_t device, tt_node_t *const *operands,
                           int32_t num_operands, const int64_t *iattrs,
                           int32_t num_iattrs, const double *fattrs,
                           int32_t num_fattrs, tt_node_t **out_node);
/* A PARAM node over buffer (retained). */
tt_node_t *tt_node_create_param(tt_buffer_t *buffer, tt_dtype_t dtype,
                                const tt_shape_t *shape, int32_t device);
/* A SCALAR node. For float dtypes value_f is used, else value_i. */
tt_node_t *tt_node_create_scalar(tt_dtype_t dtype, double value_f,
                                 int64_t value_i, int32_t device);
void tt_node_retain(tt_node_t *node);
void tt_node_release(tt_node_t *node);
/* Replaces node's sharding annotation with a copy of sharding (NULL:
 * clears it). Validates it against the node's shape first (see
 * tt_sharding_validate); on error the node is unchanged. */
tt_status_t tt_node_set_sharding(tt_node_t *node, const tt_sharding_t *sharding);

/* ---- fused elementwise kernels ------------------------------------- */
/* One step of a fused elementwise program. args[k] >= 0 names an earlier
 * step; args[k] < 0 names fused input -(args[k] + 1). */
typedef struct tt_fused_op_s {
  tt_op_t op;        /* TT_OP_UNARY, TT_OP_BINARY, TT_OP_WHERE or TT_OP_CONVERT */
  tt_dtype_t dtype;  /* the step's result dtype (as the unfused op had it) */
  int32_t num_args;
  int32_t args[3];
  int64_t code;      /* unary/binary op code, or the convert target dtype */
  double alpha, beta;
} tt_fused_op_t;

/* A fused elementwise program: the last step is the result. Every input is
 * broadcastable to the instruction's shape. */
typedef struct tt_fused_s {
  int32_t num_ops;
  tt_fused_op_t *ops;
} tt_fused_t;

/* ---- linearised graphs -------------------------------------------- */
typedef struct tt_instr_s {
  tt_op_t op;
  tt_dtype_t dtype;
  tt_shape_t shape;
  int32_t num_operands;
  int32_t *operands; /* instruction indices, all smaller than this one */
  int32_t num_iattrs;
  int64_t iattrs[TT_MAX_IATTRS];
  double fattrs[TT_MAX_FATTRS];
  int32_t input_index;  /* PARAM/SCALAR: position among graph inputs */
  int32_t last_use;     /* index of the last instruction reading this one */
  const tt_fused_t *fused; /* TT_OP_FUSED: the program (owned by the graph) */
  /* The node's sharding (borrowed from the node) in graphs made by
   * tt_stablehlo_emit; NULL in graphs made by tt_graph_build, whose
   * executions are unpartitioned (the sharding still enters their hash). */
  const tt_sharding_t *sharding;
} tt_instr_t;

/* Fused reductions (made by src/passes/fuse_reduce.c): a TT_OP_FUSED
 * instruction whose attributes (tt_fused_attrs_t) have kind
 * TT_FUSED_REDUCE runs its program over the domain dims (rank of them; the
 * reduced value's shape), reducing dims_mask. Exactly one step is
 * TT_OP_REDUCE (code = tt_reduce_op_t SUM/MEAN/MAX/MIN, args[0] = the
 * value reduced over dims_mask). Steps before it are elementwise over the
 * domain, with inputs broadcast to the domain; steps after it (the
 * epilogue) are elementwise over the instruction's shape, with inputs
 * broadcast to that shape, and read only the REDUCE step, later steps and
 * inputs. Any other fused instruction has no attributes. */
#define TT_FUSED_REDUCE 1

static inline int tt_fused_is_reduce(const tt_instr_t *in) {
  if (in->op != TT_OP_FUSED || in->num_iattrs == 0) return 0; /* a plain fused program */
  /* Attributes that fit no layout (a malformed instruction the verifier
   * reports) are not a reduction. */
  tt_fused_attrs_t a;
  tt_status_t st = tt_attrs_decode(TT_OP_FUSED, in->iattrs, in->num_iattrs, in->fattrs, &a,
                                   sizeof(a), NULL);
  if (st) {
    tt_status_free(st);
    return 0;
  }
  return a.kind == TT_FUSED_REDUCE;
}

/* A fused reduction's domain as [A, R, B] (size-1 dims dropped): A the
 * kept dims before the reduced ones, R the reduced, B the kept dims after;
 * returns the number of separate runs of reduced dims (1 for the forms
 * that execute). */
static inline int tt_fused_reduce_arb(const tt_instr_t *in, int64_t *A, int64_t *R,
                                      int64_t *B) {
  tt_fused_attrs_t fa;
  TT_ATTRS(in, &fa);
  uint32_t mask = (uint32_t)fa.dims_mask;
  int32_t rank = (int32_t)fa.rank;
  int64_t a = 1, r = 1, b = 1;
  int seen = 0, runs = 0, prev = -1;
  for (int32_t d = 0; d < rank; ++d) {
    int64_t n = fa.dims.v[d];
    if (n == 1) continue;
    int red = (mask >> d) & 1u;
    if (red) {
      r *= n;
      runs += prev != 1;
      seen = 1;
    } else if (seen) {
      b *= n;
    } else {
      a *= n;
    }
    prev = red;
  }
  *A = a;
  *R = r;
  *B = b;
  return runs;
}

/* The shape a fused instruction's program runs over. */
static inline tt_shape_t tt_fused_domain(const tt_instr_t *in) {
  if (!tt_fused_is_reduce(in)) return in->shape;
  tt_fused_attrs_t a;
  TT_ATTRS(in, &a);
  tt_shape_t s = {0, {0}};
  s.rank = (int32_t)a.rank;
  for (int32_t d = 0; d < s.rank; ++d) s.dims[d] = a.dims.v[d];
  return s;
}

typedef struct tt_graph_s {
  int32_t num_instrs;
  tt_instr_t *instrs;
  int32_t num_inputs;       /* PARAM and SCALAR nodes, in order of first use */
  int32_t *input_instr;     /* instruction index of each input */
  int32_t num_outputs;
  int32_t *output_instr;    /* instruction index of each output */
  uint64_t hash;
  uint8_t *key;             /* canonical bytes the hash was taken over */
  size_t key_size;
  void *arena;
  /* Instruction pairs marked by tt_pass_pair (passes.h), or NULL: for a
   * CONV2D, the fused elementwise instruction it may compute as its
   * epilogue; for an ATTENTION, the ATTENTION_BWD that may read the
   * probabilities it keeps, and for that backward the forward; -1 for
   * every other instruction. A backend takes a pair or leaves it. */
  int32_t *pair;
  /* Per-instruction shardings from tt_pass_propagate_sharding (passes.h,
   * torchtpu/sharding_rule.h), one malloc'd block, or NULL (never made
   * for unsharded graphs; not part of the hash). */
  struct tt_sharding_prop_s *sharding_prop;
} tt_graph_t;

/* Linearises the nodes reachable from roots (post-order, each node once).
 * *out_graph is owned by the caller (tt_graph_destroy). If out_inputs is not
 * NULL it receives a malloc'd array of the input nodes (borrowed pointers,
 * valid while the roots live), in input order. */
tt_status_t tt_graph_build(tt_node_t *const *roots, int32_t num_roots,
                           tt_graph_t **out_graph, tt_node_t ***out_inputs);
void tt_graph_destroy(tt_graph_t *graph);
/* Text form of the graph (one instruction per line); caller frees. */
char *tt_graph_to_text(const tt_graph_t *graph);
/* Graphviz dot form; caller frees. */
char *tt_graph_to_dot(const tt_graph_t *graph);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_IR_H_ */
