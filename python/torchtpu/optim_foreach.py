"""torch.optim and torch.nn.utils.clip_grad_* take their foreach path on
xla tensors.

PyTorch picks an optimizer's implementation by device: foreach (one
_foreach_* call per update step for a whole parameter group) where the
device type is in torch.utils._foreach_utils'
_get_foreach_kernels_supported_devices(), a per-tensor loop elsewhere.
'xla' is not in that list, so on PyTorch/XLA an AdamW step issues about
eight ops per parameter, each paying PyTorch's dispatch and
functionalization. Here that per-op cost is most of a step's recording
(AdamW: ~37 us per in-place op, docs/tensor-bridge.md), so the list gains
'xla': the optimizer's math is the same, issued as _foreach_* ops, which
lower element by element (lowering/foreach_ops.py) in one dispatch each.

Explicit foreach=False still takes the loop; TORCHTPU_OPTIM_FOREACH=0
keeps PyTorch's device list unchanged (PyTorch/XLA's behaviour).

Adam and AdamW go one step further (TORCHTPU_FUSED_ADAM=0 turns it off):
even as _foreach_* ops, an update step paid PyTorch's functionalization
per tensor and op (seven in-place foreach ops over every parameter: about
6 ms of a GPT-style decoder step's 21 ms of recording). On the common
path (float32 xla tensors, CPU step counters, no amsgrad, maximize,
capturable or complex), torch.optim.adam's _multi_tensor_adam is replaced
by _adam_step below, which records the same IR ops per parameter straight
on the engine's handles (the ones the lowerings of _foreach_lerp_,
_foreach_addcmul_, ... record, in the same order within each parameter,
so the results are the foreach path's bit for bit) and then swaps each
updated tensor's value once. Anything else takes PyTorch's function.
"""

import torch
import torch.optim.adam as _adam
import torch.optim.optimizer as _optimizer
import torch.utils._foreach_utils as _foreach_utils

from torchtpu import _C, bridge, ir, settings


def _with_xla(devices):
    return lambda: devices() + ["xla"]


def install():
    # Independent of TORCHTPU_OPTIM_FOREACH: without it, fused=True fails.
    if getattr(_adam, "_fused_adam", None) is not None:
        _adam._device_dtype_check_for_fused = _fused_check_allowing_xla(
            _adam._device_dtype_check_for_fused)
        _adam._fused_adam = _multi_tensor_on_xla(_adam._fused_adam)
    if not settings.OPTIM_FOREACH:
        return
    _foreach_utils._get_foreach_kernels_supported_devices = _with_xla(
        _foreach_utils._get_foreach_kernels_supported_devices)
    _optimizer._get_foreach_kernels_supported_devices = _with_xla(
        _optimizer._get_foreach_kernels_supported_devices)
    if settings.FUSED_ADAM and \
            getattr(_adam, "_multi_tensor_adam", None) is not None:
        _adam._multi_tensor_adam = _fused_adam_or(_adam._multi_tensor_adam)


# Adam/AdamW(fused=True), transformers' default optimizer since torch 2.8:
# PyTorch has no fused kernel for xla and refuses xla parameters (as on
# PyTorch/XLA), so installing torch_xla broke a Trainer that picks the xla
# device. On xla the step takes the multi-tensor path instead: the same
# update math (grad_scale/found_inf, which only fused kernels take, are
# refused there with PyTorch's error). Other fused optimizers still refuse.
def _fused_check_allowing_xla(check):
    def _device_dtype_check_for_fused(p, cuda_unsupported=False):
        if p.device.type == "xla" and torch.is_floating_point(p):
            return
        check(p, cuda_unsupported)
    return _device_dtype_check_for_fused


def _multi_tensor_on_xla(fused_adam):
    def _fused_adam(params, *args, **kw):
        if params and all(p.device.type == "xla" for p in params):
            return _adam._multi_tensor_adam(params, *args, **kw)
        return fused_adam(params, *args, **kw)
    return _fused_adam


def _inner_f32(t):
    """The XlaTensor under functional xla tensor t when it is float32, else None."""
    if t.dtype is not torch.float32 or t.device.type != "xla" or \
            not torch._is_functional_tensor(t):
        return None
    try:
        inner = bridge.inner_of(t)
    except RuntimeError:
        return None
    return inner if isinstance(inner, bridge.XlaTensor) else None


