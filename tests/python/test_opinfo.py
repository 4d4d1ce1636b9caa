"""PyTorch's OpInfo database on xla: a fixed subset in CI, the full sweep on
demand.

CI (this file, default): for each OpInfo in SUBSET -- the ops real models
reach and the ops issue 3 names (linear, layer_norm, group_norm, sdpa,
gelu, silu, interpolate, pooling, index/index_put, scatter family, gather,
sort/topk, cumsum/cumprod, pad, flip, roll, einsum, tril/triu, clamp,
norms, erf, rsqrt, where, one_hot, argmax/argmin, logsumexp, var/std,
bucketize, the dynamic-output ops, ...) -- every sample input (up to
MAX_SAMPLES per dtype) runs on xla and on CPU through the same harness as
the full sweep (scripts/opinfo_sweep.py): outputs must match in dtype,
shape and value, gradients must match, and no aten:: fallback counter may
move. KNOWN lists the (op, dtype) pairs that do not pass yet, each with its
reason; they are strict xfails, so a fix shows up as a failure to update.

Full sweep: `pytest -m opinfo_full tests/python/test_opinfo.py` (or
`scripts/opinfo_sweep.py`) runs all of op_db in worker processes and
rewrites docs/opinfo.md.
"""
import importlib.util
import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_xla  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "opinfo_sweep", os.path.join(_HERE, "..", "..", "scripts", "opinfo_sweep.py"))
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)

CI_DTYPES = ("float32", "bfloat16", "int64", "bool")
MAX_SAMPLES = 24

SUBSET = [
    # linear algebra / nn building blocks
    "nn.functional.linear", "matmul", "bmm", "addmm", "einsum",
    "nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
    "nn.functional.rms_norm", "nn.functional.scaled_dot_product_attention",
    "nn.functional.embedding", "nn.functional.conv2d",
    "softmax", "log_softmax", "nn.functional.cross_entropy", "nn.functional.nll_loss",
    "nn.functional.mse_loss",
    # activations
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu", "sigmoid", "tanh",
    "nn.functional.hardswish", "nn.functional.leaky_relu", "nn.functional.softplus",
    "erf", "rsqrt", "exp", "log", "sqrt", "clamp",
    # resampling and pooling
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear",
    "nn.functional.avg_pool2d", "nn.functional.max_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_max_pool2d",
    "nn.functional.pad.constant", "nn.functional.pad.reflect", "nn.functional.pad.replicate",
    # indexing
    "__getitem__", "index_put", "index_select", "index_add", "gather", "scatter",
    "scatter_add", "scatter_reduce.sum", "scatter_reduce.amax", "masked_fill",
    "masked_scatter", "take_along_dim", "nn.functional.one_hot",
    # shape ops
    "flip", "roll", "tril", "triu", "cat", "stack", "expand", "permute", "reshape",
    "split", "narrow", "repeat", "diagonal", "unfold", "as_strided",
    # reductions, scans, sorting
    "sum", "mean", "prod", "amax", "max.reduction_with_dim", "argmax", "argmin",
    "logsumexp", "var", "std", "norm", "linalg.vector_norm", "any", "all",
    "cumsum", "cumprod", "cummax", "sort", "topk", "median", "kthvalue",
    "bucketize", "searchsorted", "histc",
    # dynamic output shapes (one counted sync each)
    "nonzero", "masked_select", "unique", "unique_consecutive",
    # elementwise arithmetic and comparison
    "add", "sub", "mul", "div.no_rounding_mode", "pow", "remainder", "where", "eq", "lt",
    "maximum", "abs", "neg", "floor", "round", "logical_and", "bitwise_and", "isnan",
    "nan_to_num", "lerp", "addcmul",
    # factories
    "full", "arange", "linspace", "zeros_like", "ones_like",
    # linear algebra, distances, less common nn ops
    "linalg.solve", "linalg.cholesky", "linalg.qr", "linalg.svd", "linalg.det", "linalg.eigh",
    "linalg.lu_factor", "linalg.solve_triangular", "cdist", "nn.functional.conv_transpose2d",
    "nn.functional.embedding_bag", "nn.functional.avg_pool3d", "nn.functional.interpolate.bicubic",
    "nn.functional.conv3d", "nn.functional.max_pool3d",
    # complex64 and the Fourier transforms
    "fft.fft", "fft.rfft", "fft.irfft", "fft.ifft", "fft.hfft", "fft.ihfft", "fft.fft2",
    "fft.rfftn", "fft.irfftn", "view_as_complex", "complex", "polar", "angle", "real",
]

