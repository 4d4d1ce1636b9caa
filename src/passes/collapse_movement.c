/* Movement-chain collapse: a chain of reshapes, transposes, slices and
 * concatenations that only moves the elements of one tensor around is
 * rewritten as (at most) one transposed copy.
 *
 * nn.MultiheadAttention's layout plumbing is such chains. Its forward
 * turns the projection [L, B, 3E] into q, k and v [B, H, L, hd] through a
 * transposed copy of all of it to [3, L, B, E] and one more transposed
 * copy of each of q, k and v; its backward gathers dq, dk and dv back into
 * [L, B, 3E] with three transposes, a concatenation and a transpose. Every
 * element of the result is base[off + sum idx_i * stride_i] for some
 * strides, and when those strides are a permutation of a mixed-radix
 * decomposition of the base's flat index ("digits"), the result is
 *
 *   reshape(slice(transpose(reshape(base, digits), perm)), shape)
 *
 * in which only the transpose copies: digits the result does not walk
 * (which of q, k and v) are fixed and go first in perm, so the slice of
 * them is a contiguous range the executor reads in place. CSE then
 * merges q's, k's and v's identical transposes into one.
 *
 * A node's view map is built from its operands' (a list of atoms, each a
 * (size, stride) pair in the base's flat index, grouped into the node's
 * dims): a reshape regroups and splits atoms, a transpose permutes the
 * groups, a slice narrows or offsets an atom, and a concatenation of
 * equally shaped pieces whose offsets step evenly adds an atom. Anything
 * else starts a new base. A copying node (transpose, concatenation,
 * slice the executor cannot alias) is rewritten when its chain holds two
 * or more copies; with fixed digits, only when a copy of the whole base
 * that only movement ops read is among them (that copy then dies, so the
 * new transpose of the whole base costs no more). */
#include <stdlib.h>
#include <string.h>

#include "passes/movement_map.h"

int tt_mv_is_movement(tt_op_t op) {
  return op == TT_OP_RESHAPE || op == TT_OP_TRANSPOSE || op == TT_OP_SLICE || op == TT_OP_CONCAT;
}

void tt_mv_scan_readers(const tt_work_t *w, const int32_t *uses, int32_t *last_reader,
                        int32_t *users_movement) {
  int32_t n = w->num_instrs;
  for (int32_t j = 0; j < n; ++j) {
    if (last_reader) last_reader[j] = -1;
    if (users_movement) users_movement[j] = 1;
  }
  for (int32_t j = 0; j < n; ++j) {
    const tt_instr_t *u = &w->instrs[j];
    if (w->forward[j] != j || !uses[j]) continue;
    for (int32_t k = 0; k < u->num_operands; ++k) {
      int32_t o = tt_work_resolve(w, u->operands[k]);
      if (last_reader) last_reader[o] = j;
      if (users_movement && !tt_mv_is_movement(u->op)) users_movement[o] = 0;
    }
  }
  if (users_movement)
    for (int32_t r = 0; r < w->num_outputs; ++r) users_movement[tt_work_resolve(w, w->outputs[r])] = 0;
}

/* Whether slice instruction in (of operand shape xs) is a contiguous range
 * the executor aliases (as tt_slice_view_offset_ in executable.c). */
static int tt_mv_slice_aliases(const tt_instr_t *in, const tt_shape_t *xs) {
  tt_slice_attrs_t a;
  TT_ATTRS(in, &a);
  int r = xs->rank, cut = -1;
  for (int d = 0; d < r; ++d) {
    if (a.step.v[d] != 1) return 0;
    if (in->shape.dims[d] != xs->dims[d]) cut = d;
  }
  for (int d = 0; d < cut; ++d)
    if (in->shape.dims[d] != 1) return 0;
  return 1;
}

static void tt_mv_identity(const tt_instr_t *in, int32_t i, tt_vmap_t *m) {
  memset(m, 0, sizeof(*m));
  m->base = i;
  m->rank = in->shape.rank;
  int64_t s = 1;
  int n = 0;
  for (int d = in->shape.rank - 1; d >= 0; --d) n += in->shape.dims[d] != 1;
  m->n = n;
  for (int d = in->shape.rank - 1; d >= 0; --d) {
    m->dim_end[d] = n;
    if (in->shape.dims[d] != 1) {
      --n;
      m->size[n] = in->shape.dims[d];
      m->stride[n] = s;
    }
    s *= in->shape.dims[d];
  }
}

/* Regroups m's atoms into shape: splits an atom where a dim boundary falls
 * inside it. Returns 0 if the sizes do not factor that way. */
