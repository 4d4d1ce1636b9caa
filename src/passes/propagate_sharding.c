/* Sharding propagation over a linearised graph (passes.h,
 * tt_pass_propagate_sharding; the policy is docs/spmd.md's "Sharding
 * propagation").
 *
 * Every op's rule (the op table's sharding_rule) is a dim map: which
 * result dim each operand dim becomes, which it reduces, which it needs
 * whole. The pass reads it both ways: an operand's sharding, its device
 * array transposed onto the result's dims, is a forward candidate for the
 * result; a result's sharding, transposed back onto an operand's dims, is
 * a backward candidate for that operand. Sweeps alternate, forward over
 * the instructions in order then backward in reverse, until nothing
 * changes.
 *
 * Termination and determinism: annotated instructions never change; any
 * other instruction takes its first candidate and afterwards only a merge
 * of its sharding with a new candidate that has strictly more tiles, so
 * each instruction changes at most log2(devices) + 1 times, and the order
 * of visits is fixed. Candidates of one visit are taken in order of tiles
 * (most first), ties by source order (operand index forward, user
 * instruction then operand index backward): the first is kept and each
 * later one merged in where it agrees (tt_sharding_merge), else dropped. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/op_table.h"
#include "torchtpu/passes.h"
#include "torchtpu/sharding_rule.h"

typedef struct tt_prop_s {
  tt_graph_t *g;
  int32_t n;
  tt_sharding_t **cur; /* full form, or NULL: nothing reached it yet */
  uint8_t *fixed;      /* annotated by the user */
  uint8_t *origin;     /* tt_sharding_origin_t */
  int32_t *row0;       /* instruction i's operand k's map row: rows[row0[i] + k] */
  int32_t (*rows)[TT_MAX_RANK];
  int32_t *partial_reduce;
  int32_t *user0, *users; /* users of i: users[user0[i] .. user0[i + 1]), as u * 65536 + k */
  int oom;
} tt_prop_t;

static const tt_sharding_rule_t *tt_prop_rule(const tt_instr_t *in) {
  const tt_op_info_t *info = tt_op_info(in->op);
  return info ? info->sharding_rule : NULL;
}

static int tt_prop_is_fixed_rule(const tt_instr_t *in) {
  const tt_sharding_rule_t *r = tt_prop_rule(in);
  return r && r->fixed;
}

/* The manual-region op i's sharding of its result or operand, full form. */
static tt_sharding_t *tt_prop_fixed(tt_prop_t *p, int32_t i, int want_result) {
  const tt_instr_t *in = &p->g->instrs[i];
  tt_sharding_t *s = tt_prop_rule(in)->fixed(p->g, i, want_result);
  if (!s) return NULL; /* malformed attributes: the verifier's to report */
  int32_t rank = want_result ? in->shape.rank : p->g->instrs[in->operands[0]].shape.rank;
  tt_sharding_t *f = tt_sharding_full(s, rank);
  free(s);
  if (!f) p->oom = 1;
  return f;
}

static int tt_prop_maps(const int32_t e, int64_t t, int64_t xdim, int64_t ydim) {
  return !(e & TT_SDIM_EXACT) || (xdim % t == 0 && ydim % t == 0);
}

/* Operand k's sharding moved onto instruction i's result. */
static tt_sharding_t *tt_prop_forward(tt_prop_t *p, int32_t i, int32_t k, int64_t *pcount) {
  const tt_instr_t *in = &p->g->instrs[i];
  int32_t o = in->operands[k];
  const tt_sharding_t *src = p->cur[o];
  if (pcount) *pcount = 1;
  if (!src) return NULL;
  const tt_shape_t *x = &p->g->instrs[o].shape;
  const int32_t *row = p->rows[p->row0[i] + k];
  int32_t to[TT_MAX_RANK];
  uint8_t part[TT_MAX_RANK] = {0};
  for (int32_t d = 0; d < x->rank; ++d) {
    int32_t e = row[d];
    to[d] = -1;
    if (e >= 0) {
      int32_t r = e & TT_SDIM_DIM_MASK;
      int64_t t = src->kind == TT_SHARDING_TILED ? src->tile_dims[d] : 1;
      if (r < in->shape.rank && tt_prop_maps(e, t, x->dims[d], in->shape.dims[r])) to[d] = r;
    } else if (e == TT_SDIM_REDUCED && p->partial_reduce[i] >= 0) {
      part[d] = 1;
    }
  }
  tt_sharding_t *c = tt_sharding_project(src, x->rank, to, in->shape.rank, part, pcount);
  if (!c) p->oom = 1;
  return c;
}

