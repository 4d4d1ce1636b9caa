/* Unit tests for the configuration read once (src/base/config.c): the
 * defaults, each variable's parsing, and reloads (a snapshot handed out
 * before a reload stays readable). Also the string buffer and the hashes
 * of src/base. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/base.h"

static const char *kVars[] = {
    "TORCHTPU_ALLOCATOR_CACHE_MB", "TORCHTPU_MAX_INFLIGHT", "TORCHTPU_CONV_EPILOGUE",
    "TORCHTPU_ATTENTION_KEEP_PROBS", "TORCHTPU_BUFFER_PLAN", "TORCHTPU_EXEC_PROFILE",
    "TORCHTPU_NUM_THREADS", "TORCHTPU_HOST_CORE", "TORCHTPU_POOL_HOLD", "TORCHTPU_FUSION",
    "TORCHTPU_REDUCE_FUSION", "TORCHTPU_MOVEMENT_COLLAPSE", "TORCHTPU_VERIFY_IR", "TORCHTPU_TIER",
    "TORCHTPU_CC", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG", "PT_XLA_DEBUG_MAX_FRAME",
    "PJRT_LOCAL_PROCESS_RANK", "XLA_IR_DEBUG", "XLA_SAVE_TENSORS_FMT", "PT_XLA_DEBUG_FILE",
    "XLA_SAVE_TENSORS_FILE", "TORCHTPU_DUMP_DIR",
};

static void clear_vars(void) {
  for (size_t i = 0; i < sizeof(kVars) / sizeof(kVars[0]); ++i) unsetenv(kVars[i]);
  tt_config_reload();
}

static void test_defaults(void) {
  clear_vars();
  const tt_config_t *c = tt_config();
  CHECK(c->allocator_cache_bytes == (int64_t)1024 << 20);
  CHECK(c->max_inflight == 2);
  CHECK(c->conv_epilogue == 1 && c->attention_keep_probs == 1 && c->buffer_plan == 1);
  CHECK(c->exec_profile == 0);
  CHECK(c->num_threads == 0 && c->host_core == 1 && c->pool_hold == 1);
  CHECK(c->fusion == 1 && c->reduce_fusion == 1 && c->movement_collapse == 1);
  CHECK(c->verify_ir == 0);
  CHECK(c->tier == -1);
  CHECK(strcmp(c->cc, "cc") == 0);
  CHECK(c->debug_level == 0 && c->debug_max_frames == 8 && c->local_rank == 0);
  CHECK(c->ir_debug == 0 && c->save_tensors_dot == 0 && c->save_tensors_fmt == NULL);
  CHECK(!c->debug_file && !c->save_tensors_file && !c->dump_dir);
}

static void test_parsing(void) {
  clear_vars();
  setenv("TORCHTPU_ALLOCATOR_CACHE_MB", "0", 1);
  setenv("TORCHTPU_MAX_INFLIGHT", "-3", 1); /* not positive: the default */
  setenv("TORCHTPU_CONV_EPILOGUE", "0", 1);
  setenv("TORCHTPU_BUFFER_PLAN", "00", 1);  /* only exactly "0" turns a switch off */
  setenv("TORCHTPU_EXEC_PROFILE", "shapes", 1);
  setenv("TORCHTPU_NUM_THREADS", "3x", 1);  /* not a number: the default */
  setenv("TORCHTPU_HOST_CORE", "0", 1);
  setenv("TORCHTPU_FUSION", "0", 1);
  setenv("TORCHTPU_VERIFY_IR", "1", 1);
  setenv("TORCHTPU_TIER", "1", 1);
  setenv("TORCHTPU_CC", "", 1);             /* empty: "cc" */
  setenv("PT_XLA_DEBUG", "yes", 1);
  setenv("PT_XLA_DEBUG_MAX_FRAME", "-1", 1);
  setenv("XLA_IR_DEBUG", "On", 1);
  setenv("XLA_SAVE_TENSORS_FMT", "DOT", 1);
  setenv("TORCHTPU_DUMP_DIR", "/tmp/dumps", 1);
  tt_config_reload();
  const tt_config_t *c = tt_config();
  CHECK(c->allocator_cache_bytes == 0);
  CHECK(c->max_inflight == 2);
  CHECK(c->conv_epilogue == 0 && c->buffer_plan == 1 && c->attention_keep_probs == 1);
  CHECK(c->exec_profile == 2);
  CHECK(c->num_threads == 0 && c->host_core == 0 && c->pool_hold == 1);
  CHECK(c->fusion == 0 && c->reduce_fusion == 1 && c->verify_ir == 1);
  CHECK(c->tier == 1);
  CHECK(strcmp(c->cc, "cc") == 0);
  CHECK(c->debug_level == 100, "PT_XLA_DEBUG alone: level %d", c->debug_level);
  CHECK(c->debug_max_frames == 8 && c->ir_debug == 1 && c->save_tensors_dot == 1);
  CHECK(c->save_tensors_fmt && strcmp(c->save_tensors_fmt, "DOT") == 0);
  CHECK(c->dump_dir && strcmp(c->dump_dir, "/tmp/dumps") == 0);

  setenv("TORCHTPU_EXEC_PROFILE", "1", 1);
  setenv("TORCHTPU_TIER", "0", 1);
  setenv("TORCHTPU_CC", "/usr/bin/gcc", 1);
  setenv("PT_XLA_DEBUG_LEVEL", "1", 1);      /* the level wins over PT_XLA_DEBUG */
  setenv("TORCHTPU_MAX_INFLIGHT", "5", 1);
  /* Not seen until a reload: the environment is read once. */
  CHECK(tt_config()->tier == 1);
  tt_config_reload();
  const tt_config_t *d = tt_config();
  CHECK(d != c);
  CHECK(d->exec_profile == 1 && d->tier == 0 && d->max_inflight == 5);
  CHECK(strcmp(d->cc, "/usr/bin/gcc") == 0);
  CHECK(d->debug_level == 1);
  /* The earlier snapshot stays valid and unchanged. */
  CHECK(c->tier == 1 && strcmp(c->dump_dir, "/tmp/dumps") == 0);
  clear_vars();
}

