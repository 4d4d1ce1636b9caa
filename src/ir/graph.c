/* Linearising the lazy DAG into an instruction list, with its structural
 * hash. The hash and key cover op, dtype, shape, attributes and operand
 * wiring and sharding annotations (which the instructions of the cut graph
 * do not carry: its executions are unpartitioned); parameters and scalars
 * enter only through their dtype and shape,
 * so the same program over new values hits the same cache entry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/ir.h"

/* One monotonically increasing epoch marks nodes visited by a build; the
 * caller (the lazy core) serialises builds under its lock. */
static uint64_t tt_graph_epoch_ = 0;

tt_status_t tt_graph_build(tt_node_t *const *roots, int32_t num_roots,
                           tt_graph_t **out_graph, tt_node_t ***out_inputs) {
  *out_graph = NULL;
  if (out_inputs) *out_inputs = NULL;
  uint64_t epoch = ++tt_graph_epoch_;
  /* Iterative post-order DFS. */
  size_t cap = 256, count = 0, scap = 256, top = 0;
  tt_node_t **order = malloc(cap * sizeof(*order));
  struct frame { tt_node_t *n; int32_t next; } *stack = malloc(scap * sizeof(*stack));
  tt_status_t st = NULL;
  if (!order || !stack) goto oom;
  for (int32_t r = 0; r < num_roots; ++r) {
    tt_node_t *root = roots[r];
    if (root->visit_epoch == epoch) continue;
    root->visit_epoch = epoch;
    root->visit_index = -1;
    stack[top].n = root;
    stack[top].next = 0;
    ++top;
    while (top) {
      struct frame *f = &stack[top - 1];
      if (f->next < f->n->num_operands) {
        tt_node_t *c = f->n->operands[f->next++];
        if (c->visit_epoch == epoch) continue;
        c->visit_epoch = epoch;
        c->visit_index = -1;
        if (top == scap) {
          scap *= 2;
          void *ns = realloc(stack, scap * sizeof(*stack));
          if (!ns) goto oom;
          stack = ns;
        }
        stack[top].n = c;
        stack[top].next = 0;
        ++top;
      } else {
        if (count == cap) {
          cap *= 2;
          void *no = realloc(order, cap * sizeof(*order));
          if (!no) goto oom;
          order = no;
        }
        f->n->visit_index = (int32_t)count;
        order[count++] = f->n;
        --top;
      }
    }
  }
  free(stack);
  stack = NULL;

  tt_graph_t *g = calloc(1, sizeof(*g));
  if (!g) goto oom;
  size_t total_operands = 0;
  for (size_t i = 0; i < count; ++i) total_operands += (size_t)order[i]->num_operands;
  /* One arena holds instructions, operand lists and index arrays. */
  size_t bytes = count * sizeof(tt_instr_t) + total_operands * sizeof(int32_t) +
                 count * sizeof(int32_t) + (size_t)num_roots * sizeof(int32_t) + 64;
  g->arena = calloc(1, bytes);
  if (!g->arena) {
    free(g);
    goto oom;
  }
  uint8_t *cursor = g->arena;
  g->instrs = (tt_instr_t *)cursor;
  cursor += count * sizeof(tt_instr_t);
  int32_t *operand_pool = (int32_t *)cursor;
  cursor += total_operands * sizeof(int32_t);
  g->input_instr = (int32_t *)cursor;
  cursor += count * sizeof(int32_t);
  g->output_instr = (int32_t *)cursor;
  g->num_instrs = (int32_t)count;
  tt_node_t **inputs = out_inputs ? malloc((count ? count : 1) * sizeof(*inputs)) : NULL;
  if (out_inputs && !inputs) {
    tt_graph_destroy(g);
    goto oom;
  }
  tt_strbuf_t key = {0};
  for (size_t i = 0; i < count; ++i) {
    tt_node_t *n = order[i];
    tt_instr_t *in = &g->instrs[i];
    in->op = n->op;
    in->dtype = n->dtype;
    in->shape = n->shape;
    in->num_operands = n->num_operands;
    in->operands = operand_pool;
    operand_pool += n->num_operands;
    for (int32_t k = 0; k < n->num_operands; ++k) {
      in->operands[k] = n->operands[k]->visit_index;
      g->instrs[in->operands[k]].last_use = (int32_t)i;
    }
    in->num_iattrs = n->num_iattrs;
    memcpy(in->iattrs, n->iattrs, sizeof(in->iattrs));
    memcpy(in->fattrs, n->fattrs, sizeof(in->fattrs));
    in->input_index = -1;
    in->last_use = (int32_t)i;
    if (n->op == TT_OP_PARAM || n->op == TT_OP_SCALAR) {
      in->input_index = g->num_inputs;
      g->input_instr[g->num_inputs] = (int32_t)i;
      if (inputs) inputs[g->num_inputs] = n;
      ++g->num_inputs;
    }
    int32_t head[4] = {(int32_t)n->op, (int32_t)n->dtype, n->shape.rank, n->num_operands};
    tt_strbuf_put(&key, head, sizeof(head));
    tt_strbuf_put(&key, n->shape.dims, sizeof(int64_t) * (size_t)n->shape.rank);
    tt_strbuf_put(&key, in->operands, sizeof(int32_t) * (size_t)n->num_operands);
    tt_strbuf_put(&key, &n->num_iattrs, sizeof(n->num_iattrs));
    tt_strbuf_put(&key, n->iattrs, sizeof(int64_t) * (size_t)n->num_iattrs);
    tt_strbuf_put(&key, n->fattrs, sizeof(n->fattrs));
    if (n->sharding) {
      /* A negative marker cannot be read as the next node's op. */
      const tt_sharding_t *sh = n->sharding;
      int32_t mark[5] = {-0x5348, (int32_t)sh->kind, sh->num_tile_dims,
                         sh->last_tile_dim_replicate, sh->num_devices};
      tt_strbuf_put(&key, mark, sizeof(mark));
      tt_strbuf_put(&key, sh->tile_dims, sizeof(int64_t) * (size_t)sh->num_tile_dims);
      if (sh->kind == TT_SHARDING_TILED)
        tt_strbuf_put(&key, sh->devices, sizeof(int32_t) * (size_t)sh->num_devices);
    }
  }
  g->num_outputs = num_roots;
  for (int32_t r = 0; r < num_roots; ++r) {
    g->output_instr[r] = roots[r]->visit_index;
    /* Outputs live to the end of the graph. */
    g->instrs[g->output_instr[r]].last_use = g->num_instrs;
    tt_strbuf_put(&key, &g->output_instr[r], sizeof(int32_t));
  }
  if (key.failed) {
    tt_strbuf_release(&key);
    free(inputs);
    tt_graph_destroy(g);
    goto oom;
  }
  g->key = (uint8_t *)key.data;
  g->key_size = key.len;
  g->hash = tt_hash_key(key.data, key.len);
  free(order);
  *out_graph = g;
  if (out_inputs) *out_inputs = inputs;
  return NULL;
oom:
  st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory building a graph");
  free(order);
  free(stack);
  return st;
}