/* User u's sharding moved onto its operand k. */
static tt_sharding_t *tt_prop_backward(tt_prop_t *p, int32_t u, int32_t k) {
  const tt_instr_t *in = &p->g->instrs[u];
  const tt_sharding_t *res = p->cur[u];
  if (!res) return NULL;
  if (tt_prop_is_fixed_rule(in)) return k == 0 ? tt_prop_fixed(p, u, 0) : NULL;
  const tt_shape_t *x = &p->g->instrs[in->operands[k]].shape, *y = &in->shape;
  const int32_t *row = p->rows[p->row0[u] + k];
  int32_t inv[TT_MAX_RANK];
  for (int32_t r = 0; r < y->rank; ++r) inv[r] = -1;
  for (int32_t d = 0; d < x->rank; ++d) {
    int32_t e = row[d];
    if (e < 0) continue;
    int32_t r = e & TT_SDIM_DIM_MASK;
    if (r >= y->rank || inv[r] >= 0) continue;
    int64_t t = res->kind == TT_SHARDING_TILED ? res->tile_dims[r] : 1;
    if (tt_prop_maps(e, t, x->dims[d], y->dims[r])) inv[r] = d;
  }
  tt_sharding_t *c = tt_sharding_project(res, y->rank, inv, x->rank, NULL, NULL);
  if (!c) p->oom = 1;
  return c;
}

/* Candidates c[0..count) (owned, NULL entries skipped) in source order ->
 * the policy's combination (owned), or NULL when there is none. */
static tt_sharding_t *tt_prop_combine(tt_sharding_t **c, int32_t count, int32_t rank) {
  tt_sharding_t *best = NULL;
  /* Selection by tiles, most first; a strict comparison keeps source order
   * among ties. */
  for (;;) {
    int32_t pick = -1;
    for (int32_t j = 0; j < count; ++j)
      if (c[j] && (pick < 0 || tt_sharding_tiles(c[j], rank) > tt_sharding_tiles(c[pick], rank)))
        pick = j;
    if (pick < 0) break;
    if (!best) {
      best = c[pick];
    } else {
      tt_sharding_t *m = tt_sharding_merge(best, c[pick], rank);
      if (m) {
        free(best);
        best = m;
      }
      free(c[pick]);
    }
    c[pick] = NULL;
  }
  return best;
}

/* Offers cand (owned) to instruction i; 1 when i's sharding changed. */
static int tt_prop_offer(tt_prop_t *p, int32_t i, tt_sharding_t *cand, tt_sharding_origin_t from) {
  if (!cand) return 0;
  if (p->fixed[i]) {
    free(cand);
    return 0;
  }
  tt_sharding_t *cur = p->cur[i];
  int32_t rank = p->g->instrs[i].shape.rank;
  if (!cur) {
    p->cur[i] = cand;
    p->origin[i] = (uint8_t)from;
    return 1;
  }
  tt_sharding_t *m = tt_sharding_merge(cur, cand, rank);
  free(cand);
  if (m && tt_sharding_tiles(m, rank) > tt_sharding_tiles(cur, rank)) {
    free(cur);
    p->cur[i] = m;
    p->origin[i] = (uint8_t)from;
    return 1;
  }
  free(m);
  return 0;
}

