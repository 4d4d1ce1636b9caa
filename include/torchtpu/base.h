/* torchtpu base types: status words, dtypes, shapes.
 *
 * A status is an owned pointer: NULL means OK; anything else carries an error
 * code and a message and must be released with tt_status_free (or handed to
 * the caller). This keeps the OK path free of allocation, as IREE does.
 */
#ifndef TORCHTPU_BASE_H_
#define TORCHTPU_BASE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tt_code_e {
  TT_OK = 0,
  TT_INVALID_ARGUMENT = 1, /* a user's mistake: wrong shape, bad value */
  TT_TYPE_ERROR = 2,       /* a user's mistake: wrong dtype */
  TT_OUT_OF_RANGE = 3,     /* an index out of bounds */
  TT_UNIMPLEMENTED = 4,    /* no kernel / lowering for this case */
  TT_RESOURCE_EXHAUSTED = 5,
  TT_INTERNAL = 6,
  TT_IO_ERROR = 7,
} tt_code_t;

typedef struct tt_status_s *tt_status_t;

/* Creates an error status with a printf-style message; code must not be
 * TT_OK. Returns a status the caller owns. Never fails (falls back to a
 * static out-of-memory status). */
tt_status_t tt_status_make(tt_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
tt_code_t tt_status_code(tt_status_t status);
/* The message stays valid until tt_status_free. "" for OK. */
const char *tt_status_message(tt_status_t status);
void tt_status_free(tt_status_t status);

#define TT_RETURN_IF_ERROR(expr)            \
  do {                                      \
    tt_status_t tt_status_tmp_ = (expr);    \
    if (tt_status_tmp_) return tt_status_tmp_; \
  } while (0)

/* Element types. The numbering is part of the Python binding's contract. */
typedef enum tt_dtype_e {
  TT_F32 = 0,
  TT_F64 = 1,
  TT_F16 = 2,
  TT_BF16 = 3,
  TT_I8 = 4,
  TT_U8 = 5,
  TT_I16 = 6,
  TT_I32 = 7,
  TT_I64 = 8,
  TT_BOOL = 9,
  /* complex64: interleaved (real, imaginary) float32 pairs, 8 bytes. Only
   * data movement, bitcast (to and from float32 pairs) and fft take it;
   * arithmetic is lowered on the float32 pairs (see tt_dtype_is_complex). */
  TT_C64 = 10,
  TT_DTYPE_COUNT = 11,
} tt_dtype_t;

size_t tt_dtype_size(tt_dtype_t dtype);
const char *tt_dtype_name(tt_dtype_t dtype);
int tt_dtype_is_float(tt_dtype_t dtype);
int tt_dtype_is_complex(tt_dtype_t dtype);

#define TT_MAX_RANK 8

typedef struct tt_shape_s {
  int32_t rank;
  int64_t dims[TT_MAX_RANK];
} tt_shape_t;

int64_t tt_shape_numel(const tt_shape_t *shape);
/* The shape as a matrix split at dim axis: *outer the product of dims
 * [0, axis), *inner that of [axis, rank). */
void tt_shape_split(const tt_shape_t *shape, int axis, int64_t *outer, int64_t *inner);
int tt_shape_equal(const tt_shape_t *a, const tt_shape_t *b);
/* Whether x broadcasts to `to` (right-aligned; each dim equal or 1). */
int tt_shape_broadcasts_to(const tt_shape_t *x, const tt_shape_t *to);

/* Conversions between storage dtypes and f32/f64/i64, used by kernels. */
float tt_f16_to_f32(uint16_t h);
uint16_t tt_f32_to_f16(float f);
float tt_bf16_to_f32(uint16_t h);
uint16_t tt_f32_to_bf16(float f); /* round to nearest even, NaN preserved */

/* ---- environment (env.c) ---- */
/* The value of environment variable `name` when it is a positive decimal
 * integer, else dflt (unset, empty, zero, negative or not a number). */
int64_t tt_env_positive(const char *name, int64_t dflt);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_BASE_H_ */
