"""Linear algebra lowerings on the LINALG kernel (src/kernels/linalg.c):
Cholesky, LU (factor, unpack, solve), triangular solves, solve/inverse,
det/slogdet, QR (geqrf, householder_product, ormqr), eigh, SVD, pinv,
lstsq.

The kernel works on [B, rows, cols] batches and returns one packed row per
matrix ([B, P]); the lowerings here reshape batch dims in and out and slice
the packed results apart. Errors that LAPACK reports through `info` are
returned in `info` (the *_ex ops); ops that would raise on a singular or
non-positive-definite input do not check (that would need a sync).
"""
import torch

from torchtpu import ir

from torchtpu.lowering.core import (
    BIN, BINARY, CONVERT, DOT, GATHER, REDUCE, RED_MAX, RED_PROD, RED_SUM, SLICE,
    TRANSPOSE, TT_BOOL, TT_F32, TT_I32, TT_I64, UN, UNARY, WHERE, aten, broadcast, convert,
    handle, iota, lowers, reshape, scalar, tt, wrap)

CHOLESKY, LU, TRSM, GEQRF, ORGQR, ORMQR, EIGH, SVD = (
    ir.ENUMS["linalg"][n] for n in ("cholesky", "lu", "trsm", "geqrf", "orgqr", "ormqr", "eigh",
                                    "svd"))


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _float_h(x):
    h = x._h
    if h.dtype not in (0, 1, 2, 3):  # F32, F64, F16, BF16
        raise RuntimeError(f"linalg: Expected a floating point or complex tensor as input. Got "
                           f"{x.dtype}")
    return h


def _b3(h):
    """[..., m, n] -> ([B, m, n], batch shape)."""
    shape = list(h.shape)
    batch = shape[:-2]
    return reshape(h, [_numel(batch)] + shape[-2:]), batch


def _part(packed, off, count, shape):
    """Columns [off, off + count) of a packed [B, P] result, reshaped."""
    B, P = packed.shape
    h = ir.slice(packed, start=(0, off), limit=(B, off + count), step=(1, 1)) if (off, count) != (0, P) else packed
    return reshape(h, shape)


def _mT(h):
    r = len(h.shape)
    perm = list(range(r - 2)) + [r - 1, r - 2]
    return ir.transpose(h, perm=perm)


def _matmul(a, b):
    """Batched a @ b for [..., m, k] x [..., k, n] with equal batch dims."""
    batch = list(a.shape[:-2])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    B = _numel(batch)
    y = ir.dot(reshape(a, [B, m, k]), reshape(b, [B, k, n]), trans_a=0, trans_b=0)
    return reshape(y, batch + [m, n])


def _eye(dev, dt, n, batch):
    rows = reshape(iota(dev, n), [n, 1])
    cols = reshape(iota(dev, n), [1, n])
    e = ir.convert(ir.binary(rows, cols, op=BIN["eq"]), dtype=dt)
    return broadcast(e, batch + [n, n])


def _tri_mask(dev, m, n, lower, diag_ok):
    r = reshape(iota(dev, m), [m, 1])
    c = reshape(iota(dev, n), [1, n])
    if lower:
        return ir.binary(r, c, op=BIN["ge" if diag_ok else "gt"])
    return ir.binary(r, c, op=BIN["le" if diag_ok else "lt"])


def _check_square(x, name):
    if x.dim() < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if x.shape[-1] != x.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are "
                           f"{x.shape[-2]} by {x.shape[-1]} matrices")


# ----------------------------------------------------------------- Cholesky
def _cholesky_h(x, upper):
    h, batch = _b3(_float_h(x))
    n = x.shape[-1]
    packed = ir.linalg(h, op=CHOLESKY, flags=(int(bool(upper)), 0, 0))
    L = _part(packed, 0, n * n, batch + [n, n])
    info = _part(packed, n * n, 1, batch)
    if upper:
        L = _mT(L)
    return L, ir.convert(info, dtype=TT_I32)


