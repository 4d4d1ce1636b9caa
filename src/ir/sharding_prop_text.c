/* Text form of the shardings tt_pass_propagate_sharding recorded on a
 * graph (include/torchtpu/sharding_rule.h), one line per instruction, for
 * debugging a propagation and for tests:
 *   %3 dot(%1, %2): {devices=[1,2,4]0,1,2,3,4,5,6,7} forward
 *   %5 dot(%3, %4): {...} forward local {...} partial 4 sum
 * ("local": the layout computing the op on its operands' shards gives,
 * shown where it is not the result's or holds partial values). */
#include <stdlib.h>

#include "torchtpu/sharding_rule.h"

static const char *const tt_origin_names[] = {"user", "forward", "backward", "default"};
static const char *const tt_reduce_names[] = {"sum",    "mean",   "prod", "max", "min",
                                              "argmax", "argmin", "any",  "all"};

static void tt_put_sharding(tt_strbuf_t *b, const tt_sharding_t *s) {
  char *t = tt_sharding_to_text(s);
  tt_strbuf_puts(b, t ? t : "?");
  free(t);
}

char *tt_sharding_prop_to_text(const tt_graph_t *g) {
  tt_strbuf_t b = {0};
  if (!g->sharding_prop) return tt_strbuf_take(&b);
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    const tt_sharding_prop_t *r = &g->sharding_prop[i];
    tt_strbuf_printf(&b, "%%%d %s(", (int)i, tt_op_name(in->op));
    for (int32_t k = 0; k < in->num_operands; ++k)
      tt_strbuf_printf(&b, k ? ", %%%d" : "%%%d", (int)in->operands[k]);
    tt_strbuf_puts(&b, "): ");
    tt_put_sharding(&b, r->sharding);
    tt_strbuf_printf(&b, " %s", r->origin >= 0 && r->origin < 4 ? tt_origin_names[r->origin] : "?");
    /* The local layout when it is not the result's (or when its device
     * order carries partial groups). */
    tt_sharding_t *lc = r->local ? tt_sharding_canonical(r->local, in->shape.rank) : NULL;
    if (r->local && (r->partial_count > 1 || !lc || !tt_sharding_equal(lc, r->sharding))) {
      tt_strbuf_puts(&b, " local ");
      tt_put_sharding(&b, r->local);
    }
    free(lc);
    if (r->partial_count > 1)
      tt_strbuf_printf(&b, " partial %lld %s", (long long)r->partial_count,
                       r->partial_reduce >= 0 && r->partial_reduce < 9
                           ? tt_reduce_names[r->partial_reduce]
                           : "?");
    tt_strbuf_puts(&b, "\n");
  }
  return tt_strbuf_take(&b);
}
