/* The backend seam (include/torchtpu/backend.h): the CPU backend is active
 * by default; a backend made active configures the passes of the graphs
 * compiled after it and runs every execution, synchronous or queued; an
 * executable remembers the backend that prepared it; a failing prepare
 * leaves the graph to the caller. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/backend.h"
#include "torchtpu/torchtpu.h"

/* A backend that counts its calls and runs graphs as the CPU backend does
 * (its prepare is the CPU backend's, so the CPU executor can read what it
 * prepared), and one whose prepare fails. */
static int g_configured = 0, g_executed = 0;
static tt_backend_t g_counting, g_refusing;

static void counting_configure(const tt_backend_t *self, tt_optimize_options_t *opts) {
  CHECK(self == &g_counting);
  opts->no_engine_forms = 1;
  ++g_configured;
}

static tt_status_t refusing_prepare(const tt_backend_t *self, const tt_graph_t *graph,
                                    void **out) {
  (void)self;
  (void)graph;
  *out = NULL;
  return tt_status_make(TT_UNIMPLEMENTED, "refusing backend: no");
}

static tt_status_t counting_execute(const tt_backend_t *self, tt_executable_t *exe,
                                    int32_t device, const tt_input_value_t *inputs,
                                    void *const *outputs) {
  (void)self;
  __atomic_add_fetch(&g_executed, 1, __ATOMIC_RELAXED);
  const tt_backend_t *cpu = tt_backend_cpu();
  return cpu->execute(cpu, exe, device, inputs, outputs);
}

/* x * 3 over a [4] f32 parameter, as a graph. */
static tt_graph_t *times3(tt_buffer_t *buf, tt_node_t **keep) {
  tt_shape_t s = {1, {4}};
  tt_node_t *p = tt_node_create_param(buf, TT_F32, &s, 0);
  tt_node_t *k = tt_node_create_scalar(TT_F32, 3.0, 0, 0);
  tt_node_t *ops[2] = {p, k}, *m = NULL;
  int64_t mul = TT_BIN_MUL;
  CHECK_OK(tt_node_create(TT_OP_BINARY, 0, ops, 2, &mul, 1, NULL, 0, &m));
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&m, 1, &g, NULL));
  tt_node_release(p);
  tt_node_release(k);
  *keep = m;
  return g;
}

static int run_times3(tt_executable_t *exe, tt_buffer_t *buf) {
  const tt_graph_t *g = tt_executable_graph(exe);
  tt_input_value_t in[2];
  memset(in, 0, sizeof(in));
  for (int32_t k = 0; k < g->num_inputs; ++k) {
    const tt_instr_t *x = &g->instrs[g->input_instr[k]];
    if (x->op == TT_OP_PARAM) in[k].buffer = buf;
    else in[k].scalar_f = 3.0;
  }
  float out[4] = {0};
  void *outs[1] = {out};
  if (!CHECK_OK(tt_executable_run(exe, in, outs))) return 0;
  return out[0] == 3.0f && out[1] == 6.0f && out[2] == 9.0f && out[3] == 12.0f;
}

static void test_default_is_cpu(void) {
  CHECK(tt_backend_active() == tt_backend_cpu());
  CHECK(strcmp(tt_backend_cpu()->name, "cpu") == 0);
  CHECK(tt_backend_cpu()->configure_passes == NULL);
  CHECK(tt_backend_cpu()->prepare && tt_backend_cpu()->release && tt_backend_cpu()->execute);
}

