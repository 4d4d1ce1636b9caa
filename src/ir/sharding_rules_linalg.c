/* Sharding rules of products and linear algebra. dot ([B, M, K] x [B, K, N]
 * -> [B, M, N], either operand transposed): the batch dim and the free
 * dims M and N keep their sharding, the contracting dim K leaves each
 * device a partial sum (Megatron's row-parallel layer; column-parallel is
 * a sharded N). A batch of 1 that broadcasts is read whole. Factorisations
 * and solvers (packed results) are replicated; an FFT needs its last dim
 * whole. */
#include "ir/sharding_rules.h"

static void tt_srule_dot(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_dot_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *sa = tt_srule_operand_shape(g, i, 0), *sb = tt_srule_operand_shape(g, i, 1);
  m->partial_reduce = TT_RED_SUM;
  m->dims[0][0] = 0;
  m->dims[0][a.trans_a ? 2 : 1] = 1;
  m->dims[0][a.trans_a ? 1 : 2] = TT_SDIM_REDUCED;
  m->dims[1][0] = sb->dims[0] == sa->dims[0] ? 0 : TT_SDIM_WHOLE;
  m->dims[1][a.trans_b ? 1 : 2] = 2;
  m->dims[1][a.trans_b ? 2 : 1] = TT_SDIM_REDUCED;
}

static void tt_srule_fft(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0);
  for (int32_t d = 0; d + 1 < x->rank; ++d) m->dims[0][d] = d;
}

TT_SHARDING_RULE(DOT, "dot", tt_srule_dot);
TT_SHARDING_RULE(LINALG, "linalg", NULL);
TT_SHARDING_RULE(FFT, "fft", tt_srule_fft);
