/* torchtpu debug service: PyTorch/XLA's debugging environment variables,
 * recompilation diffs and per-stage dumps.
 *
 *   PT_XLA_DEBUG_LEVEL=1     "Compilation Analysis" (cause, graph name/hash,
 *                            inputs/outputs, Python frames, and what differs
 *                            from the graph compiled before at the same call
 *                            site) and "Post Compilation Analysis" (sizes)
 *                            for every compile
 *   PT_XLA_DEBUG_LEVEL=2     also "Execution Analysis" for every execution
 *   PT_XLA_DEBUG=1           level 100 (everything) when no level is set
 *   PT_XLA_DEBUG_FILE=path   append the blocks to path instead of stderr
 *   PT_XLA_DEBUG_MAX_FRAME=n Python frames printed per block (default 8)
 *   PJRT_LOCAL_PROCESS_RANK  only local rank 0 prints analysis
 *   XLA_SAVE_TENSORS_FILE=p  append every cut graph to p, in the format of
 *   XLA_SAVE_TENSORS_FMT=f   f = text (default) or dot
 *   XLA_IR_DEBUG=1           IR nodes keep the Python frames that made them;
 *                            text dumps show them as location=fn@file:line
 *   TORCHTPU_DUMP_DIR=dir    one file per compile stage (tt_debug_dump):
 *                            the IR after graph build, after each pass, and
 *                            any generated C
 *
 * The environment is read once, at the first tt_debug_flags() call;
 * tt_debug_configure replaces it at run time. With everything off the lazy
 * core pays one relaxed atomic load per graph cut.
 *
 * Python frames reach the engine through a thread-local context set by the
 * binding around each engine call (tt_debug_set_context); the analysis of a
 * cut uses the frames of the thread that cut. All functions are
 * thread-safe; output blocks are written whole under one lock.
 */
#ifndef TORCHTPU_DEBUG_H_
#define TORCHTPU_DEBUG_H_

#include <stdint.h>

#include "torchtpu/base.h"
#include "torchtpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One Python frame, innermost first in every array of them. */
typedef struct tt_debug_frame_s {
  const char *function;
  const char *file;
  int32_t line;
  int32_t library; /* 1: torch / torch_xla code; 0: the user's code */
} tt_debug_frame_t;

typedef struct tt_debug_config_s {
  int32_t level;            /* PT_XLA_DEBUG_LEVEL (0 = off) */
  int32_t max_frames;       /* PT_XLA_DEBUG_MAX_FRAME */
  int32_t local_rank;       /* PJRT_LOCAL_PROCESS_RANK */
  int32_t ir_debug;         /* XLA_IR_DEBUG */
  int32_t save_tensors_fmt; /* XLA_SAVE_TENSORS_FMT: 0 text, 1 dot */
  const char *debug_file;        /* PT_XLA_DEBUG_FILE; NULL: stderr */
  const char *save_tensors_file; /* XLA_SAVE_TENSORS_FILE; NULL: off */
  const char *dump_dir;          /* TORCHTPU_DUMP_DIR; NULL: off */
} tt_debug_config_t;

/* Bits of tt_debug_flags(). */
enum {
  TT_DEBUG_ANALYSIS = 1,      /* compilation analysis is printed */
  TT_DEBUG_EXEC_ANALYSIS = 2, /* execution analysis is printed */
  TT_DEBUG_IR_FRAMES = 4,     /* XLA_IR_DEBUG */
  TT_DEBUG_SAVE_TENSORS = 8,  /* XLA_SAVE_TENSORS_FILE */
  TT_DEBUG_DUMP_DIR = 16,     /* TORCHTPU_DUMP_DIR */
};
/* What is on; 0 when nothing is. Reads the environment on first call. */
int tt_debug_flags(void);
/* 1 when the binding should capture Python frames for engine calls that
 * may cut a graph (analysis or save-tensors output is on). */
int tt_debug_wants_frames(void);

/* The configuration the environment describes now: re-reads the
 * environment (tt_config_reload, so the engine's other per-use settings
 * follow it too); the strings stay valid for the process. An unknown
 * XLA_SAVE_TENSORS_FMT (hlo, stablehlo: this engine has no HLO) falls back
 * to text with a one-line warning on stderr when configured. */
void tt_debug_config_from_env(tt_debug_config_t *out);
/* Replaces the configuration (strings copied). TT_INVALID_ARGUMENT for a
 * negative max_frames or a format other than 0/1. */
tt_status_t tt_debug_configure(const tt_debug_config_t *config);
/* The current configuration; strings stay valid until the next
 * tt_debug_configure. */
void tt_debug_get_config(tt_debug_config_t *out);

