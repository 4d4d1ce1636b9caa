/* The tier-1 service: builds a graph's generated C with the system C
 * compiler (on a background thread, or at once when asked), loads it with
 * dlopen and installs its kernels into the executable; keeps built
 * libraries in the persistent cache when one is configured.
 *
 * Persistent cache entries are named by the graph hash and a second hash
 * of the graph key, and carry the full identity (engine version, compile
 * flags, CPU features, both hashes) in the string `tt_gen_key` inside the
 * library; a library whose identity differs, or that does not load, is
 * counted (PersistentCacheDeserializeFailure) and rebuilt, never used.
 * Entries are written to a private temporary file and renamed into place,
 * so readers never see a partial file and concurrent writers of the same
 * entry each leave a complete one. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/fastmath.h"
#include "torchtpu/codegen.h"
#include "torchtpu/debug.h"
#include "torchtpu/metrics.h"

#define TT_ENGINE_VERSION "0.1.0"
#define TT_CFLAGS "-O3 -march=native -mprefer-vector-width=512 -fPIC -shared -fno-math-errno -fno-trapping-math -std=c11"

static pthread_mutex_t tt_t1_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tt_t1_cond_ = PTHREAD_COND_INITIALIZER;
static char *tt_cache_dir_ = NULL;
static int tt_cache_readonly_ = 0;
static int tt_no_compiler_ = 0;
static int tt_worker_started_ = 0;
static int tt_pending_ = 0;

typedef struct tt_t1_req_s {
  struct tt_t1_req_s *next;
  tt_executable_t *exe;
} tt_t1_req_t;
static tt_t1_req_t *tt_queue_head_ = NULL, *tt_queue_tail_ = NULL;

tt_tier_mode_t tt_tier_mode(void) {
  int tier = tt_config()->tier; /* TORCHTPU_TIER */
  return tier == 0 ? TT_TIER_0 : tier == 1 ? TT_TIER_1 : TT_TIER_AUTO;
}

static tt_status_t tt_mkdirs(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(buf))
    return tt_status_make(TT_INVALID_ARGUMENT, "cache path '%s' is empty or too long", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (mkdir(buf, 0775) != 0 && errno != EEXIST)
        return tt_status_make(TT_IO_ERROR, "cannot create cache directory '%s': %s", buf,
                              strerror(errno));
      buf[i] = c;
    }
  }
  return NULL;
}

tt_status_t tt_persistent_cache_init(const char *path, int readonly) {
  if (path && !readonly) TT_RETURN_IF_ERROR(tt_mkdirs(path));
  if (path && readonly) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return tt_status_make(TT_IO_ERROR, "read-only cache directory '%s' does not exist", path);
  }
  char *copy = path ? strdup(path) : NULL;
  if (path && !copy) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_lock(&tt_t1_lock_);
  free(tt_cache_dir_);
  tt_cache_dir_ = copy;
  tt_cache_readonly_ = readonly;
  pthread_mutex_unlock(&tt_t1_lock_);
  return NULL;
}

const char *tt_persistent_cache_path(void) { return tt_cache_dir_; }

static const char *tt_cpu_features(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  return "x86-64";
#else
  return "generic";
#endif
}

/* A hash of the optimised graph's structure (instructions, wiring, fused
 * programs): the graph key names the unoptimised graph, and the passes run
 * (fusion options, engine changes) decide which kernels a library holds. */
static uint64_t tt_structure_hash(const tt_graph_t *g, uint64_t h) {
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    int64_t head[3] = {in->op, in->num_operands, in->num_iattrs};
    h = tt_hash_fnv1a(head, sizeof(head), h);
    h = tt_hash_fnv1a(in->operands, sizeof(int32_t) * (size_t)in->num_operands, h);
    h = tt_hash_fnv1a(in->iattrs, sizeof(int64_t) * (size_t)in->num_iattrs, h);
    if (in->op != TT_OP_FUSED || !in->fused) continue;
    for (int32_t s = 0; s < in->fused->num_ops; ++s) {
      const tt_fused_op_t *op = &in->fused->ops[s];
      int64_t step[6] = {op->op, op->dtype, op->args[0], op->args[1], op->args[2], op->code};
      h = tt_hash_fnv1a(step, sizeof(step), h);
    }
  }
  return h;
}

