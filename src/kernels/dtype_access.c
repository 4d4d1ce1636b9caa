/* Reading and writing elements of any dtype as f32/f64/i64: one element
 * at a time or in strided blocks (kernel_util.h). */
#include "kernels/kernel_util.h"

#include <string.h>

/* ---- scalar access ---------------------------------------------------- */

double tt_get_f64(const void *data, tt_dtype_t dt, int64_t i) {
  switch (dt) {
    case TT_F32: return ((const float *)data)[i];
    case TT_F64: return ((const double *)data)[i];
    case TT_F16: return tt_f16_to_f32(((const uint16_t *)data)[i]);
    case TT_BF16: return tt_bf16_to_f32(((const uint16_t *)data)[i]);
    case TT_I8: return ((const int8_t *)data)[i];
    case TT_U8: return ((const uint8_t *)data)[i];
    case TT_I16: return ((const int16_t *)data)[i];
    case TT_I32: return ((const int32_t *)data)[i];
    case TT_I64: return (double)((const int64_t *)data)[i];
    case TT_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return 0;
  }
}

int64_t tt_get_i64(const void *data, tt_dtype_t dt, int64_t i) {
  switch (dt) {
    case TT_F32: return tt_f64_to_i64_trunc(((const float *)data)[i]);
    case TT_F64: return tt_f64_to_i64_trunc(((const double *)data)[i]);
    case TT_F16: return tt_f64_to_i64_trunc(tt_f16_to_f32(((const uint16_t *)data)[i]));
    case TT_BF16: return tt_f64_to_i64_trunc(tt_bf16_to_f32(((const uint16_t *)data)[i]));
    case TT_I8: return ((const int8_t *)data)[i];
    case TT_U8: return ((const uint8_t *)data)[i];
    case TT_I16: return ((const int16_t *)data)[i];
    case TT_I32: return ((const int32_t *)data)[i];
    case TT_I64: return ((const int64_t *)data)[i];
    case TT_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return 0;
  }
}

/* Integer stores wrap (two's complement), as a C++ static_cast does. */
static inline void tt_set_int_(void *data, tt_dtype_t dt, int64_t i,
                               int64_t v) {
  switch (dt) {
    case TT_I8: ((int8_t *)data)[i] = (int8_t)(uint8_t)v; break;
    case TT_U8: ((uint8_t *)data)[i] = (uint8_t)v; break;
    case TT_I16: ((int16_t *)data)[i] = (int16_t)(uint16_t)v; break;
    case TT_I32: ((int32_t *)data)[i] = (int32_t)(uint32_t)v; break;
    case TT_I64: ((int64_t *)data)[i] = v; break;
    case TT_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    default: break;
  }
}

void tt_set_f64(void *data, tt_dtype_t dt, int64_t i, double v) {
  switch (dt) {
    case TT_F32: ((float *)data)[i] = (float)v; break;
    case TT_F64: ((double *)data)[i] = v; break;
    case TT_F16: ((uint16_t *)data)[i] = tt_f32_to_f16((float)v); break;
    case TT_BF16: ((uint16_t *)data)[i] = tt_f32_to_bf16((float)v); break;
    case TT_BOOL: ((uint8_t *)data)[i] = v != 0; break;
    case TT_I64: ((int64_t *)data)[i] = tt_f64_to_i64_trunc(v); break;
    default: tt_set_int_(data, dt, i, tt_f64_to_i32_trunc(v)); break;
  }
}

void tt_set_i64(void *data, tt_dtype_t dt, int64_t i, int64_t v) {
  switch (dt) {
    case TT_F32: ((float *)data)[i] = (float)v; break;
    case TT_F64: ((double *)data)[i] = (double)v; break;
    case TT_F16: ((uint16_t *)data)[i] = tt_f32_to_f16((float)v); break;
    case TT_BF16: ((uint16_t *)data)[i] = tt_f32_to_bf16((float)v); break;
    default: tt_set_int_(data, dt, i, v); break;
  }
}

/* ---- block loads ------------------------------------------------------ */

void tt_load_f32(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, float *dst) {
  switch (dt) {
    case TT_F32: {
      const float *s = (const float *)src + off;
      if (stride == 1) {
        memcpy(dst, s, (size_t)n * sizeof(float));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case TT_F16: {
      const uint16_t *s = (const uint16_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = tt_f16_to_f32(s[i * stride]);
      return;
    }
    case TT_BF16: {
      const uint16_t *s = (const uint16_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = tt_bf16_to_f32(s[i * stride]);
      return;
    }
    case TT_F64: {
      const double *s = (const double *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = (float)s[i * stride];
      return;
    }
    case TT_I64: {
      const int64_t *s = (const int64_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = (float)s[i * stride];
      return;
    }
    case TT_I32: {
      const int32_t *s = (const int32_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = (float)s[i * stride];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = (float)tt_get_i64(src, dt, off + i * stride);
      }
      return;
  }
}

void tt_load_f64(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, double *dst) {
  switch (dt) {
    case TT_F64: {
      const double *s = (const double *)src + off;
      if (stride == 1) {
        memcpy(dst, s, (size_t)n * sizeof(double));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case TT_F32: {
      const float *s = (const float *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = tt_get_f64(src, dt, off + i * stride);
      }
      return;
  }
}

void tt_load_i64(const void *src, tt_dtype_t dt, int64_t off, int64_t stride,
                 int64_t n, int64_t *dst) {
  switch (dt) {
    case TT_I64: {
      const int64_t *s = (const int64_t *)src + off;
      if (stride == 1) {
        memcpy(dst, s, (size_t)n * sizeof(int64_t));
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case TT_I32: {
      const int32_t *s = (const int32_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      return;
    }
    case TT_BOOL:
    case TT_U8: {
      const uint8_t *s = (const uint8_t *)src + off;
      if (dt == TT_BOOL) {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride] != 0;
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = tt_get_i64(src, dt, off + i * stride);
      }
      return;
  }
}

/* ---- block stores ----------------------------------------------------- */

void tt_store_f32(const float *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off) {
  switch (dt) {
    case TT_F32:
      memcpy((float *)dst + off, src, (size_t)n * sizeof(float));
      return;
    case TT_F16: {
      uint16_t *d = (uint16_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = tt_f32_to_f16(src[i]);
      return;
    }
    case TT_BF16: {
      uint16_t *d = (uint16_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = tt_f32_to_bf16(src[i]);
      return;
    }
    case TT_F64: {
      double *d = (double *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i];
      return;
    }
    case TT_BOOL: {
      uint8_t *d = (uint8_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i] != 0;
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) tt_set_f64(dst, dt, off + i, src[i]);
      return;
  }
}

void tt_store_f64(const double *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off) {
  switch (dt) {
    case TT_F64:
      memcpy((double *)dst + off, src, (size_t)n * sizeof(double));
      return;
    case TT_F32: {
      float *d = (float *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = (float)src[i];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) tt_set_f64(dst, dt, off + i, src[i]);
      return;
  }
}

void tt_store_i64(const int64_t *src, int64_t n, void *dst, tt_dtype_t dt,
                  int64_t off) {
  switch (dt) {
    case TT_I64:
      memcpy((int64_t *)dst + off, src, (size_t)n * sizeof(int64_t));
      return;
    case TT_I32: {
      int32_t *d = (int32_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = (int32_t)(uint32_t)src[i];
      return;
    }
    case TT_BOOL: {
      uint8_t *d = (uint8_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = src[i] != 0;
      return;
    }
    case TT_F32: {
      float *d = (float *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = (float)src[i];
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) tt_set_i64(dst, dt, off + i, src[i]);
      return;
  }
}
