/* The debug service's graph tools: deep copies, structural diffs (the
 * "Recompilation Cause" lines) and graph text annotated with XLA_IR_DEBUG
 * locations. Pure functions of their arguments; no configuration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "services/debug_text.h"
#include "torchtpu/debug.h"

/* ---- graph clone and diff ---- */

tt_graph_t *tt_debug_graph_clone(const tt_graph_t *g) {
  size_t total_operands = 0;
  for (int32_t i = 0; i < g->num_instrs; ++i) total_operands += (size_t)g->instrs[i].num_operands;
  size_t bytes = sizeof(tt_instr_t) * (size_t)g->num_instrs + sizeof(int32_t) * total_operands +
                 sizeof(int32_t) * ((size_t)g->num_inputs + (size_t)g->num_outputs) + 16;
  tt_graph_t *c = calloc(1, sizeof(*c));
  uint8_t *arena = calloc(1, bytes);
  uint8_t *key = g->key_size ? malloc(g->key_size) : NULL;
  if (!c || !arena || (g->key_size && !key)) {
    free(c);
    free(arena);
    free(key);
    return NULL;
  }
  *c = *g;
  c->pair = NULL; /* the clone is for diffs: no pairs */
  c->arena = arena;
  c->instrs = (tt_instr_t *)arena;
  memcpy(c->instrs, g->instrs, sizeof(tt_instr_t) * (size_t)g->num_instrs);
  int32_t *pool = (int32_t *)(arena + sizeof(tt_instr_t) * (size_t)g->num_instrs);
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    int32_t k = g->instrs[i].num_operands;
    memcpy(pool, g->instrs[i].operands, sizeof(int32_t) * (size_t)k);
    c->instrs[i].operands = pool;
    pool += k;
  }
  c->input_instr = pool;
  memcpy(pool, g->input_instr, sizeof(int32_t) * (size_t)g->num_inputs);
  pool += g->num_inputs;
  c->output_instr = pool;
  memcpy(pool, g->output_instr, sizeof(int32_t) * (size_t)g->num_outputs);
  if (key) memcpy(key, g->key, g->key_size);
  c->key = key;
  return c;
}

typedef struct tt_diff_s {
  tt_strbuf_t text;
  int32_t items, max_items, extra;
} tt_diff_t;