static void test_active_backend_runs_and_prepares(void) {
  float x[4] = {1, 2, 3, 4};
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, x, sizeof(x), &buf));
  tt_node_t *m1 = NULL, *m2 = NULL;
  tt_executable_t *cpu_exe = NULL, *own_exe = NULL;
  tt_graph_t *g1 = times3(buf, &m1);
  CHECK_OK(tt_executable_create(g1, &cpu_exe));
  CHECK(cpu_exe && tt_executable_backend(cpu_exe) == tt_backend_cpu());

  tt_backend_set_active(&g_counting);
  CHECK(tt_backend_active() == &g_counting);
  /* An executable the CPU backend prepared runs on the active backend. */
  g_executed = 0;
  CHECK(run_times3(cpu_exe, buf), "x * 3 through the counting backend");
  CHECK(g_executed == 1, "executed %d times", g_executed);
  /* Executables made now are the active backend's. */
  tt_graph_t *g2 = times3(buf, &m2);
  CHECK_OK(tt_executable_create(g2, &own_exe));
  CHECK(own_exe && tt_executable_backend(own_exe) == &g_counting &&
        tt_executable_prepared(own_exe) != NULL);
  CHECK(own_exe && run_times3(own_exe, buf));
  CHECK(g_executed == 2, "executed %d times", g_executed);

  /* Back to the CPU backend: both still run, without the counting one. */
  tt_backend_set_active(NULL);
  CHECK(tt_backend_active() == tt_backend_cpu());
  CHECK(run_times3(cpu_exe, buf) && own_exe && run_times3(own_exe, buf));
  CHECK(g_executed == 2, "executed %d times", g_executed);
  tt_executable_release(cpu_exe);
  tt_executable_release(own_exe);
  tt_node_release(m1);
  tt_node_release(m2);
  tt_buffer_release(buf);
}

static void test_failed_prepare_keeps_graph(void) {
  float x[4] = {1, 2, 3, 4};
  tt_buffer_t *buf = NULL;
  CHECK_OK(tt_buffer_from_host(0, x, sizeof(x), &buf));
  tt_node_t *m = NULL;
  tt_graph_t *g = times3(buf, &m);
  tt_backend_set_active(&g_refusing);
  tt_executable_t *exe = (tt_executable_t *)&exe; /* overwritten with NULL */
  CHECK_CODE(tt_executable_create(g, &exe), TT_UNIMPLEMENTED, "refused prepare");
  CHECK(exe == NULL);
  tt_backend_set_active(NULL);
  tt_graph_destroy(g); /* still the caller's: ASan reports a double free otherwise */
  tt_node_release(m);
  tt_buffer_release(buf);
}

/* The lazy path: the compile driver asks the active backend to configure
 * the passes, and queued executions run on it. */
static void test_lazy_path_uses_active_backend(void) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  tt_shape_t s = {2, {2, 3}};
  tt_backend_set_active(&g_counting);
  g_configured = 0;
  g_executed = 0;
  tt_tensor_t *a = NULL, *k = NULL, *m = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, x, &a));
  /* A scalar no other test uses: a graph the cache has not seen. */
  CHECK_OK(tt_tensor_scalar(0, TT_F32, 0.25, 0, &k));
  int64_t sub = TT_BIN_SUB;
  tt_tensor_t *ops[2] = {a, k};
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &sub, 1, NULL, 0, &m));
  float out[6] = {0};
  CHECK_OK(tt_tensor_to_host(m, out, sizeof(out)));
  CHECK(out[0] == 0.75f && out[5] == 5.75f, "got %g .. %g", out[0], out[5]);
  CHECK(g_configured == 1, "configured %d times", g_configured);
  CHECK(__atomic_load_n(&g_executed, __ATOMIC_RELAXED) == 1, "executed %d times", g_executed);
  tt_tensor_release(a);
  tt_tensor_release(k);
  tt_tensor_release(m);
  tt_runtime_wait(-1);
  tt_backend_set_active(NULL);
}

int main(void) {
  CHECK_OK(tt_runtime_init(1));
  g_counting = *tt_backend_cpu();
  g_counting.name = "counting";
  g_counting.configure_passes = counting_configure;
  g_counting.execute = counting_execute;
  g_refusing = *tt_backend_cpu();
  g_refusing.name = "refusing";
  g_refusing.prepare = refusing_prepare;
  test_default_is_cpu();
  test_active_backend_runs_and_prepares();
  test_failed_prepare_keeps_graph();
  test_lazy_path_uses_active_backend();
  tt_runtime_wait(-1);
  return test_summary();
}
