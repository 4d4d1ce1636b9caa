/* torchtpu._C: the Python binding of the C API, one file per subsystem in
 * this folder (tensor.c, record.c, runtime.c, graph.c, metrics.c,
 * capture.c, cache.c, blas.c, debug.c, trace.c, stablehlo.c, pjrt.c,
 * spmd.c, op_table.c, collective.c, spmd_exec.c; binding.h is what they share). Each binding converts
 * arguments, calls one C API function, and turns a failed status into the
 * exception PyTorch would raise (status.c). This file only assembles the
 * module from the files' method tables and types. */
#include "binding.h"

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "torchtpu._C",
                                       "torchtpu C engine binding", -1, NULL,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void) {
  PyMethodDef *tables[] = {
      tt_py_methods_tensor,    tt_py_methods_record,    tt_py_methods_runtime,
      tt_py_methods_graph,     tt_py_methods_metrics,   tt_py_methods_capture,
      tt_py_methods_cache,     tt_py_methods_blas,      tt_py_methods_debug,
      tt_py_methods_trace,     tt_py_methods_stablehlo, tt_py_methods_pjrt,
      tt_py_methods_spmd,      tt_py_methods_op_table,  tt_py_methods_collective, tt_py_methods_spmd_exec,
  };
  PyObject *mod = PyModule_Create(&moduledef);
  if (!mod) return NULL;
  if (tt_py_add_tensor_type(mod) < 0 || tt_py_add_capture_type(mod) < 0) {
    Py_DECREF(mod);
    return NULL;
  }
  for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); ++i) {
    if (PyModule_AddFunctions(mod, tables[i]) < 0) {
      Py_DECREF(mod);
      return NULL;
    }
  }
  return mod;
}
