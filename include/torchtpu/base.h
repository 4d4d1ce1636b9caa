/* torchtpu base types: status words, dtypes, shapes.
 *
 * A status is an owned pointer: NULL means OK; anything else carries an error
 * code and a message and must be released with tt_status_free (or handed to
 * the caller). This keeps the OK path free of allocation, as IREE does.
 */
#ifndef TORCHTPU_BASE_H_
#define TORCHTPU_BASE_H_

#include <stdarg.h>
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

/* ---- configuration (config.c) ----
 * Every setting the engine takes from the environment, parsed in one place.
 * The environment is read on the first tt_config() call (pthread_once) and
 * again only by tt_config_reload(); nothing else in the engine calls getenv.
 * Settings that were read once at first use keep that behaviour: their
 * users cache the value (the thread count, the allocator cache, the
 * in-flight limit, the execution profile, the pool's hold and host core).
 * The others are read from the config at each use, so a reload changes
 * them for what runs next (graph passes, tier choice, executable planning,
 * the debug service). */
typedef struct tt_config_s {
  /* runtime */
  int64_t allocator_cache_bytes; /* TORCHTPU_ALLOCATOR_CACHE_MB (MiB, default 1024; <= 0: 0, no cache) */
  int64_t max_inflight;          /* TORCHTPU_MAX_INFLIGHT (positive, default 2) */
  int conv_epilogue;             /* TORCHTPU_CONV_EPILOGUE: 0 when "0", else 1 */
  int attention_keep_probs;      /* TORCHTPU_ATTENTION_KEEP_PROBS: 0 when "0", else 1 */
  int buffer_plan;               /* TORCHTPU_BUFFER_PLAN: 0 when "0", else 1 */
  int exec_profile;              /* TORCHTPU_EXEC_PROFILE: 0 unset/""/"0", 2 "shapes", else 1 */
  double collective_timeout_s;   /* TORCHTPU_COLLECTIVE_TIMEOUT_S (positive seconds, fractions allowed; default 300) */
  /* kernels */
  int64_t num_threads;           /* TORCHTPU_NUM_THREADS (positive; 0 when unset: one per core) */
  int host_core;                 /* TORCHTPU_HOST_CORE: 0 when "0", else 1 */
  int pool_hold;                 /* TORCHTPU_POOL_HOLD: 0 when "0", else 1 */
  /* passes */
  int fusion;                    /* TORCHTPU_FUSION: 0 when "0", else 1 */
  int reduce_fusion;             /* TORCHTPU_REDUCE_FUSION: 0 when "0", else 1 */
  int movement_collapse;         /* TORCHTPU_MOVEMENT_COLLAPSE: 0 when "0", else 1 */
  int verify_ir;                 /* TORCHTPU_VERIFY_IR: 1 when "1", else 0 */
  /* tier-1 code generation */
  int tier;                      /* TORCHTPU_TIER: 0 for "0", 1 for "1", else -1 (automatic) */
  const char *cc;                /* TORCHTPU_CC when set and not empty, else "cc" */
  /* the debug service (PyTorch/XLA's variables) */
  int debug_level;               /* PT_XLA_DEBUG_LEVEL; unset: 100 when PT_XLA_DEBUG is true, else 0 */
  int debug_max_frames;          /* PT_XLA_DEBUG_MAX_FRAME (default 8; negative: 8) */
  int local_rank;                /* PJRT_LOCAL_PROCESS_RANK (default 0) */
  int ir_debug;                  /* XLA_IR_DEBUG is true (1/true/yes/on/y) */
  int save_tensors_dot;          /* XLA_SAVE_TENSORS_FMT is "dot" (any case) */
  const char *save_tensors_fmt;  /* XLA_SAVE_TENSORS_FMT as set, NULL when unset or empty */
  const char *debug_file;        /* PT_XLA_DEBUG_FILE, NULL when unset or empty */
  const char *save_tensors_file; /* XLA_SAVE_TENSORS_FILE, NULL when unset or empty */
  const char *dump_dir;          /* TORCHTPU_DUMP_DIR, NULL when unset or empty */
} tt_config_t;

/* The configuration; never NULL. The pointer and its strings stay valid
 * for the life of the process (a reload publishes a new copy). */
const tt_config_t *tt_config(void);
/* Reads the environment again and publishes the result. Called where the
 * environment changes on purpose after start-up: the Python layer when it
 * sets a variable (torchtpu.config, debugging.configure_from_env) and C
 * tests that switch a setting between runs. */
void tt_config_reload(void);

/* ---- growable string / byte buffer (strbuf.c) ----
 * Zero-initialise (tt_strbuf_t b = {0}) and append; data stays
 * NUL-terminated after every append, len excludes the NUL. Out of memory
 * sets failed; later appends are ignored (check failed once at the end). */
typedef struct tt_strbuf_s {
  char *data;
  size_t len, cap;
  int failed;
} tt_strbuf_t;

void tt_strbuf_put(tt_strbuf_t *b, const void *bytes, size_t n);
void tt_strbuf_puts(tt_strbuf_t *b, const char *s);
void tt_strbuf_printf(tt_strbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tt_strbuf_vprintf(tt_strbuf_t *b, const char *fmt, va_list ap);
/* The text, owned by the caller (free); "" when nothing was written, NULL
 * only when even that cannot be allocated. Leaves b empty. */
char *tt_strbuf_take(tt_strbuf_t *b);
void tt_strbuf_release(tt_strbuf_t *b);

/* ---- hashing (hash.c) ----
 * Stable across runs and builds: graph keys and on-disk cache names use
 * them. */
/* The engine's starting value: FNV-1a's published offset basis
 * (14695981039346656037) with its last digit missing. Graph keys have
 * always been computed from it; it is kept so they do not change. */
#define TT_HASH_SEED 1469598103934665603ull
#define TT_FNV_PRIME 1099511628211ull
/* Byte-wise FNV-1a continuing from seed (TT_HASH_SEED to start). */
uint64_t tt_hash_fnv1a(const void *bytes, size_t n, uint64_t seed);
/* A final avalanche (MurmurHash3's mix, first two rounds): spreads the
 * high bits of h into the low ones, for table indexing. */
uint64_t tt_hash_finish(uint64_t h);
/* A 64-bit hash of a byte string: FNV-1a by 8-byte words, then
 * tt_hash_finish. */
uint64_t tt_hash_key(const void *bytes, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_BASE_H_ */
