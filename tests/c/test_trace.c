/* Unit tests for the trace recorder (sessions, nesting per thread, JSON,
 * engine spans of a real graph run) and the debug service (graph diff,
 * clone, analysis blocks, save-tensors log, IR frames, stage dumps). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_harness.h"
#include "torchtpu/debug.h"
#include "torchtpu/torchtpu.h"
#include "torchtpu/trace.h"

static int find_event(const char *name, tt_trace_event_t *out) {
  int64_t n = tt_trace_event_count(NULL);
  int found = 0;
  for (int64_t i = 0; i < n; ++i) {
    tt_trace_event_t e;
    tt_trace_get_event(i, &e);
    if (strcmp(e.name, name) == 0) {
      if (out) *out = e;
      found++;
    }
  }
  return found;
}

static int contains(const tt_trace_event_t *outer, const tt_trace_event_t *inner) {
  return outer->tid == inner->tid && outer->start_ns <= inner->start_ns &&
         inner->start_ns + inner->dur_ns <= outer->start_ns + outer->dur_ns;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = calloc(1, (size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = 0;
  fclose(f);
  return buf;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) ++n;
  return n;
}

static void *thread_spans(void *arg) {
  (void)arg;
  tt_trace_set_thread_name("worker \"w\"");
  tt_trace_begin("outer_w", "user", "{\"k\":1}");
  tt_trace_begin("inner_w", "user", NULL);
  tt_trace_end();
  tt_trace_end();
  return NULL;
}

static void test_sessions_and_nesting(void) {
  tt_trace_begin("before", "user", NULL); /* opened while off: never recorded */
  CHECK(tt_trace_now() == 0);
  CHECK_OK(tt_trace_start());
  tt_status_t st = tt_trace_start();
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT &&
        strstr(tt_status_message(st), "already being recorded"));
  tt_status_free(st);
  CHECK(tt_trace_active());
  tt_trace_set_thread_name("main");
  tt_trace_end(); /* closes "before" unrecorded */
  tt_trace_begin("outer", "user", NULL);
  int64_t t0 = tt_trace_now();
  CHECK(t0 > 0);
  tt_trace_complete("complete", "lazy", t0, "{\"bytes\":%d}", 42);
  tt_trace_end();
  pthread_t th;
  pthread_create(&th, NULL, thread_spans, NULL);
  pthread_join(th, NULL);
  /* Unbalanced ends and over-deep begins are absorbed. */
  tt_trace_end();
  for (int i = 0; i < 300; ++i) tt_trace_begin("deep", "user", NULL);
  for (int i = 0; i < 300; ++i) tt_trace_end();
  CHECK_OK(tt_trace_stop());
  st = tt_trace_stop();
  CHECK(st && strstr(tt_status_message(st), "no trace is being recorded"));
  tt_status_free(st);
  tt_trace_begin("after", "user", NULL);
  tt_trace_end();

  tt_trace_event_t outer, complete, ow, iw;
  CHECK(find_event("before", NULL) == 0 && find_event("after", NULL) == 0);
  CHECK(find_event("outer", &outer) == 1 && find_event("complete", &complete) == 1);
  CHECK(find_event("outer_w", &ow) == 1 && find_event("inner_w", &iw) == 1);
  CHECK(find_event("deep", NULL) == 256);
  CHECK(contains(&outer, &complete) && contains(&ow, &iw));
  CHECK(outer.tid != ow.tid);
  CHECK(strcmp(complete.cat, "lazy") == 0 && strcmp(complete.args, "{\"bytes\":42}") == 0);
  CHECK(strcmp(ow.args, "{\"k\":1}") == 0 && iw.args == NULL);
  CHECK(strcmp(tt_trace_thread_name(outer.tid), "main") == 0);
  CHECK(strcmp(tt_trace_thread_name(ow.tid), "worker \"w\"") == 0);

  char *json = NULL;
  CHECK_OK(tt_trace_to_json(&json));
  CHECK(json && strncmp(json, "{\"traceEvents\":[\n", 17) == 0);
  CHECK(strstr(json, "\"args\":{\"name\":\"worker \\\"w\\\"\"}") != NULL);
  CHECK(strstr(json, "{\"name\":\"complete\",\"cat\":\"lazy\",\"ph\":\"X\"") != NULL);
  CHECK(strstr(json, "\"dropped_events\":0") != NULL);
  CHECK(count_of(json, "\"ph\":\"X\"") == 4 + 256);
  /* Braces balance (no string here contains one). */
  CHECK(count_of(json, "{") == count_of(json, "}"));
  char path[] = "/tmp/tt_trace_test_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  CHECK_OK(tt_trace_write_json(path));
  char *back = read_file(path);
  /* Same events (device threads may have registered names meanwhile). */
  CHECK(back && strncmp(back, "{\"traceEvents\":[\n", 17) == 0);
  CHECK(back && count_of(back, "\"ph\":\"X\"") == 4 + 256 &&
        strstr(back, "{\"name\":\"complete\",\"cat\":\"lazy\",\"ph\":\"X\""));
  free(back);
  unlink(path);
  st = tt_trace_write_json("/nonexistent-dir/x.json");
  CHECK(st && tt_status_code(st) == TT_IO_ERROR && strstr(tt_status_message(st), "/nonexistent-dir/x.json"));
  tt_status_free(st);
  free(json);
}

