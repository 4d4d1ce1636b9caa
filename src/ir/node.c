/* IR nodes: creation and reference counting. Every user-facing check of
 * an op's operands runs when a node is created (the op table's operand
 * range and attribute layout here, the op's own checks in its infer
 * function, src/ir/infer_*.c), so a bad op is refused when it is
 * recorded, with a message naming the values. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/ir.h"
#include "torchtpu/op_table.h"
#include "torchtpu/runtime.h"
#include "torchtpu/spmd_exec.h"

/* The checks every op shares, then the op's own (its entry's infer). */
static tt_status_t tt_infer(tt_node_t *n) {
  const tt_op_info_t *info = tt_op_info(n->op);
  if (!info) return tt_status_make(TT_INVALID_ARGUMENT, "unknown op %d", (int)n->op);
  if (info->flags & TT_OPF_INPUT)
    return tt_status_make(TT_INTERNAL, "param/scalar nodes have their own constructors");
  for (int i = 0; i < n->num_operands; ++i)
    if (n->operands[i]->device != n->device)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "Expected all tensors to be on the same device, but found at "
                            "least two devices, xla:%d and xla:%d!",
                            n->device, n->operands[i]->device);
  int32_t lo = info->min_operands, hi = info->max_operands;
  if (n->num_operands < lo || (hi >= 0 && n->num_operands > hi)) {
    if (lo == hi)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d operands, got %d", info->name,
                            lo, n->num_operands);
    if (hi < 0)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected at least %d operands, got %d",
                            info->name, lo, n->num_operands);
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d to %d operands, got %d",
                          info->name, lo, hi, n->num_operands);
  }
  _Alignas(max_align_t) unsigned char attrs[TT_ATTRS_MAX_SIZE];
  TT_RETURN_IF_ERROR(tt_attrs_decode((int32_t)n->op, n->iattrs, n->num_iattrs, n->fattrs, attrs,
                                     info->attrs_size, NULL));
  return info->infer(n, attrs);
}

/* Complex values are data to the engine: only ops that move whole elements
 * (and bitcast, and fft: TT_OPF_COMPLEX_OK) may read or make them.
 * Arithmetic on complex tensors is lowered on their float32 pairs, so
 * anything else seeing one is a lowering's mistake, reported instead of
 * computing garbage. */
static tt_status_t tt_check_complex(const tt_node_t *n) {
  int complex_seen = tt_dtype_is_complex(n->dtype);
  for (int i = 0; i < n->num_operands && !complex_seen; ++i)
    complex_seen = tt_dtype_is_complex(n->operands[i]->dtype);
  if (!complex_seen) return NULL;
  /* index_select gathers complex rows, but its indices are integers. */
  if (n->op == TT_OP_INDEX_SELECT)
    return tt_dtype_is_complex(n->operands[1]->dtype)
               ? tt_status_make(TT_TYPE_ERROR, "index_select: complex indices")
               : NULL;
  if (tt_op_has_flag(n->op, TT_OPF_COMPLEX_OK)) return NULL;
  return tt_status_make(TT_TYPE_ERROR,
                        "%s does not take complex64 tensors in the engine (complex "
                        "arithmetic is lowered on float32 pairs)",
                        tt_op_name(n->op));
}

static tt_node_t *tt_node_alloc(tt_op_t op, int32_t device, int32_t num_operands) {
  tt_node_t *n = calloc(1, sizeof(*n));
  if (!n) return NULL;
  n->refcount = 1;
  n->op = op;
  n->device = device;
  n->num_operands = num_operands;
  if (num_operands) {
    n->operands = calloc((size_t)num_operands, sizeof(tt_node_t *));
    if (!n->operands) {
      free(n);
      return NULL;
    }
  }
  return n;
}

