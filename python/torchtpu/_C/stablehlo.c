/* torchtpu._C bindings of StableHLO emission (issue 7). */
#include "binding.h"

PyMethodDef tt_py_extra_methods_stablehlo[] = {
    {NULL, NULL, 0, NULL},
};