static int tt_mv_reshape(tt_vmap_t *m, const tt_shape_t *shape) {
  int64_t sz[TT_MV_ATOMS], st[TT_MV_ATOMS];
  int n = 0;
  for (int a = 0; a < m->n; ++a) {
    if (m->size[a] == 1) continue;
    sz[n] = m->size[a];
    st[n++] = m->stride[a];
  }
  /* From the innermost dim outwards, taking atoms from the end. */
  int64_t osz[TT_MV_ATOMS], ost[TT_MV_ATOMS];
  int on = 0, ends_rev[TT_MAX_RANK];
  for (int d = shape->rank - 1; d >= 0; --d) {
    int64_t need = shape->dims[d];
    while (need > 1) {
      if (n == 0 || on == TT_MV_ATOMS) return 0;
      int64_t a = sz[n - 1], s = st[n - 1];
      if (a <= need) {
        if (need % a) return 0;
        osz[on] = a;
        ost[on++] = s;
        need /= a;
        --n;
      } else {
        if (a % need) return 0;
        osz[on] = need;
        ost[on++] = s;
        sz[n - 1] = a / need;
        st[n - 1] = s * need;
        need = 1;
      }
    }
    ends_rev[d] = on; /* atoms taken so far (counted from the end) */
  }
  if (n) return 0;
  m->n = on;
  for (int a = 0; a < on; ++a) {
    m->size[a] = osz[on - 1 - a];
    m->stride[a] = ost[on - 1 - a];
  }
  m->rank = shape->rank;
  /* dim d's atoms are those taken while handling d; counted from the
   * front, dim d ends where the atoms of dims d+1.. begin. */
  for (int d = 0; d < shape->rank; ++d) m->dim_end[d] = on - (d + 1 < shape->rank ? ends_rev[d + 1] : 0);
  return 1;
}

int tt_mv_dim_begin(const tt_vmap_t *m, int d) { return d ? m->dim_end[d - 1] : 0; }

static int tt_mv_transpose(tt_vmap_t *m, const tt_transpose_attrs_t *a) {
  tt_vmap_t o = *m;
  int n = 0;
  for (int d = 0; d < m->rank; ++d) {
    int p = (int)a->perm.v[d];
    for (int a = tt_mv_dim_begin(m, p); a < m->dim_end[p]; ++a) {
      o.size[n] = m->size[a];
      o.stride[n++] = m->stride[a];
    }
    o.dim_end[d] = n;
  }
  *m = o;
  return 1;
}

/* Slices m (of shape xs) by start/limit/step; 0 if a dim cannot be. */
static int tt_mv_slice(tt_vmap_t *m, const tt_shape_t *xs, const tt_slice_attrs_t *a) {
  int r = xs->rank;
  tt_vmap_t o = *m;
  int n = 0;
  for (int d = 0; d < r; ++d) {
    int64_t start = a->start.v[d], limit = a->limit.v[d], step = a->step.v[d];
    int64_t len = (limit - start + step - 1) / step;
    int b = tt_mv_dim_begin(m, d), e = m->dim_end[d];
    if (start == 0 && limit == xs->dims[d] && step == 1) {
      for (int a = b; a < e; ++a) {
        o.size[n] = m->size[a];
        o.stride[n++] = m->stride[a];
      }
    } else if (e - b == 1) {
      o.off += start * m->stride[b];
      if (len != 1) {
        o.size[n] = len;
        o.stride[n++] = m->stride[b] * step;
      }
    } else if (e - b > 1 && step == 1) {
      int64_t inner = 1;
      for (int a = b + 1; a < e; ++a) inner *= m->size[a];
      if (start % inner || (limit - start) % inner) return 0;
      o.off += start / inner * m->stride[b];
      if ((limit - start) / inner != 1) {
        o.size[n] = (limit - start) / inner;
        o.stride[n++] = m->stride[b];
      }
      for (int a = b + 1; a < e; ++a) {
        o.size[n] = m->size[a];
        o.stride[n++] = m->stride[a];
      }
    } else {
      return 0; /* a strided slice across atoms */
    }
    o.dim_end[d] = n;
  }
  o.n = n;
  *m = o;
  return 1;
}

static int tt_mv_same_atoms(const tt_vmap_t *a, const tt_vmap_t *b) {
  if (a->base != b->base || a->n != b->n || a->rank != b->rank) return 0;
  for (int k = 0; k < a->n; ++k)
    if (a->size[k] != b->size[k] || a->stride[k] != b->stride[k]) return 0;
  for (int d = 0; d < a->rank; ++d)
    if (a->dim_end[d] != b->dim_end[d]) return 0;
  return 1;
}

