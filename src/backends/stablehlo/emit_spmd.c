/* StableHLO for SPMD programs: sharding annotations (argument/result
 * attributes, @Sharding custom calls, the partition count) and the
 * collective ops (all_reduce, all_gather, reduce_scatter, all_to_all,
 * collective_permute). Replica groups become
 * a `replica_groups` dense attribute (empty: one group of everyone); a
 * channel id > 0 becomes a `channel_handle` (type 1, device to device) and
 * marks the ids as global device ids (`use_global_device_ids`), the form
 * SPMD programs use; without a channel the ids are replica ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/stablehlo/emit_internal.h"

/* The collectives' attribute structs in one (fields an op lacks are 0). */
typedef struct {
  int64_t reduce;               /* all_reduce, reduce_scatter */
  int64_t dim;                  /* all_gather, reduce_scatter */
  int64_t split_dim, concat_dim, split_count; /* all_to_all */
  int64_t channel_id, group_size;
  tt_attr_list_t groups;
} tt_shlo_coll_t;

#define TT_SHLO_COLL_COPY(out, a)            \
  do {                                       \
    (out)->channel_id = (a).channel_id;      \
    (out)->group_size = (a).group_size;      \
    (out)->groups = (a).groups;              \
  } while (0)

static void tt_shlo_coll_decode(const tt_instr_t *in, tt_shlo_coll_t *out) {
  memset(out, 0, sizeof(*out));
  switch (in->op) {
    case TT_OP_ALL_REDUCE: {
      tt_all_reduce_attrs_t a;
      TT_ATTRS(in, &a);
      out->reduce = a.reduce;
      TT_SHLO_COLL_COPY(out, a);
      break;
    }
    case TT_OP_ALL_GATHER: {
      tt_all_gather_attrs_t a;
      TT_ATTRS(in, &a);
      out->dim = a.dim;
      TT_SHLO_COLL_COPY(out, a);
      break;
    }
    case TT_OP_REDUCE_SCATTER: {
      tt_reduce_scatter_attrs_t a;
      TT_ATTRS(in, &a);
      out->reduce = a.reduce;
      out->dim = a.dim;
      TT_SHLO_COLL_COPY(out, a);
      break;
    }
    case TT_OP_ALL_TO_ALL: {
      tt_all_to_all_attrs_t a;
      TT_ATTRS(in, &a);
      out->split_dim = a.split_dim;
      out->concat_dim = a.concat_dim;
      out->split_count = a.split_count;
      TT_SHLO_COLL_COPY(out, a);
      break;
    }
    case TT_OP_COLLECTIVE_PERMUTE: {
      tt_collective_permute_attrs_t a;
      TT_ATTRS(in, &a);
      TT_SHLO_COLL_COPY(out, a);
      break;
    }
    default:
      break;
  }
}

static const char *tt_shlo_coll_body(tt_shlo_t *c, int64_t code, tt_dtype_t dt) {
  int is_bool = dt == TT_BOOL;
  switch ((tt_reduce_op_t)code) {
    case TT_RED_SUM: return is_bool ? "or" : "add";
    case TT_RED_PROD: return is_bool ? "and" : "multiply";
    case TT_RED_MAX: return is_bool ? "or" : "maximum";
    case TT_RED_MIN: return is_bool ? "and" : "minimum";
    case TT_RED_ANY: return "or";
    case TT_RED_ALL: return "and";
    default: break;
  }
  tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: collective reduce code %lld",
                                 (long long)code));
  return NULL;
}

/* ", replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>" (name may
 * be source_target_pairs) and the channel attributes. */
