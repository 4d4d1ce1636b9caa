/* Internal to the StableHLO emitter: a text builder for generic-form MLIR
 * with typed SSA values, shared by the lowering files of this folder
 * (emit.c: core, the simple ops and the dispatch; emit_elementwise.c;
 * emit_nn.c; emit_attention.c; emit_layer_norm.c; emit_data.c;
 * emit_spmd.c; emit_barrier.c), and the lowerings' registrations (emit_table.c).
 *
 * Values are small integers (tt_shv_t) naming an entry of the emitter's
 * value table, which records the SSA name, the result index of a
 * multi-result op, and the value's dtype and shape. A helper that fails
 * records the first error in the emitter and returns -1; every helper
 * returns -1 at once when the emitter already failed or an argument is -1,
 * so lowerings chain helpers and check once at the end. */
#ifndef TORCHTPU_BACKENDS_STABLEHLO_EMIT_INTERNAL_H_
#define TORCHTPU_BACKENDS_STABLEHLO_EMIT_INTERNAL_H_

#include <stdarg.h>
#include <stddef.h>

#include "torchtpu/ir.h"
#include "torchtpu/kernels.h"
#include "torchtpu/stablehlo.h"

typedef int32_t tt_shv_t;

/* Element types StableHLO needs beyond the engine's (random bits). */
#define TT_SHLO_U32 ((tt_dtype_t)(TT_DTYPE_COUNT + 0))
#define TT_SHLO_U64 ((tt_dtype_t)(TT_DTYPE_COUNT + 1))

typedef struct tt_shv_info_s {
  int32_t ssa;  /* %ssa */
  int32_t res;  /* -1, or the result index of a multi-result op (%ssa#res) */
  tt_dtype_t dtype;
  tt_shape_t shape;
  /* The value this one was made from by a broadcast that only added unit
   * dimensions (same elements), or -1: a reshape back to that value's
   * shape reuses it instead of emitting a reshape (dot's shared-weight
   * form, which the partitioner then sees unreshaped). */
  tt_shv_t unit_of;
  /* The sharding the value is known to carry: an argument's annotation or
   * an annotated intermediate's @Sharding call (NULL: none known). */
  const tt_sharding_t *sharding;
} tt_shv_info_t;

typedef struct tt_shlo_s {
  tt_strbuf_t text;
  int32_t indent;
  int32_t next_ssa;
  tt_shv_info_t *vals;
  int32_t num_vals, cap_vals;
  tt_status_t err; /* first failure, owned */
  int64_t channels; /* channel handles given out so far (emit_spmd.c) */
  /* The optimization barriers emitted so far (emit_barrier.c): an
   * instruction of each and the value of its result 0, so the other nodes
   * of one barrier (the same operands) read its results. */
  const tt_instr_t **barrier_instr;
  tt_shv_t *barrier_val;
  int32_t num_barriers, cap_barriers;
  /* Shardings values carry that the graph does not own (the manual-region
   * calls' own): copies, freed with the emitter. */
  tt_sharding_t **owned;
  int32_t num_owned, cap_owned;
} tt_shlo_t;

