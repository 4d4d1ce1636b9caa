/* The StableHLO emitter's lowering table (emit_internal.h), built once
 * from the family files' registrations; tt_stablehlo_op_lowering reads its
 * descriptions. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/stablehlo/emit_internal.h"
#include "torchtpu/op_table.h"

/* Each family file's registrations (its last lines). */
extern const tt_shlo_row_t tt_shlo_rows_core[], tt_shlo_rows_elementwise[], tt_shlo_rows_nn[],
    tt_shlo_rows_attention[], tt_shlo_rows_layer_norm[], tt_shlo_rows_data[],
    tt_shlo_rows_spmd[], tt_shlo_rows_barrier[];

const tt_shlo_row_t *const tt_shlo_families[] = {
    tt_shlo_rows_core,       tt_shlo_rows_elementwise, tt_shlo_rows_nn,
    tt_shlo_rows_attention,  tt_shlo_rows_layer_norm,  tt_shlo_rows_data,
    tt_shlo_rows_spmd,       tt_shlo_rows_barrier,     NULL,
};

/* The rows into t, refusing the unsound ones; ops without a row stay NULL. */
static tt_status_t tt_shlo_table_fill_(const tt_shlo_row_t *const *lists, tt_shlo_table_t *t) {
  memset(t, 0, sizeof *t);
  for (; *lists; ++lists) {
    for (const tt_shlo_row_t *r = *lists; r->op != TT_OP_COUNT; ++r) {
      if ((unsigned)r->op >= TT_OP_COUNT)
        return tt_status_make(TT_INTERNAL, "stablehlo: a registration of op %d names no op",
                              (int)r->op);
      const char *name = tt_op_name(r->op);
      if (!r->how || !r->how[0])
        return tt_status_make(TT_INTERNAL,
                              "stablehlo: the registration of op %s has no description", name);
      int input = tt_op_has_flag(r->op, TT_OPF_INPUT);
      if (input && r->fn)
        return tt_status_make(TT_INTERNAL,
                              "stablehlo: op %s is a graph input (a function argument) and "
                              "takes no lowering function",
                              name);
      if (!input && !r->fn)
        return tt_status_make(TT_INTERNAL,
                              "stablehlo: op %s is registered without a lowering function", name);
      if (t->how[r->op])
        return tt_status_make(TT_INTERNAL, "stablehlo: op %s has two lowerings registered",
                              name);
      t->fn[r->op] = r->fn;
      t->how[r->op] = r->how;
    }
  }
  return NULL;
}

static tt_status_t tt_shlo_table_missing_(const tt_shlo_table_t *t) {
  for (int op = 0; op < TT_OP_COUNT; ++op)
    if (!t->how[op])
      return tt_status_make(TT_INTERNAL,
                            "stablehlo: op %s has no lowering registered (a row in its "
                            "family's tt_shlo_rows_* list, emit_*.c)",
                            tt_op_name((tt_op_t)op));
  return NULL;
}

tt_status_t tt_shlo_table_build(const tt_shlo_row_t *const *lists, tt_shlo_table_t *t) {
  tt_status_t st = tt_shlo_table_fill_(lists, t);
  return st ? st : tt_shlo_table_missing_(t);
}

/* Written once under tt_shlo_once_; every reader calls pthread_once first,
 * which orders the writes before its reads. */
static tt_shlo_table_t tt_shlo_table_;
static pthread_once_t tt_shlo_once_ = PTHREAD_ONCE_INIT;
static int tt_shlo_table_sound_;           /* no unsound row: the table is usable */
static tt_code_t tt_shlo_table_error_code_; /* TT_OK: the registrations are complete */
static char tt_shlo_table_error_[256];

static void tt_shlo_build_once_(void) {
  tt_status_t st = tt_shlo_table_fill_(tt_shlo_families, &tt_shlo_table_);
  tt_shlo_table_sound_ = st == NULL;
  if (!st) st = tt_shlo_table_missing_(&tt_shlo_table_);
  else memset(&tt_shlo_table_, 0, sizeof tt_shlo_table_);
  if (st) {
    tt_shlo_table_error_code_ = tt_status_code(st);
    snprintf(tt_shlo_table_error_, sizeof tt_shlo_table_error_, "%s", tt_status_message(st));
    tt_status_free(st);
  }
}

tt_status_t tt_shlo_table_check(void) {
  pthread_once(&tt_shlo_once_, tt_shlo_build_once_);
  if (tt_shlo_table_error_code_ == TT_OK) return NULL;
  return tt_status_make(tt_shlo_table_error_code_, "%s", tt_shlo_table_error_);
}

const tt_shlo_table_t *tt_shlo_table(void) {
  pthread_once(&tt_shlo_once_, tt_shlo_build_once_);
  return tt_shlo_table_sound_ ? &tt_shlo_table_ : NULL;
}

const char *tt_stablehlo_op_lowering(tt_op_t op) {
  if ((unsigned)op >= TT_OP_COUNT) return NULL;
  pthread_once(&tt_shlo_once_, tt_shlo_build_once_);
  return tt_shlo_table_.how[op];
}
