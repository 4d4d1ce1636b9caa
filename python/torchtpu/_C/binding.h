/* Internal to the torchtpu._C binding: what the binding files in this
 * folder share (one file per subsystem: tensor.c, record.c, debug.c,
 * stablehlo.c, pjrt.c, ...). Each such file defines a NULL-terminated
 * PyMethodDef table that module.c adds to the module. */
#ifndef TORCHTPU_C_BINDING_H
#define TORCHTPU_C_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchtpu/torchtpu.h"
#include "torchtpu/spmd_exec.h"

/* Sets the Python exception PyTorch would raise for a failed status, frees
 * the status, returns NULL. */
PyObject *tt_py_raise_status(tt_status_t st);
/* Wraps a tensor reference (ownership moves to the new object). */
PyObject *tt_py_wrap_tensor(tt_tensor_t *t);
/* Borrowed tensor of a torchtpu._C.Tensor; 0 with TypeError otherwise. */
int tt_py_as_tensor(PyObject *o, tt_tensor_t **out);
/* A sequence of torchtpu._C.Tensor as a PyMem_Malloc'ed array (borrowed
 * references); 0 with an exception set on error. */
int tt_py_tensor_array(PyObject *seq, tt_tensor_t ***out, Py_ssize_t *n);
/* A shape from a sequence of ints; 0 with an exception set on error. */
int tt_py_parse_shape(PyObject *seq, tt_shape_t *s);
/* A shape as a tuple of ints (new reference). */
PyObject *tt_py_shape_tuple(const tt_shape_t *s);
/* Adds the torchtpu._C.Tensor / Capture types to the module; -1 on error. */
int tt_py_add_tensor_type(PyObject *mod);
int tt_py_add_capture_type(PyObject *mod);

/* Debug hooks around engine calls (debug.c): begin hands the engine the
 * Python caller's frames when the debug service wants them and returns
 * whether it did; end takes that result. The call form brackets calls that
 * may cut a graph, the node form op recording (XLA_IR_DEBUG). */
int tt_py_debug_call_begin(void);
void tt_py_debug_call_end(int active);
int tt_py_debug_node_begin(void);
void tt_py_debug_node_end(int active);

/* Method tables of the binding files, one per subsystem. */
extern PyMethodDef tt_py_methods_tensor[];
extern PyMethodDef tt_py_methods_record[];
extern PyMethodDef tt_py_methods_runtime[];
extern PyMethodDef tt_py_methods_graph[];
extern PyMethodDef tt_py_methods_metrics[];
extern PyMethodDef tt_py_methods_capture[];
extern PyMethodDef tt_py_methods_cache[];
extern PyMethodDef tt_py_methods_blas[];
extern PyMethodDef tt_py_methods_debug[];
extern PyMethodDef tt_py_methods_trace[];
extern PyMethodDef tt_py_methods_stablehlo[];
extern PyMethodDef tt_py_methods_pjrt[];
extern PyMethodDef tt_py_methods_spmd[];
extern PyMethodDef tt_py_methods_spmd_exec[];
extern PyMethodDef tt_py_methods_op_table[];
extern PyMethodDef tt_py_methods_collective[];

/* A sharding as Python data: None, or (kind, tile_dims, devices,
 * last_tile_dim_replicate, num_devices) with kind "replicated", "tiled" or
 * "manual" (spmd.c). New reference, NULL with an exception on error. */
PyObject *tt_py_sharding_to_python(const tt_sharding_t *s);
/* Parses a sharding spec tuple (spmd.c); *out NULL for None; 0 with an
 * exception set on a malformed spec. */
int tt_py_sharding_from_python(PyObject *spec, tt_sharding_t **out);

#endif
