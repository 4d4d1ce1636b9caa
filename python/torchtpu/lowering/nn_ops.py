"""Linear algebra and neural-network lowerings: GEMMs, convolution,
pooling, softmax, embedding, dropout."""
import math

import torch

from torchtpu import settings, ir
from torchtpu.lowering.core import (
    LAYER_NORM, LAYER_NORM_BWD,
    ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_BWD, AVG_POOL2D, AVG_POOL2D_BWD, BIN, BINARY,
    BROADCAST, CONV2D, CONV2D_BWD_INPUT, CONV2D_BWD_WEIGHT, DOT, INDEX_ADD, INDEX_SELECT,
    MAX_POOL2D, MAX_POOL2D_BWD, MAX_POOL2D_INDICES, REDUCE, RED_MAX, RED_MEAN, RED_SUM, SOFTMAX,
    SOFTMAX_BWD, TT_BF16, TT_F16, TT_F32, TT_I64, UN, UNARY, WHERE, PAD, SLICE, aten, broadcast, convert, handle, lowers, norm_dim,
    iota, is_xla, reshape, result_type, scalar, tt, wrap)


def _check_mm_dtypes(a, b, name):
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{a.dtype} != {b.dtype}")


@lowers(aten.mm.default)
def mm(a, b):
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"{'self' if a.dim() != 2 else 'mat2'} must be a matrix")
    _check_mm_dtypes(a, b, "mm")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
            f"{b.shape[0]}x{b.shape[1]})")
    h = ir.dot(reshape(a._h, [1, *a.shape]), reshape(b._h, [1, *b.shape]), trans_a=0, trans_b=0)
    return wrap(reshape(h, [a.shape[0], b.shape[1]]))


@lowers(aten.bmm.default)
def bmm(a, b):
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor" if a.dim() != 3 else
                           "batch2 must be a 3D tensor")
    _check_mm_dtypes(a, b, "bmm")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: "
            f"[{a.shape[0]}, {a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
    return wrap(ir.dot(a._h, b._h, trans_a=0, trans_b=0))


@lowers(aten.addmm.default)
def addmm(bias, a, b, beta=1, alpha=1):
    prod = mm(a, b)._h
    dev = prod.device
    if alpha != 1:
        prod = ir.binary(prod, scalar(dev, prod.dtype, alpha), op=BIN["mul"])
    if beta == 0:
        return wrap(prod)
    bh = handle(bias, dev, prod.dtype)
    if beta != 1:
        bh = ir.binary(bh, scalar(dev, prod.dtype, beta), op=BIN["mul"])
    return wrap(ir.binary(prod, bh, op=BIN["add"]))


@lowers(aten.baddbmm.default)
def baddbmm(bias, a, b, beta=1, alpha=1):
    prod = bmm(a, b)._h
    dev = prod.device
    if alpha != 1:
        prod = ir.binary(prod, scalar(dev, prod.dtype, alpha), op=BIN["mul"])
    if beta == 0:
        return wrap(prod)
    bh = handle(bias, dev, prod.dtype)
    if beta != 1:
        bh = ir.binary(bh, scalar(dev, prod.dtype, beta), op=BIN["mul"])
    return wrap(ir.binary(prod, bh, op=BIN["add"]))


@lowers(aten.dot.default, aten.vdot.default)
def dot(a, b):
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src "
                           f"[{b.shape[0]}] to have the same number of elements, but got "
                           f"{a.shape[0]} and {b.shape[0]} elements respectively")
    _check_mm_dtypes(a, b, "dot")
    n = a.shape[0]
    h = ir.dot(reshape(a._h, [1, 1, n]), reshape(b._h, [1, n, 1]), trans_a=0, trans_b=0)
    return wrap(reshape(h, []))


@lowers(aten.mv.default)
def mv(a, v):
    h = ir.dot(reshape(a._h, [1, *a.shape]), reshape(v._h, [1, v.shape[0], 1]), trans_a=0, trans_b=0)
    return wrap(reshape(h, [a.shape[0]]))


# ------------------------------------------------------------- softmax
# TORCHTPU_LOG_SOFTMAX_PROBS=0: log_softmax never keeps its probabilities.
_KEEP_PROBS = settings.LOG_SOFTMAX_PROBS


def _softmax(log):
    def fn(x, dim, half_to_float=False):
        d = norm_dim(dim, x.dim())
        h = x._h
        if half_to_float:
            h = convert(h, tt(torch.float32))
        if x.dim() == 0:
            h = reshape(h, [1])
            return wrap(reshape(ir.softmax(h, dim=0, log=log), []))
        if (log and _KEEP_PROBS and d == x.dim() - 1 and h.dtype == TT_F32 and
                x.numel() > 0 and torch.is_grad_enabled()):
            # Training: the backward of a cross-entropy needs exp(y), the
            # softmax, which the forward has as the exps of its row sums.
            # One packed result [log_softmax | softmax]; the backward reads
            # the second half (y._probs) instead of an exp per element.
            n, shape = x.numel(), list(x.shape)
            y, p = _packed_pieces(ir.softmax(h, dim=d, log=1, packed=1), [(n, shape), (n, shape)])
            y._probs = p._h
            return y
        return wrap(ir.softmax(h, dim=d, log=log))
    return fn


lowers(aten._softmax.default)(_softmax(0))
lowers(aten._log_softmax.default)(_softmax(1))


def _softmax_bwd(log):
    def fn(grad, out, dim, input_dtype):
        d = norm_dim(dim, grad.dim())
        gh, yh = grad._h, out._h
        sums = getattr(grad, "_row_sums", None) if log else None
        if sums is not None and grad.dim() == 2 and d == 1 and yh.dtype == gh.dtype:
            # Cross-entropy: g is nll_loss_backward's one-hot rows, whose sums
            # are known, so g - exp(y) * sum(g) is elementwise and fuses with
            # the select that makes g: one pass over [N, C] instead of
            # writing g, then reading g and y to reduce and combine.
            e = getattr(out, "_probs", None)
            if e is None:
                e = ir.unary(yh, op=UN["exp"], alpha=0.0, beta=0.0)
            r = ir.binary(gh, ir.binary(e, sums, op=BIN["mul"]), op=BIN["sub"])
            return wrap(convert(r, tt(input_dtype)))
        if grad.dim() == 0:
            gh, yh = reshape(gh, [1]), reshape(yh, [1])
            r = reshape(ir.softmax_bwd(gh, yh, dim=0, log=log), [])
        else:
            r = ir.softmax_bwd(gh, yh, dim=d, log=log)
        return wrap(convert(r, tt(input_dtype)))
    return fn


lowers(aten._softmax_backward_data.default)(_softmax_bwd(0))
lowers(aten._log_softmax_backward_data.default)(_softmax_bwd(1))


# ---------------------------------------------------------- convolution
def _pair(v, n=2):
    v = list(v)
    return v * n if len(v) == 1 else v


def _single_window(in_hw, out_hw, k, p, d, groups):
    """A convolution with a 1x1 output plane reads one window of the padded
    input, so it is a single GEMM: ResNet's last stage on 32x32 images (3x3
    kernels over 1x1 or 2x2 planes) ran as one matrix-vector product per
    image. Only the taps of the window that fall on the input do work (the
    centre tap of a 3x3 kernel over a 1x1 plane): the GEMM is over
    C * (taps on the input), not C*KH*KW. The window starts p rows (and
    columns) above the input, so those taps are [p, p + h) and they read
    input rows [0, h). Returns h per spatial dim, or None when the output is
    not 1x1 or the window reads no input at all."""
    if list(out_hw) != [1, 1] or list(d) != [1, 1] or groups != 1:
        return None
    ext = [min(k[i] - p[i], in_hw[i]) for i in range(2)]
    return ext if min(ext) > 0 else None