static void tt_shlo_coll_groups(tt_shlo_t *c, tt_shlo_attr_t *a, const tt_instr_t *in,
                                const tt_shlo_coll_t *co, const char *name) {
  const int64_t *ids = co->groups.v;
  int32_t n = co->groups.n;
  int64_t size = co->group_size;
  if (a->n) tt_shlo_attr(a, ", ");
  if (n == 0 && in->op == TT_OP_ALL_TO_ALL) {
    /* XLA's all_to_all divides by the group size: "everyone" is written
     * out as one group of split_count replicas (an empty list crashed XLA's
     * CPU plugin with a division by zero). */
    tt_shlo_attr(a, "%s = dense<[[", name);
    int64_t split_count = co->split_count;
    for (int64_t i = 0; i < split_count; ++i) tt_shlo_attr(a, i ? ", %lld" : "%lld", (long long)i);
    tt_shlo_attr(a, "]]> : tensor<1x%lldxi64>", (long long)split_count);
  } else if (n == 0) {
    tt_shlo_attr(a, "%s = dense<> : tensor<0x%lldxi64>", name,
                 (long long)(in->op == TT_OP_COLLECTIVE_PERMUTE ? 2 : 0));
  } else {
    tt_shlo_attr(a, "%s = dense<[", name);
    for (int32_t i = 0; i < n; ++i)
      tt_shlo_attr(a, "%s%s%lld%s", i % size == 0 ? (i ? ", [" : "[") : ", ", "",
                   (long long)ids[i], i % size == size - 1 ? "]" : "");
    tt_shlo_attr(a, "]> : tensor<%lldx%lldxi64>", (long long)(n / size), (long long)size);
  }
  /* A channel id > 0 in the IR marks an SPMD collective; handles are
   * numbered here, 1, 2, ... in module order, so a graph's hash does not
   * depend on how many collectives were recorded before it. */
  if (co->channel_id > 0) {
    tt_shlo_attr(a, ", channel_handle = #stablehlo.channel_handle<handle = %lld, type = 1>",
                 (long long)++c->channels);
    if (in->op != TT_OP_COLLECTIVE_PERMUTE) tt_shlo_attr(a, ", use_global_device_ids");
  }
}

static tt_shv_t tt_shlo_lower_collective(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_shlo_coll_t co;
  tt_shlo_coll_decode(in, &co);
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  tt_shlo_attr_t a = {0};
  switch (in->op) {
    case TT_OP_ALL_REDUCE:
    case TT_OP_REDUCE_SCATTER: {
      const char *body = tt_shlo_coll_body(c, co.reduce, in->dtype);
      if (!body) return -1;
      int scatter = in->op == TT_OP_REDUCE_SCATTER;
      int32_t ssa = tt_shlo_op_begin(c, scatter ? "stablehlo.reduce_scatter"
                                                : "stablehlo.all_reduce", 1, 1, &x);
      tt_shlo_region_binary(c, 1, body, in->dtype);
      if (scatter) tt_shlo_attr(&a, "scatter_dimension = %lld : i64", (long long)co.dim);
      tt_shlo_coll_groups(c, &a, in, &co, "replica_groups");
      return tt_shlo_op_end(c, ssa, a.s, 1, &x, 1, &in->dtype, &in->shape);
    }
    case TT_OP_ALL_GATHER:
      tt_shlo_attr(&a, "all_gather_dim = %lld : i64", (long long)co.dim);
      tt_shlo_coll_groups(c, &a, in, &co, "replica_groups");
      return tt_shlo_op(c, "stablehlo.all_gather", 1, &x, a.s, in->dtype, &in->shape);
    case TT_OP_ALL_TO_ALL:
      tt_shlo_attr(&a, "split_dimension = %lld : i64, concat_dimension = %lld : i64, "
                   "split_count = %lld : i64", (long long)co.split_dim, (long long)co.concat_dim,
                   (long long)co.split_count);
      tt_shlo_coll_groups(c, &a, in, &co, "replica_groups");
      return tt_shlo_op(c, "stablehlo.all_to_all", 1, &x, a.s, in->dtype, &in->shape);
    case TT_OP_COLLECTIVE_PERMUTE:
      tt_shlo_coll_groups(c, &a, in, &co, "source_target_pairs");
      return tt_shlo_op(c, "stablehlo.collective_permute", 1, &x, a.s, in->dtype, &in->shape);
    default:
      break;
  }
  tt_shlo_fail(c, tt_status_make(TT_INTERNAL, "stablehlo: %s is not a collective",
                                 tt_op_name(in->op)));
  return -1;
}

int32_t tt_shlo_collective_replicas(const tt_graph_t *g) {
  int64_t most = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    /* With a channel the ids are global device ids (SPMD), not replicas. */
    if (!tt_op_is_collective(in->op)) continue;
    tt_shlo_coll_t co;
    tt_shlo_coll_decode(in, &co);
    if (co.channel_id > 0) continue;
    for (int32_t k = 0; k < co.groups.n; ++k)
      if (co.groups.v[k] + 1 > most) most = co.groups.v[k] + 1;
  }
  return most > 1 ? (int32_t)most : 1;
}