static int tt_prop_forward_sweep(tt_prop_t *p, tt_sharding_t **scratch) {
  int changed = 0;
  for (int32_t i = 0; i < p->n; ++i) {
    const tt_instr_t *in = &p->g->instrs[i];
    if (p->fixed[i] || in->num_operands == 0) continue;
    if (tt_prop_is_fixed_rule(in)) {
      if (!p->cur[i])
        changed |= tt_prop_offer(p, i, tt_prop_fixed(p, i, 1), TT_SHARDING_FROM_FORWARD);
      continue;
    }
    for (int32_t k = 0; k < in->num_operands; ++k) scratch[k] = tt_prop_forward(p, i, k, NULL);
    changed |= tt_prop_offer(p, i, tt_prop_combine(scratch, in->num_operands, in->shape.rank),
                             TT_SHARDING_FROM_FORWARD);
  }
  return changed;
}

static int tt_prop_backward_sweep(tt_prop_t *p, tt_sharding_t **scratch) {
  int changed = 0;
  for (int32_t i = p->n - 1; i >= 0; --i) {
    if (p->fixed[i]) continue;
    int32_t count = 0;
    for (int32_t j = p->user0[i]; j < p->user0[i + 1]; ++j)
      scratch[count++] = tt_prop_backward(p, p->users[j] >> 16, p->users[j] & 0xffff);
    changed |= tt_prop_offer(p, i, tt_prop_combine(scratch, count, p->g->instrs[i].shape.rank),
                             TT_SHARDING_FROM_BACKWARD);
  }
  return changed;
}

/* The maps of every instruction and the users of each. */
static tt_status_t tt_prop_setup(tt_prop_t *p) {
  tt_graph_t *g = p->g;
  int32_t n = p->n, total = 0;
  p->row0 = malloc(sizeof(int32_t) * ((size_t)n + 1));
  p->user0 = calloc((size_t)n + 2, sizeof(int32_t));
  if (!p->row0 || !p->user0) return NULL;
  for (int32_t i = 0; i < n; ++i) {
    p->row0[i] = total;
    total += g->instrs[i].num_operands;
    for (int32_t k = 0; k < g->instrs[i].num_operands; ++k)
      ++p->user0[g->instrs[i].operands[k] + 2];
  }
  p->row0[n] = total;
  p->rows = malloc(sizeof(*p->rows) * ((size_t)total + 1));
  p->users = malloc(sizeof(int32_t) * ((size_t)total + 1));
  p->partial_reduce = malloc(sizeof(int32_t) * ((size_t)n + 1));
  if (!p->rows || !p->users || !p->partial_reduce) return NULL;
  for (int32_t i = 0; i < n; ++i) p->user0[i + 2] += p->user0[i + 1];
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (in->num_operands > 0xffff)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "sharding propagation: instruction %d has %d operands (at most 65535)",
                            (int)i, (int)in->num_operands);
    for (int32_t k = 0; k < in->num_operands; ++k) {
      p->users[p->user0[in->operands[k] + 1]++] = i * 65536 + k;
      for (int32_t d = 0; d < TT_MAX_RANK; ++d) p->rows[p->row0[i] + k][d] = TT_SDIM_WHOLE;
    }
    tt_sharding_map_t m = {in->num_operands, p->rows + p->row0[i], -1};
    const tt_sharding_rule_t *rule = tt_prop_rule(in);
    if (!rule)
      return tt_status_make(TT_INTERNAL, "sharding propagation: op %s has no sharding rule",
                            tt_op_name(in->op));
    if (rule->map) rule->map(g, i, &m);
    p->partial_reduce[i] = m.partial_reduce;
  }
  return NULL;
}

/* The layout computing instruction i on its operands' shards gives, and
 * its partial groups: the operands' forward candidates taken by the tiles
 * of the operand's own sharding (a replicated operand is sliced locally
 * for free), most first, ties by operand order; the first is kept and each
 * later one merged in where its tiles and partial groups agree
 * (tt_sharding_merge_partial), else that operand is resharded by the
 * partitioner to agree. */