/* Counts of the chain are added for copying nodes; a copy of every
 * element of the base whose readers are all movement ops marks
 * whole_copy. */
void tt_mv_map(tt_mv_pass_t *p, int32_t i, int depth, tt_vmap_t *m) {
  const tt_work_t *w = p->w;
  const tt_instr_t *in = &w->instrs[i];
  int32_t x = in->num_operands ? tt_work_resolve(w, in->operands[0]) : -1;
  if (depth > 24 || --p->budget < 0 || !tt_mv_is_movement(in->op) ||
      tt_shape_numel(&in->shape) == 0 ||
      (x >= 0 && w->instrs[x].dtype != in->dtype)) {
    tt_mv_identity(in, i, m);
    return;
  }
  int copy = 0, ok = 1;
  switch (in->op) {
    case TT_OP_RESHAPE:
      tt_mv_map(p, x, depth + 1, m);
      ok = tt_mv_reshape(m, &in->shape);
      break;
    case TT_OP_TRANSPOSE: {
      tt_transpose_attrs_t a;
      TT_ATTRS(in, &a);
      tt_mv_map(p, x, depth + 1, m);
      ok = tt_mv_transpose(m, &a);
      copy = 1;
      break;
    }
    case TT_OP_SLICE: {
      tt_slice_attrs_t a;
      TT_ATTRS(in, &a);
      tt_mv_map(p, x, depth + 1, m);
      copy = !tt_mv_slice_aliases(in, &w->instrs[x].shape);
      ok = tt_mv_slice(m, &w->instrs[x].shape, &a);
      break;
    }
    case TT_OP_CONCAT: {
      tt_concat_attrs_t ca;
      TT_ATTRS(in, &ca);
      int dim = (int)ca.dim;
      tt_vmap_t first, piece;
      int64_t delta = 0;
      copy = 1;
      for (int32_t k = 0; k < in->num_operands && ok; ++k) {
        int32_t o = tt_work_resolve(w, in->operands[k]);
        tt_mv_map(p, o, depth + 1, k ? &piece : &first);
        if (k == 0) {
          ok = in->num_operands > 1;
          continue;
        }
        ok = tt_mv_same_atoms(&first, &piece) &&
             w->instrs[o].shape.dims[dim] ==
                 w->instrs[tt_work_resolve(w, in->operands[0])].shape.dims[dim];
        if (k == 1) delta = piece.off - first.off;
        ok = ok && delta != 0 && piece.off - first.off == k * delta;
        first.copies += piece.copies;
        first.whole_copy |= piece.whole_copy;
      }
      if (!ok) break;
      *m = first;
      if (m->n == TT_MV_ATOMS) {
        ok = 0;
        break;
      }
      /* The piece index is a new outer atom of dim `dim`. */
      int b = tt_mv_dim_begin(m, dim);
      memmove(m->size + b + 1, m->size + b, sizeof(int64_t) * (size_t)(m->n - b));
      memmove(m->stride + b + 1, m->stride + b, sizeof(int64_t) * (size_t)(m->n - b));
      m->size[b] = in->num_operands;
      m->stride[b] = delta;
      m->n++;
      for (int d = dim; d < m->rank; ++d) m->dim_end[d]++;
      break;
    }
    default:
      ok = 0;
  }
  if (!ok) {
    tt_mv_identity(in, i, m);
    return;
  }
  if (copy) {
    m->copies++;
    if (p->users_movement &&
        tt_shape_numel(&in->shape) == tt_shape_numel(&w->instrs[m->base].shape) &&
        p->users_movement[i])
      m->whole_copy = 1;
  }
}

/* The digits of base's flat index that m's atoms use (and the fixed
 * ones). Returns the number of digits, 0 if m's strides are not a
 * permutation of some digits. dsz/dst: digits outermost first; atom_digit
 * [a]: the digit of atom a; fixed[k]: -1 if digit k is walked, else its
 * value. */
