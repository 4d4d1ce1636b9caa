/* Sharding rules of the ops that make values from nothing sharded: graph
 * inputs, iota and random numbers. No operand constrains them, so they
 * take the sharding their users ask for (backward) or stay replicated.
 * RNG's seed is a scalar; drawing a sharded tensor so that each device's
 * slice equals the unsharded tensor's is the partitioner's task. */
#include "ir/sharding_rules.h"

TT_SHARDING_RULE(PARAM, "source", NULL);
TT_SHARDING_RULE(SCALAR, "source", NULL);
TT_SHARDING_RULE(IOTA, "source", NULL);
TT_SHARDING_RULE(RNG, "rng", NULL);
