/* The CPU backend's tier-0 executor table (exec.h), built once from the
 * family files' registrations. Graph inputs have none: the executor walk
 * binds them. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/exec.h"
#include "torchtpu/op_table.h"

/* Each family file's registrations (its last lines). */
extern const tt_cpu_exec_row_t tt_cpu_exec_rows_elementwise[], tt_cpu_exec_rows_movement[],
    tt_cpu_exec_rows_index[], tt_cpu_exec_rows_reduce[], tt_cpu_exec_rows_linalg[],
    tt_cpu_exec_rows_nn[], tt_cpu_exec_rows_norm[], tt_cpu_exec_rows_attention[],
    tt_cpu_exec_rows_collective[], tt_cpu_exec_rows_fused[];

const tt_cpu_exec_row_t *const tt_cpu_exec_families[] = {
    tt_cpu_exec_rows_elementwise, tt_cpu_exec_rows_movement,  tt_cpu_exec_rows_index,
    tt_cpu_exec_rows_reduce,      tt_cpu_exec_rows_linalg,    tt_cpu_exec_rows_nn,
    tt_cpu_exec_rows_norm,        tt_cpu_exec_rows_attention, tt_cpu_exec_rows_collective,
    tt_cpu_exec_rows_fused,       NULL,
};

tt_status_t tt_cpu_exec_table_build(const tt_cpu_exec_row_t *const *lists, tt_cpu_exec_fn *table) {
  memset(table, 0, sizeof(tt_cpu_exec_fn) * TT_OP_COUNT);
  for (; *lists; ++lists) {
    for (const tt_cpu_exec_row_t *r = *lists; r->op != TT_OP_COUNT || r->fn; ++r) {
      if ((unsigned)r->op >= TT_OP_COUNT || !r->fn)
        return tt_status_make(TT_INTERNAL, "CPU backend: a registration of op %d (%s) %s",
                              (int)r->op, tt_op_name(r->op),
                              r->fn ? "names no op" : "has no executor function");
      if (tt_op_has_flag(r->op, TT_OPF_INPUT))
        return tt_status_make(TT_INTERNAL,
                              "CPU backend: op %s is a graph input and takes no executor",
                              tt_op_name(r->op));
      if (table[r->op])
        return tt_status_make(TT_INTERNAL, "CPU backend: op %s has two executors registered",
                              tt_op_name(r->op));
      table[r->op] = r->fn;
    }
  }
  for (int op = 0; op < TT_OP_COUNT; ++op)
    if (!table[op] && !tt_op_has_flag((tt_op_t)op, TT_OPF_INPUT))
      return tt_status_make(TT_INTERNAL,
                            "CPU backend: op %s has no executor registered (a row in its "
                            "family's tt_cpu_exec_rows_* list, exec_*.c)",
                            tt_op_name((tt_op_t)op));
  return NULL;
}

/* Written once, under tt_cpu_exec_once_; read with relaxed atomic loads
 * (a plain load) so a lookup racing the build is defined: it sees NULL
 * and waits for the build in pthread_once. */
static tt_cpu_exec_fn tt_cpu_exec_table_[TT_OP_COUNT];
static pthread_once_t tt_cpu_exec_once_ = PTHREAD_ONCE_INIT;
static tt_code_t tt_cpu_exec_error_code_;      /* TT_OK: the registrations are complete */
static char tt_cpu_exec_error_[256];

/* Every op's executor while the registrations are broken. */
static tt_status_t tt_cpu_exec_refused_(const tt_cpu_exec_t *c, tt_view_t *out) {
  (void)c;
  (void)out;
  return tt_cpu_exec_table_check();
}

static void tt_cpu_exec_build_once_(void) {
  tt_cpu_exec_fn built[TT_OP_COUNT];
  tt_status_t st = tt_cpu_exec_table_build(tt_cpu_exec_families, built);
  const int broken = st != NULL;
  if (broken) {
    tt_cpu_exec_error_code_ = tt_status_code(st);
    snprintf(tt_cpu_exec_error_, sizeof tt_cpu_exec_error_, "%s", tt_status_message(st));
    tt_status_free(st);
  }
  for (int op = 0; op < TT_OP_COUNT; ++op) {
    tt_cpu_exec_fn fn = built[op];
    if (broken) fn = tt_op_has_flag((tt_op_t)op, TT_OPF_INPUT) ? NULL : tt_cpu_exec_refused_;
    __atomic_store_n(&tt_cpu_exec_table_[op], fn, __ATOMIC_RELAXED);
  }
}

tt_status_t tt_cpu_exec_table_check(void) {
  pthread_once(&tt_cpu_exec_once_, tt_cpu_exec_build_once_);
  if (tt_cpu_exec_error_code_ == TT_OK) return NULL;
  return tt_status_make(tt_cpu_exec_error_code_, "%s", tt_cpu_exec_error_);
}

tt_cpu_exec_fn tt_cpu_executor(tt_op_t op) {
  if ((unsigned)op >= TT_OP_COUNT) return NULL;
  tt_cpu_exec_fn fn = __atomic_load_n(&tt_cpu_exec_table_[op], __ATOMIC_RELAXED);
  if (fn) return fn;
  /* Before the build, or a graph input (the walk never asks for one). */
  pthread_once(&tt_cpu_exec_once_, tt_cpu_exec_build_once_);
  return __atomic_load_n(&tt_cpu_exec_table_[op], __ATOMIC_RELAXED);
}