@lowers(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(x, *, upper=False, check_errors=False):
    _check_square(x, "linalg.cholesky")
    L, info = _cholesky_h(x, upper)
    return wrap(L), wrap(info)


@lowers(aten.cholesky.default)
def cholesky(x, upper=False):
    _check_square(x, "cholesky")
    return wrap(_cholesky_h(x, upper)[0])


def _trsm_h(a, b, upper, unit=False, trans=False):
    """op(a) X = b for a [..., n, n], b [..., n, r] (batch dims equal)."""
    a3, batch = _b3(a)
    b3, _ = _b3(b)
    n, r = b.shape[-2], b.shape[-1]
    x = ir.linalg(a3, b3, op=TRSM, flags=(int(bool(upper)), int(bool(unit)), int(bool(trans))))
    return reshape(x, batch + [n, r])


def _bcast_batch(a, b):
    """Broadcasts the batch dims of a and b ([..., r, c]) to each other."""
    ba, bb = list(a.shape[:-2]), list(b.shape[:-2])
    r = max(len(ba), len(bb))
    ba, bb = [1] * (r - len(ba)) + ba, [1] * (r - len(bb)) + bb
    out = [max(x, y) if 1 in (x, y) else x for x, y in zip(ba, bb)]
    for x, y in zip(ba, bb):
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"linalg: incompatible batch dimensions {list(a.shape)} and "
                               f"{list(b.shape)}")
    return broadcast(a, out + list(a.shape[-2:])), broadcast(b, out + list(b.shape[-2:]))


@lowers(aten.cholesky_solve.default)
def cholesky_solve(b, L, upper=False):
    bh, lh = _bcast_batch(b._h, L._h)
    # A = L L^T (or U^T U): solve L Y = B, then L^T X = Y.
    y = _trsm_h(lh, bh, upper, trans=upper)
    return wrap(_trsm_h(lh, y, upper, trans=not upper))


@lowers(aten.cholesky_inverse.default)
def cholesky_inverse(L, upper=False):
    n = L.shape[-1]
    eye = _eye(L._h.device, L._h.dtype, n, list(L.shape[:-2]))
    return cholesky_solve(wrap(eye), L, upper)


# ---------------------------------------------------------------------- LU
def _lu_h(x):
    h, batch = _b3(_float_h(x))
    m, n = x.shape[-2], x.shape[-1]
    k = min(m, n)
    packed = ir.linalg(h, op=LU)
    LU_ = _part(packed, 0, m * n, batch + [m, n])
    piv = _part(packed, m * n, k, batch + [k])
    perm = _part(packed, m * n + k, m, batch + [m])
    info = _part(packed, m * n + k + m, 1, batch)
    return LU_, piv, perm, info


