/* The op table (include/torchtpu/op_table.h): one entry per row of
 * torchtpu/ops.def, and the attribute codec that reads each entry's
 * schema. The schemas are defined here, from op_attrs.h (hence
 * TT_OP_ATTRS_SCHEMAS before any include: every header here includes
 * op_attrs.h). Shape inference lives in the family files
 * src/ir/infer_*.c, declared in src/ir/infer.h; sharding rules in the
 * family files src/ir/sharding_rules_*.c, declared in
 * src/ir/sharding_rules.h. */
#define TT_OP_ATTRS_SCHEMAS

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "ir/sharding_rules.h"
#include "torchtpu/op_table.h"

/* The entries, one per row of torchtpu/ops.def (the enum's order, so an
 * op's entry is tt_op_table_[op]). */
#define TT_OP(id, nm, lo, hi, fl, attrs, fn)                                             \
  [TT_OP_##id] = {nm, lo, hi, fl, tt_##attrs##_attrs_schema,                              \
                  (int32_t)(sizeof(tt_##attrs##_attrs_schema) / sizeof(tt_attr_field_t)), \
                  sizeof(tt_##attrs##_attrs_t), fn, &tt_sharding_rule_##id},
#define TT_OP_NO_ATTRS(id, nm, lo, hi, fl, fn) \
  [TT_OP_##id] = {nm, lo, hi, fl, NULL, 0, sizeof(tt_no_attrs_t), fn, &tt_sharding_rule_##id},
static const tt_op_info_t tt_op_table_[] = {
#include "torchtpu/ops.def"
};
_Static_assert(sizeof(tt_op_table_) / sizeof(tt_op_table_[0]) == TT_OP_COUNT,
               "every IR op needs an op table entry");
_Static_assert(TT_OP_PARAM == 0, "ops.def's first row is op code 0");
/* Code decoding an op it does not know decodes into TT_ATTRS_MAX_SIZE bytes. */
#define TT_OP(id, nm, lo, hi, fl, attrs, fn)                   \
  _Static_assert(sizeof(tt_##attrs##_attrs_t) <= TT_ATTRS_MAX_SIZE, \
                 "TT_ATTRS_MAX_SIZE must hold tt_" #attrs "_attrs_t");
#include "torchtpu/ops.def"

const tt_op_info_t *tt_op_info(tt_op_t op) {
  if ((unsigned)op >= TT_OP_COUNT || !tt_op_table_[op].name) return NULL;
  return &tt_op_table_[op];
}

const char *tt_op_name(tt_op_t op) {
  const tt_op_info_t *info = tt_op_info(op);
  return info ? info->name : "?";
}

/* ---- the codec ----------------------------------------------------------- */

/* How the ints of an instance split: the count of fixed ints up to the
 * first absent optional field, and each list's length. */
typedef struct tt_attr_layout_s {
  int32_t num_fields; /* int fields present */
  int32_t list_len;
} tt_attr_layout_t;

static tt_status_t tt_attr_layout(const tt_op_info_t *info, int32_t num_iattrs,
                                  tt_attr_layout_t *out) {
  int32_t total = 0, first_optional = -1;
  for (int32_t f = 0; f < info->num_fields; ++f) {
    const tt_attr_field_t *fd = &info->fields[f];
    if (fd->kind == TT_ATTR_FLOAT) continue;
    if ((fd->flags & TT_ATTR_OPTIONAL) && first_optional < 0) first_optional = total;
    ++total;
  }
  if (first_optional < 0) first_optional = total;
  /* The longest prefix of int fields whose ints are there: optional
   * fields are present when the ints are there for them. */
  for (int32_t present = total; present >= first_optional; --present) {
    int32_t fixed = 0, lists = 0, seen = 0;
    for (int32_t f = 0; f < info->num_fields && seen < present; ++f) {
      const tt_attr_field_t *fd = &info->fields[f];
      if (fd->kind == TT_ATTR_FLOAT) continue;
      ++seen;
      if (fd->kind == TT_ATTR_LIST)
        ++lists;
      else
        fixed += fd->count;
    }
    int32_t rest = num_iattrs - fixed;
    if (rest < 0 || (lists == 0 && rest != 0) || (lists && rest % lists)) continue;
    out->num_fields = present;
    out->list_len = lists ? rest / lists : 0;
    return NULL;
  }
  return tt_status_make(TT_INVALID_ARGUMENT,
                        "%s: %d int attributes fit no layout of its fields", info->name,
                        num_iattrs);
}

tt_status_t tt_attrs_decode(int32_t op, const int64_t *iattrs, int32_t num_iattrs,
                            const double *fattrs, void *out, size_t out_size,
                            int32_t *out_num_fields) {
  const tt_op_info_t *info = tt_op_info((tt_op_t)op);
  if (!info) return tt_status_make(TT_INVALID_ARGUMENT, "unknown op %d", op);
  if (out_size != info->attrs_size) abort(); /* the caller's struct is not this op's */
  memset(out, 0, out_size);
  tt_attr_layout_t lay = {0, 0};
  TT_RETURN_IF_ERROR(tt_attr_layout(info, num_iattrs, &lay));
  char *base = out;
  int32_t pos = 0, ints = 0, floats = 0;
  for (int32_t f = 0; f < info->num_fields; ++f) {
    const tt_attr_field_t *fd = &info->fields[f];
    if (fd->kind == TT_ATTR_FLOAT) {
      *(double *)(base + fd->offset) = fattrs[floats++];
      continue;
    }
    if (ints++ >= lay.num_fields) continue;
    if (fd->kind == TT_ATTR_LIST) {
      tt_attr_list_t *l = (tt_attr_list_t *)(base + fd->offset);
      l->n = lay.list_len;
      memcpy(l->v, iattrs + pos, sizeof(int64_t) * (size_t)lay.list_len);
      pos += lay.list_len;
    } else {
      memcpy(base + fd->offset, iattrs + pos, sizeof(int64_t) * (size_t)fd->count);
      pos += fd->count;
    }
  }
  if (out_num_fields) *out_num_fields = lay.num_fields;
  return NULL;
}

tt_status_t tt_attrs_encode(int32_t op, const void *in, size_t in_size, int32_t num_int_fields,
                            int64_t *iattrs, int32_t *out_num_iattrs, double *fattrs) {
  const tt_op_info_t *info = tt_op_info((tt_op_t)op);
  if (!info) return tt_status_make(TT_INVALID_ARGUMENT, "unknown op %d", op);
  if (in_size != info->attrs_size) abort(); /* the caller's struct is not this op's */
  const char *base = in;
  int32_t pos = 0, ints = 0, floats = 0, list_len = -1;
  memset(fattrs, 0, sizeof(double) * TT_MAX_FATTRS);
  for (int32_t f = 0; f < info->num_fields; ++f) {
    const tt_attr_field_t *fd = &info->fields[f];
    if (fd->kind == TT_ATTR_FLOAT) {
      fattrs[floats++] = *(const double *)(base + fd->offset);
      continue;
    }
    if (num_int_fields >= 0 && ints >= num_int_fields) continue;
    ++ints;
    if (fd->kind == TT_ATTR_LIST) {
      const tt_attr_list_t *l = (const tt_attr_list_t *)(base + fd->offset);
      if (list_len >= 0 && l->n != list_len)
        return tt_status_make(TT_INVALID_ARGUMENT, "%s: list %s has %d entries, an earlier list %d",
                              info->name, fd->name, l->n, list_len);
      if (l->n < 0 || pos + l->n > TT_MAX_IATTRS)
        return tt_status_make(TT_INVALID_ARGUMENT, "%s: more than %d int attributes", info->name,
                              TT_MAX_IATTRS);
      list_len = l->n;
      memcpy(iattrs + pos, l->v, sizeof(int64_t) * (size_t)l->n);
      pos += l->n;
    } else {
      if (pos + fd->count > TT_MAX_IATTRS)
        return tt_status_make(TT_INVALID_ARGUMENT, "%s: more than %d int attributes", info->name,
                              TT_MAX_IATTRS);
      memcpy(iattrs + pos, base + fd->offset, sizeof(int64_t) * (size_t)fd->count);
      pos += fd->count;
    }
  }
  *out_num_iattrs = pos;
  return NULL;
}

int32_t tt_attrs_decode_valid(int32_t op, const int64_t *iattrs, int32_t num_iattrs,
                              const double *fattrs, void *out, size_t out_size) {
  int32_t n = 0;
  tt_status_t st = tt_attrs_decode(op, iattrs, num_iattrs, fattrs, out, out_size, &n);
  if (st) abort(); /* recorded and verified attributes always decode */
  return n;
}

void tt_attrs_encode_valid(int32_t op, const void *in, size_t in_size, int32_t num_int_fields,
                           int64_t *iattrs, int32_t *out_num_iattrs, double *fattrs) {
  tt_status_t st =
      tt_attrs_encode(op, in, in_size, num_int_fields, iattrs, out_num_iattrs, fattrs);
  if (st) abort(); /* the engine's own structs always fit */
}

/* ---- fusibility ------------------------------------------------------------ */

static int tt_is_real(tt_dtype_t dt) { return dt == TT_F32 || dt == TT_F16 || dt == TT_BF16; }

int tt_instr_fusible(const tt_instr_t *in, tt_dtype_t x0) {
  if (!tt_op_has_flag(in->op, TT_OPF_FUSIBLE)) return 0;
  if (!tt_is_real(in->dtype) && in->dtype != TT_BOOL) return 0;
  switch (in->op) {
    case TT_OP_UNARY: {
      tt_unary_attrs_t a;
      TT_ATTRS(in, &a);
      if (a.op == TT_UN_BITWISE_NOT) return 0;
      if (x0 == TT_BOOL) return a.op == TT_UN_LOGICAL_NOT;
      return tt_is_real(x0);
    }
    case TT_OP_BINARY: {
      tt_binary_attrs_t a;
      TT_ATTRS(in, &a);
      if (a.op == TT_BIN_BITWISE_AND || a.op == TT_BIN_BITWISE_OR ||
          a.op == TT_BIN_BITWISE_XOR || a.op == TT_BIN_SHIFT_LEFT || a.op == TT_BIN_SHIFT_RIGHT)
        return 0;
      if (x0 == TT_BOOL)
        return a.op == TT_BIN_LOGICAL_AND || a.op == TT_BIN_LOGICAL_OR ||
               a.op == TT_BIN_LOGICAL_XOR || a.op == TT_BIN_EQ || a.op == TT_BIN_NE;
      return tt_is_real(x0);
    }
    case TT_OP_WHERE:
      return 1;
    case TT_OP_CONVERT:
      /* Sources load into f32 as the convert kernel converts them; f64
       * would round twice (and tiny values would lose their truth). */
      return x0 != TT_F64;
    default:
      return 0;
  }
}
