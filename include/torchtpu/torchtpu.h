/* Umbrella header of the torchtpu C API. */
#ifndef TORCHTPU_TORCHTPU_H_
#define TORCHTPU_TORCHTPU_H_
#include "torchtpu/base.h"
#include "torchtpu/kernels.h"
#include "torchtpu/ir.h"
#include "torchtpu/runtime.h"
#include "torchtpu/lazy.h"
#include "torchtpu/metrics.h"
#endif