static void tt_diff_add(tt_diff_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tt_diff_add(tt_diff_t *d, const char *fmt, ...) {
  if (d->items >= d->max_items) {
    d->extra++;
    return;
  }
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  tt_strbuf_printf(&d->text, "%s\n", line);
  d->items++;
}

static const char *tt_input_kind(tt_op_t op) {
  return op == TT_OP_SCALAR ? "runtime scalar" : "device data";
}

/* dtype/shape differences of two values, named what (e.g. "input 1"). */
static void tt_diff_value(tt_diff_t *d, const char *what, const tt_instr_t *a, const tt_instr_t *b) {
  char sa[256], sb[256];
  if (a->dtype != b->dtype)
    tt_diff_add(d, "%s: dtype %s -> %s", what, tt_dtype_name(a->dtype), tt_dtype_name(b->dtype));
  if (!tt_shape_equal(&a->shape, &b->shape)) {
    tt_shape_text(&a->shape, sa, sizeof(sa));
    tt_shape_text(&b->shape, sb, sizeof(sb));
    tt_diff_add(d, "%s: shape %s -> %s", what, sa, sb);
  }
}

static void tt_attrs_text(const tt_instr_t *in, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int32_t k = 0; k < in->num_iattrs && len < n; ++k)
    len += (size_t)snprintf(buf + len, n - len, k ? ", %lld" : "%lld", (long long)in->iattrs[k]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

static void tt_operands_text(const tt_instr_t *in, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "(");
  for (int32_t k = 0; k < in->num_operands && len < n; ++k)
    len += (size_t)snprintf(buf + len, n - len, k ? ", %%%d" : "%%%d", in->operands[k]);
  if (len < n) snprintf(buf + len, n - len, ")");
}

/* 1 if a and b differ in op, attributes or wiring (reported). */
static int tt_diff_instr(tt_diff_t *d, int32_t i, const tt_instr_t *a, const tt_instr_t *b) {
  char sa[512], sb[512];
  if (a->op != b->op) {
    tt_diff_add(d, "instruction %%%d: op %s -> %s", i, tt_op_name(a->op), tt_op_name(b->op));
    return 1;
  }
  int found = 0;
  const char *op = tt_op_name(a->op);
  if (a->num_iattrs != b->num_iattrs) {
    tt_attrs_text(a, sa, sizeof(sa));
    tt_attrs_text(b, sb, sizeof(sb));
    tt_diff_add(d, "instruction %%%d (%s): attributes %s -> %s", i, op, sa, sb);
    found = 1;
  } else {
    for (int32_t k = 0; k < a->num_iattrs; ++k)
      if (a->iattrs[k] != b->iattrs[k]) {
        tt_diff_add(d, "instruction %%%d (%s): attribute i[%d] %lld -> %lld", i, op, k,
                    (long long)a->iattrs[k], (long long)b->iattrs[k]);
        found = 1;
      }
  }
  for (int32_t k = 0; k < TT_MAX_FATTRS; ++k)
    if (memcmp(&a->fattrs[k], &b->fattrs[k], sizeof(double)) != 0) {
      tt_diff_add(d, "instruction %%%d (%s): attribute f[%d] %g -> %g", i, op, k, a->fattrs[k],
                  b->fattrs[k]);
      found = 1;
    }
  int wiring = a->num_operands != b->num_operands;
  for (int32_t k = 0; !wiring && k < a->num_operands; ++k)
    wiring = a->operands[k] != b->operands[k];
  if (wiring) {
    tt_operands_text(a, sa, sizeof(sa));
    tt_operands_text(b, sb, sizeof(sb));
    tt_diff_add(d, "instruction %%%d (%s): operands %s -> %s", i, op, sa, sb);
    found = 1;
  }
  return found;
}

char *tt_debug_graph_diff(const tt_graph_t *a, const tt_graph_t *b, int32_t max_items) {
  tt_diff_t d = {{0}, 0, max_items > 0 ? max_items : 1, 0};
  char what[64];
  if (a->num_inputs != b->num_inputs)
    tt_diff_add(&d, "number of inputs: %d -> %d", a->num_inputs, b->num_inputs);
  int32_t ni = a->num_inputs < b->num_inputs ? a->num_inputs : b->num_inputs;
  for (int32_t i = 0; i < ni; ++i) {
    const tt_instr_t *x = &a->instrs[a->input_instr[i]], *y = &b->instrs[b->input_instr[i]];
    if (x->op != y->op)
      tt_diff_add(&d, "input %d: %s -> %s", i, tt_input_kind(x->op), tt_input_kind(y->op));
    snprintf(what, sizeof(what), "input %d", i);
    tt_diff_value(&d, what, x, y);
  }
  if (a->num_outputs != b->num_outputs)
    tt_diff_add(&d, "number of outputs: %d -> %d", a->num_outputs, b->num_outputs);
  int32_t no = a->num_outputs < b->num_outputs ? a->num_outputs : b->num_outputs;
  for (int32_t r = 0; r < no; ++r) {
    snprintf(what, sizeof(what), "output %d", r);
    tt_diff_value(&d, what, &a->instrs[a->output_instr[r]], &b->instrs[b->output_instr[r]]);
  }
  if (a->num_instrs != b->num_instrs)
    tt_diff_add(&d, "number of instructions: %d -> %d", a->num_instrs, b->num_instrs);
  int32_t n = a->num_instrs < b->num_instrs ? a->num_instrs : b->num_instrs;
  int structural = 0;
  for (int32_t i = 0; i < n; ++i)
    structural |= tt_diff_instr(&d, i, &a->instrs[i], &b->instrs[i]);
  if (!structural && d.items + d.extra == 0) {
    /* Same structure and interface: name the first value that changed. */
    for (int32_t i = 0; i < n && d.items == 0; ++i) {
      snprintf(what, sizeof(what), "instruction %%%d (%s)", i, tt_op_name(a->instrs[i].op));
      tt_diff_value(&d, what, &a->instrs[i], &b->instrs[i]);
    }
  }
  if (d.extra) tt_strbuf_printf(&d.text, "... (%d more differences)\n", d.extra);
  return tt_strbuf_take(&d.text);
}

/* ---- graph text with IR frames ---- */

/* The node of each instruction of graph, from the roots the graph was just
 * built from (visit_index holds the instruction index). Caller frees. */
static tt_node_t **tt_nodes_by_instr(const tt_graph_t *g, tt_node_t *const *roots) {
  if (!roots || g->num_instrs <= 0) return NULL;
  tt_node_t **by = calloc((size_t)g->num_instrs, sizeof(*by));
  size_t cap = 64, top = 0;
  tt_node_t **stack = malloc(cap * sizeof(*stack));
  if (!by || !stack) {
    free(by);
    free(stack);
    return NULL;
  }
  for (int32_t r = 0; r < g->num_outputs; ++r) {
    if (top == cap) {
      size_t ncap = cap * 2;
      tt_node_t **ns = realloc(stack, ncap * sizeof(*ns));
      if (!ns) break;
      stack = ns;
      cap = ncap;
    }
    stack[top++] = roots[r];
  }
  while (top) {
    tt_node_t *n = stack[--top];
    int32_t i = n->visit_index;
    if (i < 0 || i >= g->num_instrs || by[i]) continue;
    by[i] = n;
    for (int32_t k = 0; k < n->num_operands; ++k) {
      if (top == cap) {
        size_t ncap = cap * 2;
        tt_node_t **ns = realloc(stack, ncap * sizeof(*ns));
        if (!ns) break;
        stack = ns;
        cap = ncap;
      }
      stack[top++] = n->operands[k];
    }
  }
  free(stack);
  return by;
}

/* The first line of a node's debug_info, copied into buf. */
static const char *tt_node_location(const tt_node_t *n, char *buf, size_t size) {
  if (!n || !n->debug_info) return NULL;
  size_t len = strcspn(n->debug_info, "\n");
  if (len >= size) len = size - 1;
  memcpy(buf, n->debug_info, len);
  buf[len] = 0;
  for (char *p = buf; *p; ++p)
    if (*p == '"') *p = '\''; /* keeps dot labels well formed */
  return buf;
}

char *tt_debug_graph_text(const tt_graph_t *g, tt_node_t *const *roots, int fmt) {
  char *base = fmt == 1 ? tt_graph_to_dot(g) : tt_graph_to_text(g);
  if (!base) return calloc(1, 1);
  tt_node_t **by = tt_nodes_by_instr(g, roots);
  int any = 0;
  for (int32_t i = 0; by && i < g->num_instrs; ++i) any |= by[i] && by[i]->debug_info;
  if (!any) {
    free(by);
    return base;
  }
  tt_strbuf_t out = {0};
  char loc[1024];
  int32_t line_no = 0;
  for (char *p = base; *p; ++line_no) {
    char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int32_t instr = -1;
    if (fmt == 1) {
      int k = -1;
      if (sscanf(p, "  node%d [label=", &k) == 1 && len >= 3 && strncmp(p + len - 3, "\"];", 3) == 0)
        instr = k;
    } else {
      instr = line_no - 1; /* line 0 is the "IR {" header */
    }
    const char *where = instr >= 0 && instr < g->num_instrs ? tt_node_location(by[instr], loc, sizeof(loc)) : NULL;
    if (where && fmt == 1) {
      tt_strbuf_put(&out, p, len - 3);
      tt_strbuf_printf(&out, "\\nlocation=%s\"];", where);
    } else {
      tt_strbuf_put(&out, p, len);
      if (where) tt_strbuf_printf(&out, ", location=%s", where);
    }
    if (e) tt_strbuf_put(&out, "\n", 1);
    p = e ? e + 1 : p + len;
  }
  free(by);
  free(base);
  return tt_strbuf_take(&out);
}
