/* Sharding annotations: validation, copies and XLA's HloSharding text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchtpu/ir.h"

size_t tt_sharding_size(int32_t num_devices) {
  return sizeof(tt_sharding_t) + sizeof(int32_t) * (size_t)(num_devices > 0 ? num_devices : 0);
}

static const char *tt_sharding_kind_name(tt_sharding_kind_t k) {
  switch (k) {
    case TT_SHARDING_REPLICATED: return "replicated";
    case TT_SHARDING_TILED: return "tiled";
    case TT_SHARDING_MANUAL: return "manual";
  }
  return "unknown";
}

tt_status_t tt_sharding_validate(const tt_sharding_t *s, const tt_shape_t *shape) {
  if (s->kind != TT_SHARDING_REPLICATED && s->kind != TT_SHARDING_TILED &&
      s->kind != TT_SHARDING_MANUAL)
    return tt_status_make(TT_INVALID_ARGUMENT, "sharding: unknown kind %d", (int)s->kind);
  if (s->num_devices < 0 || s->num_devices > TT_SHARDING_MAX_DEVICES)
    return tt_status_make(TT_INVALID_ARGUMENT, "sharding: %d devices is outside [0, %d]",
                          (int)s->num_devices, TT_SHARDING_MAX_DEVICES);
  if (s->kind != TT_SHARDING_TILED) {
    if (s->num_tile_dims != 0)
      return tt_status_make(TT_INVALID_ARGUMENT, "sharding: a %s sharding has no tile dims "
                            "(got %d)", tt_sharding_kind_name(s->kind), (int)s->num_tile_dims);
    return NULL;
  }
  int32_t want = shape->rank + (s->last_tile_dim_replicate ? 1 : 0);
  if (s->num_tile_dims != want)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "sharding: %d tile dims for a tensor of rank %d%s (want %d)",
                          (int)s->num_tile_dims, (int)shape->rank,
                          s->last_tile_dim_replicate ? " with last_tile_dim_replicate" : "",
                          (int)want);
  int64_t product = 1;
  for (int32_t d = 0; d < s->num_tile_dims; ++d) {
    if (s->tile_dims[d] < 1 || s->tile_dims[d] > TT_SHARDING_MAX_DEVICES)
      return tt_status_make(TT_INVALID_ARGUMENT, "sharding: tile dim %d is %lld (must be in "
                            "[1, %d])", (int)d, (long long)s->tile_dims[d],
                            TT_SHARDING_MAX_DEVICES);
    product *= s->tile_dims[d];
    if (product > TT_SHARDING_MAX_DEVICES)
      return tt_status_make(TT_INVALID_ARGUMENT, "sharding: more than %d tiles",
                            TT_SHARDING_MAX_DEVICES);
  }
  if (product != s->num_devices)
    return tt_status_make(TT_INVALID_ARGUMENT, "sharding: tile dims make %lld tiles but %d "
                          "devices are assigned", (long long)product, (int)s->num_devices);
  uint8_t seen[TT_SHARDING_MAX_DEVICES] = {0};
  for (int32_t i = 0; i < s->num_devices; ++i) {
    int32_t dev = s->devices[i];
    if (dev < 0 || dev >= s->num_devices)
      return tt_status_make(TT_INVALID_ARGUMENT, "sharding: device id %d (entry %d) is outside "
                            "[0, %d)", (int)dev, (int)i, (int)s->num_devices);
    if (seen[dev])
      return tt_status_make(TT_INVALID_ARGUMENT, "sharding: device id %d appears twice in the "
                            "tile assignment", (int)dev);
    seen[dev] = 1;
  }
  return NULL;
}

tt_sharding_t *tt_sharding_copy(const tt_sharding_t *s) {
  int32_t nd = s->kind == TT_SHARDING_TILED ? s->num_devices : 0;
  size_t bytes = tt_sharding_size(nd);
  tt_sharding_t *c = malloc(bytes);
  if (!c) return NULL;
  memcpy(c, s, bytes);
  return c;
}

int tt_sharding_equal(const tt_sharding_t *a, const tt_sharding_t *b) {
  if (!a || !b) return a == b;
  if (a->kind != b->kind || a->num_devices != b->num_devices) return 0;
  if (a->kind != TT_SHARDING_TILED) return 1;
  if (a->num_tile_dims != b->num_tile_dims ||
      a->last_tile_dim_replicate != b->last_tile_dim_replicate)
    return 0;
  for (int32_t d = 0; d < a->num_tile_dims; ++d)
    if (a->tile_dims[d] != b->tile_dims[d]) return 0;
  return memcmp(a->devices, b->devices, sizeof(int32_t) * (size_t)a->num_devices) == 0;
}

char *tt_sharding_to_text(const tt_sharding_t *s) {
  if (s->kind == TT_SHARDING_REPLICATED) return strdup("{replicated}");
  if (s->kind == TT_SHARDING_MANUAL) return strdup("{manual}");
  /* "{devices=[" + dims + "]" + ids + " last_tile_dim_replicate}" */
  size_t cap = 64 + (size_t)s->num_tile_dims * 21 + (size_t)s->num_devices * 12;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  size_t n = (size_t)snprintf(buf, cap, "{devices=[");
  for (int32_t d = 0; d < s->num_tile_dims; ++d)
    n += (size_t)snprintf(buf + n, cap - n, d ? ",%lld" : "%lld", (long long)s->tile_dims[d]);
  n += (size_t)snprintf(buf + n, cap - n, "]");
  for (int32_t i = 0; i < s->num_devices; ++i)
    n += (size_t)snprintf(buf + n, cap - n, i ? ",%d" : "%d", (int)s->devices[i]);
  snprintf(buf + n, cap - n, "%s}", s->last_tile_dim_replicate ? " last_tile_dim_replicate" : "");
  return buf;
}