/* The identity a library must carry; also its cache file stem. */
static void tt_identity(const tt_graph_t *g, char *key, size_t key_size, char *stem,
                        size_t stem_size) {
  /* The shared math the generated code embeds is part of its identity: a
   * library built with other exp/tanh/erf is never loaded. */
  static const char fastmath[] = TT_FASTMATH_SOURCE;
  uint64_t h2 = tt_hash_fnv1a(fastmath, sizeof fastmath - 1, 0x84222325cbf29ce4ull);
  h2 = tt_structure_hash(g, tt_hash_fnv1a(g->key, g->key_size, h2));
  snprintf(key, key_size, "torchtpu-%s|%s|%s|%016llx|%016llx", TT_ENGINE_VERSION, TT_CFLAGS,
           tt_cpu_features(), (unsigned long long)g->hash, (unsigned long long)h2);
  snprintf(stem, stem_size, "%016llx-%016llx-%s-%s", (unsigned long long)g->hash,
           (unsigned long long)h2, TT_ENGINE_VERSION, tt_cpu_features());
}

static const char *tt_cc(void) { return tt_config()->cc; /* TORCHTPU_CC */ }

/* Runs the compiler; 0 on success, 127 when the compiler is missing. */
static int tt_run_cc(const char *src_path, const char *so_path) {
  char cmd[8192];
  snprintf(cmd, sizeof(cmd), "%s %s -o '%s' '%s' -lm 2>/dev/null", tt_cc(), TT_CFLAGS, so_path,
           src_path);
  int rc = system(cmd);
  if (rc == -1) return 127;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

/* Loads lib_path, checks its identity, installs its kernels. */
static int tt_load_library(tt_executable_t *exe, const char *lib_path, const char *key) {
  void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
  const char *found = dlsym(h, "tt_gen_key");
  if (!found || strcmp(found, key) != 0) {
    dlclose(h);
    return 0;
  }
  const tt_graph_t *g = tt_executable_graph(exe);
  for (int32_t i = 0; i < g->num_instrs; ++i) {
    if (!tt_codegen_supported(g, i)) continue;
    char name[64];
    snprintf(name, sizeof(name), "tt_gen_%d", i);
    void *fn = dlsym(h, name);
    if (!fn) {
      dlclose(h);
      return 0;
    }
    tt_fused_fn_t f;
    memcpy(&f, &fn, sizeof(f));
    tt_executable_install_kernel(exe, i, f);
  }
  tt_executable_adopt_library(exe, h);
  return 1;
}

static void tt_notice_once(const char *what) {
  static int said = 0;
  if (!__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
    fprintf(stderr, "torchtpu: %s; running tier 0 (interpreted kernels) only\n", what);
}

static void tt_build(tt_executable_t *exe) {
  const tt_graph_t *g = tt_executable_graph(exe);
  char key[512], stem[128];
  tt_identity(g, key, sizeof(key), stem, sizeof(stem));
  pthread_mutex_lock(&tt_t1_lock_);
  char *dir = tt_cache_dir_ ? strdup(tt_cache_dir_) : NULL;
  int readonly = tt_cache_readonly_;
  pthread_mutex_unlock(&tt_t1_lock_);
  char cached[4096];
  if (dir) {
    snprintf(cached, sizeof(cached), "%s/%s.so", dir, stem);
    if (access(cached, R_OK) == 0) {
      if (tt_load_library(exe, cached, key)) {
        tt_counter_add("PersistentCacheHit", 1);
        free(dir);
        return;
      }
      tt_counter_add("PersistentCacheDeserializeFailure", 1);
    } else {
      tt_counter_add("PersistentCacheMiss", 1);
    }
  }
  if (__atomic_load_n(&tt_no_compiler_, __ATOMIC_ACQUIRE)) {
    free(dir);
    return;
  }
  char *src = tt_codegen_emit(g, key);
  if (!src) {
    free(dir);
    return; /* nothing to generate */
  }
  if (tt_debug_dump_enabled()) tt_status_free(tt_debug_dump(g->hash, "generated", "c", src));
  char tmpdir[] = "/tmp/torchtpu-cc-XXXXXX";
  if (!mkdtemp(tmpdir)) {
    free(src);
    free(dir);
    return;
  }
  char src_path[256], so_path[256];
  snprintf(src_path, sizeof(src_path), "%s/kernels.c", tmpdir);
  snprintf(so_path, sizeof(so_path), "%s/kernels.so", tmpdir);
  FILE *f = fopen(src_path, "w");
  int ok = f && fputs(src, f) >= 0;
  if (f) ok &= fclose(f) == 0;
  free(src);
  int64_t t0 = tt_now_ns();
  int rc = ok ? tt_run_cc(src_path, so_path) : 1;
  if (rc == 0) {
    tt_metric_add("Tier1CompileTime", TT_UNIT_NANOSECONDS, (double)(tt_now_ns() - t0));
    if (tt_load_library(exe, so_path, key)) {
      tt_counter_add("Tier1Compile", 1);
      if (dir && !readonly) {
        /* Publish atomically: private temp name in the cache dir, rename. */
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%s/.%s.%ld.%lx.tmp", dir, stem, (long)getpid(),
                 (unsigned long)pthread_self());
        FILE *in = fopen(so_path, "rb"), *out = fopen(tmp, "wb");
        int copied = in && out;
        char buf[65536];
        size_t n;
        while (copied && (n = fread(buf, 1, sizeof(buf), in)) > 0)
          copied = fwrite(buf, 1, n, out) == n;
        if (in) fclose(in);
        if (out) {
          copied &= fflush(out) == 0 && fsync(fileno(out)) == 0;
          copied &= fclose(out) == 0;
        }
        if (!copied || rename(tmp, cached) != 0) unlink(tmp);
      }
    }
  } else if (rc == 127) {
    __atomic_store_n(&tt_no_compiler_, 1, __ATOMIC_RELEASE);
    tt_notice_once("no C compiler found (set TORCHTPU_CC)");
  } else {
    tt_counter_add("Tier1CompileFailure", 1);
  }
  unlink(src_path);
  unlink(so_path);
  rmdir(tmpdir);
  free(dir);
}

static void *tt_t1_worker(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&tt_t1_lock_);
    while (!tt_queue_head_) pthread_cond_wait(&tt_t1_cond_, &tt_t1_lock_);
    tt_t1_req_t *r = tt_queue_head_;
    tt_queue_head_ = r->next;
    if (!tt_queue_head_) tt_queue_tail_ = NULL;
    pthread_mutex_unlock(&tt_t1_lock_);
    tt_build(r->exe);
    tt_executable_release(r->exe);
    free(r);
    pthread_mutex_lock(&tt_t1_lock_);
    tt_pending_--;
    pthread_cond_broadcast(&tt_t1_cond_);
    pthread_mutex_unlock(&tt_t1_lock_);
  }
  return NULL;
}

