/* Internal to the torchtpu._C binding: what module.c shares with the other
 * binding files in this folder (one file per subsystem: stablehlo.c,
 * pjrt.c, ...). Each such file defines a NULL-terminated PyMethodDef table
 * that module.c adds to the module. */
#ifndef TORCHTPU_C_BINDING_H
#define TORCHTPU_C_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchtpu/torchtpu.h"

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

/* Extra method tables, each defined by one binding file. */
extern PyMethodDef tt_py_extra_methods_stablehlo[];
extern PyMethodDef tt_py_extra_methods_pjrt[];
extern PyMethodDef tt_py_extra_methods_spmd[];
extern PyMethodDef tt_py_extra_methods_op_table[];

/* A sharding as Python data: None, or (kind, tile_dims, devices,
 * last_tile_dim_replicate, num_devices) with kind "replicated", "tiled" or
 * "manual" (spmd.c). New reference, NULL with an exception on error. */
PyObject *tt_py_sharding_to_python(const tt_sharding_t *s);

#endif