/* ---- sharding annotations ---- */

/* Writes ` {mhlo.sharding = "..."}` for an argument or result: sh, or
 * replicated for an unannotated value of a partitioned program (the
 * partitioner then gives every device the whole value). */
void tt_shlo_sharding_attr(tt_shlo_t *c, const tt_sharding_t *sh) {
  char *text = sh ? tt_sharding_to_text(sh) : NULL;
  if (sh && !text) {
    tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
    return;
  }
  tt_shlo_printf(c, " {mhlo.sharding = \"%s\"}", text ? text : "{replicated}");
  free(text);
}

/* custom_call @target(v) {mhlo.sharding = "<sh's text>"} with result shape
 * (NULL: v's). */
static tt_shv_t tt_shlo_sharded_call(tt_shlo_t *c, tt_shv_t v, const char *target,
                                     const tt_sharding_t *sh, const tt_shape_t *shape) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  char *text = tt_sharding_to_text(sh);
  size_t n = text ? strlen(text) + strlen(target) + 96 : 0;
  char *attrs = text ? malloc(n) : NULL;
  if (!attrs) {
    free(text);
    tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
    return -1;
  }
  snprintf(attrs, n, "call_target_name = \"%s\", mhlo.sharding = \"%s\"", target, text);
  free(text);
  tt_dtype_t dt = tt_shlo_dtype(c, v);
  tt_shape_t s = shape ? *shape : *tt_shlo_shape(c, v);
  tt_shv_t r = tt_shlo_op(c, "stablehlo.custom_call", 1, &v, attrs, dt, &s);
  free(attrs);
  return r;
}

void tt_shlo_carry(tt_shlo_t *c, tt_shv_t v, const tt_sharding_t *sh) {
  if (v < 0 || c->err) return;
  if (c->num_owned == c->cap_owned) {
    int32_t ncap = c->cap_owned ? c->cap_owned * 2 : 8;
    tt_sharding_t **n = realloc(c->owned, sizeof(*n) * (size_t)ncap);
    if (!n) {
      tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
      return;
    }
    c->owned = n;
    c->cap_owned = ncap;
  }
  tt_sharding_t *copy = tt_sharding_copy(sh);
  if (!copy) {
    tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
    return;
  }
  c->owned[c->num_owned++] = copy;
  c->vals[v].sharding = copy;
}

tt_shv_t tt_shlo_sharding_call(tt_shlo_t *c, tt_shv_t v, const tt_sharding_t *sh) {
  tt_shv_t r = tt_shlo_sharded_call(c, v, "Sharding", sh, NULL);
  if (r >= 0) c->vals[r].sharding = sh; /* sh outlives the emission (the graph's) */
  return r;
}

/* Whether a value carrying `has` is annotated with `want`: the same
 * sharding, or both whole replication (a tiling into one tile is how a
 * one-device mesh replicates; HloSharding prints it {replicated}). */
int tt_shlo_carries(const tt_sharding_t *has, const tt_sharding_t *want) {
  if (!has) return 0;
  if (tt_sharding_equal(has, want)) return 1;
  for (int k = 0; k < 2; ++k) {
    const tt_sharding_t *s = k ? want : has;
    if (s->kind == TT_SHARDING_REPLICATED) continue;
    if (s->kind != TT_SHARDING_TILED) return 0;
    int32_t data_dims = s->num_tile_dims - (s->last_tile_dim_replicate ? 1 : 0);
    for (int32_t d = 0; d < data_dims; ++d)
      if (s->tile_dims[d] != 1) return 0;
  }
  return 1;
}