# The keyword arguments of torch.optim.adam._multi_tensor_adam this path
# understands; any other set (another PyTorch release) takes PyTorch's.
_ADAM_KWARGS = {"amsgrad", "has_complex", "beta1", "beta2", "lr", "weight_decay", "eps",
                "maximize", "capturable", "differentiable", "decoupled_weight_decay"}


def _fused_adam_or(original):
    def _multi_tensor_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                           grad_scale, found_inf, **kw):
        inners = None
        if params and set(kw) == _ADAM_KWARGS and grad_scale is None and found_inf is None \
                and not any(kw[k] for k in ("amsgrad", "has_complex", "maximize", "capturable",
                                            "differentiable")) \
                and all(isinstance(kw[k], (int, float))
                        for k in ("beta1", "beta2", "lr", "weight_decay", "eps")) \
                and all(s.device.type == "cpu" for s in state_steps):
            inners = []
            for group in (params, grads, exp_avgs, exp_avg_sqs):
                got = [_inner_f32(t) for t in group]
                if any(x is None for x in got):
                    inners = None
                    break
                inners.append(got)
            if inners is not None and len({x._h.device for g in inners for x in g}) != 1:
                inners = None
        if inners is None:
            return original(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                            grad_scale, found_inf, **kw)
        _adam_step(params, exp_avgs, exp_avg_sqs, state_steps, inners, kw["beta1"], kw["beta2"],
                   kw["lr"], kw["weight_decay"], kw["eps"], kw["decoupled_weight_decay"])
    return _multi_tensor_adam


def _adam_step(params, exp_avgs, exp_avg_sqs, state_steps, inners, beta1, beta2, lr,
               weight_decay, eps, decoupled):
    """One Adam(W) update of every parameter, as _multi_tensor_adam's
    non-capturable path computes it (each line names the foreach op whose
    per-tensor lowering, lowering/elementwise.py, records the same ops; the
    lowering table is imported on first use, as bridge.py does)."""
    from torchtpu.lowering.core import BIN, TT_F32, UN
    from torchtpu.lowering.elementwise import addc_h, lerp_scalar_h
    scalar = _C.scalar
    add, mul, div = (BIN[n] for n in ("add", "mul", "div"))
    ps, gs, ms, vs = inners
    dev = ps[0]._h.device

    made = {}

    def s(v):  # one scalar input per distinct value (the foreach path made one per use)
        key = float(v).hex()  # -0.0 and 0.0 stay apart
        if key not in made:
            made[key] = scalar(dev, TT_F32, float(v))
        return made[key]

    torch._foreach_add_(state_steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
    new_p, new_m, new_v = [], [], []
    for p, g, m, v, step in zip(ps, gs, ms, vs, state_steps):
        p, g, m, v = p._h, g._h, m._h, v._h
        n = step.item()
        bc1, bc2 = 1 - beta1 ** n, 1 - beta2 ** n
        if weight_decay != 0:
            if decoupled:  # _foreach_mul_(params, 1 - lr * wd)
                p = ir.binary(p, s(1 - lr * weight_decay), op=mul)
            else:  # grads = _foreach_add(grads, params, alpha=wd)
                g = ir.binary(g, ir.binary(p, s(weight_decay), op=mul), op=add)
        m = lerp_scalar_h(m, g, 1 - beta1, s)  # _foreach_lerp_(exp_avgs, grads, 1 - beta1)
        # _foreach_mul_(exp_avg_sqs, beta2); _foreach_addcmul_(.., grads, grads, 1 - beta2)
        v = addc_h("mul", ir.binary(v, s(beta2), op=mul), g, g, 1 - beta2, s)
        # sqrt, _foreach_div_(.., bias_correction2 ** 0.5), _foreach_add_(.., eps)
        den = ir.unary(v, op=UN["sqrt"])
        den = ir.binary(den, s(bc2 ** 0.5), op=div)
        den = ir.binary(den, s(eps), op=add)
        # _foreach_addcdiv_(params, exp_avgs, denom, -lr / bias_correction1)
        new_p.append(addc_h("div", p, m, den, (lr / bc1) * -1, s))
        new_m.append(m)
        new_v.append(v)
    for tensors, values in ((params, new_p), (exp_avgs, new_m), (exp_avg_sqs, new_v)):
        for t, h in zip(tensors, values):
            torch._functionalize_replace(t, bridge.XlaTensor(h))
            torch._functionalize_commit_update(t)
            torch._functionalize_sync(t)
    torch.autograd.graph.increment_version(list(params) + list(exp_avgs) + list(exp_avg_sqs))


install()