void tt_graph_destroy(tt_graph_t *graph) {
  if (!graph) return;
  free(graph->key);
  free(graph->arena);
  free(graph->pair);
  free(graph->sharding_prop);
  free(graph);
}

static void tt_append_instr(tt_strbuf_t *b, const tt_graph_t *g, int32_t i) {
  const tt_instr_t *in = &g->instrs[i];
  tt_strbuf_printf(b, "%s[", tt_dtype_name(in->dtype));
  for (int d = 0; d < in->shape.rank; ++d)
    tt_strbuf_printf(b, d ? ",%lld" : "%lld", (long long)in->shape.dims[d]);
  tt_strbuf_printf(b, "] %s(", tt_op_name(in->op));
  for (int k = 0; k < in->num_operands; ++k)
    tt_strbuf_printf(b, k ? ", %%%d" : "%%%d", in->operands[k]);
  tt_strbuf_printf(b, ")");
  if (in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR)
    tt_strbuf_printf(b, ", input=%d", in->input_index);
  if (in->num_iattrs) {
    tt_strbuf_printf(b, ", i={");
    for (int k = 0; k < in->num_iattrs; ++k)
      tt_strbuf_printf(b, k ? ",%lld" : "%lld", (long long)in->iattrs[k]);
    tt_strbuf_printf(b, "}");
  }
  if (in->fattrs[0] != 0 || in->fattrs[1] != 0)
    tt_strbuf_printf(b, ", f={%g,%g}", in->fattrs[0], in->fattrs[1]);
}

char *tt_graph_to_text(const tt_graph_t *g) {
  tt_strbuf_t b = {0};
  tt_strbuf_printf(&b, "IR {  # hash=%016llx\n", (unsigned long long)g->hash);
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    tt_strbuf_printf(&b, "  %%%d = ", i);
    tt_append_instr(&b, g, i);
    for (int32_t r = 0; r < g->num_outputs; ++r)
      if (g->output_instr[r] == i) tt_strbuf_printf(&b, ", ROOT=%d", r);
    tt_strbuf_printf(&b, "\n");
  }
  tt_strbuf_printf(&b, "}\n");
  return tt_strbuf_take(&b);
}

char *tt_graph_to_dot(const tt_graph_t *g) {
  tt_strbuf_t b = {0};
  tt_strbuf_printf(&b, "digraph G {\n");
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    tt_strbuf_printf(&b, "  node%d [label=\"%%%d = ", i, i);
    tt_append_instr(&b, g, i);
    tt_strbuf_printf(&b, "\"];\n");
    for (int k = 0; k < g->instrs[i].num_operands; ++k)
      tt_strbuf_printf(&b, "  node%d -> node%d;\n", g->instrs[i].operands[k], i);
  }
  tt_strbuf_printf(&b, "}\n");
  return tt_strbuf_take(&b);
}
