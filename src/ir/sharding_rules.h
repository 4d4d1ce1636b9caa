/* The sharding rules' registration (internal to src/ir): one rule per row
 * of torchtpu/ops.def, defined by the family files
 * src/ir/sharding_rules_<family>.c with TT_SHARDING_RULE and referenced by
 * the op's op table entry (src/ir/op_table.c). An op added to ops.def
 * without a rule does not link ("undefined reference to
 * tt_sharding_rule_<ID>"); a rule defined twice does not link either.
 * The rule's contract is in include/torchtpu/sharding_rule.h. */
#ifndef TORCHTPU_IR_SHARDING_RULES_H_
#define TORCHTPU_IR_SHARDING_RULES_H_

#include "torchtpu/op_table.h"
#include "torchtpu/sharding_rule.h"

#define TT_OP(id, ...) extern const tt_sharding_rule_t tt_sharding_rule_##id;
#include "torchtpu/ops.def"

/* Defines op ID's rule: a dim map function (NULL: replicated result). */
#define TT_SHARDING_RULE(id, family, map) \
  const tt_sharding_rule_t tt_sharding_rule_##id = {family, map, NULL}
/* Defines op ID's rule from its attributes (the manual-region ops). */
#define TT_SHARDING_RULE_FIXED(id, family, fixed) \
  const tt_sharding_rule_t tt_sharding_rule_##id = {family, NULL, fixed}

/* Operand k's shape of instruction i. */
static inline const tt_shape_t *tt_srule_operand_shape(const tt_graph_t *g, int32_t i, int32_t k) {
  return &g->instrs[g->instrs[i].operands[k]].shape;
}

/* row[d] for an operand of shape x read broadcast (numpy, right-aligned)
 * into a result of shape out: the result dim when the sizes agree, else
 * TT_SDIM_WHOLE (a size-1 dim that broadcasts). Elementwise ops' map
 * (src/ir/sharding_rules_elementwise.c). */
void tt_srule_broadcast_row(const tt_shape_t *x, const tt_shape_t *out, int32_t *row);
/* Every operand of instruction i read broadcast into its result. */
void tt_srule_map_elementwise(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m);
/* row[d] = d for dims of equal size in x and out, up to the smaller rank;
 * TT_SDIM_WHOLE for the rest. */
void tt_srule_same_size_row(const tt_shape_t *x, const tt_shape_t *out, int32_t *row);

#endif /* TORCHTPU_IR_SHARDING_RULES_H_ */