void tt_tier1_request(tt_executable_t *exe, int wait) {
  if (tt_tier_mode() == TT_TIER_0) return;
  int any = 0;
  const tt_graph_t *g = tt_executable_graph(exe);
  for (int32_t i = 0; i < g->num_instrs && !any; ++i) any = tt_codegen_supported(g, i);
  if (!any) return;
  if (wait) {
    tt_build(exe);
    return;
  }
  tt_t1_req_t *r = calloc(1, sizeof(*r));
  if (!r) return;
  tt_executable_retain(exe);
  r->exe = exe;
  pthread_mutex_lock(&tt_t1_lock_);
  if (!tt_worker_started_) {
    pthread_t t;
    if (pthread_create(&t, NULL, tt_t1_worker, NULL) == 0) {
      pthread_detach(t);
      tt_worker_started_ = 1;
    }
  }
  if (!tt_worker_started_) {
    pthread_mutex_unlock(&tt_t1_lock_);
    tt_executable_release(exe);
    free(r);
    return;
  }
  if (tt_queue_tail_) tt_queue_tail_->next = r;
  else tt_queue_head_ = r;
  tt_queue_tail_ = r;
  tt_pending_++;
  pthread_cond_broadcast(&tt_t1_cond_);
  pthread_mutex_unlock(&tt_t1_lock_);
}

void tt_tier1_wait_idle(void) {
  pthread_mutex_lock(&tt_t1_lock_);
  while (tt_pending_ > 0) pthread_cond_wait(&tt_t1_cond_, &tt_t1_lock_);
  pthread_mutex_unlock(&tt_t1_lock_);
}
