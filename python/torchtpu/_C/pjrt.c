/* torchtpu._C bindings of the PJRT backend (issue 7). */
#include "binding.h"

PyMethodDef tt_py_extra_methods_pjrt[] = {
    {NULL, NULL, 0, NULL},
};