tt_status_t tt_node_create(tt_op_t op, int32_t device, tt_node_t *const *operands,
                           int32_t num_operands, const int64_t *iattrs,
                           int32_t num_iattrs, const double *fattrs,
                           int32_t num_fattrs, tt_node_t **out_node) {
  *out_node = NULL;
  if (num_iattrs > TT_MAX_IATTRS || num_fattrs > TT_MAX_FATTRS || num_iattrs < 0 ||
      num_fattrs < 0 || num_operands < 0)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: too many attributes (%d ints, %d floats)",
                          tt_op_name(op), num_iattrs, num_fattrs);
  tt_node_t *n = tt_node_alloc(op, device, num_operands);
  if (!n) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory creating a node");
  for (int32_t i = 0; i < num_operands; ++i) n->operands[i] = operands[i];
  n->num_iattrs = num_iattrs;
  if (num_iattrs) memcpy(n->iattrs, iattrs, sizeof(int64_t) * (size_t)num_iattrs);
  if (num_fattrs) memcpy(n->fattrs, fattrs, sizeof(double) * (size_t)num_fattrs);
  tt_status_t st = tt_infer(n);
  if (!st) st = tt_check_complex(n);
  if (st) {
    free(n->operands);
    free(n);
    return st;
  }
  for (int32_t i = 0; i < num_operands; ++i) tt_node_retain(operands[i]);
  *out_node = n;
  return NULL;
}

tt_node_t *tt_node_create_param(tt_buffer_t *buffer, tt_dtype_t dtype,
                                const tt_shape_t *shape, int32_t device) {
  tt_node_t *n = tt_node_alloc(TT_OP_PARAM, device, 0);
  if (!n) return NULL;
  n->dtype = dtype;
  n->shape = *shape;
  n->buffer = buffer;
  tt_buffer_retain(buffer);
  return n;
}

tt_node_t *tt_node_create_scalar(tt_dtype_t dtype, double value_f, int64_t value_i,
                                 int32_t device) {
  tt_node_t *n = tt_node_alloc(TT_OP_SCALAR, device, 0);
  if (!n) return NULL;
  n->dtype = dtype;
  n->shape.rank = 0;
  n->scalar_f = value_f;
  n->scalar_i = value_i;
  return n;
}

void tt_node_retain(tt_node_t *node) {
  __atomic_add_fetch(&node->refcount, 1, __ATOMIC_RELAXED);
}

void tt_node_release(tt_node_t *node) {
  /* Iterative release: long chains of nodes (a 10k-step unsynced loop) must
   * not overflow the C stack. */
  tt_node_t *stack_small[64];
  tt_node_t **stack = stack_small;
  size_t cap = 64, top = 0;
  if (!node) return;
  stack[top++] = node;
  while (top) {
    tt_node_t *n = stack[--top];
    if (__atomic_sub_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL) != 0) continue;
    for (int32_t i = 0; i < n->num_operands; ++i) {
      if (top == cap) {
        size_t ncap = cap * 2;
        tt_node_t **ns = malloc(ncap * sizeof(*ns));
        if (!ns) abort(); /* cannot leak-free recover; internal invariant */
        memcpy(ns, stack, top * sizeof(*ns));
        if (stack != stack_small) free(stack);
        stack = ns;
        cap = ncap;
      }
      stack[top++] = n->operands[i];
    }
    if (n->buffer) tt_buffer_release(n->buffer);
    if (n->shards) tt_shard_set_release(n->shards);
    free(n->operands);
    free(n->debug_info);
    free(n->sharding);
    free(n);
  }
  if (stack != stack_small) free(stack);
}

tt_status_t tt_node_set_sharding(tt_node_t *node, const tt_sharding_t *sharding) {
  tt_sharding_t *copy = NULL;
  if (sharding) {
    TT_RETURN_IF_ERROR(tt_sharding_validate(sharding, &node->shape));
    copy = tt_sharding_copy(sharding);
    if (!copy) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (sharding)");
  }
  free(node->sharding);
  node->sharding = copy;
  return NULL;
}