def _window_taps(k, p, ext):
    """(lows, highs) that crop a [.., KH, KW] weight to the window's taps
    on the input (negated: that pad its gradient back to the kernel)."""
    return list(p), [k[i] - p[i] - ext[i] for i in range(2)]


def _window_weight(wh, p, ext):
    """The weight's taps that read the input: [O, C, h, w], cropped."""
    lo, hi = _window_taps(wh.shape[2:], p, ext)
    return _pad4(wh, [-v for v in lo], [-v for v in hi])


def _window_input(xh, ext):
    """The input rows and columns the window reads: [N, C, h, w]."""
    return _pad4(xh, [0, 0], [ext[i] - xh.shape[2 + i] for i in range(2)])


def _pad4(h, lows, highs):
    """h [N, C, H, W] padded with zeros (negative: cropped) on H and W."""
    if not any(lows) and not any(highs):
        return h
    return ir.pad(h, lo=(0, 0, lows[0], lows[1]), hi=(0, 0, highs[0], highs[1]), value=0.0)


def _conv_out_hw(xs, ks, s, p, d):
    return [(xs[i] + 2 * p[i] - d[i] * (ks[i] - 1) - 1) // s[i] + 1 for i in range(2)]


@lowers(aten.convolution.default)
def convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    from torchtpu.lowering.fallback import fallback
    if transposed and x.dim() in (3, 4) and x.dtype.is_floating_point and x.dtype == w.dtype:
        return _conv_transpose(x, w, bias, stride, padding, dilation, output_padding, groups)
    if transposed and x.dim() in (3, 4) and x.dtype == w.dtype and x.dtype != torch.bool:
        return _int_convolution(x, w, bias, stride, padding, dilation, groups,
                                transposed=True, output_padding=output_padding)
    if not transposed and x.dim() == 5 and x.dtype.is_floating_point and x.dtype == w.dtype:
        return _conv3d_forward(x, w, bias, stride, padding, dilation, groups)
    if not transposed and x.dim() == 5 and x.dtype == w.dtype and x.dtype != torch.bool:
        return _int_convolution(x, w, bias, stride, padding, dilation, groups)
    if transposed or x.dim() not in (3, 4) or x.dtype == torch.bool:
        return fallback(aten.convolution.default,
                        (x, w, bias, stride, padding, dilation, transposed, output_padding,
                         groups), {})
    if x.dtype != w.dtype:
        raise RuntimeError(
            f"Input type ({x.dtype}) and weight type ({w.dtype}) should be the same")
    if not x.dtype.is_floating_point:
        return _int_convolution(x, w, bias, stride, padding, dilation, groups)
    xh, wh = x._h, w._h
    conv1d = x.dim() == 3
    if conv1d:
        xh = reshape(xh, [x.shape[0], x.shape[1], 1, x.shape[2]])
        wh = reshape(wh, [w.shape[0], w.shape[1], 1, w.shape[2]])
        stride, padding, dilation = [1, stride[0]], [0, padding[0]], [1, dilation[0]]
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    win = _single_window(xh.shape[2:], _conv_out_hw(xh.shape[2:], wh.shape[2:], s, p, d),
                         wh.shape[2:], p, d, groups)
    if win:
        n, o = xh.shape[0], wh.shape[0]
        ckk = wh.shape[1] * win[0] * win[1]
        xw = reshape(_window_input(xh, win), [1, n, ckk])
        out = ir.dot(xw, reshape(_window_weight(wh, p, win), [1, o, ckk]), trans_a=0, trans_b=1)
        out = reshape(out, [n, o, 1, 1])
    else:
        out = ir.conv2d(xh, wh, stride=s, padding=p, dilation=d, groups=groups)
    if bias is not None:
        out = ir.binary(out, reshape(bias._h, [1, bias.shape[0], 1, 1]), op=BIN["add"])
    if conv1d:
        shape = out.shape
        out = reshape(out, [shape[0], shape[1], shape[3]])
    return wrap(out)


def _as_2d(x, w, stride, padding, dilation, output_padding=(0,)):
    """conv1d operands and parameters as conv2d ones (a height of 1)."""
    xh = reshape(x._h, [x.shape[0], x.shape[1], 1, x.shape[2]])
    wh = reshape(w._h, [w.shape[0], w.shape[1], 1, w.shape[2]])
    return (xh, wh, [1, stride[0]], [0, padding[0]], [1, dilation[0]],
            [0, list(output_padding)[0]])


def _conv_transpose(x, w, bias, stride, padding, dilation, output_padding, groups):
    """A transposed convolution is the input-gradient of the forward
    convolution with the same weight: CONV2D_BWD_INPUT with x as the
    output gradient, w being [Cin, Cout/groups, kh, kw]. It is computed
    unpadded (the full output, which the kernel always accepts), then
    cropped by padding and extended with zeros for output padding."""
    conv1d = x.dim() == 3
    if conv1d:
        xh, wh, stride, padding, dilation, output_padding = _as_2d(
            x, w, stride, padding, dilation, output_padding)
    else:
        xh, wh = x._h, w._h
    s, p, d, op_ = _pair(stride), _pair(padding), _pair(dilation), _pair(output_padding)
    n, _, h, wd = xh.shape
    k = wh.shape[2:]
    full = [(hw - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i, hw in enumerate((h, wd))]
    out_hw = [full[i] - 2 * p[i] + op_[i] for i in range(2)]
    cout = wh.shape[1] * groups
    out = ir.conv2d_bwd_input(xh, wh, stride=s, padding=(0, 0), dilation=d, groups=groups,
                              out_dims=(n, cout, *full))
    # output index o is full index o + p; past the full output: zeros.
    out = _pad4(out, [-p[i] for i in range(2)], [out_hw[i] + p[i] - full[i] for i in range(2)])
    if bias is not None:
        out = ir.binary(out, reshape(bias._h, [1, cout, 1, 1]), op=BIN["add"])
    if conv1d:
        out = reshape(out, [n, cout, out_hw[1]])
    return wrap(out)


def _conv_transpose_backward(grad, x, w, stride, padding, dilation, groups, output_mask):
    """Gradients of y = conv_transpose(x, w): with dy placed back on the
    unpadded full output, dx is the (unpadded) forward convolution of dy
    with w and dw the weight gradient of the convolution mapping dy to x."""
    conv1d = x.dim() == 3
    if conv1d:
        gh = reshape(grad._h, [grad.shape[0], grad.shape[1], 1, grad.shape[2]])
        xh, wh, stride, padding, dilation, _ = _as_2d(x, w, stride, padding, dilation)
    else:
        gh, xh, wh = grad._h, x._h, w._h
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    k = wh.shape[2:]
    h, wd = xh.shape[2], xh.shape[3]
    full = [(hw - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i, hw in enumerate((h, wd))]
    # grad covers full indices [p, p + out); put it back on [0, full).
    gh = _pad4(gh, [p[i] for i in range(2)], [full[i] - p[i] - gh.shape[2 + i] for i in range(2)])
    attrs = dict(stride=s, padding=(0, 0), dilation=d, groups=groups)
    gi = gw = gb = None
    if output_mask[0]:
        gi = ir.conv2d(gh, wh, **attrs)
        gi = wrap(reshape(gi, list(x.shape)) if conv1d else gi)
    if output_mask[1]:
        gw = ir.conv2d_bwd_weight(xh, gh, **attrs, out_dims=tuple(wh.shape))
        gw = wrap(reshape(gw, list(w.shape)) if conv1d else gw)
    if output_mask[2]:
        dims = [0, 2] if conv1d else [0, 2, 3]
        m = 0
        for dd in dims:
            m |= 1 << dd
        gb = wrap(ir.reduce(grad._h, op=RED_SUM, dims_mask=m, keepdim=0, dtype=grad._h.dtype))
    return gi, gw, gb


def _int_convolution(x, w, bias, stride, padding, dilation, groups, transposed=False,
                     output_padding=(0,)):
    """Integer convolution, plain or transposed (PyTorch CPU allows it; the
    kernel is float only): computed in f64, which is exact while every
    partial sum stays below 2**53, then converted back."""
    f64 = tt(torch.float64)
    xf, wf = wrap(convert(x._h, f64)), wrap(convert(w._h, f64))
    bf = None if bias is None else wrap(convert(bias._h, f64))
    out = convolution(xf, wf, bf, stride, padding, dilation, transposed, output_padding,
                      groups)
    return wrap(convert(out._h, x._h.dtype))


@lowers(aten.convolution_backward.default)
def convolution_backward(grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    from torchtpu.lowering.fallback import fallback
    if transposed and x.dim() in (3, 4):
        return _conv_transpose_backward(grad, x, w, stride, padding, dilation, groups,
                                        output_mask)
    if not transposed and x.dim() == 5 and x.dtype.is_floating_point:
        return _conv3d_backward(grad, x, w, stride, padding, dilation, groups, output_mask)
    if transposed or x.dim() not in (3, 4):
        return fallback(aten.convolution_backward.default,
                        (grad, x, w, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask), {})
    gh, xh, wh = grad._h, x._h, w._h
    conv1d = x.dim() == 3
    if conv1d:
        gh = reshape(gh, [grad.shape[0], grad.shape[1], 1, grad.shape[2]])
        xh = reshape(xh, [x.shape[0], x.shape[1], 1, x.shape[2]])
        wh = reshape(wh, [w.shape[0], w.shape[1], 1, w.shape[2]])
        stride, padding, dilation = [1, stride[0]], [0, padding[0]], [1, dilation[0]]
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    attrs = dict(stride=s, padding=p, dilation=d, groups=groups)
    win = _single_window(xh.shape[2:], gh.shape[2:], wh.shape[2:], p, d, groups)
    if win:  # the forward's single GEMM, differentiated
        n, o = xh.shape[0], wh.shape[0]
        c, ext = wh.shape[1], win
        ckk = c * ext[0] * ext[1]
        g2 = reshape(gh, [1, n, o])
        w2 = reshape(_window_weight(wh, p, ext), [1, o, ckk])
    gi = gw = gb = None
    if output_mask[0]:
        if win:
            g_window = reshape(ir.dot(g2, w2, trans_a=0, trans_b=0), [n, c, *ext])
            gi = _pad4(g_window, [0, 0], [xh.shape[2 + i] - ext[i] for i in range(2)])
        else:
            gi = ir.conv2d_bwd_input(gh, wh, **attrs, out_dims=tuple(xh.shape))
        if conv1d:
            gi = reshape(gi, list(x.shape))
        gi = wrap(gi)
    if output_mask[1]:
        if win:
            xw = reshape(_window_input(xh, win), [1, n, ckk])
            gw = reshape(ir.dot(g2, xw, trans_a=1, trans_b=0), [o, c, *ext])
            gw = _pad4(gw, *_window_taps(wh.shape[2:], p, ext))
        else:
            gw = ir.conv2d_bwd_weight(gh, xh, **attrs, out_dims=tuple(wh.shape))
        if conv1d:
            gw = reshape(gw, list(w.shape))
        gw = wrap(gw)
    if output_mask[2]:
        dims = [0, 2] if conv1d else [0, 2, 3]
        m = 0
        for dd in dims:
            m |= 1 << dd
        gb = wrap(ir.reduce(grad._h, op=RED_SUM, dims_mask=m, keepdim=0, dtype=grad._h.dtype))
    return gi, gw, gb


# ------------------------------------------------------------- pooling
def _pool_args(kernel_size, stride, padding, dilation=(1,)):
    k = _pair(kernel_size)
    s = _pair(stride) if stride else k
    return k, s, _pair(padding), _pair(dilation)


@lowers(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,),
                            ceil_mode=False):
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    attrs = dict(kernel=k, stride=s, padding=p, dilation=d, ceil_mode=int(ceil_mode))
    return wrap(ir.max_pool2d(x._h, **attrs)), wrap(ir.max_pool2d_indices(x._h, **attrs))


@lowers(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return wrap(ir.max_pool2d_bwd(grad._h, indices._h, dims=tuple(x.shape)))


@lowers(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    k, s, p, _ = _pool_args(kernel_size, stride, padding)
    if divisor_override is not None and divisor_override < 0:
        # PyTorch accepts a negative divisor; the kernel takes its magnitude.
        y = avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       -divisor_override)
        return wrap(ir.unary(y._h, op=UN["neg"], alpha=0.0, beta=0.0))
    attrs = dict(kernel=k, stride=s, padding=p, ceil_mode=int(ceil_mode),
                 count_include_pad=int(count_include_pad), divisor=int(divisor_override or 0))
    if not x.dtype.is_floating_point:
        # The kernel is float only. PyTorch's integer average is the window
        # sum divided with truncation; f64 holds the sum exactly and the
        # conversion back truncates toward zero.
        h = ir.avg_pool2d(convert(x._h, tt(torch.float64)), **attrs)
        return wrap(convert(h, x._h.dtype))
    return wrap(ir.avg_pool2d(x._h, **attrs))


@lowers(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    if divisor_override is not None and divisor_override < 0:
        g = avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode,
                                count_include_pad, -divisor_override)
        return wrap(ir.unary(g._h, op=UN["neg"], alpha=0.0, beta=0.0))
    k, s, p, _ = _pool_args(kernel_size, stride, padding)
    return wrap(ir.avg_pool2d_bwd(grad._h, kernel=k, stride=s, padding=p,
                                  ceil_mode=int(ceil_mode),
                                  count_include_pad=int(count_include_pad),
                                  divisor=int(divisor_override or 0), dims=tuple(x.shape)))


@lowers(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    oh, ow = _pair(output_size)
    if x.dim() not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got "
                           f"{list(x.shape)}")
    h, w = x.shape[-2], x.shape[-1]
    if oh == 1 and ow == 1:
        m = (1 << (x.dim() - 2)) | (1 << (x.dim() - 1))
        return wrap(ir.reduce(x._h, op=1, dims_mask=m, keepdim=1, dtype=x._h.dtype))  # mean, keepdim
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(x, [h // oh, w // ow], [h // oh, w // ow])
    return wrap(ir.adaptive_avg_pool2d(x._h, out_size=(oh, ow)))


@lowers(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad, x):
    return wrap(ir.adaptive_avg_pool2d_bwd(grad._h, dims=tuple(x.shape)))


# ------------------------------------------------------------ embedding
@lowers(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {indices.dtype} instead (while checking arguments for "
            "embedding)")
    flat = reshape(indices._h, [indices.numel()])
    out = ir.index_select(weight._h, flat, dim=0)
    return wrap(reshape(out, [*indices.shape, weight.shape[1]]))


@lowers(aten.embedding_renorm.default)
def embedding_renorm(weight, indices, max_norm, norm_type):
    """embedding(max_norm=...): rows named in indices whose norm_type-norm
    exceeds max_norm are scaled by max_norm / (norm + 1e-7), as PyTorch's
    embedding_renorm_; functionalization writes the result back to weight."""
    dev = weight._h.device
    n = weight.shape[0]
    w = weight._h
    a = ir.unary(w, op=UN["abs"], alpha=0.0, beta=0.0)
    if norm_type == float("inf"):
        norm = ir.reduce(a, op=RED_MAX, dims_mask=2, keepdim=1, dtype=w.dtype)
    elif norm_type == 1:
        norm = ir.reduce(a, op=RED_SUM, dims_mask=2, keepdim=1, dtype=w.dtype)
    else:
        p = scalar(dev, w.dtype, norm_type)
        s = ir.reduce(ir.binary(a, p, op=BIN["pow"]), op=RED_SUM, dims_mask=2, keepdim=1, dtype=w.dtype)
        norm = ir.binary(s, scalar(dev, w.dtype, 1.0 / norm_type), op=BIN["pow"])
    idx = reshape(indices._h, [indices.numel()])
    ones = broadcast(scalar(dev, TT_I64, 1), [indices.numel()])
    hits = ir.index_add(broadcast(scalar(dev, TT_I64, 0), [n]), idx, ones, dim=0)
    used = reshape(ir.binary(hits, scalar(dev, TT_I64, 0), op=BIN["gt"]), [n, 1])
    big = ir.binary(norm, scalar(dev, w.dtype, max_norm), op=BIN["gt"])
    eps = ir.binary(norm, scalar(dev, w.dtype, 1e-7), op=BIN["add"])
    scale = ir.binary(scalar(dev, w.dtype, max_norm), eps, op=BIN["div"])
    scaled = ir.binary(w, scale, op=BIN["mul"])
    keep = ir.binary(used, big, op=BIN["logical_and"])
    return wrap(ir.where(keep, scaled, w))


@lowers(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        from torchtpu.lowering.fallback import fallback
        return fallback(aten.embedding_dense_backward.default,
                        (grad, indices, num_weights, padding_idx, scale_grad_by_freq), {})
    dev = grad._h.device
    d = grad.shape[-1]
    n = indices.numel()
    idx = reshape(indices._h, [n])
    g = reshape(grad._h, [n, d])
    if padding_idx >= 0:
        keep = ir.binary(idx, scalar(dev, idx.dtype, padding_idx), op=BIN["ne"])
        g = ir.where(reshape(keep, [n, 1]), g, scalar(dev, g.dtype, 0))
    zeros = broadcast(scalar(dev, g.dtype, 0), [num_weights, d])
    return wrap(ir.index_add(zeros, idx, g, dim=0))


# --------------------------------------------------------------- dropout
@lowers(aten.native_dropout.default)
def native_dropout(x, p, train):
    from torchtpu.lowering.misc_ops import rng_handle, RNG_BERNOULLI
    # train=None means training, as in ATen (torch.export writes it so).
    dev, dt = x._h.device, x._h.dtype
    if (train is not None and not train) or p == 0:
        return wrap(x._h), wrap(broadcast(scalar(dev, 9, 1), x.shape))  # all-true mask
    if p == 1:
        keep = broadcast(scalar(dev, 9, 0), x.shape)
    else:
        keep = rng_handle(dev, RNG_BERNOULLI, 9, list(x.shape), 1.0 - p, 0.0)
    # ATen's x * mask * scale (scale 0 when p == 1): a dropped element is
    # x * 0, so -0 and NaN stay what the CPU gives.
    scale = scalar(dev, dt, 0.0 if p == 1 else 1.0 / (1.0 - p))
    y = ir.binary(ir.binary(x._h, convert(keep, dt), op=BIN["mul"]), scale, op=BIN["mul"])
    return wrap(y), wrap(keep)


@lowers(aten.native_dropout_backward.default)
def native_dropout_backward(grad, mask, scale):
    # ATen's grad * mask * scale in grad's dtype (a NaN gradient where the
    # mask drops stays NaN, as on the CPU, so no where()).
    dev, dt = grad._h.device, grad._h.dtype
    y = ir.binary(grad._h, handle(mask, dev, dt), op=BIN["mul"])
    return wrap(ir.binary(y, scalar(dev, dt, float(scale)), op=BIN["mul"]))


_ = (result_type, TT_I64)


# ---------------------------------------------------------- embedding_bag
def _bag_plan(weight, indices, offsets, include_last_offset, padding_idx):
    """offset2bag (I64 [n]), keep mask (BOOL [n]: not padding_idx), number
    of bags."""
    from torchtpu.lowering.core import SEARCHSORTED, SLICE
    dev = weight._h.device
    n = indices.numel()
    nb = offsets.shape[0] - (1 if include_last_offset else 0)
    off = convert(offsets._h, TT_I64)
    if include_last_offset:
        off = ir.slice(off, start=(0,), limit=(nb,), step=(1,))
    from torchtpu.lowering.core import iota
    o2b = ir.searchsorted(off, iota(dev, n), right=1, dtype=TT_I64)
    o2b = ir.binary(o2b, scalar(dev, TT_I64, 1), op=BIN["sub"])
    idx = convert(reshape(indices._h, [n]), TT_I64)
    keep = ir.binary(idx, scalar(dev, TT_I64, padding_idx), op=BIN["ne"]) if padding_idx >= 0 \
        else broadcast(scalar(dev, 9, 1), [n])
    return idx, o2b, keep, nb


@lowers(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """Bags of embedding rows reduced by sum (0), mean (1) or max (2):
    rows are gathered once, then summed per bag with INDEX_ADD (max: a
    scatter-reduce). Returns (output, offset2bag, bag_size, max_indices)."""
    from torchtpu.lowering.core import SCATTER_REDUCE, SR_AMAX, SR_AMIN
    dev, dt = weight._h.device, weight._h.dtype
    D = weight.shape[1]
    idx, o2b, keep, nb = _bag_plan(weight, indices, offsets, include_last_offset, padding_idx)
    n = idx.shape[0]
    rows = ir.index_select(weight._h, idx, dim=0)
    keep2 = reshape(keep, [n, 1])
    zero = scalar(dev, dt, 0)
    ones = ir.where(keep, scalar(dev, TT_I64, 1), scalar(dev, TT_I64, 0))
    bag_size = ir.index_add(broadcast(scalar(dev, TT_I64, 0), [nb]), o2b, ones, dim=0)
    if mode in (0, 1):
        # Half types: products and sums in f32, one rounding (as CPU).
        work = TT_F32 if dt in (TT_F16, TT_BF16) else dt
        rows = convert(rows, work)
        if per_sample_weights is not None:
            rows = ir.binary(rows, reshape(handle(per_sample_weights, dev, work), [n, 1]), op=BIN["mul"])
        wzero = scalar(dev, work, 0)
        masked = ir.where(keep2, rows, wzero)
        out = ir.index_add(broadcast(wzero, [nb, D]), o2b, masked, dim=0)
        if mode == 1:
            cnt = reshape(ir.binary(bag_size, scalar(dev, TT_I64, 1), op=BIN["max"]), [nb, 1])
            out = ir.binary(out, convert(cnt, work), op=BIN["div"])
        return wrap(convert(out, dt)), wrap(o2b), wrap(bag_size), wrap(bag_size)
    if per_sample_weights is not None:
        rows = ir.binary(rows, reshape(handle(per_sample_weights, dev, dt), [n, 1]), op=BIN["mul"])
    # max: per bag and column; padding rows never win.
    o2b_k = ir.where(keep, o2b, scalar(dev, TT_I64, nb))  # padding -> dump row nb
    idx2 = broadcast(reshape(o2b_k, [n, 1]), [n, D])
    base = broadcast(zero, [nb + 1, D])
    out = ir.scatter_reduce(base, idx2, rows, dim=0, reduce=SR_AMAX, include_self=0)
    from torchtpu.lowering.core import SLICE, GATHER
    out = ir.slice(out, start=(0, 0), limit=(nb, D), step=(1, 1))
    # max_indices: the first index (in input order) reaching the max.
    outg = ir.gather(ir.pad(out, lo=(0, 0), hi=(1, 0), value=0.0), idx2, dim=0)
    hit = ir.binary(ir.binary(rows, outg, op=BIN["eq"]), keep2, op=BIN["logical_and"])
    from torchtpu.lowering.core import iota
    posn = broadcast(reshape(iota(dev, n), [n, 1]), [n, D])
    big = scalar(dev, TT_I64, n)
    first = ir.scatter_reduce(broadcast(big, [nb + 1, D]), idx2, ir.where(hit, posn, big), dim=0, reduce=SR_AMIN, include_self=0)
    first = ir.slice(first, start=(0, 0), limit=(nb, D), step=(1, 1))
    empty = ir.binary(first, big, op=BIN["eq"])
    safe = ir.binary(first, scalar(dev, TT_I64, n - 1), op=BIN["min"])
    maxidx = ir.index_select(idx, reshape(safe, [nb * D]), dim=0) if n else \
        broadcast(scalar(dev, TT_I64, -1), [nb * D])
    maxidx = ir.where(empty, scalar(dev, TT_I64, -1), reshape(maxidx, [nb, D]))
    return wrap(out), wrap(o2b), wrap(bag_size), wrap(maxidx)


@lowers(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                 num_weights, scale_grad_by_freq, mode, per_sample_weights,
                                 padding_idx=-1):
    dev, dt = grad._h.device, grad._h.dtype
    D = grad.shape[1]
    n = indices.numel()
    idx = convert(reshape(indices._h, [n]), TT_I64)
    zeros = broadcast(scalar(dev, dt, 0), [num_weights, D])
    if mode == 2:
        mi = reshape(maximum_indices._h, [grad.shape[0] * D])
        valid = ir.binary(mi, scalar(dev, TT_I64, 0), op=BIN["ge"])
        from torchtpu.lowering.core import iota
        col = broadcast(reshape(iota(dev, D), [1, D]), [grad.shape[0], D])
        flat = ir.binary(ir.binary(ir.binary(mi, scalar(dev, TT_I64, 0), op=BIN["max"]), scalar(dev, TT_I64, D), op=BIN["mul"]), reshape(col, [grad.shape[0] * D]), op=BIN["add"])
        g = ir.where(valid, reshape(grad._h, [grad.shape[0] * D]), scalar(dev, dt, 0))
        out = ir.index_add(broadcast(scalar(dev, dt, 0), [num_weights * D]), flat, g, dim=0)
        return wrap(reshape(out, [num_weights, D]))
    rows = ir.index_select(grad._h, offset2bag._h, dim=0)
    if mode == 1:
        cnt = ir.index_select(bag_size._h, offset2bag._h, dim=0)
        cnt = ir.binary(cnt, scalar(dev, TT_I64, 1), op=BIN["max"])
        rows = ir.binary(rows, convert(reshape(cnt, [n, 1]), dt), op=BIN["div"])
    if per_sample_weights is not None:
        rows = ir.binary(rows, reshape(handle(per_sample_weights, dev, dt), [n, 1]), op=BIN["mul"])
    if padding_idx >= 0:
        keep = ir.binary(idx, scalar(dev, TT_I64, padding_idx), op=BIN["ne"])
        rows = ir.where(reshape(keep, [n, 1]), rows, scalar(dev, dt, 0))
    if scale_grad_by_freq:
        freq = ir.index_add(broadcast(scalar(dev, TT_I64, 0), [num_weights]), idx, broadcast(scalar(dev, TT_I64, 1), [n]), dim=0)
        f = ir.index_select(freq, idx, dim=0)
        rows = ir.binary(rows, convert(reshape(f, [n, 1]), dt), op=BIN["div"])
    return wrap(ir.index_add(zeros, idx, rows, dim=0))


@lowers(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_psw_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    if mode != 0:
        raise NotImplementedError("embedding_bag_backward: per_sample_weights only supported "
                                  "for mode='sum'")
    dev, dt = grad._h.device, grad._h.dtype
    n = indices.numel()
    idx = convert(reshape(indices._h, [n]), TT_I64)
    g = ir.index_select(grad._h, offset2bag._h, dim=0)
    w = ir.index_select(weight._h, idx, dim=0)
    out = ir.reduce(ir.binary(g, w, op=BIN["mul"]), op=RED_SUM, dims_mask=2, keepdim=0, dtype=dt)
    if padding_idx >= 0:
        keep = ir.binary(idx, scalar(dev, TT_I64, padding_idx), op=BIN["ne"])
        out = ir.where(keep, out, scalar(dev, dt, 0))
    return wrap(out)


@lowers(aten._embedding_bag_backward.default)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           padding_idx=-1):
    # sparse=True asks for a sparse gradient; xla tensors are dense.
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                        num_weights, scale_grad_by_freq, mode,
                                        per_sample_weights, padding_idx)



@lowers(aten.addbmm.default)
def addbmm(bias, b1, b2, beta=1, alpha=1):
    """beta * bias + alpha * sum_i b1[i] @ b2[i] (half types accumulate in
    float32 and round once, as CPU's addbmm)."""
    dt = b1._h.dtype
    work = tt(torch.float32) if dt in (2, 3) else dt
    p = ir.dot(convert(b1._h, work), convert(b2._h, work), trans_a=0, trans_b=0)
    prod = ir.reduce(p, op=RED_SUM, dims_mask=1, keepdim=0, dtype=work)
    if work != dt:
        bias_h = handle(bias, prod.device, work)
        out = addbmm_finish(prod, bias_h, beta, alpha)
        return wrap(convert(out, dt))
    dev = prod.device
    return wrap(addbmm_finish(prod, handle(bias, dev, prod.dtype), beta, alpha))


def addbmm_finish(prod, bh, beta, alpha):
    dev = prod.device
    if alpha != 1:
        prod = ir.binary(prod, scalar(dev, prod.dtype, alpha), op=BIN["mul"])
    if beta == 0:
        return prod
    if beta != 1:
        bh = ir.binary(bh, scalar(dev, prod.dtype, beta), op=BIN["mul"])
    return ir.binary(prod, bh, op=BIN["add"])


def _centred_rstd(h, mask, dev, ct, eps):
    """(mean, x - mean, biased var, 1/sqrt(var + eps)) over the dims in
    mask, kept as size-1 dims: two-pass statistics, as PyTorch's
    decompositions."""
    mean = ir.reduce(h, op=RED_MEAN, dims_mask=mask, keepdim=1, dtype=ct)
    xc = ir.binary(h, mean, op=BIN["sub"])
    var = ir.reduce(ir.binary(xc, xc, op=BIN["mul"]), op=RED_MEAN, dims_mask=mask, keepdim=1, dtype=ct)
    rstd = ir.unary(ir.binary(var, scalar(dev, ct, eps), op=BIN["add"]), op=UN["rsqrt"], alpha=0.0, beta=0.0)
    return mean, xc, var, rstd


def _bn_eval_outputs(fn, training_pos=5):
    """native_batch_norm with training=False: CPU returns empty save_mean and
    save_invstd (the backward uses the running statistics); the
    decomposition fills them. Match CPU."""
    from torch._decomp import decomposition_table
    decomp = decomposition_table[fn]

    def lowering(*args, **kwargs):
        out = decomp(*args, **kwargs)
        training = kwargs.get("training", args[training_pos] if len(args) > training_pos
                              else True)
        if training:
            return out
        dev, dt = out[0]._h.device, out[0]._h.dtype
        empty = wrap(broadcast(scalar(dev, dt, 0), [0]))
        # (the functional variant's new running statistics follow)
        return (out[0], empty, wrap(broadcast(scalar(dev, dt, 0), [0]))) + tuple(out[3:])
    return lowering


# Training-mode batch norm and its backward natively, for float32 inputs
# with float32 (or absent) parameters and statistics: PyTorch's Python
# decompositions cost ~0.1 ms per call to trace, about 20 ms of a ResNet-18
# training step's 68. Two-pass statistics (mean, then the mean of squared
# deviations), as the decomposition; the running statistics are replaced
# in place as its copy_ does (momentum-weighted, unbiased variance).
def _bn_native_ok(x, *params):
    return (x.dtype == torch.float32 and x.dim() >= 2 and x.numel() > 0 and
            all(p is None or (is_xla(p) and p.dtype == torch.float32) for p in params))


def _bn_geom(x):
    """(reduce mask over every dim but 1, the [C, 1, ...] view shape, n)."""
    mask = 1
    for d in range(2, x.dim()):
        mask |= 1 << d
    C = x.shape[1]
    return mask, [C] + [1] * (x.dim() - 2), x.numel() // C


def _bn_train(x, weight, bias, running_mean, running_var, momentum, eps):
    dev, ct = x._h.device, x._h.dtype
    mask, cshape, n = _bn_geom(x)
    mean, xc, var, invstd = _centred_rstd(x._h, mask, dev, ct, eps)  # [1, C, 1, ...]
    out = ir.binary(xc, invstd, op=BIN["mul"])
    if weight is not None:
        out = ir.binary(out, reshape(weight._h, cshape), op=BIN["mul"])
    if bias is not None:
        out = ir.binary(out, reshape(bias._h, cshape), op=BIN["add"])
    C = x.shape[1]
    mean_c, var_c = reshape(mean, [C]), reshape(var, [C])
    keep = scalar(dev, ct, 1.0 - momentum)
    if running_mean is not None:
        upd = ir.binary(mean_c, scalar(dev, ct, momentum), op=BIN["mul"])
        running_mean._h = ir.binary(ir.binary(running_mean._h, keep, op=BIN["mul"]), upd, op=BIN["add"])
    if running_var is not None:
        unbiased = momentum * n / (n - 1) if n > 1 else float("nan")
        upd = ir.binary(var_c, scalar(dev, ct, unbiased), op=BIN["mul"])
        running_var._h = ir.binary(ir.binary(running_var._h, keep, op=BIN["mul"]), upd, op=BIN["add"])
    return wrap(out), wrap(mean_c), wrap(reshape(invstd, [C]))


def _bn_forward(fn, training_pos=5, has_stats=True):
    eval_lowering = _bn_eval_outputs(fn, training_pos)

    def lowering(*args, **kwargs):
        from torch._decomp import decomposition_table
        names = (["input", "weight", "bias", "running_mean", "running_var"] if has_stats
                 else ["input", "weight", "bias"]) + ["training", "momentum", "eps"]
        a = dict(zip(names, args))
        a.update(kwargs)
        if not a["training"]:
            return eval_lowering(*args, **kwargs)
        rm, rv = a.get("running_mean"), a.get("running_var")
        if not _bn_native_ok(a["input"], a["weight"], a["bias"], rm, rv):
            return decomposition_table[fn](*args, **kwargs)
        return _bn_train(a["input"], a["weight"], a["bias"], rm, rv, a["momentum"], a["eps"])
    return lowering


@lowers(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad_out, x, weight, running_mean, running_var, save_mean,
                               save_invstd, train, eps, output_mask):
    if (not _bn_native_ok(x, grad_out, weight, running_mean, running_var, save_mean,
                          save_invstd) or (train and (save_mean is None or save_invstd is None))
            or (not train and (running_mean is None or running_var is None))):
        from torch._decomp import decomposition_table
        return decomposition_table[aten.native_batch_norm_backward.default](
            grad_out, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
            output_mask)
    dev, ct = x._h.device, x._h.dtype
    mask, cshape, n = _bn_geom(x)
    if train:
        mean, invstd = reshape(save_mean._h, cshape), reshape(save_invstd._h, cshape)
    else:
        mean = reshape(running_mean._h, cshape)
        invstd = ir.unary(ir.binary(reshape(running_var._h, cshape), scalar(dev, ct, eps), op=BIN["add"]), op=UN["rsqrt"], alpha=0.0, beta=0.0)
    go = grad_out._h
    xhat = ir.binary(ir.binary(x._h, mean, op=BIN["sub"]), invstd, op=BIN["mul"])
    C = x.shape[1]
    need_sums = output_mask[1] or output_mask[2] or (output_mask[0] and train)
    gsum = ir.reduce(go, op=RED_SUM, dims_mask=mask, keepdim=1, dtype=ct) if need_sums else None
    gxsum = (ir.reduce(ir.binary(go, xhat, op=BIN["mul"]), op=RED_SUM, dims_mask=mask, keepdim=1, dtype=ct)
             if output_mask[1] or (output_mask[0] and train) else None)
    gi = gw = gb = None
    if output_mask[0]:
        scale = invstd if weight is None else ir.binary(invstd, reshape(weight._h, cshape), op=BIN["mul"])
        if train:
            inv_n = scalar(dev, ct, 1.0 / n)
            inner = ir.binary(ir.binary(go, ir.binary(gsum, inv_n, op=BIN["mul"]), op=BIN["sub"]), ir.binary(xhat, ir.binary(gxsum, inv_n, op=BIN["mul"]), op=BIN["mul"]), op=BIN["sub"])
        else:
            inner = go
        gi = wrap(ir.binary(inner, scale, op=BIN["mul"]))
    if output_mask[1]:
        gw = wrap(reshape(gxsum, [C]))
    if output_mask[2]:
        gb = wrap(reshape(gsum, [C]))
    return gi, gw, gb


lowers(aten.native_batch_norm.default)(_bn_forward(aten.native_batch_norm.default))
lowers(aten._native_batch_norm_legit.default)(
    _bn_forward(aten._native_batch_norm_legit.default))
lowers(aten._native_batch_norm_legit.no_stats)(
    _bn_forward(aten._native_batch_norm_legit.no_stats, 3, has_stats=False))
# What functionalization turns _native_batch_norm_legit into (the running
# statistics come back as outputs); eval mode's save_mean/save_invstd are
# empty there too, as on the CPU.
lowers(aten._native_batch_norm_legit_functional.default)(
    _bn_eval_outputs(aten._native_batch_norm_legit_functional.default))


# ------------------------------------------------------------ nll loss
# nll_loss_backward over [N, C] as one select: -grad (over total_weight for
# the mean, times weight[target] when weighted) where the column is the
# target and the target is not ignore_index, else 0. PyTorch's
# decomposition writes zeros, scatters -1 and multiplies (three passes
# over [N, C]; the decoder's LM head: [2048, 1000], 3.9 ms a step).
def _class_index_target(target):
    """nll_loss's target as class indices. PyTorch/XLA accepts a float
    target holding class indices (its lowering compares the labels with an
    iota), where PyTorch's CPU kernel raises; the values are truncated to
    int64 as a convert would (docs/ops.md)."""
    if isinstance(target, torch.Tensor) and target.dtype.is_floating_point:
        return target.to(torch.int64)
    return target


def _nll_loss_forward(func):
    def lowering(x, target, weight, reduction, ignore_index):
        from torchtpu.lowering.fallback import decompose_or_fallback
        return decompose_or_fallback(
            func, (x, _class_index_target(target), weight, reduction, ignore_index), {})
    return lowering


def _nll_loss2d_backward(grad_output, x, target, weight, reduction, ignore_index,
                         total_weight):
    from torchtpu.lowering.fallback import decompose_or_fallback
    return decompose_or_fallback(
        aten.nll_loss2d_backward.default,
        (grad_output, x, _class_index_target(target), weight, reduction, ignore_index,
         total_weight), {})


for _f in (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default):
    lowers(_f)(_nll_loss_forward(_f))
lowers(aten.nll_loss2d_backward.default)(_nll_loss2d_backward)


@lowers(aten.nll_loss_backward.default)
def nll_loss_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight):
    target = _class_index_target(target)
    if (x.dim() != 2 or not x.dtype.is_floating_point or grad_output.dtype != x.dtype or
            target.dtype != torch.int64 or target.dim() != 1 or not is_xla(target) or
            not is_xla(grad_output) or (weight is not None and
                                        (not is_xla(weight) or weight.dtype != x.dtype))):
        from torch._decomp import decomposition_table
        return decomposition_table[aten.nll_loss_backward.default](
            grad_output, x, target, weight, reduction, ignore_index, total_weight)
    dev, dt = x._h.device, x._h.dtype
    n, c = x.shape
    tgt = reshape(target._h, [n, 1])
    # the column test in float32 (exact below 2**24 classes), which the
    # elementwise fusion takes, so the [N, C] result is written once
    cols, rows = reshape(iota(dev, c), [1, c]), tgt
    if c < 1 << 24:
        cols, rows = convert(cols, TT_F32), convert(tgt, TT_F32)
    hit = ir.binary(cols, rows, op=BIN["eq"])
    valid = ir.binary(tgt, scalar(dev, TT_I64, ignore_index), op=BIN["ne"])
    g = grad_output._h
    if reduction == 1:  # mean
        g = ir.binary(g, handle(total_weight, dev, dt), op=BIN["div"])
    if reduction == 0:  # none: one gradient per row
        g = reshape(g, [n, 1])
    val = ir.unary(g, op=UN["neg"], alpha=0.0, beta=0.0)
    if weight is not None:
        safe = ir.where(valid, tgt, scalar(dev, TT_I64, 0))
        wt = reshape(ir.index_select(weight._h, reshape(safe, [n]), dim=0), [n, 1])
        val = ir.binary(val, wt, op=BIN["mul"])
    cond = ir.binary(hit, valid, op=BIN["logical_and"])
    out = wrap(ir.where(cond, val, scalar(dev, dt, 0)))
    # Each row's sum: its one nonzero value (0 for an ignored row, or a
    # target outside [0, C), which no column matches). The log_softmax
    # backward that usually reads this gradient (cross-entropy) takes it
    # from here instead of a reduction over [N, C].
    in_range = ir.binary(ir.binary(tgt, scalar(dev, TT_I64, 0), op=BIN["ge"]), ir.binary(tgt, scalar(dev, TT_I64, c), op=BIN["lt"]), op=BIN["logical_and"])
    row_hit = ir.binary(valid, in_range, op=BIN["logical_and"])
    out._row_sums = ir.where(row_hit, val, scalar(dev, dt, 0))
    return out


# ------------------------------------------------------- 3-d convolution
# conv3d as KD 2-d convolutions: for each depth tap kd, the input planes
# that tap reads (every stride-th padded plane from kd * dilation) are
# folded into the batch, convolved with the tap's 2-d kernel, and the taps
# are summed. Backward runs the same fold through the 2-d backward ops.
def _conv3d_geom(x, w, stride, padding, dilation):
    s, p, d = (list(v) * 3 if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    N, C, D, H, W = x.shape
    KD = w.shape[2]
    Dp = D + 2 * p[0]
    OD = (Dp - d[0] * (KD - 1) - 1) // s[0] + 1
    return s, p, d, N, C, D, H, W, KD, Dp, OD


def _conv3d_taps(xh, geom):
    """For each depth tap: the planes it reads, folded to [N*OD, C, H, W]."""
    s, p, d, N, C, D, H, W, KD, Dp, OD = geom
    if p[0]:
        xh = ir.pad(xh, lo=(0, 0, p[0], 0, 0), hi=(0, 0, p[0], 0, 0), value=0.0)
    taps = []
    for kd in range(KD):
        lo = kd * d[0]
        xs = ir.slice(xh, start=(0, 0, lo, 0, 0), limit=(N, C, lo + (OD - 1) * s[0] + 1, H, W), step=(1, 1, s[0], 1, 1))
        xs = ir.transpose(xs, perm=(0, 2, 1, 3, 4))
        taps.append(reshape(xs, [N * OD, C, H, W]))
    return taps


def _conv3d_weight_tap(wh, kd):
    O, Cg, KD, KH, KW = wh.shape
    wk = ir.slice(wh, start=(0, 0, kd, 0, 0), limit=(O, Cg, kd + 1, KH, KW), step=(1, 1, 1, 1, 1))
    return reshape(wk, [O, Cg, KH, KW])


def _f32(t):
    """Half-type tensors widened to float32 (the taps are summed once, in
    float32, as CPU's kernel accumulates), others unchanged."""
    if t is None or t.dtype not in (torch.float16, torch.bfloat16):
        return t
    return wrap(convert(t._h, TT_F32))


def _narrow(res, like):
    return res if res is None or res._h.dtype == like._h.dtype else \
        wrap(convert(res._h, like._h.dtype))


def _conv3d_forward(x, w, bias, stride, padding, dilation, groups):
    if x.dtype in (torch.float16, torch.bfloat16):
        out = _conv3d_forward(_f32(x), _f32(w), _f32(bias), stride, padding, dilation, groups)
        return _narrow(out, x)
    geom = _conv3d_geom(x, w, stride, padding, dilation)
    s, p, d, N, C, D, H, W, KD, Dp, OD = geom
    attrs = dict(stride=(s[1], s[2]), padding=(p[1], p[2]), dilation=(d[1], d[2]), groups=groups)
    out = None
    for kd, xs in enumerate(_conv3d_taps(x._h, geom)):
        y = ir.conv2d(xs, _conv3d_weight_tap(w._h, kd), **attrs)
        out = y if out is None else ir.binary(out, y, op=BIN["add"])
    O, OH, OW = out.shape[1], out.shape[2], out.shape[3]
    out = ir.transpose(reshape(out, [N, OD, O, OH, OW]), perm=(0, 2, 1, 3, 4))
    if bias is not None:
        out = ir.binary(out, reshape(bias._h, [1, O, 1, 1, 1]), op=BIN["add"])
    return wrap(out)


def _conv3d_backward(grad, x, w, stride, padding, dilation, groups, output_mask):
    if x.dtype in (torch.float16, torch.bfloat16):
        gi, gw, gb = _conv3d_backward(_f32(grad), _f32(x), _f32(w), stride, padding, dilation,
                                      groups, output_mask)
        return _narrow(gi, x), _narrow(gw, w), _narrow(gb, grad)
    geom = _conv3d_geom(x, w, stride, padding, dilation)
    s, p, d, N, C, D, H, W, KD, Dp, OD = geom
    O, Cg, _, KH, KW = w.shape
    OH, OW = grad.shape[3], grad.shape[4]
    attrs = dict(stride=(s[1], s[2]), padding=(p[1], p[2]), dilation=(d[1], d[2]), groups=groups)
    gf = reshape(ir.transpose(grad._h, perm=(0, 2, 1, 3, 4)), [N * OD, O, OH, OW])
    gi = gw = gb = None
    if output_mask[0]:
        acc = None
        span = (OD - 1) * s[0] + 1
        for kd in range(KD):
            g2 = ir.conv2d_bwd_input(gf, _conv3d_weight_tap(w._h, kd), **attrs,
                                     out_dims=(N * OD, C, H, W))
            g5 = ir.transpose(reshape(g2, [N, OD, C, H, W]), perm=(0, 2, 1, 3, 4))
            if s[0] > 1:  # planes land every stride-th position: interleave zeros
                g6 = ir.pad(reshape(g5, [N, C, OD, 1, H, W]), lo=(0, 0, 0, 0, 0, 0), hi=(0, 0, 0, s[0] - 1, 0, 0), value=0.0)
                g5 = ir.slice(reshape(g6, [N, C, OD * s[0], H, W]), start=(0, 0, 0, 0, 0), limit=(N, C, span, H, W), step=(1, 1, 1, 1, 1))
            lo = kd * d[0]
            g5 = ir.pad(g5, lo=(0, 0, lo, 0, 0), hi=(0, 0, Dp - lo - span, 0, 0), value=0.0)
            acc = g5 if acc is None else ir.binary(acc, g5, op=BIN["add"])
        if p[0]:
            acc = ir.slice(acc, start=(0, 0, p[0], 0, 0), limit=(N, C, p[0] + D, H, W), step=(1, 1, 1, 1, 1))
        gi = wrap(acc)
    if output_mask[1]:
        taps = []
        for xs in _conv3d_taps(x._h, geom):
            gk = ir.conv2d_bwd_weight(gf, xs, **attrs, out_dims=(O, Cg, KH, KW))
            taps.append(reshape(gk, [O, Cg, 1, KH, KW]))
        gw = wrap(taps[0] if len(taps) == 1 else ir.concat(*taps, dim=2))
    if output_mask[2]:
        gb = wrap(ir.reduce(grad._h, op=RED_SUM, dims_mask=1 | 4 | 8 | 16, keepdim=0, dtype=grad._h.dtype))
    return gi, gw, gb


# ------------------------------------------------------------ layer norm
# native_layer_norm and its backward natively (PyTorch's decompositions
# cost about a millisecond of Python each per call): mean and variance as
# keepdim reductions over the normalized dims, which the reduction-fusion
# pass folds with their elementwise neighbours. Half types compute in
# float32 and round each output once; all outputs have the input's dtype,
# as on CPU.
def _ln_geom(x, normalized_shape):
    k = len(normalized_shape)
    axis = x.dim() - k
    mask = 0
    for d in range(axis, x.dim()):
        mask |= 1 << d
    lead = 0
    for d in range(axis):
        lead |= 1 << d
    return axis, mask, lead


def _ln_ok(x, normalized_shape):
    k = len(normalized_shape)
    return (x.dtype.is_floating_point and 0 < k <= x.dim() and
            list(x.shape[x.dim() - k:]) == [int(s) for s in normalized_shape])


# The engine's layer-norm ops (TT_OP_LAYER_NORM / _BWD, src/kernels/
# layer_norm.c): one pass over the rows each way where the IR primitives
# above ran as nine kernels. float32 with float32 parameters of the
# normalized shape; anything else keeps the primitives.
# TORCHTPU_FUSED_LAYER_NORM=0 keeps them always.
_LN_FUSED = settings.FUSED_LAYER_NORM


def _ln_fused_ok(x, normalized_shape, *params):
    if not _LN_FUSED or x._h.dtype != TT_F32 or x.numel() == 0:
        return False
    shape = [int(s) for s in normalized_shape]
    return all(p is None or (is_xla(p) and p._h.dtype == TT_F32 and
                             p._h.device == x._h.device and list(p.shape) == shape)
               for p in params)


def _packed_pieces(packed, sizes):
    """Contiguous slices of a packed result (a layer norm's, a log_softmax
    with its probabilities; read in place), as tensors of the given shapes;
    None where the shape is None."""
    out, start = [], 0
    if len(packed.shape) != 1:
        packed = reshape(packed, [math.prod(packed.shape)])
    for n, shape in sizes:
        out.append(None if shape is None else
                   wrap(reshape(ir.slice(packed, start=(start,), limit=(start + n,), step=(1,)), shape)))
        start += n
    return out


@lowers(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    if not _ln_ok(x, normalized_shape):
        from torch._decomp import decomposition_table
        return decomposition_table[aten.native_layer_norm.default](
            x, normalized_shape, weight, bias, eps)
    if _ln_fused_ok(x, normalized_shape, weight, bias):
        axis = x.dim() - len(normalized_shape)
        operands = [x._h] + [p._h for p in (weight, bias) if p is not None]
        flags = dict(axis=axis, has_weight=int(weight is not None),
                     has_bias=int(bias is not None), eps=float(eps))
        R = math.prod(x.shape[:axis])
        stat = list(x.shape[:axis]) + [1] * len(normalized_shape)
        if torch.is_grad_enabled():
            # Training: autograd keeps mean and rstd, and the output is
            # read by the next layer: one pass, one packed result.
            packed = ir.layer_norm(*operands, **flags, form=2)
            return tuple(_packed_pieces(packed, [(x.numel(), list(x.shape)), (R, stat), (R, stat)]))
        # Inference: the output alone (often the graph's output, written in
        # place there, where a slice of a packed result is copied); the
        # statistics are their own instruction, dead code unless read.
        y = ir.layer_norm(*operands, **flags, form=0)
        stats = ir.layer_norm(x._h, axis=axis, has_weight=0, has_bias=0, form=1, eps=float(eps))
        return (wrap(y), *_packed_pieces(stats, [(R, stat), (R, stat)]))
    dev = x._h.device
    ct = TT_F32 if x.dtype in (torch.float16, torch.bfloat16) else x._h.dtype
    axis, mask, _ = _ln_geom(x, normalized_shape)
    mean, xc, _, rstd = _centred_rstd(convert(x._h, ct), mask, dev, ct, eps)
    out = ir.binary(xc, rstd, op=BIN["mul"])
    if weight is not None:
        out = ir.binary(out, handle(weight, dev, ct), op=BIN["mul"])
    if bias is not None:
        out = ir.binary(out, handle(bias, dev, ct), op=BIN["add"])
    dt = x._h.dtype
    return wrap(convert(out, dt)), wrap(convert(mean, dt)), wrap(convert(rstd, dt))


@lowers(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight, bias,
                               output_mask):
    if not _ln_ok(x, normalized_shape) or grad_out.dtype != x.dtype:
        from torch._decomp import decomposition_table
        return decomposition_table[aten.native_layer_norm_backward.default](
            grad_out, x, normalized_shape, mean, rstd, weight, bias, output_mask)
    if _ln_fused_ok(x, normalized_shape, weight, bias) and \
            all(is_xla(t) and t._h.dtype == TT_F32 for t in (grad_out, mean, rstd)):
        axis = x.dim() - len(normalized_shape)
        operands = [grad_out._h, x._h, mean._h, rstd._h] + ([weight._h] if weight is not None
                                                              else [])
        packed = ir.layer_norm_bwd(*operands, axis=axis, want_grad_x=int(bool(output_mask[0])))
        C = math.prod(x.shape[axis:])
        return tuple(_packed_pieces(packed, [
            (x.numel(), list(x.shape) if output_mask[0] else None),
            (C, list(weight.shape) if output_mask[1] and weight is not None else None),
            (C, list(bias.shape) if output_mask[2] and bias is not None else None)]))
    dev = x._h.device
    ct = TT_F32 if x.dtype in (torch.float16, torch.bfloat16) else x._h.dtype
    axis, mask, lead = _ln_geom(x, normalized_shape)
    go = convert(grad_out._h, ct)
    xhat = ir.binary(ir.binary(convert(x._h, ct), handle(mean, dev, ct), op=BIN["sub"]), handle(rstd, dev, ct), op=BIN["mul"])
    gi = gw = gb = None
    if output_mask[0]:
        g = go if weight is None else ir.binary(go, handle(weight, dev, ct), op=BIN["mul"])
        mg = ir.reduce(g, op=RED_MEAN, dims_mask=mask, keepdim=1, dtype=ct)
        mgx = ir.reduce(ir.binary(g, xhat, op=BIN["mul"]), op=RED_MEAN, dims_mask=mask, keepdim=1, dtype=ct)
        inner = ir.binary(ir.binary(g, mg, op=BIN["sub"]), ir.binary(xhat, mgx, op=BIN["mul"]), op=BIN["sub"])
        gi = wrap(convert(ir.binary(inner, handle(rstd, dev, ct), op=BIN["mul"]),
                          x._h.dtype))
    if output_mask[1] and weight is not None:
        s = ir.binary(go, xhat, op=BIN["mul"])
        s = ir.reduce(s, op=RED_SUM, dims_mask=lead, keepdim=0, dtype=ct) if lead else s
        gw = wrap(convert(reshape(s, list(weight.shape)), weight._h.dtype))
    if output_mask[2] and bias is not None:
        s = ir.reduce(go, op=RED_SUM, dims_mask=lead, keepdim=0, dtype=ct) if lead else go
        gb = wrap(convert(reshape(s, list(bias.shape)), bias._h.dtype))
    return gi, gw, gb
