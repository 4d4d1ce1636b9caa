/* Elementwise binary kernels (tt_kernel_binary) with numpy broadcasting.
 *
 * The broadcasting iterator reduces any pair of shapes to runs along the
 * innermost (merged) dim where each operand's stride is 0 or 1 or some
 * other constant. Each run is handed, in blocks, to the block function of
 * the compute class; operands whose storage is already the compute type and
 * whose stride is 0 or 1 are used in place, others are converted into a
 * small buffer first. Same-shape f32 and tensor-with-scalar f32 therefore
 * run as straight vectorised loops over the caller's memory.
 *
 * Semantics follow PyTorch CPU (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp):
 * REMAINDER and FLOOR_DIV take the sign of the divisor, MAX/MIN ignore a NaN
 * operand (torch.fmax), MAXIMUM_NAN/MINIMUM_NAN propagate it (torch.maximum),
 * integer division by zero gives 0, shifts by a negative amount or by the
 * width or more give 0 (left) or the sign fill (right).
 */
#include "kernels/kernel_util.h"

/* ---- scalar helpers ---------------------------------------------------- */

static TT_ALWAYS_INLINE float tt_remainder_f32(float a, float b) {
  float m = fmodf(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

static TT_ALWAYS_INLINE double tt_remainder_f64(double a, double b) {
  double m = fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

/* PyTorch's div_floor_floating: floor of the exact quotient, computed from
 * fmod so it does not round up across an integer. */
static double tt_floor_div_f64(double a, double b) {
  if (b == 0) return a / b;
  double mod = fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1.0;
  double fd;
  if (div != 0) {
    fd = floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = copysign(0.0, a / b);
  }
  return fd;
}

static float tt_floor_div_f32(float a, float b) {
  if (b == 0) return a / b;
  float mod = fmodf(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1.0f;
  float fd;
  if (div != 0) {
    fd = floorf(div);
    if (div - fd > 0.5f) fd += 1.0f;
  } else {
    fd = copysignf(0.0f, a / b);
  }
  return fd;
}

static int64_t tt_pow_i64(int64_t a, int64_t b) {
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (b % 2) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, base = (uint64_t)a;
  while (b) {
    if (b & 1) result *= base;
    b /= 2;
    base *= base;
  }
  return (int64_t)result;
}

static TT_ALWAYS_INLINE int64_t tt_floor_div_i64(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps */
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}

static TT_ALWAYS_INLINE int64_t tt_remainder_i64(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

static TT_ALWAYS_INLINE int64_t tt_fmod_i64(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  return a % b;
}

/* ---- per-class block functions ----------------------------------------
 * o[i] = op(a[i*sa], b[i*sb]) with sa, sb in {0, 1}. The body is inlined
 * once per stride combination so each loop vectorises with known strides. */

static TT_ALWAYS_INLINE void tt_binary_f32_body(tt_binary_op_t op,
                                                const float *a, int64_t sa,
                                                const float *b, int64_t sb,
                                                float *o, int64_t n) {
  int64_t i;
#define TT_EACH(expr)                 \
  for (i = 0; i < n; ++i) {           \
    float x = a[i * sa], y = b[i * sb]; \
    o[i] = (expr);                    \
  }                                   \
  break;
  switch (op) {
    case TT_BIN_ADD: TT_EACH(x + y)
    case TT_BIN_SUB: TT_EACH(x - y)
    case TT_BIN_MUL: TT_EACH(x * y)
    case TT_BIN_DIV: TT_EACH(x / y)
    case TT_BIN_POW: TT_EACH(powf(x, y))
    case TT_BIN_MAX: TT_EACH(fmaxf(x, y))
    case TT_BIN_MIN: TT_EACH(fminf(x, y))
    case TT_BIN_EQ: TT_EACH(x == y)
    case TT_BIN_NE: TT_EACH(x != y)
    case TT_BIN_LT: TT_EACH(x < y)
    case TT_BIN_LE: TT_EACH(x <= y)
    case TT_BIN_GT: TT_EACH(x > y)
    case TT_BIN_GE: TT_EACH(x >= y)
    case TT_BIN_LOGICAL_AND: TT_EACH((x != 0) & (y != 0))
    case TT_BIN_LOGICAL_OR: TT_EACH((x != 0) | (y != 0))
    case TT_BIN_LOGICAL_XOR: TT_EACH((x != 0) ^ (y != 0))
    case TT_BIN_ATAN2: TT_EACH(atan2f(x, y))
    case TT_BIN_REMAINDER: TT_EACH(tt_remainder_f32(x, y))
    case TT_BIN_FMOD: TT_EACH(fmodf(x, y))
    case TT_BIN_FLOOR_DIV: TT_EACH(tt_floor_div_f32(x, y))
    case TT_BIN_HYPOT: TT_EACH(hypotf(x, y))
    case TT_BIN_MAXIMUM_NAN: TT_EACH((x != x || y != y) ? NAN : (x < y ? y : x))
    case TT_BIN_MINIMUM_NAN: TT_EACH((x != x || y != y) ? NAN : (y < x ? y : x))
    default: break; /* integer-only ops are rejected by the driver */
  }
#undef TT_EACH
}

TT_TARGET_CLONES
static void tt_binary_f32(tt_binary_op_t op, const float *a, int64_t sa,
                          const float *b, int64_t sb, float *o, int64_t n) {
  if (sa && sb) {
    tt_binary_f32_body(op, a, 1, b, 1, o, n);
  } else if (sa) {
    tt_binary_f32_body(op, a, 1, b, 0, o, n);
  } else if (sb) {
    tt_binary_f32_body(op, a, 0, b, 1, o, n);
  } else {
    tt_binary_f32_body(op, a, 0, b, 0, o, n);
  }
}

static void tt_binary_f64(tt_binary_op_t op, const double *a, int64_t sa,
                          const double *b, int64_t sb, double *o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double x = a[i * sa], y = b[i * sb], r = 0;
    switch (op) {
      case TT_BIN_ADD: r = x + y; break;
      case TT_BIN_SUB: r = x - y; break;
      case TT_BIN_MUL: r = x * y; break;
      case TT_BIN_DIV: r = x / y; break;
      case TT_BIN_POW: r = pow(x, y); break;
      case TT_BIN_MAX: r = fmax(x, y); break;
      case TT_BIN_MIN: r = fmin(x, y); break;
      case TT_BIN_EQ: r = x == y; break;
      case TT_BIN_NE: r = x != y; break;
      case TT_BIN_LT: r = x < y; break;
      case TT_BIN_LE: r = x <= y; break;
      case TT_BIN_GT: r = x > y; break;
      case TT_BIN_GE: r = x >= y; break;
      case TT_BIN_LOGICAL_AND: r = (x != 0) & (y != 0); break;
      case TT_BIN_LOGICAL_OR: r = (x != 0) | (y != 0); break;
      case TT_BIN_LOGICAL_XOR: r = (x != 0) ^ (y != 0); break;
      case TT_BIN_ATAN2: r = atan2(x, y); break;
      case TT_BIN_REMAINDER: r = tt_remainder_f64(x, y); break;
      case TT_BIN_FMOD: r = fmod(x, y); break;
      case TT_BIN_FLOOR_DIV: r = tt_floor_div_f64(x, y); break;
      case TT_BIN_HYPOT: r = hypot(x, y); break;
      case TT_BIN_MAXIMUM_NAN: r = (x != x || y != y) ? NAN : (x < y ? y : x); break;
      case TT_BIN_MINIMUM_NAN: r = (x != x || y != y) ? NAN : (y < x ? y : x); break;
      default: break;
    }
    o[i] = r;
  }
}

static TT_ALWAYS_INLINE void tt_binary_i64_body(tt_binary_op_t op,
                                                const int64_t *a, int64_t sa,
                                                const int64_t *b, int64_t sb,
                                                int64_t *o, int64_t n) {
  int64_t i;
#define TT_EACH(expr)                     \
  for (i = 0; i < n; ++i) {               \
    int64_t x = a[i * sa], y = b[i * sb]; \
    o[i] = (expr);                        \
  }                                       \
  break;
  switch (op) {
    case TT_BIN_ADD: TT_EACH((int64_t)((uint64_t)x + (uint64_t)y))
    case TT_BIN_SUB: TT_EACH((int64_t)((uint64_t)x - (uint64_t)y))
    case TT_BIN_MUL: TT_EACH((int64_t)((uint64_t)x * (uint64_t)y))
    case TT_BIN_POW: TT_EACH(tt_pow_i64(x, y))
    case TT_BIN_MAX:
    case TT_BIN_MAXIMUM_NAN: TT_EACH(x < y ? y : x)
    case TT_BIN_MIN:
    case TT_BIN_MINIMUM_NAN: TT_EACH(y < x ? y : x)
    case TT_BIN_EQ: TT_EACH(x == y)
    case TT_BIN_NE: TT_EACH(x != y)
    case TT_BIN_LT: TT_EACH(x < y)
    case TT_BIN_LE: TT_EACH(x <= y)
    case TT_BIN_GT: TT_EACH(x > y)
    case TT_BIN_GE: TT_EACH(x >= y)
    case TT_BIN_LOGICAL_AND: TT_EACH((x != 0) & (y != 0))
    case TT_BIN_LOGICAL_OR: TT_EACH((x != 0) | (y != 0))
    case TT_BIN_LOGICAL_XOR: TT_EACH((x != 0) ^ (y != 0))
    case TT_BIN_BITWISE_AND: TT_EACH(x & y)
    case TT_BIN_BITWISE_OR: TT_EACH(x | y)
    case TT_BIN_BITWISE_XOR: TT_EACH(x ^ y)
    case TT_BIN_REMAINDER: TT_EACH(tt_remainder_i64(x, y))
    case TT_BIN_FMOD: TT_EACH(tt_fmod_i64(x, y))
    case TT_BIN_FLOOR_DIV: TT_EACH(tt_floor_div_i64(x, y))
    /* Shifting the int64 value then truncating to the storage width gives
     * the narrow types' results too (0 / sign fill past their width). */
    case TT_BIN_SHIFT_LEFT:
      TT_EACH((y < 0 || y >= 64) ? 0 : (int64_t)((uint64_t)x << y))
    case TT_BIN_SHIFT_RIGHT:
      TT_EACH((y < 0 || y >= 64) ? (x < 0 ? -1 : 0) : (x >> y))
    default: break; /* float-only ops are rejected by the driver */
  }
#undef TT_EACH
}

TT_TARGET_CLONES
static void tt_binary_i64(tt_binary_op_t op, const int64_t *a, int64_t sa,
                          const int64_t *b, int64_t sb, int64_t *o, int64_t n) {
  if (sa && sb) {
    tt_binary_i64_body(op, a, 1, b, 1, o, n);
  } else if (sa) {
    tt_binary_i64_body(op, a, 1, b, 0, o, n);
  } else if (sb) {
    tt_binary_i64_body(op, a, 0, b, 1, o, n);
  } else {
    tt_binary_i64_body(op, a, 0, b, 0, o, n);
  }
}

/* ---- driver ------------------------------------------------------------ */

static int tt_binary_out_is_bool(tt_binary_op_t op) {
  return (op >= TT_BIN_EQ && op <= TT_BIN_GE) ||
         (op >= TT_BIN_LOGICAL_AND && op <= TT_BIN_LOGICAL_XOR);
}

static int tt_binary_int_only(tt_binary_op_t op) {
  return (op >= TT_BIN_BITWISE_AND && op <= TT_BIN_BITWISE_XOR) ||
         op == TT_BIN_SHIFT_LEFT || op == TT_BIN_SHIFT_RIGHT;
}

static int tt_binary_float_only(tt_binary_op_t op) {
  return op == TT_BIN_DIV || op == TT_BIN_ATAN2 || op == TT_BIN_HYPOT;
}

typedef struct tt_binary_ctx_s {
  tt_binary_op_t op;
  const tt_view_t *a, *b;
  tt_view_t *out;
  tt_iter_t it;
} tt_binary_ctx_t;

/* Makes a dense (or stride-0) operand of the compute type for one block:
 * in place when possible, otherwise converted into buf. */
static const float *tt_operand_f32(const tt_view_t *v, int64_t off,
                                   int64_t stride, int64_t len, float *buf,
                                   int64_t *out_stride) {
  if (v->dtype == TT_F32 && (stride == 0 || stride == 1)) {
    *out_stride = stride;
    return (const float *)v->data + off;
  }
  *out_stride = stride == 0 ? 0 : 1;
  tt_load_f32(v->data, v->dtype, off, stride, stride == 0 ? 1 : len, buf);
  return buf;
}

static const int64_t *tt_operand_i64(const tt_view_t *v, int64_t off,
                                     int64_t stride, int64_t len, int64_t *buf,
                                     int64_t *out_stride) {
  if (v->dtype == TT_I64 && (stride == 0 || stride == 1)) {
    *out_stride = stride;
    return (const int64_t *)v->data + off;
  }
  *out_stride = stride == 0 ? 0 : 1;
  tt_load_i64(v->data, v->dtype, off, stride, stride == 0 ? 1 : len, buf);
  return buf;
}

/* Inner runs shorter than this (batch norm's [N, C, 2, 2] against
 * [1, C, 1, 1]) are gathered into whole blocks before the op runs, so the
 * op's dispatch is paid once per block, not once per run. */
#define TT_BINARY_SHORT_RUN 16

static TT_ALWAYS_INLINE void tt_run_f32(const tt_view_t *v, int64_t off, int64_t stride,
                                        int64_t len, float *dst) {
  if (v->dtype != TT_F32) {
    tt_load_f32(v->data, v->dtype, off, stride, len, dst);
    return;
  }
  const float *src = (const float *)v->data + off;
  if (stride == 0) {
    float x = *src;
    for (int64_t q = 0; q < len; ++q) dst[q] = x;
  } else if (stride == 1) {
    memcpy(dst, src, (size_t)len * sizeof(float));
  } else {
    for (int64_t q = 0; q < len; ++q) dst[q] = src[q * stride];
  }
}

/* Whether operand k (1 or 2) is f32 laid out as the output is, so a
 * block of it is read in place. */
static int tt_binary_flat(const tt_binary_ctx_t *c, int k) {
  const tt_iter_t *it = &c->it;
  if ((k == 1 ? c->a : c->b)->dtype != TT_F32) return 0;
  for (int d = 0; d < it->rank; ++d)
    if (it->strides[k][d] != it->strides[0][d]) return 0;
  return 1;
}

/* The two innermost dims are stepped here; the iterator is re-seeked once
 * per block or per pass over them. */
static void tt_binary_short_runs_f32(const tt_binary_ctx_t *c, int64_t begin, int64_t end) {
  const tt_iter_t *it = &c->it;
  int l0 = it->rank - 1, l1 = it->rank - 2;
  int64_t D0 = it->dims[l0], D1 = it->dims[l1];
  int64_t sa0 = it->strides[1][l0], sb0 = it->strides[2][l0];
  int64_t sa1 = it->strides[1][l1], sb1 = it->strides[2][l1];
  tt_dtype_t od = c->out->dtype;
  float ba[TT_BLOCK], bb[TT_BLOCK], bo[TT_BLOCK];
  int flat_a = tt_binary_flat(c, 1), flat_b = tt_binary_flat(c, 2);
  tt_iter_pos_t pos;
  for (int64_t i = begin; i < end;) {
    int64_t n = tt_min64(TT_BLOCK, end - i);
    for (int64_t done = 0; done < n && !(flat_a && flat_b);) {
      tt_iter_seek(it, i + done, &pos);
      int64_t j = pos.idx[l0], r = pos.idx[l1];
      int64_t ra = pos.off[1] - j * sa0, rb = pos.off[2] - j * sb0;
      while (done < n && r < D1) {
        int64_t len = tt_min64(D0 - j, n - done);
        if (!flat_a) tt_run_f32(c->a, ra + j * sa0, sa0, len, ba + done);
        if (!flat_b) tt_run_f32(c->b, rb + j * sb0, sb0, len, bb + done);
        done += len;
        j += len;
        if (j == D0) {
          j = 0;
          ++r;
          ra += sa1;
          rb += sb1;
        }
      }
    }
    const float *pa = flat_a ? (const float *)c->a->data + i : ba;
    const float *pb = flat_b ? (const float *)c->b->data + i : bb;
    float *po = od == TT_F32 ? (float *)c->out->data + i : bo;
    tt_binary_f32(c->op, pa, 1, pb, 1, po, n);
    if (po == bo) tt_store_f32(bo, n, c->out->data, od, i);
    i += n;
  }
}

static void tt_binary_range(void *arg, int64_t begin, int64_t end) {
  const tt_binary_ctx_t *c = (const tt_binary_ctx_t *)arg;
  const tt_iter_t *it = &c->it;
  tt_class_t cls = tt_class_of(c->a->dtype);
  tt_dtype_t od = c->out->dtype;
  int last = it->rank - 1;
  if (cls == TT_CLASS_F32 && it->rank > 1 && it->dims[last] < TT_BINARY_SHORT_RUN) {
    tt_binary_short_runs_f32(c, begin, end);
    return;
  }
  int64_t sa = it->strides[1][last], sb = it->strides[2][last];
  tt_iter_pos_t pos;
  tt_iter_seek(it, begin, &pos);
  for (int64_t i = begin; i < end;) {
    int64_t len = tt_min64(tt_min64(tt_iter_inner_left(it, &pos), end - i),
                           TT_BLOCK);
    int64_t ka, kb;
    if (cls == TT_CLASS_F32) {
      float ba[TT_BLOCK], bb[TT_BLOCK], bo[TT_BLOCK];
      const float *pa = tt_operand_f32(c->a, pos.off[1], sa, len, ba, &ka);
      const float *pb = tt_operand_f32(c->b, pos.off[2], sb, len, bb, &kb);
      float *po = od == TT_F32 ? (float *)c->out->data + i : bo;
      tt_binary_f32(c->op, pa, ka, pb, kb, po, len);
      if (po == bo) tt_store_f32(bo, len, c->out->data, od, i);
    } else if (cls == TT_CLASS_F64) {
      double ba[TT_BLOCK], bb[TT_BLOCK], bo[TT_BLOCK];
      tt_load_f64(c->a->data, c->a->dtype, pos.off[1], sa, len, ba);
      tt_load_f64(c->b->data, c->b->dtype, pos.off[2], sb, len, bb);
      tt_binary_f64(c->op, ba, 1, bb, 1, bo, len);
      tt_store_f64(bo, len, c->out->data, od, i);
    } else {
      int64_t ba[TT_BLOCK], bb[TT_BLOCK], bo[TT_BLOCK];
      const int64_t *pa = tt_operand_i64(c->a, pos.off[1], sa, len, ba, &ka);
      const int64_t *pb = tt_operand_i64(c->b, pos.off[2], sb, len, bb, &kb);
      int64_t *po = od == TT_I64 ? (int64_t *)c->out->data + i : bo;
      tt_binary_i64(c->op, pa, ka, pb, kb, po, len);
      if (po == bo) tt_store_i64(bo, len, c->out->data, od, i);
    }
    tt_iter_advance(it, &pos, len);
    i += len;
  }
}

tt_status_t tt_kernel_binary(tt_binary_op_t op, const tt_view_t *a,
                             const tt_view_t *b, tt_view_t *out) {
  static const char *name = "binary";
  TT_RETURN_IF_ERROR(tt_check_view(name, "a", a));
  TT_RETURN_IF_ERROR(tt_check_view(name, "b", b));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if ((unsigned)op >= TT_BIN_COUNT) {
    return tt_status_make(TT_INVALID_ARGUMENT, "binary: unknown op %d", (int)op);
  }
  if (a->dtype != b->dtype) {
    return tt_status_make(TT_TYPE_ERROR,
                          "binary op %d: operand dtypes differ (%s and %s)",
                          (int)op, tt_dtype_name(a->dtype),
                          tt_dtype_name(b->dtype));
  }
  tt_dtype_t want = tt_binary_out_is_bool(op) ? TT_BOOL : a->dtype;
  if (out->dtype != want) {
    return tt_status_make(TT_TYPE_ERROR,
                          "binary op %d: out dtype is %s, expected %s", (int)op,
                          tt_dtype_name(out->dtype), tt_dtype_name(want));
  }
  tt_class_t cls = tt_class_of(a->dtype);
  if (cls != TT_CLASS_INT && tt_binary_int_only(op)) {
    return tt_status_make(TT_TYPE_ERROR,
                          "binary op %d is not implemented for dtype %s "
                          "(integer and bool only)",
                          (int)op, tt_dtype_name(a->dtype));
  }
  if (cls == TT_CLASS_INT && tt_binary_float_only(op)) {
    return tt_status_make(TT_TYPE_ERROR,
                          "binary op %d is not implemented for dtype %s "
                          "(floating point only)",
                          (int)op, tt_dtype_name(a->dtype));
  }
  tt_binary_ctx_t ctx = {.op = op, .a = a, .b = b, .out = out};
  const tt_view_t *ins[2] = {a, b};
  TT_RETURN_IF_ERROR(tt_iter_init(name, &out->shape, ins, 2, &ctx.it));
  tt_parallel_for(tt_view_numel(out), TT_GRAIN, tt_binary_range, &ctx);
  return NULL;
}
