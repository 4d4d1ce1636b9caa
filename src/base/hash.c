/* The engine's hash functions (see base.h). Their values name cached
 * graphs and tier-1 libraries on disk, so they must not change between
 * runs or builds: no seeds from addresses or time. */
#include <string.h>

#include "torchtpu/base.h"

uint64_t tt_hash_fnv1a(const void *bytes, size_t n, uint64_t seed) {
  const uint8_t *p = bytes;
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= TT_FNV_PRIME;
  }
  return h;
}

uint64_t tt_hash_finish(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

uint64_t tt_hash_key(const void *bytes, size_t n) {
  /* FNV-1a over 8-byte words where possible (with a shift so high bits
   * reach the low ones), the tail byte by byte, then the finish. */
  const uint8_t *p = bytes;
  uint64_t h = TT_HASH_SEED;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h ^= w;
    h *= TT_FNV_PRIME;
    h ^= h >> 29;
  }
  for (; i < n; ++i) {
    h ^= p[i];
    h *= TT_FNV_PRIME;
  }
  return tt_hash_finish(h);
}