static tt_sharding_t *tt_prop_local(tt_prop_t *p, int32_t i, int64_t *pcount) {
  const tt_instr_t *in = &p->g->instrs[i];
  tt_sharding_t *local = NULL;
  *pcount = 1;
  uint8_t *taken = calloc((size_t)in->num_operands, 1);
  if (!taken) {
    p->oom = 1;
    return NULL;
  }
  for (int32_t round = 0; round < in->num_operands; ++round) {
    int32_t pick = -1;
    int64_t pick_tiles = 0;
    for (int32_t k = 0; k < in->num_operands; ++k) {
      if (taken[k]) continue;
      int32_t o = in->operands[k];
      int64_t t = tt_sharding_tiles(p->cur[o], p->g->instrs[o].shape.rank);
      if (pick < 0 || t > pick_tiles) {
        pick = k;
        pick_tiles = t;
      }
    }
    taken[pick] = 1;
    int64_t c_count = 1;
    tt_sharding_t *c = tt_prop_forward(p, i, pick, &c_count);
    if (!c) break;
    if (!local) {
      local = c;
      *pcount = c_count;
      continue;
    }
    int64_t m_count = 1;
    tt_sharding_t *m = tt_sharding_merge_partial(local, *pcount, c, c_count, in->shape.rank,
                                                 &m_count);
    free(c);
    if (m) {
      free(local);
      local = m;
      *pcount = m_count;
    }
  }
  free(taken);
  return local;
}

static size_t tt_prop_round(size_t b) { return (b + 7) & ~(size_t)7; }

static size_t tt_prop_bytes(const tt_sharding_t *s) {
  return s ? tt_prop_round(tt_sharding_size(s->kind == TT_SHARDING_TILED ? s->num_devices : 0))
           : 0;
}

/* Packs the final shardings and the local layouts into one block. */
static tt_status_t tt_prop_record(tt_prop_t *p) {
  int32_t n = p->n;
  tt_sharding_t **canon = calloc((size_t)n + 1, sizeof(*canon));
  tt_sharding_t **local = calloc((size_t)n + 1, sizeof(*local));
  int64_t *pcount = calloc((size_t)n + 1, sizeof(int64_t));
  tt_status_t st = NULL;
  size_t bytes = tt_prop_round(sizeof(tt_sharding_prop_t) * ((size_t)n + 1));
  if (!canon || !local || !pcount) goto oom;
  for (int32_t i = 0; i < n; ++i) {
    const tt_instr_t *in = &p->g->instrs[i];
    canon[i] = tt_sharding_canonical(p->cur[i], in->shape.rank);
    if (!canon[i]) goto oom;
    bytes += tt_prop_bytes(canon[i]);
    pcount[i] = 1;
    if (in->num_operands == 0 || tt_prop_is_fixed_rule(in)) continue;
    local[i] = tt_prop_local(p, i, &pcount[i]);
    if (p->oom) goto oom;
    bytes += tt_prop_bytes(local[i]);
  }
  uint8_t *block = malloc(bytes);
  if (!block) goto oom;
  tt_sharding_prop_t *rec = (tt_sharding_prop_t *)block;
  uint8_t *cursor = block + tt_prop_round(sizeof(tt_sharding_prop_t) * ((size_t)n + 1));
  for (int32_t i = 0; i < n; ++i) {
    tt_sharding_t *copies[2] = {canon[i], local[i]};
    const tt_sharding_t *placed[2] = {NULL, NULL};
    for (int j = 0; j < 2; ++j) {
      if (!copies[j]) continue;
      size_t b = tt_prop_bytes(copies[j]);
      memcpy(cursor, copies[j], tt_sharding_size(copies[j]->kind == TT_SHARDING_TILED
                                                     ? copies[j]->num_devices
                                                     : 0));
      placed[j] = (const tt_sharding_t *)cursor;
      cursor += b;
    }
    rec[i].sharding = placed[0];
    rec[i].local = placed[1];
    rec[i].partial_count = pcount[i];
    rec[i].partial_reduce = pcount[i] > 1 ? p->partial_reduce[i] : -1;
    rec[i].origin = p->origin[i];
  }
  free(p->g->sharding_prop);
  p->g->sharding_prop = rec;
  goto done;
oom:
  st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding propagation)");