static tt_tensor_t *upload(const float *data, int64_t n) {
  tt_shape_t s = {1, {n}};
  tt_tensor_t *t = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, data, &t));
  return t;
}

static void test_engine_spans(void) {
  float a[4] = {1, 2, 3, 4}, out[4] = {0};
  CHECK_OK(tt_trace_start());
  tt_tensor_t *x = upload(a, 4);
  int64_t op = TT_BIN_MUL;
  tt_tensor_t *ops[2] = {x, x}, *y = NULL;
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &op, 1, NULL, 0, &y));
  CHECK_OK(tt_lazy_sync(-1, 1, "step"));
  CHECK_OK(tt_tensor_to_host(y, out, sizeof(out)));
  CHECK_OK(tt_trace_stop());
  CHECK(out[3] == 16.0f);
  tt_trace_event_t up, build, compile, sync, exec, down;
  CHECK(find_event("TransferToDevice", &up) == 1 && strstr(up.args, "\"bytes\":16"));
  CHECK(find_event("BuildGraph", &build) == 1 && strstr(build.args, "\"cached\":0"));
  CHECK(find_event("Compile", &compile) == 1);
  CHECK(find_event("Execute", &exec) == 1);
  CHECK(find_event("TransferFromDevice", &down) == 1 && strstr(down.args, "\"bytes\":16"));
  CHECK(find_event("SyncTensorsGraph", &sync) == 2); /* the sync, and the read's */
  int64_t n = tt_trace_event_count(NULL);
  for (int64_t i = 0; i < n; ++i) { /* the first SyncTensorsGraph holds the cut */
    tt_trace_event_t e;
    tt_trace_get_event(i, &e);
    if (!strcmp(e.name, "SyncTensorsGraph") && strstr(e.args, "\"device\":-1")) sync = e;
  }
  CHECK(contains(&sync, &build) && contains(&sync, &compile));
  CHECK(build.start_ns + build.dur_ns <= compile.start_ns);
  CHECK(strcmp(compile.cat, "compile") == 0 && strcmp(exec.cat, "execute") == 0);
  /* Same graph hash on the compile and the execution, on the device thread. */
  CHECK(strcmp(strstr(compile.args, "\"hash\""), "") != 0);
  CHECK(strncmp(strstr(exec.args, "\"hash\""), strstr(compile.args, "\"hash\""), 25) == 0);
  CHECK(exec.tid != compile.tid && strcmp(tt_trace_thread_name(exec.tid), "xla:0") == 0);
  CHECK(exec.start_ns >= compile.start_ns + compile.dur_ns);
  CHECK(down.start_ns >= exec.start_ns + exec.dur_ns);
  tt_tensor_release(y);
  tt_tensor_release(x);
}

/* ---- debug service ---- */

static tt_graph_t *graph_of(tt_tensor_t *t) {
  tt_node_t *root = tt_tensor_node(t);
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&root, 1, &g, NULL));
  return g;
}