static int tt_mv_digits(const tt_vmap_t *m, int64_t numel, int64_t *dsz, int64_t *dst,
                        int *atom_digit, int64_t *fixed) {
  int64_t bnd[2 * TT_MV_ATOMS + 2];
  int nb = 0;
  bnd[nb++] = 1;
  bnd[nb++] = numel;
  for (int a = 0; a < m->n; ++a) {
    if (m->size[a] < 2 || m->stride[a] < 1) return 0;
    bnd[nb++] = m->stride[a];
    bnd[nb++] = m->stride[a] * m->size[a];
  }
  /* sort and dedup */
  for (int i = 1; i < nb; ++i)
    for (int j = i; j > 0 && bnd[j - 1] > bnd[j]; --j) {
      int64_t t = bnd[j];
      bnd[j] = bnd[j - 1];
      bnd[j - 1] = t;
    }
  int u = 0;
  for (int i = 0; i < nb; ++i)
    if (!u || bnd[u - 1] != bnd[i]) bnd[u++] = bnd[i];
  if (bnd[u - 1] != numel) return 0;
  int nd = u - 1;
  if (nd > TT_MAX_RANK) return 0;
  for (int k = 0; k < nd; ++k)
    if (bnd[k + 1] % bnd[k]) return 0;
  /* digit k (outermost first) spans [bnd[nd-1-k], bnd[nd-k]) */
  for (int k = 0; k < nd; ++k) {
    dst[k] = bnd[nd - 1 - k];
    dsz[k] = bnd[nd - k] / dst[k];
    fixed[k] = 0;
  }
  int used[TT_MAX_RANK] = {0};
  for (int a = 0; a < m->n; ++a) {
    int hit = -1;
    for (int k = 0; k < nd; ++k)
      if (dst[k] == m->stride[a] && dsz[k] == m->size[a]) hit = k;
    if (hit < 0 || used[hit]) return 0;
    used[hit] = 1;
    atom_digit[a] = hit;
    fixed[hit] = -1;
  }
  int64_t off = m->off;
  for (int k = 0; k < nd; ++k) {
    if (used[k]) continue;
    fixed[k] = (off / dst[k]) % dsz[k];
  }
  int64_t back = 0;
  for (int k = 0; k < nd; ++k)
    if (!used[k]) back += fixed[k] * dst[k];
  return back == off ? nd : 0;
}

/* Makes room for k instructions before position pos (indices >= pos move
 * up by k). Returns 0 on allocation failure. */
int tt_mv_insert(tt_work_t *w, int32_t pos, int32_t k) {
  int32_t n = w->num_instrs;
  if (n + k > w->cap) {
    int32_t cap = (n + k) * 2;
    tt_instr_t *ni = realloc(w->instrs, sizeof(tt_instr_t) * ((size_t)cap + 1));
    if (!ni) return 0;
    w->instrs = ni;
    int32_t *nf = realloc(w->forward, sizeof(int32_t) * ((size_t)cap + 1));
    if (!nf) return 0;
    w->forward = nf;
    w->cap = cap;
  }
  memmove(w->instrs + pos + k, w->instrs + pos, sizeof(tt_instr_t) * (size_t)(n - pos));
  memmove(w->forward + pos + k, w->forward + pos, sizeof(int32_t) * (size_t)(n - pos));
  w->num_instrs = n + k;
  for (int32_t i = 0; i < n + k; ++i) {
    if (i >= pos && i < pos + k) continue;
    tt_instr_t *in = &w->instrs[i];
    for (int32_t q = 0; q < in->num_operands; ++q)
      if (in->operands[q] >= pos) in->operands[q] += k;
    if (w->forward[i] >= pos) w->forward[i] += k;
  }
  for (int32_t r = 0; r < w->num_outputs; ++r)
    if (w->outputs[r] >= pos) w->outputs[r] += k;
  for (int32_t i = pos; i < pos + k; ++i) {
    memset(&w->instrs[i], 0, sizeof(tt_instr_t));
    w->forward[i] = i;
  }
  return 1;
}

int tt_mv_set(tt_instr_t *in, tt_op_t op, tt_dtype_t dt, int32_t operand,
              const tt_shape_t *shape, const void *attrs, size_t attrs_size) {
  int32_t *ops = malloc(sizeof(int32_t) * 2);
  if (!ops) return 0;
  free(in->operands);
  ops[0] = operand;
  in->op = op;
  in->dtype = dt;
  in->shape = *shape;
  in->operands = ops;
  in->num_operands = 1;
  tt_attrs_encode_valid(op, attrs, attrs_size, -1, in->iattrs, &in->num_iattrs, in->fattrs);
  in->fused = NULL;
  return 1;
}

int tt_mv_set_reshape(tt_instr_t *in, tt_dtype_t dt, int32_t operand, const tt_shape_t *shape) {
  tt_dims_attrs_t a = {.dims = {.n = shape->rank}};
  for (int32_t d = 0; d < shape->rank; ++d) a.dims.v[d] = shape->dims[d];
  return tt_mv_set(in, TT_OP_RESHAPE, dt, operand, shape, &a, sizeof(a));
}