static void test_strbuf(void) {
  tt_strbuf_t b = {0};
  char *empty = tt_strbuf_take(&b);
  CHECK(empty && empty[0] == 0);
  free(empty);
  tt_strbuf_puts(&b, "graph ");
  for (int i = 0; i < 1000; ++i) tt_strbuf_printf(&b, "%d,", i);
  tt_strbuf_put(&b, "end", 3);
  CHECK(!b.failed && b.len == strlen(b.data));
  CHECK(strncmp(b.data, "graph 0,1,2,", 12) == 0);
  CHECK(strcmp(b.data + b.len - 7, "999,end") == 0);
  size_t len = b.len;
  char *s = tt_strbuf_take(&b);
  CHECK(strlen(s) == len && b.data == NULL && b.len == 0);
  free(s);
  tt_strbuf_puts(&b, "x");
  tt_strbuf_release(&b);
  CHECK(b.data == NULL && b.cap == 0);
}

static void test_hashes(void) {
  /* FNV-1a of "a" from the published offset basis, from the engine's
   * seed, and continuation from a seed. */
  CHECK(tt_hash_fnv1a("a", 1, 14695981039346656037ull) == 0xaf63dc4c8601ec8cull);
  CHECK(tt_hash_fnv1a("a", 1, TT_HASH_SEED) == 0x44bd8ad473cd9906ull);
  CHECK(tt_hash_fnv1a("ab", 2, TT_HASH_SEED) ==
        tt_hash_fnv1a("b", 1, tt_hash_fnv1a("a", 1, TT_HASH_SEED)));
  const char key[] = "0123456789abcdefXYZ"; /* two words and a tail */
  CHECK(tt_hash_key(key, sizeof key - 1) == tt_hash_key(key, sizeof key - 1));
  CHECK(tt_hash_key(key, sizeof key - 1) != tt_hash_key(key, sizeof key - 2));
  CHECK(tt_hash_finish(0) == 0 && tt_hash_finish(1) != 1);
}

int main(void) {
  test_defaults();
  test_parsing();
  test_strbuf();
  test_hashes();
  return test_summary();
}
