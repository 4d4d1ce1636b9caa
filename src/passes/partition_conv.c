/* Convolution over a spatial dim tiled across partitions
 * (src/passes/partition_internal.h): each partition's rows need `lo` rows
 * of the tile before its own and `hi` rows of the tile after it (the
 * window's reach past a tile's edge), exchanged with two
 * collective_permutes between neighbouring tiles; the partitions at the
 * ends receive zeros, which are the convolution's zero padding. The
 * convolution then runs on the extended tile with no padding along that
 * dim and gives the tile's own output rows. */
#include <stdlib.h>
#include <string.h>

#include "passes/partition_internal.h"

int tt_part_halo_fits(const tt_part_t *p, int64_t dim, int64_t tiles, int64_t stride,
                      int64_t lo, int64_t hi) {
  int64_t chunk = tt_part_chunk(dim, tiles);
  /* one pair per partition but the first (or last) tile's */
  return stride == 1 && lo >= 0 && hi >= 0 && lo <= chunk && hi <= chunk &&
         TT_COLLECTIVE_HEADER + 2 * p->n <= TT_MAX_IATTRS;
}

/* The (source, target) pairs that move each tile's rows to the next tile
 * along d (step 1) or the previous one (step -1): between devices with
 * the same tile along every other dim and the same place among a tile's
 * replicas. */
static int32_t tt_part_neighbour_pairs(const tt_part_t *p, const tt_sharding_t *s,
                                       int32_t rank, int32_t d, int32_t step, int32_t *pairs) {
  int64_t c[27][TT_MAX_RANK], rep[27];
  for (int32_t dev = 0; dev < p->n; ++dev) tt_part_coords(s, rank, dev, c[dev], &rep[dev]);
  int32_t np = 0;
  for (int32_t src = 0; src < p->n; ++src)
    for (int32_t dst = 0; dst < p->n; ++dst) {
      if (rep[src] != rep[dst] || c[dst][d] != c[src][d] + step) continue;
      int same = 1;
      for (int32_t e = 0; e < rank; ++e) same = same && (e == d || c[src][e] == c[dst][e]);
      if (!same) continue;
      pairs[2 * np] = src;
      pairs[2 * np + 1] = dst;
      ++np;
    }
  return np;
}

tt_node_t *tt_part_halo(tt_part_t *p, tt_node_t *x, const tt_shape_t *global,
                        const tt_sharding_t *s, int32_t d, int64_t lo, int64_t hi) {
  if (!x) return NULL;
  int32_t rank = global->rank;
  int64_t chunk = x->shape.dims[d];
  /* Padding rows become zeros: the next tile's halo and this tile's own
   * rows past the end are the convolution's zero padding. */
  x = tt_part_mask(p, x, global, s, 1ull << d, 0.0);
  tt_node_t *parts[3];
  int32_t np = 0, pairs[54];
  if (lo > 0) {
    tt_node_t *tail = tt_part_slice_dim(p, x, d, chunk - lo, lo);
    int32_t n = tt_part_neighbour_pairs(p, s, rank, d, 1, pairs);
    parts[np++] = tt_part_permute(p, tail, pairs, n);
  }
  parts[np++] = x;
  if (hi > 0) {
    tt_node_t *head = tt_part_slice_dim(p, x, d, 0, hi);
    int32_t n = tt_part_neighbour_pairs(p, s, rank, d, -1, pairs);
    parts[np++] = tt_part_permute(p, head, pairs, n);
  }
  if (np == 1) return x;
  for (int32_t k = 0; k < np; ++k)
    if (!parts[k]) {
      if (!p->error)
        p->error = tt_status_make(TT_INTERNAL, "partitioner: a halo exchange did not fit");
      return NULL;
    }
  int64_t dim = d;
  return tt_part_make(p, TT_OP_CONCAT, parts, np, &dim, 1, NULL);
}