# (op, dtype) -> why it does not pass yet. Strict: a fixed one must be removed.
KNOWN = {}
# (Half-type gradients are judged against float64 gradients when they differ
# from CPU's: scaled_dot_product_attention's bf16 backward, PyTorch's math
# decomposition on xla against CPU's fused kernel, is within tolerance there.)

_OPS = sweep.all_ops()


def _failures(rec):
    bad = {}
    for outcome in ("fail", "fallback"):
        if rec["fwd"].get(outcome):
            bad[f"fwd {outcome}"] = rec["fwd"][outcome]
        if rec["grad"].get(outcome):
            bad[f"grad {outcome}"] = rec["grad"][outcome]
    return bad


@pytest.mark.parametrize("key", SUBSET)
def test_opinfo_subset(key):
    assert key in _OPS, f"{key} is not in op_db"
    torch_xla.sync(wait=True)
    recs = sweep.run_op(_OPS[key], CI_DTYPES, max_samples=MAX_SAMPLES)
    ran = 0
    problems = {}
    for rec in recs:
        ran += sum(rec["fwd"].values())
        bad = _failures(rec)
        if not bad:
            continue
        why = dict(rec["reasons"])
        why.update(rec["grad_reasons"])
        if (key, rec["dtype"]) in KNOWN:
            continue
        problems[rec["dtype"]] = (bad, dict(list(why.items())[:3]))
    assert ran > 0, f"{key}: no sample ran"
    unexpected_pass = [d for (k, d) in KNOWN if k == key and
                       not _failures(next(r for r in recs if r["dtype"] == d))]
    assert not problems, problems
    assert not unexpected_pass, f"{key} now passes for {unexpected_pass}: remove it from KNOWN"


def test_dynamic_shape_ops_sync_once_and_never_fall_back():
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    xx = x.to("xla")
    torch_xla.sync(wait=True)
    met.clear_counters()
    nz = torch.nonzero(xx)
    assert met.counter_value("DynamicShapeSync") == 1
    sel = torch.masked_select(xx, xx > 0)
    u, inv, cnt = torch.unique(xx, return_inverse=True, return_counts=True)
    assert met.counter_value("DynamicShapeSync") == 3
    assert torch.equal(nz.cpu(), torch.nonzero(x))
    assert torch.equal(sel.cpu(), torch.masked_select(x, x > 0))
    ue, ie, ce = torch.unique(x, return_inverse=True, return_counts=True)
    assert torch.equal(u.cpu(), ue) and torch.equal(inv.cpu(), ie) and torch.equal(cnt.cpu(), ce)
    # A boolean-mask assignment with one value needs no sync at all.
    yy = xx.clone()
    yy[yy < 0] = 0.0
    assert met.counter_value("DynamicShapeSync") == 3
    assert torch.equal(yy.cpu(), x.clamp(min=0))
    assert met.executed_fallback_ops() == []


