/* The op table: one descriptor per IR op (src/ir/op_table.c), generated
 * from the op list torchtpu/ops.def like the tt_op_t enum itself.
 *
 * Everything the engine knows about an op that is not how to execute it
 * lives in its entry: its name, how many operands it takes, its attribute
 * schema (field names and kinds, op_attrs.h), what kind of op it is, and
 * its shape inference. Backends keep their own per-op tables: the
 * StableHLO lowering's is checked against TT_OP_COUNT at compile time, the
 * CPU backend's executors are registered by its family files and checked
 * when the backend prepares a graph (src/backends/cpu/exec_table.c), and
 * tests/c/test_op_table.c checks both, so an op added to ops.def without
 * an entry anywhere fails the build or the tests, never a user's program
 * silently.
 *
 * Adding an op: docs/architecture.md, "Adding an op".
 */
#ifndef TORCHTPU_OP_TABLE_H_
#define TORCHTPU_OP_TABLE_H_

#include "torchtpu/ir.h"
#include "torchtpu/op_attrs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What kind of op an entry is (tt_op_info_t.flags). */
enum {
  TT_OPF_INPUT = 1u << 0,       /* a graph input (param, scalar): no infer */
  TT_OPF_ELEMENTWISE = 1u << 1, /* result element i depends on operand elements i (broadcast) */
  TT_OPF_MOVEMENT = 1u << 2,    /* only moves elements (reshape, transpose, slice, ...) */
  TT_OPF_COMPLEX_OK = 1u << 3,  /* may read or make complex64 values */
  TT_OPF_FUSIBLE = 1u << 4,     /* may be a step of a fused elementwise program
                                 * (subject to tt_instr_fusible's dtype rules) */
  TT_OPF_COLLECTIVE = 1u << 5,  /* a cross-device collective (src/ir/infer_collective.c) */
  TT_OPF_SPMD_MANUAL = 1u << 6, /* enters or leaves a manual SPMD region */
  TT_OPF_RANDOM = 1u << 7,      /* draws random numbers from its seed operand */
};

/* Infers node n's shape and dtype from its operands and attributes (all
 * set), checking them: a user's mistake returns a status naming the values
 * (the message PyTorch gives where there is one). Operand count and the
 * attribute layout were checked against the entry before the call. */
typedef tt_status_t (*tt_infer_fn_t)(tt_node_t *n, const void *attrs);

/* An op's sharding-propagation rule (torchtpu/sharding_rule.h): every
 * entry has one, defined in src/ir/sharding_rules_<family>.c (an op
 * without one does not link); a rule with no dim map replicates. */
typedef struct tt_sharding_rule_s tt_sharding_rule_t;

typedef struct tt_op_info_s {
  const char *name;            /* lower case, as printed in graph text and metrics */
  int32_t min_operands;        /* operand count range; max -1: any number */
  int32_t max_operands;
  uint32_t flags;              /* TT_OPF_* */
  const tt_attr_field_t *fields; /* the attribute schema, in storage order */
  int32_t num_fields;
  size_t attrs_size;           /* sizeof the op's attribute struct (op_attrs.h) */
  tt_infer_fn_t infer;         /* NULL only for TT_OPF_INPUT ops */
  const tt_sharding_rule_t *sharding_rule;
} tt_op_info_t;

/* The entry of op; NULL when op is not an op. */
const tt_op_info_t *tt_op_info(tt_op_t op);

static inline int tt_op_has_flag(tt_op_t op, uint32_t flag) {
  const tt_op_info_t *info = tt_op_info(op);
  return info && (info->flags & flag) != 0;
}

/* Whether instruction `in`, whose first operand (if any) has dtype
 * x0_dtype, can be a step of a fused elementwise program: a TT_OPF_FUSIBLE
 * op whose result is f32/f16/bf16/bool and whose inputs load exactly into
 * the f32 the fused program computes in. The one rule every fusion pass
 * and the tier-1 code generator apply. */
int tt_instr_fusible(const tt_instr_t *in, tt_dtype_t x0_dtype);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_OP_TABLE_H_ */
