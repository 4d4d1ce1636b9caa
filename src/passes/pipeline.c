/* The optimisation pipeline: simplify -> movement collapse -> CSE ->
 * attention layouts -> reduction fusion ->
 * elementwise fusion -> compaction (DCE) -> pairs,
 * with the verifier between passes when asked. */
#include <stdlib.h>
#include <string.h>

#include "torchtpu/passes.h"

void tt_optimize_options_from_env(tt_optimize_options_t *opts) {
  const tt_config_t *c = tt_config();
  opts->fuse = c->fusion;
  opts->no_reduce_fusion = !c->reduce_fusion;
  opts->verify = c->verify_ir;
  opts->no_collapse = !c->movement_collapse;
  opts->conv_epilogue = c->conv_epilogue;
  opts->attention_pairs = c->attention_keep_probs;
}

#define TT_RUN_PASS(name, call)                                    \
  do {                                                             \
    st = (call);                                                   \
    if (!st && opts->verify) st = tt_verify_work(work, name);      \
    if (st) goto done;                                             \
  } while (0)

tt_status_t tt_graph_optimize(const tt_graph_t *graph, const tt_optimize_options_t *opts,
                              tt_graph_t **out) {
  *out = NULL;
  tt_work_t *work = NULL;
  tt_status_t st = tt_work_from_graph(graph, &work);
  if (st) return st;
  if (opts->verify) TT_RUN_PASS("build", NULL);
  TT_RUN_PASS("simplify", tt_pass_simplify(work));
  if (!opts->no_collapse) TT_RUN_PASS("collapse_movement", tt_pass_collapse_movement(work));
  TT_RUN_PASS("cse", tt_pass_cse(work));
  if (!opts->no_collapse && !opts->no_engine_forms)
    TT_RUN_PASS("attention_layout", tt_pass_attention_layout(work));
  if (opts->fuse && !opts->no_reduce_fusion)
    TT_RUN_PASS("fuse_reduce", tt_pass_fuse_reduce(work));
  if (opts->fuse) TT_RUN_PASS("fuse_elementwise", tt_pass_fuse_elementwise(work));
  st = tt_work_to_graph(work, out);
  if (!st && (st = tt_pass_pair(*out, opts)) != NULL) {
    tt_graph_destroy(*out);
    *out = NULL;
  }
  if (!st) {
    /* The optimised graph answers to the original's cache key. */
    (*out)->hash = graph->hash;
    (*out)->key_size = graph->key_size;
    (*out)->key = malloc(graph->key_size ? graph->key_size : 1);
    if (!(*out)->key) {
      tt_graph_destroy(*out);
      *out = NULL;
      st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (optimize)");
    } else {
      memcpy((*out)->key, graph->key, graph->key_size);
    }
  }
done:
  tt_work_destroy(work);
  return st;
}