def test_sweep_harness_detects_wrong_values():
    """The harness must be able to fail: a wrong result is reported."""
    ops = sweep.all_ops()
    s = next(iter(ops["add"].sample_inputs("cpu", torch.float32)))
    assert sweep.compare(torch.zeros(2), torch.ones(2), "float32") is not None
    assert sweep.compare(torch.ones(2, dtype=torch.int32), torch.ones(2), "float32") is not None
    assert sweep.compare(torch.ones(3), torch.ones(2), "float32") is not None
    fwd, _ = sweep.run_sample(ops["add"], s, "float32", False)
    assert fwd == ("pass", None)
    # The float64 referee for half types: a result no closer to the exact
    # value than CPU's (plus tolerance) is still a failure; one as close is not.
    sb = next(iter(ops["mul"].sample_inputs("cpu", torch.bfloat16)))
    exp = sb.input * sb.args[0]
    assert sweep.at_least_as_accurate(ops["mul"], sb, exp.clone(), exp, "bfloat16")
    assert not sweep.at_least_as_accurate(ops["mul"], sb, exp + 1, exp, "bfloat16")
    # Its gradient form: CPU's own gradients pass, gradients off by more
    # than the tolerance beyond CPU's error do not.
    sg = sb.transform(lambda t: t.detach().requires_grad_(True)
                      if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
    ins = [sg.input, sg.args[0]]
    out = ops["mul"](sg.input, *sg.args, **sg.kwargs)
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out.dtype)
    cg = list(torch.autograd.grad(out, ins, cot))
    assert sweep.grads_at_least_as_accurate(ops["mul"], sg, [cot], [g.clone() for g in cg],
                                            cg, "bfloat16")
    assert not sweep.grads_at_least_as_accurate(ops["mul"], sg, [cot], [g + 1 for g in cg],
                                                cg, "bfloat16")


@pytest.mark.opinfo_full
def test_opinfo_full_sweep(request):
    """The whole op_db, all five dtypes; rewrites docs/opinfo.md."""
    if "opinfo_full" not in (request.config.getoption("-m") or ""):
        pytest.skip("full OpInfo sweep: run with -m opinfo_full")
    assert sweep.main([]) == 0


# ------------------------------------------------------------ Core ATen
# Core ATen ops (the `core` tag) that have no xla implementation and why.
CORE_EXCEPTIONS = {}
# Never dispatched to a backend: symbolic-size queries answered by the tensor
# itself.
CORE_META_ONLY = {"aten::sym_size", "aten::sym_stride", "aten::sym_numel",
                  "aten::sym_storage_offset"}


def core_aten_ops():
    ops = []
    for name in dir(torch.ops.aten):
        try:
            packet = getattr(torch.ops.aten, name)
        except Exception:
            continue
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for ov in packet.overloads():
            o = getattr(packet, ov)
            if torch.Tag.core in o.tags:
                ops.append(o)
    return ops


def core_op_status(o):
    """How an xla tensor gets this core op: 'lowered' (an entry in the
    lowering table), 'factory' (a kernel registered for the XLA key),
    'decomposed' (PyTorch's decomposition table, into lowered ops), or
    None."""
    from torch._decomp import decomposition_table
    from torchtpu.lowering.core import LOWERINGS
    if o in LOWERINGS:
        return "lowered"
    if torch._C._dispatch_has_kernel_for_dispatch_key(o.name(), "XLA"):
        return "factory"
    if o in decomposition_table:
        return "decomposed"
    for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd"):
        if torch._C._dispatch_has_kernel_for_dispatch_key(o.name(), key):
            return "composite"
    return None


def test_every_core_aten_op_has_an_xla_implementation():
    missing = []
    for o in core_aten_ops():
        name = o._schema.name
        if name in CORE_EXCEPTIONS or name in CORE_META_ONLY:
            continue
        if core_op_status(o) is None:
            missing.append(str(o))
    assert missing == [], missing
    assert len(core_aten_ops()) > 150


