#!/usr/bin/env python
"""OpInfo sweep: every OpInfo in PyTorch's op_db, every sample input, run on
xla and on CPU and compared; gradients too where the op supports autograd.

    PJRT_DEVICE=CPU .venv/bin/python scripts/opinfo_sweep.py            # full sweep
    .venv/bin/python scripts/opinfo_sweep.py --ops add,mul --dtypes float32
    .venv/bin/python -m pytest -m opinfo_full tests/python/test_opinfo.py  # same, via pytest

The full sweep writes docs/opinfo.md (the table: op, dtype, samples passed /
failed / fell back, reason) and prints one summary line. It runs ops in
worker processes (--jobs, default 2) so that a crash or hang in one op is
recorded against that op and the sweep goes on.

What a sample's outcome means:
  pass      xla's outputs equal CPU's (dtype, shape, values within the
            dtype's tolerance; integers and bool exactly) and no aten::
            fallback counter moved.
  fallback  the values match but at least one op ran on the counted CPU
            fallback (the reason names the aten:: counters).
  fail      values, dtype or shape differ, or xla raised where CPU did not
            (or did not raise where CPU did); the reason says which.
  meta      the OpInfo itself marks the op's values as not comparable
            between devices (random ops, empty, undefined overflow:
            PyTorch's own test_compare_cpu skips them); dtype and shape are
            compared and fallbacks counted. Reported apart from pass.
Gradients: for float dtypes the op's backward supports, a fixed random
cotangent is pulled back through the outputs on both devices and the input
gradients are compared the same way (grad pass / fail / fallback).

This module is also imported by tests/python/test_opinfo.py, which runs a
fixed subset in CI.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import time
import traceback
import warnings

os.environ.setdefault("PJRT_DEVICE", "CPU")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOC = os.path.join(ROOT, "docs", "opinfo.md")
COMMAND = "PJRT_DEVICE=CPU .venv/bin/python scripts/opinfo_sweep.py"

DTYPE_NAMES = ("float32", "bfloat16", "float16", "int64", "bool")

# Tolerances (atol, rtol). float32 uses PyTorch's own device-vs-CPU test
# (TestCommon.test_compare_cpu: atol=rtol=1e-3). Half types: results are
# rounded once per op on both sides, but PyTorch's CPU kernels round some
# intermediates that the engine keeps in float32 (and vice versa), so a few
# ulps of the result type (bf16: 2**-8 relative) must be allowed.
TOL = {"float32": (1e-3, 1e-3), "bfloat16": (2e-2, 2e-2), "float16": (2e-3, 2e-3)}
GRAD_TOL = {"float32": (1e-3, 1e-3), "bfloat16": (5e-2, 5e-2), "float16": (5e-3, 5e-3)}

OP_TIMEOUT_S = 300


# ---------------------------------------------------------------- helpers
def _torch():
    import torch
    return torch


def op_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def all_ops():
    from torch.testing._internal.common_methods_invocations import op_db
    return {op_key(op): op for op in op_db}


def compare_cpu_skip_reason(op):
    """The reason PyTorch's own device-vs-CPU test (test_compare_cpu) skips
    this op's value comparison, or None. Only reasons that make values
    incomparable by definition count (random ops, uninitialised memory,
    undefined overflow, unspecified order)."""
    from torch.testing._internal.opinfo.core import DecorateInfo
    for d in op.decorators:
        if not (isinstance(d, DecorateInfo) and d.test_name == "test_compare_cpu"):
            continue
        if d.device_type not in (None, "cpu"):
            continue
        for dec in d.decorators:
            cells = [c.cell_contents for c in (dec.__closure__ or ())]
            reasons = [c for c in cells if isinstance(c, str)]
            for r in reasons:
                low = r.lower()
                if ("non-deterministic" in low or "undefined" in low):
                    return r
    return None


# Ops whose values are incomparable by definition but which OpInfo does not
# mark for test_compare_cpu.
EXTRA_META = {
    "nn.functional.feature_alpha_dropout.without_train": None,  # deterministic: compared
}
META_BY_NAME = {
    "empty_like": "uninitialised memory", "new_empty": "uninitialised memory",
    "new_empty_strided": "uninitialised memory", "empty": "uninitialised memory",
    "empty_strided": "uninitialised memory", "empty_permuted": "uninitialised memory",
    "nn.functional.alpha_dropout": "output is non-deterministic",
    "nn.functional.feature_alpha_dropout.with_train": "output is non-deterministic",
    "torch.empty": "uninitialised memory",
    "randn": "output is random (device RNG, not the CPU generator)",
    "randint": "output is random (device RNG, not the CPU generator)",
    "normal.number_mean": "output is random (device RNG, not the CPU generator)",
}


# Ops where only some samples are incomparable: (predicate, reason).
META_BY_SAMPLE = {
    "nn.functional.scaled_dot_product_attention": (
        lambda s: (s.kwargs.get("dropout_p", 0.0) or 0.0) > 0,
        "output is random when dropout_p > 0"),
}


def _unique_valid(sample, actual, expected):
    """torch.unique(sorted=False) leaves the order of the unique values
    undefined: xla's answer is accepted when it holds the same values, its
    inverse rebuilds the input and its counts count them."""
    torch = _torch()
    if sample.kwargs.get("sorted", True) is not False:
        return False
    a = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    e = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(a) != len(e):
        return False
    dim = sample.kwargs.get("dim")
    ua, ue = a[0], e[0]
    if dim is not None or ua.shape != ue.shape:
        return False
    if not torch.equal(torch.sort(ua.flatten())[0], torch.sort(ue.flatten())[0]):
        return False
    k = 1
    if sample.kwargs.get("return_inverse"):
        if not torch.equal(ua[a[k]], sample.input):
            return False
        k += 1
    if sample.kwargs.get("return_counts"):
        ref = (sample.input.flatten().unsqueeze(1) == ua.unsqueeze(0)).sum(0)
        if not torch.equal(a[k], ref):
            return False
    return True


# Per-op validity checks for outputs PyTorch leaves partly unspecified.
VALIDITY_CHECKS = {"unique": _unique_valid}


def meta_reason(op):
    key = op_key(op)
    if key in META_BY_SAMPLE or key in VALIDITY_CHECKS:
        return None
    if key in META_BY_NAME:
        return META_BY_NAME[key]
    return compare_cpu_skip_reason(op)


def _first_line(e):
    s = f"{type(e).__name__}: {e}".strip().splitlines()
    s = s[0] if s else type(e).__name__
    return s[:160]


def _tree_map(fn, x):
    from torch.utils._pytree import tree_map
    return tree_map(fn, x)


def _leaves(x):
    from torch.utils._pytree import tree_leaves
    return tree_leaves(x)


def _to_cpu(x):
    torch = _torch()
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu")
    return x


def _to_xla(t):
    torch = _torch()
    if isinstance(t, torch.Tensor):
        return t.detach().to("xla").requires_grad_(t.requires_grad)
    return t


def _clone_cpu(t):
    torch = _torch()
    if isinstance(t, torch.Tensor):
        return t.detach().clone().requires_grad_(t.requires_grad)
    return t


def _device_kwargs_to_xla(s):
    """Factory samples carry device='cpu' in their kwargs: ask for xla."""
    torch = _torch()
    for k, v in list(s.kwargs.items()):
        if (isinstance(v, str) and v == "cpu") or (isinstance(v, torch.device) and
                                                   v.type == "cpu"):
            s.kwargs[k] = "xla"
    return s


def _fallbacks():
    """Ops that ran on the CPU fallback. Value reads (.item(), an op
    reading a size argument from a tensor) are listed as
    aten::_local_scalar_dense, as PyTorch/XLA lists them; they run no op on
    the CPU, so they do not make an op a fallback here."""
    import torch_xla.debug.metrics as met
    return [op for op in met.executed_fallback_ops() if op != "aten::_local_scalar_dense"]


def _clear():
    import torch_xla.debug.metrics as met
    met.clear_counters()


def compare(actual, expected, dtype_name, tol=TOL, meta_only=False):
    """None if actual (already on the CPU) matches expected, else a short
    reason."""
    torch = _torch()
    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return f"output structure differs ({len(a_leaves)} vs {len(e_leaves)} leaves)"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        # Tolerance by the output's dtype (an int op may return floats).
        odt = str(e.dtype).replace("torch.", "") if isinstance(e, torch.Tensor) else dtype_name
        if odt not in tol:
            odt = "float32" if odt in ("float64", "complex64", "complex128") else odt
        atol, rtol = tol.get(odt, tol.get("float32") if isinstance(e, float) else (0.0, 0.0))
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output {i}: expected a tensor, got {type(a).__name__}"
            if a.dtype != e.dtype:
                return f"output {i}: dtype {a.dtype} != {e.dtype}"
            if tuple(a.shape) != tuple(e.shape):
                return f"output {i}: shape {tuple(a.shape)} != {tuple(e.shape)}"
            if meta_only:
                continue
            if e.is_complex():
                a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
            exact = not (e.dtype.is_floating_point or e.is_complex())
            try:
                torch.testing.assert_close(a, e, atol=0 if exact else atol,
                                           rtol=0 if exact else rtol, equal_nan=True,
                                           check_device=False, check_stride=False)
            except AssertionError as err:
                lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
                detail = "; ".join(lines[1:3]) if len(lines) > 1 else lines[0]
                return f"output {i}: values differ ({detail})"[:200]
        elif meta_only:
            continue
        elif isinstance(e, float) and isinstance(a, (int, float)):
            if not (abs(a - e) <= atol + rtol * abs(e) or (a != a and e != e)):
                return f"output {i}: {a} != {e}"
        elif a != e:
            return f"output {i}: {a!r} != {e!r}"[:200]
    return None


# Positional arguments that PyTorch requires on the CPU whatever the
# device (tensor_split's indices_or_sections tensor).
CPU_ARGS = {"tensor_split": (0,)}


# Ops whose index outputs PyTorch leaves unspecified among equal elements
# (torch.sort without stable=True, topk, kthvalue, mode, median): an index
# that differs from CPU's is accepted when it selects an equal value, i.e.
# input.gather(dim, xla_index) == input.gather(dim, cpu_index).
# (positional index of dim, default dim, position of the index output)
TIE_OPS = {"sort": (0, -1, 1), "argsort": (0, -1, 0), "topk": (1, -1, 1),
           "kthvalue": (1, -1, 1), "mode": (0, -1, 1), "median": (0, None, 1),
           "nanmedian": (0, None, 1)}


def ties_only(op, sample, actual, expected):
    """True when actual differs from expected only in which of several equal
    elements an index output names (see TIE_OPS)."""
    torch = _torch()
    spec = TIE_OPS.get(op.name)
    if spec is None or not isinstance(sample.input, torch.Tensor):
        return False
    pos, default, out_i = spec
    if op.name == "sort" and (sample.kwargs.get("stable") or
                              (len(sample.args) > 2 and sample.args[2])):
        return False
    dim = sample.kwargs.get("dim", sample.args[pos] if len(sample.args) > pos else default)
    if dim is None:
        return False
    x = sample.input.detach()
    a = actual if isinstance(actual, (tuple, list)) else [actual]
    e = expected if isinstance(expected, (tuple, list)) else [expected]
    if len(a) != len(e) or out_i >= len(a):
        return False
    for i, (ai, ei) in enumerate(zip(a, e)):
        if i != out_i and compare(ai, ei, "float32", tol={"float32": (0, 0)}) is not None:
            return False
    ai, ei = a[out_i], e[out_i]
    if x.dim() == 0 or ai.shape != ei.shape:
        return ai.shape == ei.shape and bool((ai == ei).all())
    d = dim % x.dim()
    if ai.dim() < x.dim():
        ai, ei = ai.unsqueeze(d), ei.unsqueeze(d)
    try:
        ga, ge = x.gather(d, ai), x.gather(d, ei)
    except Exception:
        return False
    return bool(((ga == ge) | (ga.isnan() & ge.isnan())).all())


# ------------------------------------------------ half-type reference
def at_least_as_accurate(op, cpu_s, actual, expected, dtype_name):
    """For bfloat16/float16: True when xla's outputs are, elementwise, as
    close to the float64 result of the same (exactly widened) inputs as
    CPU's outputs are, up to the dtype's tolerance. PyTorch's CPU kernels
    round some intermediates to the half type (and the engine keeps them in
    float32, or the other way round), so two correct results can differ by
    more than a few ulps; the float64 result decides which is closer."""
    torch = _torch()
    half = getattr(torch, dtype_name)

    def widen(t):
        if isinstance(t, torch.Tensor) and t.dtype == half:
            return t.detach().to(torch.float64)
        return t
    try:
        ref_s = cpu_s.transform(widen)
        with torch.no_grad():
            ref = op(ref_s.input, *ref_s.args, **ref_s.kwargs)
        ref = cpu_s.output_process_fn_grad(ref)
    except Exception:
        return False
    a_l, e_l, r_l = _leaves(actual), _leaves(expected), _leaves(ref)
    if not (len(a_l) == len(e_l) == len(r_l)):
        return False
    atol, rtol = TOL[dtype_name]
    for a, e, r in zip(a_l, e_l, r_l):
        if not isinstance(e, torch.Tensor) or not e.dtype.is_floating_point:
            if compare(a, e, dtype_name) is not None:
                return False
            continue
        if not isinstance(a, torch.Tensor) or not _as_close_to_ref(a, e, r, atol, rtol):
            return False
    return True


def _as_close_to_ref(a, e, r, atol, rtol):
    """Tensor a is, elementwise, no further from the reference r than e is,
    up to (atol, rtol); NaN where e is NaN counts as close."""
    torch = _torch()
    if not isinstance(r, torch.Tensor) or a.shape != e.shape or r.shape != e.shape or \
            a.dtype != e.dtype:
        return False
    a64, e64, r64 = a.double(), e.double(), r.detach().double()
    ok = (a64 - r64).abs() <= (e64 - r64).abs() + atol + rtol * r64.abs()
    ok |= a64.isnan() & e64.isnan()
    return bool(ok.all())


def grads_at_least_as_accurate(op, cpu_s, cots, xg, cg, dtype_name):
    """The gradients' form of at_least_as_accurate: xla's gradients are,
    elementwise, as close to the float64 gradients (inputs and cotangents
    widened exactly) as CPU's are, up to GRAD_TOL. PyTorch's half-type
    backward kernels round differently on AVX2 and AVX-512 machines."""
    torch = _torch()
    half = getattr(torch, dtype_name)

    def widen(t):
        if isinstance(t, torch.Tensor) and t.dtype == half:
            return t.detach().to(torch.float64).requires_grad_(t.requires_grad)
        return t
    try:
        ref_s = cpu_s.transform(widen)
        ri = [t for t in _leaves([ref_s.input, ref_s.args, ref_s.kwargs])
              if isinstance(t, torch.Tensor) and t.requires_grad]
        out = cpu_s.output_process_fn_grad(op(ref_s.input, *ref_s.args, **ref_s.kwargs))
        ro = [o for o in _leaves(out)
              if isinstance(o, torch.Tensor) and o.requires_grad and o.grad_fn is not None]
        if len(ro) != len(cots) or len(ri) != len(cg):
            return False
        rg = torch.autograd.grad(ro, ri, [c.double() for c in cots], allow_unused=True)
    except Exception:
        return False
    atol, rtol = GRAD_TOL[dtype_name]
    for a, e, r in zip(xg, cg, rg):
        if r is None:
            r = torch.zeros_like(e, dtype=torch.float64)
        if not _as_close_to_ref(a, e, r, atol, rtol):
            return False
    return True


# ---------------------------------------------------------- one sample
def run_sample(op, sample, dtype_name, check_grad, meta=None):
    """Runs one sample on CPU and xla. Returns (fwd, grad): each is
    (outcome, reason) with outcome in pass/fail/fallback/meta, grad None
    when not checked."""
    torch = _torch()
    import torch_xla
    cpu_s = sample.transform(_clone_cpu)
    xla_s = _device_kwargs_to_xla(sample.transform(_to_xla))
    for i in CPU_ARGS.get(op.name, ()):  # arguments PyTorch wants on the CPU
        if i < len(xla_s.args) and isinstance(xla_s.args[i], torch.Tensor):
            xla_s.args = tuple(a.cpu() if j == i else a for j, a in enumerate(xla_s.args))
    cpu_err = None
    try:
        expected = op(cpu_s.input, *cpu_s.args, **cpu_s.kwargs)
    except Exception as e:  # the sample asks for an error: xla must raise too
        cpu_err = e
    _clear()
    try:
        actual = op(xla_s.input, *xla_s.args, **xla_s.kwargs)
        actual_cpu = _tree_map(_to_cpu, actual)
    except Exception as e:
        torch_xla.sync()
        if cpu_err is not None:
            if isinstance(e, type(cpu_err)) or isinstance(cpu_err, type(e)):
                return ("pass", None), None
            return ("fail", f"CPU raised {type(cpu_err).__name__}, xla {_first_line(e)}"), None
        fb = _fallbacks()
        return ("fail", "xla raised " + _first_line(e) +
                (f" [after fallback {', '.join(fb)}]" if fb else "")), None
    if cpu_err is not None:
        return ("fail", f"CPU raised {_first_line(cpu_err)}; xla did not"), None
    fb = _fallbacks()
    try:
        exp_cpu = sample.output_process_fn_grad(_tree_map(_to_cpu, expected))
        act_cpu = sample.output_process_fn_grad(actual_cpu)
        why = compare(act_cpu, exp_cpu, dtype_name, meta_only=meta is not None)
        if why is not None and ties_only(op, cpu_s, act_cpu, exp_cpu):
            # Equal elements picked in another order: the gradient flows to
            # the other (equal) element, so it is not comparable either.
            why, check_grad = None, False
        if why is not None and dtype_name in ("bfloat16", "float16") and \
                at_least_as_accurate(op, cpu_s, act_cpu, exp_cpu, dtype_name):
            why = None
        if why is not None and op.name in VALIDITY_CHECKS and \
                VALIDITY_CHECKS[op.name](cpu_s, act_cpu, exp_cpu):
            why = None
    except Exception as e:
        why = "comparison raised " + _first_line(e)
    if why is not None:
        fwd = ("fail", why)
    elif fb:
        fwd = ("fallback", "fallback: " + ", ".join(sorted(fb)))
    elif meta is not None:
        fwd = ("meta", meta)
    else:
        fwd = ("pass", None)
    if not check_grad or fwd[0] == "meta":  # random outputs: gradients too
        return fwd, None
    return fwd, run_grad(op, cpu_s, xla_s, sample, expected, actual, dtype_name)


def _grad_pairs(cpu_s, xla_s):
    torch = _torch()
    ci = [t for t in _leaves([cpu_s.input, cpu_s.args, cpu_s.kwargs])
          if isinstance(t, torch.Tensor) and t.requires_grad]
    xi = [t for t in _leaves([xla_s.input, xla_s.args, xla_s.kwargs])
          if isinstance(t, torch.Tensor) and t.requires_grad]
    return ci, xi


def run_grad(op, cpu_s, xla_s, sample, expected, actual, dtype_name):
    torch = _torch()
    ci, xi = _grad_pairs(cpu_s, xla_s)
    if not ci:
        return None
    co = [o for o in _leaves(sample.output_process_fn_grad(expected))
          if isinstance(o, torch.Tensor) and o.requires_grad and o.grad_fn is not None]
    xo = [o for o in _leaves(sample.output_process_fn_grad(actual))
          if isinstance(o, torch.Tensor) and o.requires_grad and o.grad_fn is not None]
    if not co:
        return None
    if len(co) != len(xo):
        return ("fail", f"{len(xo)} differentiable outputs on xla, {len(co)} on CPU")
    g = torch.Generator().manual_seed(1234)
    cots = [torch.randn(o.shape, generator=g, dtype=torch.float32).to(o.dtype) for o in co]
    try:
        cg = torch.autograd.grad(co, ci, cots, allow_unused=True)
    except Exception as e:
        # CPU has no backward for this sample: nothing to compare against.
        return ("cpu-error", _first_line(e))
    _clear()
    try:
        xg = torch.autograd.grad(xo, xi, [c.to("xla") for c in cots], allow_unused=True)
        xg = [None if t is None else t.cpu() for t in xg]
    except Exception as e:
        fb = _fallbacks()
        return ("fail", "xla backward raised " + _first_line(e) +
                (f" [after fallback {', '.join(fb)}]" if fb else ""))
    fb = _fallbacks()
    cg = [torch.zeros_like(c) if t is None else t for c, t in zip(ci, cg)]
    xg = [torch.zeros_like(c) if t is None else t for c, t in zip(ci, xg)]
    why = compare(xg, cg, dtype_name, tol=GRAD_TOL)
    if why is not None and dtype_name in ("bfloat16", "float16") and \
            grads_at_least_as_accurate(op, cpu_s, cots, xg, cg, dtype_name):
        why = None
    if why is not None:
        return ("fail", "grad " + why)
    if fb:
        return ("fallback", "fallback: " + ", ".join(sorted(fb)))
    return ("pass", None)


# --------------------------------------------------------------- one op
def new_record(key, dtype_name):
    return {"op": key, "dtype": dtype_name, "fwd": collections.Counter(),
            "grad": collections.Counter(), "reasons": collections.Counter(),
            "grad_reasons": collections.Counter(), "note": None}


def run_op(op, dtype_names=DTYPE_NAMES, max_samples=None):
    """Runs every sample of op for each dtype name; returns a list of
    records (one per dtype)."""
    torch = _torch()
    import torch_xla
    out = []
    key = op_key(op)
    meta = meta_reason(op)
    supported = op.supported_dtypes("cpu")
    try:
        bwd_supported = op.supported_backward_dtypes("cpu") if op.supports_autograd else set()
    except Exception:
        bwd_supported = set()
    for dn in dtype_names:
        dtype = getattr(torch, dn)
        rec = new_record(key, dn)
        out.append(rec)
        if dtype not in supported:
            rec["note"] = "n/a (CPU does not support this dtype)"
            continue
        check_grad = dtype.is_floating_point and dtype in bwd_supported
        torch.manual_seed(0)
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=check_grad))
        except Exception as e:
            rec["note"] = "sample inputs raised " + _first_line(e)
            continue
        if max_samples is not None:
            samples = samples[:max_samples]
        for s in samples:
            smeta = meta
            if key in META_BY_SAMPLE and META_BY_SAMPLE[key][0](s):
                smeta = META_BY_SAMPLE[key][1]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fwd, grad = run_sample(op, s, dn, check_grad, smeta)
            except Exception as e:  # a bug in the harness or an uncaught engine error
                fwd, grad = ("fail", "harness: " + _first_line(e)), None
                traceback.print_exc()
            try:
                torch_xla.sync()
            except Exception:
                pass
            rec["fwd"][fwd[0]] += 1
            if fwd[1]:
                rec["reasons"][fwd[1]] += 1
            if grad is not None and grad[0] in ("pass", "fail", "fallback"):
                rec["grad"][grad[0]] += 1
                if grad[1]:
                    rec["grad_reasons"][grad[1]] += 1
    return out


def _jsonable(rec):
    r = dict(rec)
    for k in ("fwd", "grad", "reasons", "grad_reasons"):
        r[k] = dict(r[k])
    return r


# ----------------------------------------------------------- workers
def worker_main(keys, out_path, dtype_names):
    import torch
    torch.set_num_threads(1)
    import torch_xla  # noqa: F401
    ops = all_ops()
    with open(out_path, "a") as f:
        for key in keys:
            f.write(json.dumps({"start": key}) + "\n")
            f.flush()
            t0 = time.time()
            recs = run_op(ops[key], dtype_names)
            for r in recs:
                r = _jsonable(r)
                r["seconds"] = round(time.time() - t0, 2)
                f.write(json.dumps(r) + "\n")
            f.write(json.dumps({"done": key}) + "\n")
            f.flush()


def _read_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    return out


def run_workers(keys, dtype_names, jobs, tmpdir, log=print):
    """Runs keys across jobs worker processes; a worker that crashes or
    hangs has its current op recorded as crashed/timed out and is
    restarted on the rest. Returns all records."""
    import threading
    chunks = [keys[i::jobs] for i in range(jobs)]
    results = []
    lock = threading.Lock()

    def drive(idx, chunk):
        remaining = list(chunk)
        attempt = 0
        while remaining:
            attempt += 1
            path = os.path.join(tmpdir, f"w{idx}_{attempt}.jsonl")
            env = dict(os.environ, TORCHTPU_NUM_THREADS="1", OMP_NUM_THREADS="1")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--out", path,
                   "--dtypes", ",".join(dtype_names), "--ops", ",".join(remaining)]
            errp = path + ".err"
            with open(errp, "w") as err:
                p = subprocess.Popen(cmd, stdout=err, stderr=err, env=env, cwd=ROOT)
                last_n, last_t = 0, time.time()
                while p.poll() is None:
                    time.sleep(1.0)
                    lines = _read_jsonl(path)
                    if len(lines) != last_n:
                        last_n, last_t = len(lines), time.time()
                    elif time.time() - last_t > OP_TIMEOUT_S:
                        p.kill()
                        p.wait()
                        break
            lines = _read_jsonl(path)
            done = {ln["done"] for ln in lines if "done" in ln}
            started = [ln["start"] for ln in lines if "start" in ln]
            recs = [ln for ln in lines if "op" in ln and ln["op"] in done]
            with lock:
                results.extend(recs)
                for k in done:
                    log(f"  {k}")
            stuck = [k for k in started if k not in done]
            if stuck:
                k = stuck[0]
                why = ("timed out" if p.returncode in (-9, None) else
                       f"worker died (exit {p.returncode})")
                with open(errp) as err:
                    tail = [ln for ln in err.read().splitlines() if ln.strip()][-1:]
                for dn in dtype_names:
                    r = _jsonable(new_record(k, dn))
                    r["fwd"] = {"fail": 1}
                    r["reasons"] = {f"{why}: {tail[0][:120] if tail else ''}": 1}
                    r["note"] = why
                    with lock:
                        results.append(r)
                done.add(k)
            elif p.returncode != 0 and not done:
                with open(errp) as err:
                    raise RuntimeError(f"worker failed before any op:\n{err.read()[-3000:]}")
            remaining = [k for k in remaining if k not in done]

    threads = [threading.Thread(target=drive, args=(i, c)) for i, c in enumerate(chunks) if c]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ------------------------------------------------------------ reporting
def totals(records):
    """Per dtype: forward and gradient outcome counts."""
    t = collections.defaultdict(lambda: {"fwd": collections.Counter(),
                                         "grad": collections.Counter(), "ops": 0})
    for r in records:
        d = t[r["dtype"]]
        d["fwd"].update(r["fwd"])
        d["grad"].update(r["grad"])
        if sum(r["fwd"].values()):
            d["ops"] += 1
    return t


def _pct(n, d):
    return f"{100.0 * n / d:.1f}%" if d else "n/a"


def summary_line(records):
    t = totals(records)
    parts = []
    for dn in DTYPE_NAMES:
        if dn not in t:
            continue
        f = t[dn]["fwd"]
        n = sum(f.values())
        parts.append(f"{dn} fwd {f['pass']}/{n} pass ({_pct(f['pass'], n)}; "
                     f"{_pct(f['pass'], n - f['meta'])} of comparable), "
                     f"{f['fail']} fail, {f['fallback']} fallback, {f['meta']} meta")
    g = collections.Counter()
    for dn in t:
        g.update(t[dn]["grad"])
    ng = sum(g.values())
    gf = t.get("float32", {"grad": collections.Counter()})["grad"]
    ngf = sum(gf.values())
    parts.append(f"grad f32 {gf['pass']}/{ngf} ({_pct(gf['pass'], ngf)}), "
                 f"all {g['pass']}/{ng} ({_pct(g['pass'], ng)})")
    return "OpInfo sweep: " + "; ".join(parts)


def _fmt_counts(c, keys=("pass", "fail", "fallback", "meta")):
    return " / ".join(str(c.get(k, 0)) for k in keys)


def _esc(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def write_doc(records, path=DOC, elapsed=None):
    import torch
    t = totals(records)
    recs = sorted(records, key=lambda r: (r["op"], DTYPE_NAMES.index(r["dtype"])))
    fallback_ops = collections.Counter()
    fail_reasons = collections.Counter()
    for r in recs:
        for why, n in list(r["reasons"].items()) + list(r["grad_reasons"].items()):
            if why.startswith("fallback: "):
                for name in why[len("fallback: "):].split(", "):
                    fallback_ops[name] += n
    for r in recs:
        for why, n in r["reasons"].items():
            if not why.startswith("fallback: ") and r["fwd"].get("fail"):
                fail_reasons[(r["op"], r["dtype"], why)] += n
    L = []
    L.append("# OpInfo sweep: PyTorch's op database on xla")
    L.append("")
    L.append("Generated by `scripts/opinfo_sweep.py` (regenerate with "
             f"`{COMMAND}`, or `.venv/bin/python -m pytest -m opinfo_full "
             "tests/python/test_opinfo.py`). Do not edit by hand.")
    L.append("")
    L.append(f"torch {torch.__version__}; {len({r['op'] for r in recs})} OpInfos; "
             f"dtypes {', '.join(DTYPE_NAMES)}" +
             (f"; sweep took {elapsed / 60:.1f} min on 2 workers" if elapsed else "") + ".")
    L.append("")
    L.append("Every sample input of every OpInfo (`op.sample_inputs('cpu', dtype)`) runs "
             "on CPU and on xla; outputs (after the OpInfo's `output_process_fn_grad`) must "
             "match in dtype, shape and value (float32 atol=rtol=1e-3 as PyTorch's "
             "`test_compare_cpu`; bfloat16 2e-2; float16 2e-3; integers and bool exactly). "
             "For float dtypes the op's backward supports, a fixed random cotangent is pulled "
             "back on both devices and input gradients compared (float32 1e-3, bfloat16 "
             "5e-2, float16 5e-3). A sample whose op ran on the CPU fallback counts as "
             "`fallback` even when its values match. `meta`: the OpInfo marks values as "
             "incomparable across devices (random ops, uninitialised memory, undefined "
             "overflow); dtype and shape are still compared and fallbacks still counted. "
             "A sample for which CPU raises passes when xla raises the same exception type. "
             "A bfloat16/float16 output or gradient that differs from CPU's still passes when "
             "it is, elementwise, at least as close to the float64 result of the same inputs "
             "(up to the tolerance).")
    L.append("")
    L.append("## Summary")
    L.append("")
    L.append("`" + summary_line(records) + "`")
    L.append("")
    L.append("| dtype | OpInfos run | fwd samples | pass | fail | fallback | meta | pass rate "
             "| pass rate of comparable | grad checks | grad pass | grad fail | grad fallback "
             "| grad pass rate |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for dn in DTYPE_NAMES:
        if dn not in t:
            continue
        f, g = t[dn]["fwd"], t[dn]["grad"]
        n, ng = sum(f.values()), sum(g.values())
        L.append(f"| {dn} | {t[dn]['ops']} | {n} | {f['pass']} | {f['fail']} | "
                 f"{f['fallback']} | {f['meta']} | {_pct(f['pass'], n)} | "
                 f"{_pct(f['pass'], n - f['meta'])} | {ng} | {g['pass']} | "
                 f"{g['fail']} | {g['fallback']} | {_pct(g['pass'], ng)} |")
    L.append("")
    L.append("Pass rate = pass / all samples (meta and fallback samples count against it). "
             "Pass rate of comparable = pass / (all samples - meta): the samples whose values "
             "PyTorch itself defines, the measure PyTorch's own device-vs-CPU test uses.")
    L.append("")
    L.append("## Ops that fell back (aten:: counters, samples)")
    L.append("")
    if fallback_ops:
        L.append(", ".join(f"`{k}` ({v})" for k, v in fallback_ops.most_common()))
    else:
        L.append("None.")
    L.append("")
    L.append("## Dynamic-output ops and other syncs")
    L.append("")
    L.append("`nonzero`, `masked_select`, `unique` (and ops built on them: `argwhere`, "
             "boolean-mask indexing, `unique_consecutive`, `unique_dim`) have output shapes "
             "that depend on values. They are lowered natively with one counted sync: the "
             "engine computes the data-dependent size (a count) on the device, the size is "
             "read back (counter `DynamicShapeSync`, one per read), and the rest runs on the "
             "device with that static shape. No aten:: fallback counter moves. "
             "`nonzero_static` has a static size and needs no sync; `x[mask] = value` with one "
             "value is a `where`, also without a sync.")
    L.append("")
    L.append("Ops whose result is a Python value (`equal`, `allclose`, `.item()`) read one "
             "value back, as on any device. The linalg ops that raise on singular or "
             "non-positive-definite input (`linalg.inv`, `linalg.solve`, `linalg.cholesky`, "
             "...) read LAPACK's `info` back to raise PyTorch's error: counter "
             "`LinalgErrorCheckSync` (the `*_ex` variants never sync).")
    L.append("")
    L.append("## Not supported by design")
    L.append("")
    L.append("- complex128 and complex32: the engine's complex dtype is complex64 "
             "(`docs/complex.md`); the others raise TypeError (listed as failures). The "
             "sweep's dtypes are real, so complex64 appears through ops with complex "
             "results (`fft.*`, `stft`, `complex`, `polar`, `view_as_complex`): those run "
             "natively; complex ops without a lowering fall back visibly.")
    L.append("- Sparse layouts (`sparse.*`, `to_sparse`): xla tensors are dense.")
    L.append("- `uint64` (`hash_tensor`): not an engine dtype.")
    L.append("")
    L.append("## Table")
    L.append("")
    L.append("Columns: forward pass / fail / fallback / meta; gradient pass / fail / fallback. "
             "Reasons: the most frequent failure or fallback reasons for that op and dtype.")
    L.append("")
    L.append("| op | dtype | fwd p/f/fb/meta | grad p/f/fb | reason |")
    L.append("| --- | --- | --- | --- | --- |")
    for r in recs:
        f = collections.Counter(r["fwd"])
        g = collections.Counter(r["grad"])
        if r.get("note") and not sum(f.values()):
            L.append(f"| {_esc(r['op'])} | {r['dtype']} | - | - | {_esc(r['note'])} |")
            continue
        reasons = collections.Counter(r["reasons"])
        reasons.update(r["grad_reasons"])
        why = "; ".join(f"{_esc(k)} (x{v})" for k, v in reasons.most_common(2))
        gtxt = _fmt_counts(g, ("pass", "fail", "fallback")) if sum(g.values()) else "-"
        L.append(f"| {_esc(r['op'])} | {r['dtype']} | {_fmt_counts(f)} | {gtxt} | {why} |")
    L.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(L))


# ------------------------------------------------------------------ main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated OpInfo keys (name or name.variant)")
    ap.add_argument("--dtypes", default=",".join(DTYPE_NAMES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--doc", default=None, help=f"table path (default {DOC} for a full sweep)")
    ap.add_argument("--json", default=None, help="also write all records as JSON")
    ap.add_argument("--from-json", default=None,
                    help="rewrite the table from records saved with --json (no sweep)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    dtype_names = [d for d in args.dtypes.split(",") if d]
    if args.worker:
        worker_main(args.ops.split(","), args.out, dtype_names)
        return 0
    if args.from_json:
        with open(args.from_json) as fh:
            records = json.load(fh)
        write_doc(records, args.doc or DOC, None)
        print(summary_line(records))
        return 0
    keys = sorted(all_ops())
    full = not args.ops
    if args.ops:
        want = args.ops.split(",")
        keys = [k for k in keys if k in want or k.split(".")[0] in want or
                k.split(".", 1)[0] in want]
    import tempfile
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        records = run_workers(keys, dtype_names, max(1, args.jobs), tmp,
                              log=(lambda s: None) if full else print)
    elapsed = time.time() - t0
    doc = args.doc or (DOC if full and dtype_names == list(DTYPE_NAMES) else None)
    if doc:
        write_doc(records, doc, elapsed)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh)
    if not full:
        for r in sorted(records, key=lambda r: (r["op"], r["dtype"])):
            reasons = collections.Counter(r["reasons"])
            reasons.update(r["grad_reasons"])
            print(f"{r['op']:40s} {r['dtype']:9s} fwd {_fmt_counts(r['fwd'])}  grad "
                  f"{_fmt_counts(r['grad'], ('pass', 'fail', 'fallback'))}  "
                  f"{r.get('note') or ''} {dict(reasons.most_common(3)) if reasons else ''}")
    print(summary_line(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
