/* Captured graphs: trace once, replay on new inputs. Used by the dynamo
 * bridge. A capture records, for each input of the compiled graph, where
 * its value comes from on replay, and for each requested output, whether
 * the graph computes it, it passes an input through, or it is a constant.
 * The executable itself comes from the shared compilation cache:
 * capturing cuts the traced graph exactly as a sync would, so it is
 * compiled (and optimised) by the same path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazy/lazy_internal.h"
#include "torchtpu/codegen.h"

enum { TT_CAP_SRC_INPUT = 0, TT_CAP_SRC_CONST = 1, TT_CAP_SRC_SEED = 2 };
enum { TT_CAP_OUT_GRAPH = 0, TT_CAP_OUT_INPUT = 1, TT_CAP_OUT_CONST = 2 };

struct tt_capture_s {
  int32_t refcount; /* atomic */
  int32_t device;
  tt_executable_t *exe; /* NULL when no output needs computing */
  uint64_t hash;
  int32_t num_inputs;
  tt_dtype_t *in_dtype;
  tt_shape_t *in_shape;
  uint8_t *in_is_scalar;  /* the slot takes a pending SCALAR tensor */
  int32_t *in_alias_of;   /* an earlier input with the same buffer, or -1 */
  int32_t num_graph_inputs;
  int32_t *gin_src;       /* TT_CAP_SRC_* */
  int32_t *gin_index;     /* input or seed index */
  tt_input_value_t *gin_const; /* constants: retained buffer or scalar */
  int32_t num_seeds;
  int32_t num_graph_outputs;
  int32_t num_outputs;
  int32_t *out_src;       /* TT_CAP_OUT_* */
  int32_t *out_index;     /* graph output or input index */
  tt_buffer_t **out_const;
  tt_dtype_t *out_dtype;
  tt_shape_t *out_shape;
};

static void tt_capture_free(tt_capture_t *c) {
  if (!c) return;
  tt_executable_release(c->exe);
  for (int32_t i = 0; c->gin_const && i < c->num_graph_inputs; ++i)
    tt_buffer_release(c->gin_const[i].buffer);
  for (int32_t i = 0; c->out_const && i < c->num_outputs; ++i) tt_buffer_release(c->out_const[i]);
  free(c->in_dtype);
  free(c->in_shape);
  free(c->in_is_scalar);
  free(c->in_alias_of);
  free(c->gin_src);
  free(c->gin_index);
  free(c->gin_const);
  free(c->out_src);
  free(c->out_index);
  free(c->out_const);
  free(c->out_dtype);
  free(c->out_shape);
  free(c);
}

void tt_capture_retain(tt_capture_t *c) { __atomic_add_fetch(&c->refcount, 1, __ATOMIC_RELAXED); }