@pytest.mark.parametrize("op_name,args", [
    ("native_layer_norm", lambda: (torch.randn(4, 8), [8], torch.randn(8), torch.randn(8), 1e-5)),
    ("native_group_norm", lambda: (torch.randn(2, 6, 5), torch.randn(6), torch.randn(6), 2, 6, 5,
                                   3, 1e-5)),
    ("_native_batch_norm_legit_no_training",
     lambda: (torch.randn(3, 4, 5), torch.randn(4), torch.randn(4), torch.randn(4),
              torch.rand(4) + 0.5, 0.1, 1e-5)),
    ("avg_pool3d", lambda: (torch.randn(1, 2, 5, 6, 7), [2, 3, 2], [2, 1, 2], [1, 1, 0])),
    ("max_pool3d_with_indices", lambda: (torch.randn(1, 2, 5, 6, 7), [2, 2, 3], [2, 2, 1])),
    ("_adaptive_avg_pool3d", lambda: (torch.randn(1, 2, 5, 6, 7), [2, 3, 4])),
    ("upsample_bilinear2d.vec", lambda: (torch.randn(1, 2, 4, 5), [7, 9], False, None)),
    ("upsample_nearest2d.vec", lambda: (torch.randn(1, 2, 4, 5), [7, 9], None)),
    ("grid_sampler_2d", lambda: (torch.randn(1, 2, 4, 5), torch.rand(1, 3, 3, 2) * 2 - 1, 0, 0,
                                 False)),
    ("col2im", lambda: (torch.randn(1, 12, 6), [3, 4], [2, 2], [1, 1], [0, 0], [1, 1])),
    ("reflection_pad2d", lambda: (torch.randn(1, 2, 4, 5), [1, 2, 2, 1])),
    ("replication_pad3d", lambda: (torch.randn(1, 2, 3, 4, 5), [1, 2, 2, 1, 1, 1])),
    ("_embedding_bag", lambda: (torch.randn(10, 3), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]),
                                torch.tensor([0, 4]), False, 1)),
    ("repeat", lambda: (torch.randn(2, 3), [2, 1, 3])),
    ("isinf", lambda: (torch.tensor([1.0, float("inf"), -float("inf"), float("nan")]),)),
    ("sort", lambda: (torch.randn(4, 6), 1, True)),
    ("topk", lambda: (torch.randn(4, 6), 3)),
    ("scatter_reduce.two", lambda: (torch.zeros(5), 0, torch.tensor([0, 1, 1, 4]),
                                    torch.randn(4), "amax")),
    ("masked_scatter", lambda: (torch.zeros(2, 3), torch.tensor([[True, False, True],
                                                                 [False, True, True]]),
                                torch.randn(6))),
    ("index_put", lambda: (torch.zeros(4, 3), [torch.tensor([0, 2, 2])], torch.randn(3, 3),
                           True)),
    ("as_strided", lambda: (torch.randn(20), [3, 4], [5, 1], 2)),
    ("_fft_r2c", lambda: (torch.randn(3, 10), [0, 1], 1, True)),
    ("_fft_c2r", lambda: (torch.randn(3, 6, dtype=torch.complex64), [1], 2, 10)),
    ("_fft_c2c", lambda: (torch.randn(4, 5, dtype=torch.complex64), [0], 0, False)),
])
def test_core_op_runs_natively_float32(op_name, args):
    """Core ATen ops outside the OpInfo database's direct reach, called as
    aten ops on float32: no fallback, CPU's values."""
    name, _, ov = op_name.partition(".")
    o = getattr(getattr(torch.ops.aten, name), ov or "default")
    torch.manual_seed(0)
    cpu_args = args()
    xla_args = [a.to("xla") if isinstance(a, torch.Tensor) else
                [t.to("xla") for t in a] if isinstance(a, list) and a and
                isinstance(a[0], torch.Tensor) else a for a in cpu_args]
    torch_xla.sync(wait=True)
    met.clear_counters()
    got = o(*xla_args)
    expected = o(*cpu_args)
    got = [got] if isinstance(got, torch.Tensor) else list(got)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    if name in ("_embedding_bag", "_native_batch_norm_legit_no_training"):
        # Only the first output is defined (the rest are backward state
        # that CPU leaves empty or fills differently).
        got, expected = got[:1], expected[:1]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, atol=1e-4, rtol=1e-4, equal_nan=True)
    assert met.executed_fallback_ops() == []