done:
  for (int32_t i = 0; canon && local && i < n; ++i) {
    free(canon[i]);
    free(local[i]);
  }
  free(canon);
  free(local);
  free(pcount);
  return st;
}

tt_status_t tt_pass_propagate_sharding(tt_graph_t *g) {
  tt_prop_t p = {0};
  p.g = g;
  p.n = g->num_instrs;
  size_t n1 = (size_t)p.n + 1;
  p.cur = calloc(n1, sizeof(*p.cur));
  p.fixed = calloc(n1, 1);
  p.origin = calloc(n1, 1);
  int32_t max_ops = 1, max_users = 1;
  tt_sharding_t **scratch = NULL;
  tt_status_t st = NULL;
  if (!p.cur || !p.fixed || !p.origin) goto oom;
  st = tt_prop_setup(&p);
  if (st) goto done;
  if (!p.rows || !p.users || !p.partial_reduce) goto oom;
  for (int32_t i = 0; i < p.n; ++i) {
    if (g->instrs[i].num_operands > max_ops) max_ops = g->instrs[i].num_operands;
    if (p.user0[i + 1] - p.user0[i] > max_users) max_users = p.user0[i + 1] - p.user0[i];
  }
  scratch = calloc((size_t)(max_ops > max_users ? max_ops : max_users), sizeof(*scratch));
  if (!scratch) goto oom;
  int32_t devices = 0;
  for (int32_t i = 0; i < p.n; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    p.origin[i] = TT_SHARDING_FROM_DEFAULT;
    if (!in->sharding) continue;
    tt_status_t bad = tt_sharding_validate(in->sharding, &in->shape);
    if (bad) {
      st = tt_status_make(TT_INVALID_ARGUMENT, "sharding propagation: instruction %d (%s): %s",
                          (int)i, tt_op_name(in->op), tt_status_message(bad));
      tt_status_free(bad);
      goto done;
    }
    p.cur[i] = tt_sharding_full(in->sharding, in->shape.rank);
    if (!p.cur[i]) goto oom;
    p.fixed[i] = 1;
    p.origin[i] = TT_SHARDING_FROM_USER;
  }
  /* Each sweep pair changes some instruction or ends the loop, and an
   * instruction changes at most 1 + log2(TT_SHARDING_MAX_DEVICES) = 13
   * times (the header comment): the bound is never reached. */
  for (int64_t sweep = 0; sweep <= 13 * (int64_t)p.n; ++sweep) {
    int changed = tt_prop_forward_sweep(&p, scratch);
    changed |= tt_prop_backward_sweep(&p, scratch);
    if (p.oom) goto oom;
    if (!changed) break;
  }
  for (int32_t i = 0; i < p.n; ++i)
    if (p.cur[i] && p.cur[i]->num_devices > devices) devices = p.cur[i]->num_devices;
  for (int32_t i = 0; i < p.n; ++i) {
    if (p.cur[i]) continue;
    tt_sharding_t rep = {TT_SHARDING_REPLICATED, 0, {0}, 0, devices};
    p.cur[i] = tt_sharding_full(&rep, g->instrs[i].shape.rank);
    if (!p.cur[i]) goto oom;
    p.origin[i] = TT_SHARDING_FROM_DEFAULT;
  }
  st = tt_prop_record(&p);
  goto done;
oom:
  st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding propagation)");
done:
  for (int32_t i = 0; p.cur && i < p.n; ++i) free(p.cur[i]);
  free(p.cur);
  free(p.fixed);
  free(p.origin);
  free(p.row0);
  free(p.rows);
  free(p.partial_reduce);
  free(p.user0);
  free(p.users);
  free(scratch);
  return st;
}