void tt_capture_release(tt_capture_t *c) {
  if (!c || __atomic_sub_fetch(&c->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  tt_capture_free(c);
}

int32_t tt_capture_num_inputs(const tt_capture_t *c) { return c->num_inputs; }
int32_t tt_capture_num_outputs(const tt_capture_t *c) { return c->num_outputs; }
int32_t tt_capture_num_seeds(const tt_capture_t *c) { return c->num_seeds; }
int32_t tt_capture_num_graph_inputs(const tt_capture_t *c) { return c->num_graph_inputs; }
int32_t tt_capture_num_graph_outputs(const tt_capture_t *c) { return c->num_graph_outputs; }
uint64_t tt_capture_hash(const tt_capture_t *c) { return c->hash; }

int32_t tt_capture_graph_input_source(const tt_capture_t *c, int32_t k, int32_t *out_index) {
  if (k < 0 || k >= c->num_graph_inputs) return -1;
  *out_index = c->gin_index[k];
  return c->gin_src[k];
}

tt_status_t tt_capture_graph_text(const tt_capture_t *c, char **out_text) {
  *out_text = c->exe ? tt_graph_to_text(tt_executable_graph(c->exe)) : calloc(1, 1);
  if (!*out_text) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (graph text)");
  return NULL;
}

/* The buffer a materialized tensor or a PARAM alias stands for (lock held). */
static tt_buffer_t *tt_tensor_value_buffer(const tt_tensor_t *t) {
  if (!t->node) return t->buffer;
  return t->node->op == TT_OP_PARAM ? t->node->buffer : NULL;
}

static void tt_shape_str(const tt_shape_t *s, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  len += (size_t)snprintf(buf, n, "[");
  for (int32_t d = 0; d < s->rank && len < n; ++d)
    len += (size_t)snprintf(buf + len, n - len, d ? ", %lld" : "%lld", (long long)s->dims[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

tt_status_t tt_lazy_capture(tt_tensor_t *const *inputs, int32_t num_inputs,
                            tt_tensor_t *const *outputs, int32_t num_outputs,
                            tt_capture_t **out_capture) {
  *out_capture = NULL;
  if (num_inputs < 0 || num_outputs < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "capture: negative counts (%d inputs, %d outputs)",
                          num_inputs, num_outputs);
  tt_capture_t *c = calloc(1, sizeof(*c));
  size_t ni = (size_t)num_inputs + 1, no = (size_t)num_outputs + 1;
  tt_buffer_t **in_buf = calloc(ni, sizeof(*in_buf));
  tt_tensor_t **roots = calloc(no, sizeof(*roots));
  int32_t *root_of = calloc(no, sizeof(*root_of));
  if (c) {
    c->refcount = 1;
    c->num_inputs = num_inputs;
    c->num_outputs = num_outputs;
    c->in_dtype = calloc(ni, sizeof(*c->in_dtype));
    c->in_shape = calloc(ni, sizeof(*c->in_shape));
    c->in_is_scalar = calloc(ni, sizeof(*c->in_is_scalar));
    c->in_alias_of = calloc(ni, sizeof(*c->in_alias_of));
    c->out_src = calloc(no, sizeof(*c->out_src));
    c->out_index = calloc(no, sizeof(*c->out_index));
    c->out_const = calloc(no, sizeof(*c->out_const));
    c->out_dtype = calloc(no, sizeof(*c->out_dtype));
    c->out_shape = calloc(no, sizeof(*c->out_shape));
  }
  if (!c || !in_buf || !roots || !root_of || !c->in_dtype || !c->in_shape || !c->in_is_scalar ||
      !c->in_alias_of || !c->out_src || !c->out_index || !c->out_const || !c->out_dtype ||
      !c->out_shape) {
    tt_capture_free(c);
    free(in_buf);
    free(roots);
    free(root_of);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (capture)");
  }
  tt_status_t st = NULL;
  tt_graph_t *g = NULL;
  tt_node_t **gin = NULL;
  c->device = num_outputs ? outputs[0]->device : (num_inputs ? inputs[0]->device : 0);
  pthread_mutex_lock(&tt_lazy_lock);
  /* Values still held on the host (SPMD mode) become device data first. */
  for (int32_t j = 0; j < num_inputs && !st; ++j) st = tt_tensor_upload_host_locked(inputs[j]);
  for (int32_t i = 0; i < num_outputs && !st; ++i) st = tt_tensor_upload_host_locked(outputs[i]);
  for (int32_t j = 0; j < num_inputs && !st; ++j) {
    const tt_tensor_t *t = inputs[j];
    if (t->device != c->device)
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "capture: input %d is on xla:%d, expected xla:%d like the others", j,
                          t->device, c->device);
    else if (t->node && t->node->op != TT_OP_PARAM && t->node->op != TT_OP_SCALAR)
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "capture: input %d (tensor %lld) has pending computation (%s); sync the "
                          "inputs before tracing",
                          j, (long long)t->id, tt_op_name(t->node->op));
    c->in_dtype[j] = t->dtype;
    c->in_shape[j] = t->shape;
    c->in_is_scalar[j] = t->node && t->node->op == TT_OP_SCALAR;
    in_buf[j] = c->in_is_scalar[j] ? NULL : tt_tensor_value_buffer(t);
    c->in_alias_of[j] = -1;
    for (int32_t k = 0; k < j && in_buf[j]; ++k)
      if (in_buf[k] == in_buf[j]) {
        c->in_alias_of[j] = k;
        break;
      }
  }
  /* Roots: the pending outputs, deduplicated, as a cut would take them. */
  int32_t nr = 0;
  for (int32_t i = 0; i < num_outputs && !st; ++i) {
    tt_tensor_t *t = outputs[i];
    root_of[i] = -1;
    c->out_dtype[i] = t->dtype;
    c->out_shape[i] = t->shape;
    if (t->device != c->device) {
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "capture: output %d is on xla:%d, expected xla:%d like the others", i,
                          t->device, c->device);
      break;
    }
    if (!t->node || t->node->op == TT_OP_PARAM) continue;
    for (int32_t r = 0; r < nr; ++r)
      if (roots[r] == t) root_of[i] = r;
    if (root_of[i] < 0) {
      root_of[i] = nr;
      roots[nr++] = t;
    }
  }
  if (!st && nr > 0) {
    tt_node_t **nodes = malloc(sizeof(*nodes) * (size_t)nr);
    if (!nodes) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (capture)");
    for (int32_t r = 0; r < nr && !st; ++r) nodes[r] = roots[r]->node;
    if (!st) st = tt_graph_build(nodes, nr, &g, &gin);
    free(nodes);
  }
  for (int32_t k = 0; !st && g && k < g->num_inputs; ++k)
    if (gin[k]->shards) /* SPMD mode's sharded storage (spmd_exec.h) */
      st = tt_status_make(TT_UNIMPLEMENTED, "capturing a graph that reads a tensor held as "
                          "shards (SPMD mode) is not supported");
  if (!st && g) {
    int32_t n = g->num_inputs;
    c->num_graph_inputs = n;
    c->num_graph_outputs = nr;
    c->hash = g->hash;
    c->gin_src = calloc((size_t)n + 1, sizeof(*c->gin_src));
    c->gin_index = calloc((size_t)n + 1, sizeof(*c->gin_index));
    c->gin_const = calloc((size_t)n + 1, sizeof(*c->gin_const));
    uint8_t *is_seed = calloc((size_t)n + 1, 1);
    if (!c->gin_src || !c->gin_index || !c->gin_const || !is_seed) {
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (capture)");
    } else {
      /* A SCALAR read as the key of an RNG op is a seed slot. */
      for (int32_t i = 0; i < g->num_instrs; ++i) {
        const tt_instr_t *in = &g->instrs[i];
        if (in->op != TT_OP_RNG || in->num_operands < 1) continue;
        const tt_instr_t *key = &g->instrs[in->operands[0]];
        if (key->op == TT_OP_SCALAR) is_seed[key->input_index] = 1;
      }
      for (int32_t k = 0; k < n; ++k) {
        tt_node_t *node = gin[k];
        int32_t src = -1;
        for (int32_t j = 0; j < num_inputs && src < 0; ++j) {
          if (node->op == TT_OP_PARAM && !c->in_is_scalar[j] && in_buf[j] == node->buffer) src = j;
          if (node->op == TT_OP_SCALAR && c->in_is_scalar[j] && inputs[j]->node == node) src = j;
        }
        if (src >= 0) {
          c->gin_src[k] = TT_CAP_SRC_INPUT;
          c->gin_index[k] = src;
        } else if (node->op == TT_OP_SCALAR && is_seed[k]) {
          c->gin_src[k] = TT_CAP_SRC_SEED;
          c->gin_index[k] = c->num_seeds++;
        } else {
          c->gin_src[k] = TT_CAP_SRC_CONST;
          c->gin_const[k].buffer = node->op == TT_OP_PARAM ? node->buffer : NULL;
          if (c->gin_const[k].buffer) tt_buffer_retain(c->gin_const[k].buffer);
          c->gin_const[k].scalar_f = node->scalar_f;
          c->gin_const[k].scalar_i = node->scalar_i;
        }
      }
    }
    free(is_seed);
  }
  free(gin);
  /* Compile and run the first call through the ordinary cut. */
  if (!st && nr > 0) st = tt_cut_locked(roots, nr, c->device, 0);
  if (!st && g) {
    c->exe = tt_cache_lookup_locked(g);
    if (c->exe) {
      tt_executable_retain(c->exe);
    } else {
      /* Not cached (cache insert ran out of memory): plan our own copy. */
      st = tt_executable_create(g, &c->exe);
      if (!st) g = NULL;
    }
    if (!st && tt_executable_graph(c->exe)->num_inputs != c->num_graph_inputs)
      st = tt_status_make(TT_INTERNAL, "capture: compiled graph has %d inputs, traced graph %d",
                          tt_executable_graph(c->exe)->num_inputs, c->num_graph_inputs);
  }
  for (int32_t i = 0; i < num_outputs && !st; ++i) {
    if (root_of[i] >= 0) {
      c->out_src[i] = TT_CAP_OUT_GRAPH;
      c->out_index[i] = root_of[i];
      continue;
    }
    tt_buffer_t *b = tt_tensor_value_buffer(outputs[i]);
    int32_t src = -1;
    for (int32_t j = 0; j < num_inputs && src < 0; ++j)
      if (b && in_buf[j] == b) src = j;
    if (src < 0 && outputs[i]->node && outputs[i]->node->op == TT_OP_SCALAR)
      for (int32_t j = 0; j < num_inputs && src < 0; ++j)
        if (inputs[j] == outputs[i]) src = j;
    if (src >= 0) {
      c->out_src[i] = TT_CAP_OUT_INPUT;
      c->out_index[i] = src;
    } else if (b) {
      c->out_src[i] = TT_CAP_OUT_CONST;
      c->out_const[i] = b;
      tt_buffer_retain(b);
    } else {
      st = tt_status_make(TT_INTERNAL, "capture: output %d has no value after the cut", i);
    }
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  tt_graph_destroy(g);
  free(in_buf);
  free(roots);
  free(root_of);
  if (st) {
    tt_capture_free(c);
    return st;
  }
  *out_capture = c;
  return NULL;
}

int tt_capture_matches(const tt_capture_t *c, tt_tensor_t *const *inputs, int32_t num_inputs,
                       char *why, size_t why_size) {
  char a[160], b[160];
  if (why && why_size) why[0] = 0;
  if (num_inputs != c->num_inputs) {
    if (why) snprintf(why, why_size, "expected %d inputs, got %d", c->num_inputs, num_inputs);
    return 0;
  }
  for (int32_t j = 0; j < num_inputs; ++j) {
    const tt_tensor_t *t = inputs[j];
    if (t->device != c->device) {
      if (why)
        snprintf(why, why_size, "input %d is on xla:%d, the graph was captured on xla:%d", j,
                 t->device, c->device);
      return 0;
    }
    if (t->dtype != c->in_dtype[j] || !tt_shape_equal(&t->shape, &c->in_shape[j])) {
      if (why) {
        tt_shape_str(&t->shape, a, sizeof(a));
        tt_shape_str(&c->in_shape[j], b, sizeof(b));
        snprintf(why, why_size, "input %d is %s%s, the graph was captured for %s%s", j,
                 tt_dtype_name(t->dtype), a, tt_dtype_name(c->in_dtype[j]), b);
      }
      return 0;
    }
    /* Read without the engine lock: a racing cut can only turn a pending
     * scalar into data, which tt_lazy_replay checks again under the lock. */
    tt_node_t *node = __atomic_load_n(&t->node, __ATOMIC_ACQUIRE);
    int is_scalar = node && node->op == TT_OP_SCALAR;
    if (is_scalar != (int)c->in_is_scalar[j]) {
      if (why)
        snprintf(why, why_size, "input %d is %s, the graph was captured with %s", j,
                 is_scalar ? "a runtime scalar" : "device data",
                 c->in_is_scalar[j] ? "a runtime scalar" : "device data");
      return 0;
    }
  }
  return 1;
}

tt_status_t tt_lazy_replay(tt_capture_t *c, tt_tensor_t *const *inputs, int32_t num_inputs,
                           const int64_t *seeds, int32_t num_seeds, tt_tensor_t **out_tensors) {
  char why[256];
  for (int32_t i = 0; i < c->num_outputs; ++i) out_tensors[i] = NULL;
  if (!tt_capture_matches(c, inputs, num_inputs, why, sizeof(why)))
    return tt_status_make(TT_INVALID_ARGUMENT, "replay: %s", why);
  if (num_seeds != c->num_seeds)
    return tt_status_make(TT_INVALID_ARGUMENT, "replay: the graph takes %d RNG seeds, got %d",
                          c->num_seeds, num_seeds);
  /* Inputs still being computed lazily are cut first. */
  tt_tensor_t **pend = malloc(sizeof(*pend) * ((size_t)num_inputs + 1));
  tt_input_value_t *vals = calloc((size_t)c->num_graph_inputs + 1, sizeof(*vals));
  tt_buffer_t **outs = calloc((size_t)c->num_graph_outputs + 1, sizeof(*outs));
  if (!pend || !vals || !outs) {
    free(pend);
    free(vals);
    free(outs);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (replay)");
  }
  int32_t np = 0;
  pthread_mutex_lock(&tt_lazy_lock);
  for (int32_t j = 0; j < num_inputs; ++j)
    if (!c->in_is_scalar[j] && inputs[j]->node && inputs[j]->node->op != TT_OP_PARAM)
      pend[np++] = inputs[j];
  pthread_mutex_unlock(&tt_lazy_lock);
  tt_status_t st = np ? tt_lazy_sync_tensors(pend, np, 0) : NULL;
  free(pend);
  if (st) {
    free(vals);
    free(outs);
    return st;
  }
  pthread_mutex_lock(&tt_lazy_lock);
  for (int32_t j = 0; j < num_inputs && !st; ++j) st = tt_tensor_upload_host_locked(inputs[j]);
  for (int32_t j = 0; j < num_inputs && !st; ++j) {
    if (c->in_is_scalar[j]) {
      if (!inputs[j]->node || inputs[j]->node->op != TT_OP_SCALAR)
        st = tt_status_make(TT_INVALID_ARGUMENT, "replay: input %d is no longer a runtime scalar",
                            j);
      continue;
    }
    if (!tt_tensor_value_buffer(inputs[j]))
      st = tt_status_make(TT_INVALID_ARGUMENT, "replay: input %d was given new pending work "
                          "while the graph was being queued", j);
    else if (c->in_alias_of[j] >= 0 &&
             tt_tensor_value_buffer(inputs[c->in_alias_of[j]]) != tt_tensor_value_buffer(inputs[j]))
      st = tt_status_make(TT_INVALID_ARGUMENT,
                          "replay: inputs %d and %d were the same data at capture but differ now",
                          c->in_alias_of[j], j);
  }
  for (int32_t k = 0; k < c->num_graph_inputs && !st; ++k) {
    int32_t idx = c->gin_index[k];
    if (c->gin_src[k] == TT_CAP_SRC_CONST) {
      vals[k] = c->gin_const[k];
    } else if (c->gin_src[k] == TT_CAP_SRC_SEED) {
      vals[k].scalar_i = seeds[idx];
      vals[k].scalar_f = (double)seeds[idx];
    } else if (c->in_is_scalar[idx]) {
      vals[k].scalar_f = inputs[idx]->node->scalar_f;
      vals[k].scalar_i = inputs[idx]->node->scalar_i;
    } else {
      vals[k].buffer = tt_tensor_value_buffer(inputs[idx]);
    }
  }
  if (!st && c->exe) {
    const tt_graph_t *eg = tt_executable_graph(c->exe);
    for (int32_t r = 0; r < c->num_graph_outputs && !st; ++r) {
      const tt_instr_t *in = &eg->instrs[eg->output_instr[r]];
      outs[r] = tt_buffer_create_pending(c->device,
                                         (size_t)tt_shape_numel(&in->shape) * tt_dtype_size(in->dtype));
      if (!outs[r]) st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (buffer)");
    }
    if (!st)
      st = tt_executable_enqueue(c->exe, c->device, vals, c->num_graph_inputs, outs,
                                 c->num_graph_outputs);
    /* A replayed graph repeats by definition: ask for tier 1 as a cut of a
     * repeating graph does (the capture's cut was the first run). */
    if (!st && tt_executable_count_run(c->exe) == 1 && tt_tier_mode() == TT_TIER_AUTO)
      tt_tier1_request(c->exe, 0);
  }
  for (int32_t i = 0; i < c->num_outputs && !st; ++i) {
    if (c->out_src[i] == TT_CAP_OUT_INPUT) {
      tt_tensor_retain(inputs[c->out_index[i]]);
      out_tensors[i] = inputs[c->out_index[i]];
      continue;
    }
    tt_buffer_t *b = c->out_src[i] == TT_CAP_OUT_GRAPH ? outs[c->out_index[i]] : c->out_const[i];
    tt_tensor_t *t = tt_tensor_new_locked(c->device, c->out_dtype[i], &c->out_shape[i]);
    if (!t) {
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (tensor)");
      break;
    }
    tt_buffer_retain(b);
    t->buffer = b;
    out_tensors[i] = t;
  }
  pthread_mutex_unlock(&tt_lazy_lock);
  for (int32_t r = 0; r < c->num_graph_outputs; ++r) tt_buffer_release(outs[r]);
  free(vals);
  free(outs);
  if (st) {
    for (int32_t i = 0; i < c->num_outputs; ++i) {
      tt_tensor_release(out_tensors[i]);
      out_tensors[i] = NULL;
    }
    return st;
  }
  return NULL;
}