static tt_shv_t tt_shlo_lower_spmd_manual(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  union {
    tt_sharding_t s;
    uint8_t room[sizeof(tt_sharding_t) + sizeof(int32_t) * TT_MAX_IATTRS];
  } tiled;
  tt_shape_t out;
  tt_status_t st = tt_spmd_manual_check(in->op, in->iattrs, in->num_iattrs,
                                        tt_shlo_shape(c, x), &tiled.s, &out);
  if (st) {
    tt_shlo_fail(c, st);
    return -1;
  }
  tt_sharding_t manual = {TT_SHARDING_MANUAL, 0, {0}, 0, tiled.s.num_devices};
  const tt_sharding_t *has = tt_shlo_info(c, x)->sharding;
  if (in->op == TT_OP_SPMD_FULL_TO_SHARD) {
    /* The operand's sharding, for the partitioner: an argument or an
     * annotated value that already carries it says it (as PyTorch/XLA
     * writes SPMDFullToShardShape straight on a sharded parameter); else
     * a @Sharding call first. */
    tt_shv_t v = tt_shlo_carries(has, &tiled.s)
                     ? x
                     : tt_shlo_sharded_call(c, x, "Sharding", &tiled.s, NULL);
    tt_shv_t r = tt_shlo_sharded_call(c, v, "SPMDFullToShardShape", &manual, &out);
    tt_shlo_carry(c, r, &manual);
    return r;
  }
  /* Likewise the {manual} annotation before SPMDShardToFullShape (what
   * PyTorch/XLA's _mark_manual_sharding writes). */
  tt_shv_t v = tt_shlo_carries(has, &manual)
                   ? x
                   : tt_shlo_sharded_call(c, x, "Sharding", &manual, NULL);
  tt_shv_t r = tt_shlo_sharded_call(c, v, "SPMDShardToFullShape", &tiled.s, &out);
  tt_shlo_carry(c, r, &tiled.s);
  return r;
}

tt_status_t tt_shlo_spmd_scan(const tt_graph_t *g, tt_shlo_spmd_t *out) {
  memset(out, 0, sizeof(*out));
  out->num_partitions = 1;
  out->num_replicas = 1;
  int32_t parts = 0, first = -1;
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_sharding_t *sh = g->instrs[i].sharding;
    if (!sh) continue;
    out->sharded = 1;
    if (sh->num_devices <= 0) continue;
    if (parts && sh->num_devices != parts)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "stablehlo: instruction %%%d is sharded over %d devices but "
                            "instruction %%%d over %d; one program has one partition count",
                            (int)i, (int)sh->num_devices, (int)first, (int)parts);
    if (!parts) first = i;
    parts = sh->num_devices;
  }
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (!tt_op_is_spmd_manual(in->op)) continue;
    /* The spec's device count follows its tile dims (op_attrs.h). */
    tt_spmd_manual_attrs_t ma;
    TT_ATTRS(in, &ma);
    const tt_attr_list_t *spec = &ma.spec;
    if (spec->n < 3 || spec->v[0] < 1 || 2 + spec->v[0] >= spec->n) continue;
    int32_t n = (int32_t)spec->v[2 + spec->v[0]];
    out->sharded = 1;
    if (parts && n != parts)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "stablehlo: instruction %%%d is a manual region over %d devices "
                            "but instruction %%%d is sharded over %d", (int)i, (int)n,
                            (int)first, (int)parts);
    if (!parts) first = i;
    parts = n;
  }
  if (parts) out->num_partitions = parts;
  out->num_replicas = tt_shlo_collective_replicas(g);
  return NULL;
}

/* ---- registrations ---- */

const tt_shlo_row_t tt_shlo_rows_spmd[] = {
    {TT_OP_ALL_REDUCE, tt_shlo_lower_collective,
     "all_reduce with an add/multiply/maximum/minimum/or/and region"},
    {TT_OP_ALL_GATHER, tt_shlo_lower_collective, "all_gather"},
    {TT_OP_REDUCE_SCATTER, tt_shlo_lower_collective, "reduce_scatter with a reduction region"},
    {TT_OP_ALL_TO_ALL, tt_shlo_lower_collective, "all_to_all"},
    {TT_OP_COLLECTIVE_PERMUTE, tt_shlo_lower_collective,
     "collective_permute (source_target_pairs)"},
    {TT_OP_SPMD_FULL_TO_SHARD, tt_shlo_lower_spmd_manual,
     "custom_call @Sharding + @SPMDFullToShardShape ({manual})"},
    {TT_OP_SPMD_SHARD_TO_FULL, tt_shlo_lower_spmd_manual,
     "custom_call @Sharding ({manual}) + @SPMDShardToFullShape"},
    TT_SHLO_ROWS_END,
};
