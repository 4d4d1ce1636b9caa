/* Failed statuses as the exceptions PyTorch would raise: RuntimeError,
 * IndexError for out-of-range indices and dims, NotImplementedError,
 * MemoryError. */
#include "binding.h"

PyObject *tt_py_raise_status(tt_status_t st) {
  PyObject *type = PyExc_RuntimeError;
  switch (tt_status_code(st)) {
    case TT_OUT_OF_RANGE: type = PyExc_IndexError; break;
    case TT_UNIMPLEMENTED: type = PyExc_NotImplementedError; break;
    case TT_RESOURCE_EXHAUSTED: type = PyExc_MemoryError; break;
    default: break;
  }
  PyErr_SetString(type, tt_status_message(st));
  tt_status_free(st);
  return NULL;
}