static void test_graph_diff_and_clone(void) {
  float a[12] = {0};
  tt_shape_t s34 = {2, {3, 4}}, s64 = {2, {6, 4}};
  tt_tensor_t *x = NULL, *w = NULL, *r1 = NULL, *r2 = NULL, *r3 = NULL, *r4 = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s34, a, &x));
  float b[24] = {0};
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s64, b, &w));
  int64_t sum0[4] = {TT_RED_SUM, 1, 0, TT_F32}, sum1[4] = {TT_RED_SUM, 2, 0, TT_F32};
  CHECK_OK(tt_tensor_op(TT_OP_REDUCE, 0, &x, 1, sum0, 4, NULL, 0, &r1));
  CHECK_OK(tt_tensor_op(TT_OP_REDUCE, 0, &x, 1, sum1, 4, NULL, 0, &r2));
  CHECK_OK(tt_tensor_op(TT_OP_REDUCE, 0, &w, 1, sum0, 4, NULL, 0, &r3));
  int64_t neg = TT_UN_NEG;
  CHECK_OK(tt_tensor_op(TT_OP_UNARY, 0, &x, 1, &neg, 1, NULL, 0, &r4));
  tt_graph_t *g1 = graph_of(r1), *g2 = graph_of(r2), *g3 = graph_of(r3), *g4 = graph_of(r4);

  char *d = tt_debug_graph_diff(g1, g1, 8);
  CHECK(d && strcmp(d, "") == 0);
  free(d);
  d = tt_debug_graph_diff(g1, g2, 8);
  CHECK(strcmp(d, "output 0: shape [4] -> [3]\ninstruction %1 (reduce): attribute i[1] 1 -> 2\n") == 0);
  free(d);
  d = tt_debug_graph_diff(g1, g3, 8);
  CHECK(strcmp(d, "input 0: shape [3, 4] -> [6, 4]\n") == 0);
  free(d);
  d = tt_debug_graph_diff(g1, g4, 8);
  CHECK(strcmp(d, "output 0: shape [4] -> [3, 4]\ninstruction %1: op reduce -> unary\n") == 0);
  free(d);
  d = tt_debug_graph_diff(g1, g4, 1);
  CHECK(strcmp(d, "output 0: shape [4] -> [3, 4]\n... (1 more differences)\n") == 0);
  free(d);

  tt_graph_t *c = tt_debug_graph_clone(g2);
  CHECK(c && c->hash == g2->hash && c->key_size == g2->key_size &&
        memcmp(c->key, g2->key, c->key_size) == 0 && c->num_instrs == g2->num_instrs);
  char *t1 = tt_graph_to_text(c), *t2 = tt_graph_to_text(g2);
  CHECK(strcmp(t1, t2) == 0);
  free(t1);
  free(t2);
  d = tt_debug_graph_diff(c, g2, 8);
  CHECK(strcmp(d, "") == 0);
  free(d);
  tt_graph_destroy(c);
  tt_graph_destroy(g1);
  tt_graph_destroy(g2);
  tt_graph_destroy(g3);
  tt_graph_destroy(g4);
  tt_tensor_t *all[6] = {x, w, r1, r2, r3, r4};
  for (int i = 0; i < 6; ++i) tt_tensor_release(all[i]);
}