/* Rewrites copying node i from its map; returns 1 if it did. */
static int tt_mv_rewrite(tt_mv_pass_t *p, int32_t i, const tt_vmap_t *m) {
  tt_work_t *w = p->w;
  const tt_instr_t *b = &w->instrs[m->base];
  int64_t numel = tt_shape_numel(&b->shape);
  int64_t dsz[TT_MAX_RANK], dst[TT_MAX_RANK], fixed[TT_MAX_RANK];
  int atom_digit[TT_MV_ATOMS];
  int nd = tt_mv_digits(m, numel, dsz, dst, atom_digit, fixed);
  if (!nd) return 0;
  int nfixed = 0;
  for (int k = 0; k < nd; ++k) nfixed += fixed[k] >= 0;
  if (nfixed && !m->whole_copy) return 0;
  /* perm: fixed digits (outermost first), then the atoms in order */
  tt_transpose_attrs_t ta = {.perm = {.n = nd}};
  int64_t *perm = ta.perm.v;
  int np = 0, identity = 1;
  for (int k = 0; k < nd; ++k)
    if (fixed[k] >= 0) perm[np++] = k;
  for (int a = 0; a < m->n; ++a) perm[np++] = atom_digit[a];
  for (int k = 0; k < nd; ++k) identity &= perm[k] == k;
  tt_dtype_t dt = w->instrs[i].dtype;
  tt_shape_t rs = {nd, {0}}, ts = {nd, {0}};
  for (int k = 0; k < nd; ++k) {
    rs.dims[k] = dsz[k];
    ts.dims[k] = dsz[perm[k]];
  }
  int need_r = !tt_shape_equal(&rs, &b->shape);
  int need_t = !identity, need_s = nfixed > 0;
  int32_t extra = need_r + need_t + need_s;
  int32_t base = m->base;
  if (extra && !tt_mv_insert(w, i, extra)) return 0;
  int32_t at = i, cur = base;
  i += extra; /* the node itself moved up */
  if (need_r) {
    if (!tt_mv_set_reshape(&w->instrs[at], dt, cur, &rs)) return 0;
    cur = at++;
  }
  if (need_t) {
    if (!tt_mv_set(&w->instrs[at], TT_OP_TRANSPOSE, dt, cur, &ts, &ta, sizeof(ta))) return 0;
    cur = at++;
  }
  if (need_s) {
    tt_slice_attrs_t sa = {.start = {.n = nd}, .limit = {.n = nd}, .step = {.n = nd}};
    tt_shape_t ss = ts;
    for (int k = 0; k < nd; ++k) {
      int f = k < nfixed;
      sa.start.v[k] = f ? fixed[perm[k]] : 0;
      sa.limit.v[k] = f ? fixed[perm[k]] + 1 : ts.dims[k];
      sa.step.v[k] = 1;
      if (f) ss.dims[k] = 1;
    }
    if (!tt_mv_set(&w->instrs[at], TT_OP_SLICE, dt, cur, &ss, &sa, sizeof(sa))) return 0;
    cur = at++;
  }
  tt_instr_t *in = &w->instrs[i];
  tt_shape_t shape = in->shape;
  return tt_mv_set_reshape(in, dt, cur, &shape);
}

tt_status_t tt_pass_collapse_movement(tt_work_t *w) {
  tt_mv_pass_t p = {.w = w};
  /* From the last node back, so the longest chains go first and the
   * shorter ones inside them die. */
  for (int32_t i = w->num_instrs - 1; i >= 0; --i) {
    if (w->forward[i] != i) continue;
    const tt_instr_t *in = &w->instrs[i];
    if (in->op != TT_OP_TRANSPOSE && in->op != TT_OP_CONCAT && in->op != TT_OP_SLICE) continue;
    if (!p.uses) {
      p.uses = tt_work_use_counts(w);
      p.users_movement = malloc(sizeof(int32_t) * ((size_t)w->num_instrs + 1));
      if (!p.uses || !p.users_movement) break;
      tt_mv_scan_readers(w, p.uses, NULL, p.users_movement);
    }
    if (!p.uses[i]) continue;
    tt_vmap_t m;
    p.budget = TT_MV_BUDGET;
    tt_mv_map(&p, i, 0, &m);
    if (p.budget < 0 || m.base == i || m.copies < 2) continue;
    if (tt_mv_rewrite(&p, i, &m)) {
      free(p.uses);
      free(p.users_movement);
      p.uses = p.users_movement = NULL;
    }
  }
  free(p.uses);
  free(p.users_movement);
  return NULL;
}