/* ---- thread-local call context (set by the Python binding) ---- */
/* Frames (innermost first, copied) of the Python code now calling into the
 * engine on this thread, and optionally an explicit cause that overrides
 * the one derived from the frames: "cause" for both analysis blocks, or
 * "compilation cause\nexecution cause" when a call both compiles and runs
 * a graph that PyTorch/XLA describes differently in the two (dynamo's
 * first call). tt_debug_clear_context forgets both. */
void tt_debug_set_context(const tt_debug_frame_t *frames, int32_t num_frames,
                          const char *cause);
void tt_debug_clear_context(void);
/* The graph name of cuts made by this thread (torch_xla.compile(name=...));
 * copied; NULL or "" clears. tt_lazy_sync's own name argument wins. */
void tt_debug_set_graph_name(const char *name);
/* Current graph name of this thread, or NULL; valid until the next set. */
const char *tt_debug_graph_name(void);
/* Set by tt_lazy_sync around its cuts: its name argument (borrowed, not
 * copied; NULL after the call). */
void tt_debug_set_sync_name(const char *name);

/* Eager mode on (and not suspended by a compile region or dynamo trace):
 * as PyTorch/XLA, no analysis blocks are printed for eager ops' graphs,
 * except the execution of a graph whose cause was set explicitly
 * (dynamo executing a compiled program). Process-wide. */
void tt_debug_set_eager(int eager);

/* ---- XLA_IR_DEBUG ---- */
/* Frames for the next IR nodes this thread creates (copied); the lazy core
 * attaches them with tt_debug_attach_node_frames. */
void tt_debug_set_node_frames(const tt_debug_frame_t *frames, int32_t num_frames);
void tt_debug_clear_node_frames(void);
/* Gives node the thread's node frames as debug_info ("fn@file:line" lines,
 * innermost first) unless it has some. Called with the engine lock held. */
void tt_debug_attach_node_frames(tt_node_t *node);

/* ---- hooks of the lazy core (called with the engine lock held) ---- */
typedef struct tt_debug_cut_s {
  const tt_graph_t *graph;  /* the graph as built: its hash is the cache key */
  tt_node_t *const *roots;  /* graph->num_outputs roots, for IR frames */
  int32_t device;
  int32_t cache_miss;       /* 1 when this cut compiles */
} tt_debug_cut_t;
/* After the graph is built and looked up: appends it to the save-tensors
 * file, dumps stage "build" (on a miss) and prints the compilation
 * analysis (on a miss). Never fails: output errors are reported once on
 * stderr. */
void tt_debug_on_cut_built(const tt_debug_cut_t *cut);
/* After the executable exists (exec_graph: the graph it runs, which
 * passes may have rewritten): prints the post-compilation analysis (on a
 * miss) and the execution analysis. */
void tt_debug_on_cut_scheduled(const tt_debug_cut_t *cut, const tt_graph_t *exec_graph);

/* ---- per-stage dumps (TORCHTPU_DUMP_DIR) ---- */
/* 1 when TORCHTPU_DUMP_DIR is set. Callers test it before rendering text. */
int tt_debug_dump_enabled(void);
/* Writes text to <dir>/<pid>-<seq>-<hash>-<stage>.<ext>, where seq counts
 * dumps in this process (so a directory listing is chronological) and
 * hash is the graph's 16 hex digits. Stages in use: "build" (IR as cut,
 * lazy core), "after-<pass>" (src/passes), "generated" with ext "c"
 * (src/backends/cpu/tier1.c). A no-op returning NULL when dumps are off; TT_IO_ERROR
 * naming the path when the write fails. */
tt_status_t tt_debug_dump(uint64_t graph_hash, const char *stage, const char *ext,
                          const char *text);

/* ---- recompilation analysis ---- */
/* What differs between two graphs, one line per difference (at most
 * max_items, then "..."): input count, each input's kind/dtype/shape,
 * output count/dtype/shape, and the first instructions whose op,
 * attributes or operands differ. "" when they are the same. Caller frees. */
char *tt_debug_graph_diff(const tt_graph_t *before, const tt_graph_t *after,
                          int32_t max_items);
/* The last recompilation explanation printed (caller frees), or NULL. */
char *tt_debug_last_recompile(void);
/* A deep copy of graph (key included) in one allocation; free with
 * tt_graph_destroy. NULL when out of memory. */
tt_graph_t *tt_debug_graph_clone(const tt_graph_t *graph);

/* Text (fmt 0) or dot (fmt 1) of graph, with "location=fn@file:line" on
 * the lines of nodes that carry XLA_IR_DEBUG frames. roots are the graph's
 * roots as built (NULL: no locations). Caller frees. */
char *tt_debug_graph_text(const tt_graph_t *graph, tt_node_t *const *roots, int fmt);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_DEBUG_H_ */