static void test_analysis_save_tensors_ir_frames_and_dumps(void) {
  char dir[] = "/tmp/tt_debug_test_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char dbg[256], save[256], dumps[256];
  snprintf(dbg, sizeof(dbg), "%s/debug.txt", dir);
  snprintf(save, sizeof(save), "%s/graphs.txt", dir);
  snprintf(dumps, sizeof(dumps), "%s/dumps", dir);
  tt_debug_config_t saved;
  tt_debug_get_config(&saved);
  tt_debug_config_t c = {.level = 2, .max_frames = 1, .ir_debug = 1, .debug_file = dbg,
                         .save_tensors_file = save, .dump_dir = dumps};
  CHECK_OK(tt_debug_configure(&c));
  CHECK(tt_debug_flags() == (TT_DEBUG_ANALYSIS | TT_DEBUG_EXEC_ANALYSIS | TT_DEBUG_IR_FRAMES |
                             TT_DEBUG_SAVE_TENSORS | TT_DEBUG_DUMP_DIR));
  tt_debug_config_t bad = c;
  bad.save_tensors_fmt = 7;
  tt_status_t st = tt_debug_configure(&bad);
  CHECK(st && strstr(tt_status_message(st), "save_tensors_fmt must be 0 (text) or 1 (dot), got 7"));
  tt_status_free(st);

  tt_debug_frame_t frames[2] = {{"sync", "/x/torch_xla/__init__.py", 50, 1},
                                {"train", "/home/u/train.py", 7, 0}};
  tt_debug_frame_t op_frames[1] = {{"forward", "/home/u/model.py", 12, 0}};
  float a[6] = {1, 2, 3, 4, 5, 6};
  for (int round = 0; round < 2; ++round) {
    tt_tensor_t *x = upload(a, 5 + round), *y = NULL;
    int64_t un = TT_UN_EXP;
    tt_debug_set_node_frames(op_frames, 1);
    CHECK_OK(tt_tensor_op(TT_OP_UNARY, 0, &x, 1, &un, 1, NULL, 0, &y));
    tt_debug_clear_node_frames();
    CHECK(strcmp(tt_tensor_node(y)->debug_info, "forward@/home/u/model.py:12") == 0);
    tt_debug_set_context(frames, 2, NULL);
    CHECK_OK(tt_lazy_sync(-1, 1, NULL));
    tt_debug_clear_context();
    tt_tensor_release(y);
    tt_tensor_release(x);
  }
  CHECK_OK(tt_debug_configure(&saved));

  char *text = read_file(dbg);
  CHECK(text != NULL);
  if (text) {
    CHECK(count_of(text, "Compilation Analysis: Compilation Cause\n"
                         "Compilation Analysis:   user torch_xla.sync\n") == 2);
    CHECK(count_of(text, "Execution Analysis: Execution Cause\n") == 2);
    CHECK(count_of(text, "Post Compilation Analysis: Graph input size: 0.000000 GB\n") == 2);
    /* max_frames 1: one frame, then the ellipsis. */
    CHECK(count_of(text, "Python Frame Triggered Execution: \n"
                         "Compilation Analysis:   sync (/x/torch_xla/__init__.py:50)\n"
                         "Compilation Analysis:   ..........\n") == 2);
    /* The second compile at the same call site (train.py:7) explains itself. */
    CHECK(count_of(text, "Compilation Analysis: Recompilation Cause\n") == 1);
    CHECK(strstr(text, "compiled before for train (/home/u/train.py:7):\n"
                       "Compilation Analysis:   input 0: shape [5] -> [6]\n") != NULL);
    char *last = tt_debug_last_recompile();
    CHECK(last && strstr(last, "input 0: shape [5] -> [6]\n"));
    free(last);
  }
  free(text);
  /* The log of device 0 (PyTorch/XLA appends the device ordinal). */
  char save0[272];
  snprintf(save0, sizeof(save0), "%s.0", save);
  CHECK(read_file(save) == NULL);
  text = read_file(save0);
  CHECK(text && count_of(text, "[ScheduleSyncTensorsGraph]\nTensorsGraphInfo:\n"
                               "  sync (/x/torch_xla/__init__.py:50)\n"
                               "  train (/home/u/train.py:7)\n\nHashes: (") == 2);
  CHECK(text && count_of(text, " unary(%0), i={") == 2 &&
        count_of(text, ", location=forward@/home/u/model.py:12") == 2);
  free(text);

  /* Dumps: one "build" file per compile, named <pid>-<seq>-<hash>-build.txt. */
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "ls %s | grep -c '^%d-[0-9]\\{6\\}-[0-9a-f]\\{16\\}-build.txt$'", dumps,
           (int)getpid());
  FILE *p = popen(cmd, "r");
  int nfiles = 0;
  CHECK(p && fscanf(p, "%d", &nfiles) == 1);
  if (p) pclose(p);
  CHECK(nfiles == 2);
  CHECK_OK(tt_debug_dump(1, "off", "txt", "x")); /* dumps off again: no-op */
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  CHECK_OK(tt_runtime_init(2));
  test_sessions_and_nesting();
  test_engine_spans();
  test_graph_diff_and_clone();
  test_analysis_save_tensors_ir_frames_and_dumps();
  return test_summary();
}