@lowers(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(x, *, pivot=True, check_errors=False):
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    LU_, piv, _, info = _lu_h(x)
    return wrap(LU_), wrap(ir.convert(piv, dtype=TT_I32)), wrap(ir.convert(info, dtype=TT_I32))


def _perm_matrix(perm_f, m, dt):
    """P with P[perm[i], i] = 1 (so A = P L U when A[perm] = L U)."""
    dev = perm_f.device
    p = ir.convert(perm_f, dtype=TT_I64)
    batch = list(perm_f.shape[:-1])
    rows = reshape(iota(dev, m), [m, 1])
    eq = ir.binary(rows, reshape(p, batch + [1, m]), op=BIN["eq"])
    return ir.convert(eq, dtype=dt)


def _unpack_lu(LU_, m, n, dt):
    dev = LU_.device
    k = min(m, n)
    batch = list(LU_.shape[:-2])
    zero = scalar(dev, dt, 0)
    Lfull = ir.where(_tri_mask(dev, m, n, True, False), LU_, zero)
    L = _slice_last2(Lfull, m, k)
    eye = _eye(dev, dt, min(m, k), [])
    eye = reshape(eye, [m, k]) if m == k else _eye_rect(dev, dt, m, k)
    L = ir.binary(L, broadcast(eye, batch + [m, k]), op=BIN["add"])
    Ufull = ir.where(_tri_mask(dev, m, n, False, True), LU_, zero)
    U = _slice_last2(Ufull, k, n)
    return L, U


def _eye_rect(dev, dt, m, k):
    rows = reshape(iota(dev, m), [m, 1])
    cols = reshape(iota(dev, k), [1, k])
    return ir.convert(ir.binary(rows, cols, op=BIN["eq"]), dtype=dt)


def _slice_last2(h, rows, cols):
    r = len(h.shape)
    if list(h.shape[-2:]) == [rows, cols]:
        return h
    starts = [0] * r
    limits = list(h.shape[:-2]) + [rows, cols]
    return ir.slice(h, start=starts, limit=limits, step=[1] * r)


@lowers(aten.linalg_lu.default)
def linalg_lu(x, *, pivot=True):
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the CPU")
    m, n = x.shape[-2], x.shape[-1]
    LU_, _, perm, _ = _lu_h(x)
    L, U = _unpack_lu(LU_, m, n, x._h.dtype)
    return wrap(_perm_matrix(perm, m, x._h.dtype)), wrap(L), wrap(U)


def _pivots_to_perm(piv, m):
    """Row order from LAPACK pivots ([..., k], 1-based): apply the swaps."""
    dev = piv.device
    batch = list(piv.shape[:-1])
    k = piv.shape[-1]
    p = ir.binary(ir.convert(piv, dtype=TT_I64), scalar(dev, TT_I64, 1), op=BIN["sub"])
    B = _numel(batch)
    p = reshape(p, [B, k])
    perm = broadcast(reshape(iota(dev, m), [1, m]), [B, m])
    pos = reshape(iota(dev, m), [1, m])
    for j in range(k):
        pj = ir.slice(p, start=(0, j), limit=(B, j + 1), step=(1, 1))               # [B, 1]
        a = ir.slice(perm, start=(0, j), limit=(B, j + 1), step=(1, 1))              # perm[j]
        b = ir.gather(perm, pj, dim=1)                           # perm[pj]
        is_j = ir.binary(pos, scalar(dev, TT_I64, j), op=BIN["eq"])
        is_p = ir.binary(pos, pj, op=BIN["eq"])
        perm = ir.where(is_j, b, ir.where(is_p, a, perm))
    return reshape(perm, batch + [m])


@lowers(aten.lu_unpack.default)
def lu_unpack(LU_, pivots, unpack_data=True, unpack_pivots=True):
    m, n = LU_.shape[-2], LU_.shape[-1]
    dt = LU_._h.dtype
    dev = LU_._h.device
    batch = list(LU_.shape[:-2])
    if unpack_pivots:
        perm = _pivots_to_perm(pivots._h, m)
        P = _perm_matrix(ir.convert(perm, dtype=dt), m, dt)
    else:
        P = broadcast(scalar(dev, dt, 0), [0])
    if unpack_data:
        L, U = _unpack_lu(LU_._h, m, n, dt)
    else:
        L = U = broadcast(scalar(dev, dt, 0), [0])
    _ = batch
    return wrap(P), wrap(L), wrap(U)


def _lu_solve_h(LU_, perm, b, left=True, adjoint=False):
    """Solves A X = B (or A^T X = B, X A = B, X A^T = B) from A[perm] = L U."""
    dev = LU_.device
    if not left:
        # X A = B  <=>  A^T X^T = B^T
        return _mT(_lu_solve_h(LU_, perm, _mT(b), True, not adjoint))
    n = LU_.shape[-1]
    batch = list(b.shape[:-2])
    p = ir.convert(perm, dtype=TT_I64)
    r = b.shape[-1]
    if not adjoint:
        # L U X = B[perm]
        idx = broadcast(reshape(p, batch + [n, 1]), batch + [n, r])
        pb = ir.gather(b, idx, dim=len(batch))
        y = _trsm_h(LU_, pb, False, unit=True)
        return _trsm_h(LU_, y, True)
    # A^T X = B: U^T L^T (P^T X) = B -> Z = P^T X, X[perm] = Z.
    y = _trsm_h(LU_, b, True, trans=True)
    z = _trsm_h(LU_, y, False, unit=True, trans=True)
    idx = broadcast(reshape(p, batch + [n, 1]), batch + [n, r])
    from torchtpu.lowering.core import SCATTER
    zeros = broadcast(scalar(dev, b.dtype, 0), batch + [n, r])
    return ir.scatter(zeros, idx, z, dim=len(batch), reduce=0)


@lowers(aten.linalg_lu_solve.default)
def linalg_lu_solve(LU_, pivots, B, *, left=True, adjoint=False):
    n = LU_.shape[-1]
    lh, bh = _bcast_batch(LU_._h, B._h)
    ph = pivots._h
    batch = list(lh.shape[:-2])
    ph = broadcast(ph, batch + [ph.shape[-1]])
    perm = _pivots_to_perm(ph, n)
    return wrap(_lu_solve_h(lh, perm, bh, left, adjoint))


# ----------------------------------------------------- triangular solves
@lowers(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    ah, bh = _bcast_batch(_float_h(A), B._h)
    if left:
        return wrap(_trsm_h(ah, bh, upper, unitriangular))
    # X A = B  <=>  A^T X^T = B^T
    return wrap(_mT(_trsm_h(ah, _mT(bh), upper, unitriangular, trans=True)))


@lowers(aten.triangular_solve.default)
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    ah, bh = _bcast_batch(_float_h(A), b._h)
    return wrap(_trsm_h(ah, bh, upper, unitriangular, transpose)), wrap(ah)


# ------------------------------------------------- solve, inverse, det
@lowers(aten._linalg_solve_ex.default)
def linalg_solve_ex(A, B, *, left=True, check_errors=False):
    _check_square(A, "linalg.solve")
    n = A.shape[-1]
    vector = B.dim() == 1 or (left and B.dim() == A.dim() - 1 and
                              list(B.shape) == list(A.shape[:-1]))
    bh = reshape(B._h, list(B.shape) + [1]) if vector else B._h
    LU_, piv, perm, info = _lu_h(A)
    lh, bh = _bcast_batch(LU_, bh)
    batch = list(lh.shape[:-2])
    perm = broadcast(perm, batch + [n])
    x = _lu_solve_h(lh, perm, bh, left, False)
    if vector:
        x = reshape(x, list(x.shape[:-1]))
    return (wrap(x), wrap(LU_), wrap(ir.convert(piv, dtype=TT_I32)),
            wrap(ir.convert(info, dtype=TT_I32)))


@lowers(aten.linalg_inv_ex.default)
def linalg_inv_ex(A, *, check_errors=False):
    _check_square(A, "linalg.inv")
    n = A.shape[-1]
    LU_, _, perm, info = _lu_h(A)
    eye = _eye(A._h.device, A._h.dtype, n, list(A.shape[:-2]))
    return wrap(_lu_solve_h(LU_, perm, eye)), wrap(ir.convert(info, dtype=TT_I32))


def _det_parts(A):
    # ATen factors A^T (F-contiguous LAPACK input) and returns that LU and
    # its pivots; the backward (lu_solve on them) relies on it.
    LU_, piv, perm, info = _lu_h(wrap(_mT(A._h)))
    dev, dt = A._h.device, A._h.dtype
    n = A.shape[-1]
    batch = list(A.shape[:-2])
    eye = ir.convert(_eye(dev, dt, n, []), dtype=TT_BOOL)
    diag = ir.reduce(ir.where(eye, LU_, scalar(dev, dt, 0)), op=RED_SUM, dims_mask=1 << (len(batch) + 1), keepdim=0, dtype=dt)
    swaps = ir.binary(ir.convert(piv, dtype=TT_I64), reshape(ir.binary(iota(dev, n), scalar(dev, TT_I64, 1), op=BIN["add"]),
                                [n]), op=BIN["ne"])
    nswap = ir.reduce(ir.convert(swaps, dtype=TT_I64), op=RED_SUM, dims_mask=1 << len(batch), keepdim=0, dtype=TT_I64)
    odd = ir.binary(ir.binary(nswap, scalar(dev, TT_I64, 2), op=BIN["remainder"]), scalar(dev, TT_I64, 1), op=BIN["eq"])
    sign = ir.where(odd, scalar(dev, dt, -1.0), scalar(dev, dt, 1.0))
    return LU_, piv, diag, sign


@lowers(aten._linalg_det.default)
def linalg_det(A):
    _check_square(A, "linalg.det")
    LU_, piv, diag, sign = _det_parts(A)
    nb = len(A.shape) - 2
    det = ir.binary(ir.reduce(diag, op=RED_PROD, dims_mask=1 << nb, keepdim=0, dtype=diag.dtype), sign, op=BIN["mul"])
    return wrap(det), wrap(LU_), wrap(ir.convert(piv, dtype=TT_I32))


@lowers(aten._linalg_slogdet.default)
def linalg_slogdet(A):
    _check_square(A, "linalg.slogdet")
    dev, dt = A._h.device, A._h.dtype
    LU_, piv, diag, sign = _det_parts(A)
    nb = len(A.shape) - 2
    dsign = ir.unary(diag, op=UN["sign"], alpha=0.0, beta=0.0)
    sign = ir.binary(sign, ir.reduce(dsign, op=RED_PROD, dims_mask=1 << nb, keepdim=0, dtype=dt), op=BIN["mul"])
    logabs = ir.reduce(ir.unary(ir.unary(diag, op=UN["abs"], alpha=0.0, beta=0.0), op=UN["log"], alpha=0.0, beta=0.0), op=RED_SUM, dims_mask=1 << nb, keepdim=0, dtype=dt)
    _ = dev
    return wrap(sign), wrap(logabs), wrap(LU_), wrap(ir.convert(piv, dtype=TT_I32))


# ---------------------------------------------------------------------- QR
def _geqrf_h(x):
    h, batch = _b3(_float_h(x))
    m, n = x.shape[-2], x.shape[-1]
    k = min(m, n)
    packed = ir.linalg(h, op=GEQRF)
    return _part(packed, 0, m * n, batch + [m, n]), _part(packed, m * n, k, batch + [k])


@lowers(aten.geqrf.default)
def geqrf(x):
    a, tau = _geqrf_h(x)
    return wrap(a), wrap(tau)


def _orgqr_h(a, tau):
    a3, batch = _b3(a)
    m, n = a.shape[-2], a.shape[-1]
    k = tau.shape[-1]
    t3 = reshape(tau, [_numel(batch), 1, k])
    return reshape(ir.linalg(a3, t3, op=ORGQR), batch + [m, n])


@lowers(aten.linalg_householder_product.default)
def linalg_householder_product(A, tau):
    if A.shape[-1] > A.shape[-2]:
        raise RuntimeError("torch.linalg.householder_product: input.shape[-2] must be greater "
                           "than or equal to input.shape[-1]")
    return wrap(_orgqr_h(_float_h(A), tau._h))


@lowers(aten.linalg_qr.default)
def linalg_qr(A, mode="reduced"):
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    dev, dt = A._h.device, A._h.dtype
    a, tau = _geqrf_h(A)
    rows = m if mode == "complete" else k
    R = ir.where(_tri_mask(dev, m, n, False, True), a, scalar(dev, dt, 0))
    R = _slice_last2(R, rows, n)
    if mode == "r":
        return wrap(broadcast(scalar(dev, dt, 0), [0])), wrap(R)
    batch = list(A.shape[:-2])
    if mode == "complete" and m > n:
        # Q is m x m: extend the reflector matrix with zero columns.
        r = len(a.shape)
        a = ir.pad(a, lo=[0] * r, hi=[0] * (r - 1) + [m - n], value=0.0)
        q = _orgqr_h(a, tau)
    else:
        q = _orgqr_h(_slice_last2(a, m, k), tau)
    _ = batch
    return wrap(q), wrap(R)


@lowers(aten.ormqr.default)
def ormqr(A, tau, C, left=True, transpose=False):
    a3, batch = _b3(_float_h(A))
    c3, _ = _b3(C._h)
    k = tau.shape[-1]
    t3 = reshape(tau._h, [_numel(batch), 1, k])
    out = ir.linalg(a3, t3, c3, op=ORMQR, flags=(int(bool(left)), int(bool(transpose)), 0))
    return wrap(reshape(out, list(C.shape)))


# ------------------------------------------------------------ eigh / SVD
@lowers(aten._linalg_eigh.default)
def linalg_eigh(A, UPLO="L", compute_v=True):
    _check_square(A, "linalg.eigh")
    n = A.shape[-1]
    h, batch = _b3(_float_h(A))
    packed = ir.linalg(h, op=EIGH, flags=(int(UPLO.upper() == "U"), 0, 0))
    w = _part(packed, 0, n, batch + [n])
    v = _part(packed, n, n * n, batch + [n, n]) if compute_v else \
        broadcast(scalar(A._h.device, A._h.dtype, 0), [0])
    return wrap(w), wrap(v)


def _svd_h(x, full_matrices=True):
    h, batch = _b3(_float_h(x))
    m, n = x.shape[-2], x.shape[-1]
    k = min(m, n)
    packed = ir.linalg(h, op=SVD)
    U = _part(packed, 0, m * m, batch + [m, m])
    S = _part(packed, m * m, k, batch + [k])
    Vh = _part(packed, m * m + k, n * n, batch + [n, n])
    if not full_matrices:
        U, Vh = _slice_last2(U, m, k), _slice_last2(Vh, k, n)
    return U, S, Vh


@lowers(aten._linalg_svd.default)
def linalg_svd(A, full_matrices=False, compute_uv=True, driver=None):
    U, S, Vh = _svd_h(A, full_matrices)
    if not compute_uv:
        e = broadcast(scalar(A._h.device, A._h.dtype, 0), [0])
        return wrap(e), wrap(S), wrap(e)
    return wrap(U), wrap(S), wrap(Vh)


def _pinv_h(A, atol, rtol, hermitian):
    dev, dt = A._h.device, A._h.dtype
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    nb = len(A.shape) - 2
    if hermitian:
        wrapped = linalg_eigh(A, "L", True)
        w, V = wrapped[0]._h, wrapped[1]._h
        S = ir.unary(w, op=UN["abs"], alpha=0.0, beta=0.0)
        U, Vh = V, _mT(V)
        Sd = w
    else:
        U, S, Vh = _svd_h(A, False)
        Sd = S
    smax = ir.reduce(S, op=RED_MAX, dims_mask=1 << nb, keepdim=1, dtype=dt) if k else scalar(dev, dt, 0)
    tol = None
    if rtol is not None:
        tol = ir.binary(smax, handle(rtol, dev, dt) if not isinstance(rtol, (int, float))
                          else scalar(dev, dt, rtol), op=BIN["mul"])
    if atol is not None:
        ah = scalar(dev, dt, atol) if isinstance(atol, (int, float)) else \
            reshape(handle(atol, dev, dt), list(atol.shape) + [1])
        tol = ah if tol is None else ir.binary(tol, ah, op=BIN["max"])
    keep = ir.binary(S, tol, op=BIN["gt"])
    inv = ir.where(keep, ir.unary(Sd, op=UN["reciprocal"], alpha=0.0, beta=0.0), scalar(dev, dt, 0))
    # pinv = V diag(1/s) U^T
    V = _mT(Vh)
    Vs = ir.binary(V, reshape(inv, list(inv.shape[:-1]) + [1, k]), op=BIN["mul"])
    return _matmul(Vs, _mT(U))


@lowers(aten.linalg_pinv.atol_rtol_tensor)
def linalg_pinv(A, *, atol=None, rtol=None, hermitian=False):
    m, n = A.shape[-2], A.shape[-1]
    if rtol is None:
        eps = torch.finfo(A.dtype).eps
        rtol = 0.0 if (atol is not None and not _is_zero(atol)) else eps * max(m, n)
    return wrap(_pinv_h(A, atol, rtol, hermitian))


def _is_zero(v):
    return isinstance(v, (int, float)) and v == 0


@lowers(aten.linalg_pinv.atol_rtol_float)
def linalg_pinv_float(A, atol=None, rtol=None, hermitian=False):
    return linalg_pinv(A, atol=atol, rtol=rtol, hermitian=hermitian)


@lowers(aten.linalg_lstsq.default)
def linalg_lstsq(A, B, rcond=None, *, driver=None):
    """Least squares through the pseudo-inverse (minimum-norm solution, as
    gelsd; equal to gelsy's for full-rank A). rank and singular values are
    returned for the drivers that return them on CPU."""
    dev, dt = A._h.device, A._h.dtype
    driver = driver or "gelsy"
    m, n = A.shape[-2], A.shape[-1]
    vector = B.dim() == A.dim() - 1
    bh = reshape(B._h, list(B.shape) + [1]) if vector else B._h
    eps = torch.finfo(A.dtype).eps
    rc = rcond if rcond is not None else eps * max(m, n)
    ah, bh = _bcast_batch(A._h, bh)
    Aw = wrap(ah)
    x = _matmul(_pinv_h(Aw, None, rc, False), bh)
    batch = list(ah.shape[:-2])
    empty = broadcast(scalar(dev, dt, 0), [0])
    residuals = empty
    if m > n and driver != "gelsy":
        # Squared residual norms (ATen returns them when m > n and A has
        # full rank; full rank is assumed here, checking it would sync).
        d = ir.binary(_matmul(ah, x), bh, op=BIN["sub"])
        residuals = ir.reduce(ir.binary(d, d, op=BIN["mul"]), op=RED_SUM, dims_mask=1 << len(batch), keepdim=0, dtype=dt)
        if vector:
            residuals = reshape(residuals, batch)
    if vector:
        x = reshape(x, list(x.shape[:-1]))
    rank = broadcast(scalar(dev, TT_I64, 0), [0])
    sv = empty
    if driver != "gels":
        _, S, _ = _svd_h(Aw, False)
        k = min(m, n)
        smax = ir.reduce(S, op=RED_MAX, dims_mask=1 << len(batch), keepdim=1, dtype=dt) if k else scalar(dev, dt, 0)
        big = ir.binary(S, ir.binary(smax, scalar(dev, dt, rc), op=BIN["mul"]), op=BIN["gt"])
        rank = ir.reduce(ir.convert(big, dtype=TT_I64), op=RED_SUM, dims_mask=1 << len(batch), keepdim=0, dtype=TT_I64)
        if driver in ("gelsd", "gelss"):
            sv = S
    return wrap(x), wrap(residuals), wrap(rank), wrap(sv)


# ------------------------------------------------------------ error checks
ERROR_CHECK_COUNTER = "LinalgErrorCheckSync"


@lowers(aten._linalg_check_errors.default)
def linalg_check_errors(info, api_name, *, is_matrix):
    """The ops that raise on a singular / non-positive-definite input
    (linalg.inv, linalg.cholesky, linalg.solve, ...) read their info back,
    as they do on CUDA: one counted sync (LinalgErrorCheckSync), never a
    fallback. The messages are ATen's."""
    from torchtpu import _C, bridge
    _C.counter_add(ERROR_CHECK_COUNTER, 1)
    vals = bridge.download(info._h).reshape(-1)
    bad = (vals != 0).nonzero()
    if bad.numel() == 0:
        return None
    i = int(bad[0, 0])
    v = int(vals[i])
    batch = "" if is_matrix or info.dim() == 0 else f"(Batch element {i}): "
    if v < 0:
        raise RuntimeError(f"{api_name}: {batch}Argument {-v} has illegal value. Most certainly "
                           "there is a bug in the implementation calling the backend library.")
    if "cholesky" in api_name:
        raise torch.linalg.LinAlgError(
            f"{api_name}: {batch}The factorization could not be completed because the input is "
            f"not positive-definite (the leading minor of order {v} is not positive-definite).")
    raise torch.linalg.LinAlgError(
        f"{api_name}: {batch}The diagonal element {v} is zero, the inversion could not be "
        "completed because the input matrix is singular.")


_ = (TT_F32, convert, tt, RED_MAX)