/* ---- text and errors (emit.c) ---- */
void tt_shlo_printf(tt_shlo_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tt_shlo_line_start(tt_shlo_t *c); /* newline-terminated lines get indent */
/* Records err (owned) as the emitter's failure unless one is recorded. */
void tt_shlo_fail(tt_shlo_t *c, tt_status_t err);
int tt_shlo_bad(const tt_shlo_t *c, int n, const tt_shv_t *vs);
void tt_shlo_type(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s);
const char *tt_shlo_elem(tt_dtype_t dt);
void tt_shlo_ref(tt_shlo_t *c, tt_shv_t v);
const tt_shv_info_t *tt_shlo_info(const tt_shlo_t *c, tt_shv_t v);
tt_dtype_t tt_shlo_dtype(const tt_shlo_t *c, tt_shv_t v);
const tt_shape_t *tt_shlo_shape(const tt_shlo_t *c, tt_shv_t v);
tt_shv_t tt_shlo_new_value(tt_shlo_t *c, int32_t ssa, int32_t res, tt_dtype_t dt,
                           const tt_shape_t *s);

/* A shape from a dims list. */
tt_shape_t tt_shlo_dims(int32_t rank, const int64_t *dims);

/* ---- attributes: a bounded string that ops append to ---- */
typedef struct tt_shlo_attr_s {
  char s[8192];
  size_t n;
  int overflow;
} tt_shlo_attr_t;
void tt_shlo_attr(tt_shlo_attr_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends "name = array<i64: v0, v1>" (with a leading ", " when needed). */
void tt_shlo_attr_i64s(tt_shlo_attr_t *a, const char *name, const int64_t *v, int n);
/* Appends "[v0, v1]" (for #stablehlo.* dimension lists). */
void tt_shlo_attr_list(tt_shlo_attr_t *a, const int64_t *v, int n);
/* Appends "name = dense<[[lo0, hi0], ...]> : tensor<nx2xi64>". */
void tt_shlo_attr_padding(tt_shlo_attr_t *a, const char *name, const int64_t *lo,
                          const int64_t *hi, int n);

/* ---- generic ops ---- */
/* One result: %N = "name"(args) {attrs} : (arg types) -> type. attrs may be
 * NULL or "". name is the full op name ("stablehlo.add"). */
tt_shv_t tt_shlo_op(tt_shlo_t *c, const char *name, int nargs, const tt_shv_t *args,
                    const char *attrs, tt_dtype_t dt, const tt_shape_t *s);
/* An op with regions or several results, in pieces: begin prints the
 * result names and operands, returns the first SSA number (-1 on error);
 * each region is region_begin (block arguments, returned as values in
 * out_args) ... tt_shlo_return ... region_end; end prints the attributes
 * and the type signature and returns the value of result 0 (results k
 * are that value + k). */
int32_t tt_shlo_op_begin(tt_shlo_t *c, const char *name, int nres, int nargs,
                         const tt_shv_t *args);
void tt_shlo_region_begin(tt_shlo_t *c, int first, int nargs, const tt_dtype_t *dts,
                          tt_shv_t *out_args);
void tt_shlo_return(tt_shlo_t *c, int n, const tt_shv_t *vs);
void tt_shlo_region_end(tt_shlo_t *c);
tt_shv_t tt_shlo_op_end(tt_shlo_t *c, int32_t ssa, const char *attrs, int nargs,
                        const tt_shv_t *args, int nres, const tt_dtype_t *dts,
                        const tt_shape_t *shapes);

/* ---- constants ---- */
tt_shv_t tt_shlo_const_f(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, double v);
tt_shv_t tt_shlo_const_i(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, int64_t v);
/* A scalar (0-d) constant: double for float dtypes, else the integer. */
tt_shv_t tt_shlo_scalar(tt_shlo_t *c, tt_dtype_t dt, double v);
/* A constant of shape s with element values vals (row-major). */
tt_shv_t tt_shlo_const_array(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s,
                             const double *vals);
/* The most negative / positive value of dt (-inf / +inf for floats). */
tt_shv_t tt_shlo_lowest(tt_shlo_t *c, tt_dtype_t dt);
tt_shv_t tt_shlo_highest(tt_shlo_t *c, tt_dtype_t dt);
/* A constant like v's shape and dtype. */
tt_shv_t tt_shlo_like(tt_shlo_t *c, tt_shv_t v, double value);

/* ---- shape and type helpers ---- */
tt_shv_t tt_shlo_convert(tt_shlo_t *c, tt_shv_t v, tt_dtype_t dt);
tt_shv_t tt_shlo_reshape(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *s);
/* numpy broadcasting (right-aligned; size-1 dims stretch) to s. */
tt_shv_t tt_shlo_bcast_to(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *s);
/* broadcast_in_dim with explicit dims (v's dim i -> result dim dims[i]). */
tt_shv_t tt_shlo_bcast_dims(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *s,
                            const int64_t *dims);
tt_shv_t tt_shlo_transpose(tt_shlo_t *c, tt_shv_t v, const int64_t *perm);
tt_shv_t tt_shlo_slice(tt_shlo_t *c, tt_shv_t v, const int64_t *start, const int64_t *limit,
                       const int64_t *step);
tt_shv_t tt_shlo_concat(tt_shlo_t *c, int n, const tt_shv_t *vs, int64_t dim);
/* dot_general of a and b with nbatch batch dims (lb[i] of a paired with
 * rb[i] of b) and one contracting dim (lc of a, rc of b); the result has
 * dtype dt and shape out (batch dims, then a's free dims, then b's). */
tt_shv_t tt_shlo_dot_general(tt_shlo_t *c, tt_shv_t a, tt_shv_t b, int nbatch,
                             const int64_t *lb, const int64_t *rb, int64_t lc, int64_t rc,
                             tt_dtype_t dt, const tt_shape_t *out);
/* iota of dtype and shape s along dim. */
tt_shv_t tt_shlo_iota(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, int64_t dim);

/* ---- elementwise (operands of one shape; result dtype = a's) ---- */
tt_shv_t tt_shlo_un(tt_shlo_t *c, const char *name, tt_shv_t a);
tt_shv_t tt_shlo_bin(tt_shlo_t *c, const char *name, tt_shv_t a, tt_shv_t b);
/* compare with direction "EQ", "NE", "LT", "LE", "GT", "GE"; i1 result. */
tt_shv_t tt_shlo_cmp(tt_shlo_t *c, const char *dir, tt_shv_t a, tt_shv_t b);
tt_shv_t tt_shlo_select(tt_shlo_t *c, tt_shv_t p, tt_shv_t a, tt_shv_t b);
/* a op (constant k of a's dtype and shape). */
tt_shv_t tt_shlo_bin_k(tt_shlo_t *c, const char *name, tt_shv_t a, double k);
tt_shv_t tt_shlo_isnan(tt_shlo_t *c, tt_shv_t a);

/* ---- reductions ---- */
/* A region whose block takes two scalars of dt and returns "name"(a, b). */
void tt_shlo_region_binary(tt_shlo_t *c, int first, const char *name, tt_dtype_t dt);
/* reduce of v over the dims whose bit is in mask with body op name
 * ("stablehlo.add", ...) and init (a 0-d value of v's dtype). */
tt_shv_t tt_shlo_reduce(tt_shlo_t *c, tt_shv_t v, uint32_t mask, const char *name,
                        tt_shv_t init);
/* reduce_window with one input: window/stride/dilation and padding per dim. */
tt_shv_t tt_shlo_reduce_window(tt_shlo_t *c, tt_shv_t v, tt_shv_t init, const char *name,
                               const int64_t *window, const int64_t *stride,
                               const int64_t *dilation, const int64_t *lo,
                               const int64_t *hi, const tt_shape_t *out_shape);
/* Body of a two-operand (value, index) selection: returns (value, index)
 * of the winner. kind: 0 argmax (NaN wins, smaller index on ties), 1 argmin
 * (NaN wins, smaller index), 2 running max (NaN wins, larger index on
 * ties), 3 running min (NaN wins, larger index). Emits the region. */
void tt_shlo_region_select_index(tt_shlo_t *c, int first, int kind, tt_dtype_t vdt,
                                 tt_dtype_t idt);

/* ---- lowerings and their registrations (emit_table.c) ---- */
typedef struct tt_shlo_instr_s {
  const tt_instr_t *in;
  const tt_shv_t *x; /* operand values */
} tt_shlo_instr_t;

/* Lowers one instruction (ins->x holds its operands' values) and returns
 * its value, of exactly the IR's dtype and shape, or -1 with the failure
 * recorded in c (TT_UNIMPLEMENTED for a variant with no lowering). */
typedef tt_shv_t (*tt_shlo_lower_fn)(tt_shlo_t *c, const tt_shlo_instr_t *ins);

/* One registration: op is lowered by fn, as `how` says in a few words (a
 * static string: tt_stablehlo_op_lowering, docs). Graph inputs (TT_OPF_INPUT)
 * become @main's arguments: their rows have a description and no fn. Each
 * family file ends with its list, tt_shlo_rows_<family>, of the ops its
 * static lowerings handle; emit.c's list holds the inputs and the simple
 * ops. */
typedef struct tt_shlo_row_s {
  tt_op_t op;
  tt_shlo_lower_fn fn;
  const char *how;
} tt_shlo_row_t;

/* Ends every list of registrations. */
#define TT_SHLO_ROWS_END {TT_OP_COUNT, NULL, NULL}

/* Every family's list (emit_table.c; a new family file adds its list
 * there), NULL-ended: the emitter's registrations. */
extern const tt_shlo_row_t *const tt_shlo_families[];

/* The registrations as tables indexed by tt_op_t. */
typedef struct tt_shlo_table_s {
  tt_shlo_lower_fn fn[TT_OP_COUNT];
  const char *how[TT_OP_COUNT];
} tt_shlo_table_t;

/* Fills t from `lists` (a NULL-ended array of lists, each ended by
 * TT_SHLO_ROWS_END): every op registered exactly once, with a description,
 * and with a function unless it is a graph input. NULL, or TT_INTERNAL
 * naming the first op registered twice, registered without a description,
 * a graph input registered with a function, another op without one, or a
 * row naming no op (t's contents are then unspecified); else, the rows
 * being sound, the first op with no row (t then holds every registered op,
 * the missing ones NULL). */
tt_status_t tt_shlo_table_build(const tt_shlo_row_t *const *lists, tt_shlo_table_t *t);

/* The emitter's registrations (tt_shlo_families), built once (thread-safe):
 * NULL when they are complete, else a new status with the build's error
 * (every call its own copy). */
tt_status_t tt_shlo_table_check(void);

/* The built table, or NULL when the rows are unsound (a duplicate, or a
 * row of the kinds the build refuses; emission then fails with
 * tt_shlo_table_check's error). An op with no row has fn and how NULL:
 * emitting it is TT_UNIMPLEMENTED "no lowering for op", as for any op
 * without a lowering. After the first call, a pthread_once and a read. */
const tt_shlo_table_t *tt_shlo_table(void);

/* Shared by the elementwise lowerings and the index ops (emit_data.c). */
tt_shv_t tt_shlo_lower_binary(tt_shlo_t *c, int64_t code, tt_shv_t a, tt_shv_t b,
                              tt_dtype_t out_dt);
/* Scatter along dim of torch.scatter: base.scatter(dim, idx, src) with
 * combiner body name (NULL = replace). src is sliced to idx's extent. */
tt_shv_t tt_shlo_scatter_dim(tt_shlo_t *c, tt_shv_t base, int64_t dim, tt_shv_t idx,
                             tt_shv_t src, const char *body);

/* ---- SPMD: shardings and collectives (emit_spmd.c) ---- */
typedef struct tt_shlo_spmd_s {
  int sharded;            /* some instruction carries a sharding */
  int32_t num_partitions; /* the shardings' device count (1 when none) */
  int32_t num_replicas;   /* 1 + the largest replica id of any collective's groups */
} tt_shlo_spmd_t;
/* Scans g's shardings and collectives; TT_INVALID_ARGUMENT when shardings
 * disagree on the device count. */
tt_status_t tt_shlo_spmd_scan(const tt_graph_t *g, tt_shlo_spmd_t *out);
/* Writes ` {mhlo.sharding = "..."}` for an argument or result: sh's text,
 * or {replicated} when sh is NULL. */
void tt_shlo_sharding_attr(tt_shlo_t *c, const tt_sharding_t *sh);
/* Whether a value carrying `has` (may be NULL) is annotated with `want`:
 * the same sharding, or both whole replication. */
int tt_shlo_carries(const tt_sharding_t *has, const tt_sharding_t *want);
/* Records that v carries sh (a copy of sh is kept). */
void tt_shlo_carry(tt_shlo_t *c, tt_shv_t v, const tt_sharding_t *sh);
/* v annotated: custom_call @Sharding with mhlo.sharding = sh's text. */
tt_shv_t tt_shlo_sharding_call(tt_shlo_t *c, tt_shv_t v, const tt_sharding_t *sh);
/* 1 + the largest device id named by a collective's replica groups in g (1
 * when g has none). */
int32_t tt_shlo_collective_replicas(const tt_graph_t *g);

#endif /* TORCHTPU_BACKENDS_STABLEHLO_EMIT_INTERNAL_H_ */
