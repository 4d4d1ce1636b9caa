/* torchtpu StableHLO emission: the graph IR written as an MLIR module.
 *
 * The module has one function, @main, whose arguments are the graph's
 * inputs in input order (device data as tensors of their dtype and shape,
 * runtime scalars as 0-d tensors) and whose results are the roots, in
 * order. Function and module use MLIR's custom (pretty) form; every op in
 * the body is written in MLIR's generic form ("stablehlo.add"(...) : ...),
 * so any MLIR parser reads it: StableHLO tools, PJRT plugins, and plain
 * `mlir-opt --allow-unregistered-dialect`. A few ops have no StableHLO
 * form and become `chlo.*` ops or `stablehlo.custom_call`s; docs/stablehlo.md
 * lists them. Nothing here executes anything; the emitter reads the IR only.
 */
#ifndef TORCHTPU_STABLEHLO_H_
#define TORCHTPU_STABLEHLO_H_

#include "torchtpu/base.h"
#include "torchtpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes graph as a StableHLO module named module_name (NULL: "torchtpu").
 * Graph inputs become @main's arguments in input order, graph outputs its
 * results. On success *out_text is a malloc'd NUL-terminated string the
 * caller frees. Instructions with a sharding make a partitioned module:
 * every argument and result gets an mhlo.sharding attribute ({replicated}
 * where unannotated), the module mhlo.num_partitions; shardings over
 * different device counts are TT_INVALID_ARGUMENT. An op (or op variant)
 * with no lowering is TT_UNIMPLEMENTED naming it; nothing partial is
 * returned on failure (*out_text = NULL). */
tt_status_t tt_stablehlo_emit_graph(const tt_graph_t *graph, const char *module_name,
                                    char **out_text);

/* Linearises the nodes reachable from roots (without touching the nodes'
 * graph-cut bookkeeping, so it needs no engine lock: nodes are immutable,
 * except their sharding annotation, which the caller must not change
 * during the call) and writes them as tt_stablehlo_emit_graph does, with
 * the nodes' shardings (mhlo.sharding attributes, @Sharding custom calls;
 * docs/stablehlo.md). If out_inputs is not
 * NULL it receives a malloc'd array (caller frees; NULL when there are no
 * inputs) of the input nodes (PARAM or SCALAR, borrowed: valid while the
 * roots live) in argument order, and *out_num_inputs their count. */
tt_status_t tt_stablehlo_emit(tt_node_t *const *roots, int32_t num_roots, char **out_text,
                              tt_node_t ***out_inputs, int32_t *out_num_inputs);

/* How op is lowered, in a few words (a static string), or NULL when op has
 * no lowering. Every op below TT_OP_COUNT has one: each is registered with
 * its lowering in its family's file of src/backends/stablehlo/, and
 * tests/c/test_op_table.c fails naming an op registered twice or not at
 * all. */
const char *tt_stablehlo_op_lowering(tt_op_t op);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_STABLEHLO_H_ */
