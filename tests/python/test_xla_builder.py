"""torch_xla.core.xla_builder / xla_op_registry over the lazy engine: every
builder op against PyTorch on CPU, control flow (conditional both ways,
while with tuple state), tuples of mixed element types, triangular_solve,
the build-time errors PyTorch/XLA raises, and unsupported ops."""
import pytest
import torch

import torch_xla.core.xla_builder as xb
import torch_xla.core.xla_op_registry as xor
import torch_xla.debug.metrics as met

_counter = [0]


def run(dev, fn, *tensors, **kwargs):
    """fn registered as an op, called on xla copies of tensors; results on CPU."""
    _counter[0] += 1
    op = xor.register(f"t{_counter[0]}", fn)
    out = op(*[t.to(dev) for t in tensors], **kwargs)
    if isinstance(out, list):
        return [o.cpu() for o in out]
    return out.cpu()


def same(got, want, atol=1e-5):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.is_floating_point or want.dtype.is_complex:
        torch.testing.assert_close(got, want, atol=atol, rtol=1e-4)
    else:
        assert torch.equal(got, want), (got, want)


A = torch.randn(3, 4)
B = torch.randn(3, 4)
I1 = torch.tensor([[7, -7, 5, 0], [9, -3, 2, 1]], dtype=torch.int32)
I2 = torch.tensor([[3, 3, -2, 5], [2, 2, 1, 3]], dtype=torch.int32)
P1 = torch.tensor([True, False, True, False])
P2 = torch.tensor([True, True, False, False])


@pytest.mark.parametrize("name,fn,want", [
    ("add", lambda a, b: a + b, torch.add),
    ("sub", lambda a, b: a - b, torch.sub),
    ("mul", lambda a, b: a * b, torch.mul),
    ("div", lambda a, b: a / b, torch.div),
    ("rem", lambda a, b: a % b, torch.fmod),
    ("max", lambda a, b: a.max(b), torch.maximum),
    ("min", lambda a, b: a.min(b), torch.minimum),
    ("atan2", lambda a, b: a.atan2(b), torch.atan2),
    ("eq", lambda a, b: a == b, torch.eq),
    ("ne", lambda a, b: a != b, torch.ne),
    ("lt", lambda a, b: a < b, torch.lt),
    ("le", lambda a, b: a <= b, torch.le),
    ("gt", lambda a, b: a > b, torch.gt),
    ("ge", lambda a, b: a >= b, torch.ge),
])
def test_binary_float(dev, name, fn, want):
    b = B.clone()
    b[0, 0] = A[0, 0]  # one equal pair for the comparisons
    same(run(dev, fn, A, b), want(A, b))


def test_pow_float(dev):
    a = A.abs() + 0.5
    same(run(dev, lambda x, y: x ** y, a, B), a ** B)


@pytest.mark.parametrize("fn,want,rhs", [
    (lambda a, b: a / b, lambda a, b: torch.div(a, b, rounding_mode="trunc"), I2),
    (lambda a, b: a % b, torch.fmod, I2),
    (lambda a, b: a & b, torch.bitwise_and, I2),
    (lambda a, b: a | b, torch.bitwise_or, I2),
    (lambda a, b: a ^ b, torch.bitwise_xor, I2),
    (lambda a, b: a << b, torch.bitwise_left_shift, I2.abs()),
    (lambda a, b: a >> b, torch.bitwise_right_shift, I2.abs()),
    (lambda a, b: a ** b, torch.pow, I2.abs()),
])
def test_binary_int(dev, fn, want, rhs):
    same(run(dev, fn, I1, rhs), want(I1, rhs))


def test_shift_right_of_unsigned_is_logical(dev):
    a = torch.tensor([200, 7, 255], dtype=torch.uint8)
    s = torch.tensor([1, 1, 4], dtype=torch.uint8)
    same(run(dev, lambda x, y: x >> y, a, s), torch.tensor([100, 3, 15], dtype=torch.uint8))


def test_integer_division_truncates(dev):
    same(run(dev, lambda a, b: a / b, I1, I2), torch.tensor(
        [[2, -2, -2, 0], [4, -1, 2, 0]], dtype=torch.int32))


def test_logical_ops_on_pred(dev):
    same(run(dev, lambda a, b: a & b, P1, P2), P1 & P2)
    same(run(dev, lambda a, b: a | b, P1, P2), P1 | P2)
    same(run(dev, lambda a, b: a ^ b, P1, P2), P1 ^ P2)
    same(run(dev, lambda a: a.__not__(), P1), ~P1)
    same(run(dev, lambda a: a.__not__(), I1), ~I1)


def test_scalar_and_degenerate_broadcast(dev):
    s = torch.tensor(2.5)
    same(run(dev, lambda a, s: a * s, A, s), A * s)
    row = torch.randn(1, 4)
    same(run(dev, lambda a, r: a - r, A, row), A - row)


@pytest.mark.parametrize("name", ["acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc",
                                  "exp", "expm1", "floor", "log", "log1p", "sqrt", "rsqrt", "sin",
                                  "sinh", "tan", "tanh"])
def test_unary_float(dev, name):
    x = torch.rand(3, 4) * 0.9 + 0.05  # inside every op's domain
    same(run(dev, lambda a: getattr(a, name)(), x), getattr(torch, name)(x))


def test_unary_others(dev):
    x = torch.rand(5) * 1.8 - 0.9
    same(run(dev, lambda a: a.erfinf(), x), torch.erfinv(x))
    same(run(dev, lambda a: -a, A), -A)
    same(run(dev, lambda a: xb.mkop("Abs", (a.op,)), A), A.abs())
    same(run(dev, lambda a: xb.mkop("Square", (a.op,)), I1), I1 * I1)
    c = torch.randn(4, dtype=torch.complex64)
    same(run(dev, lambda a: a.real(), c), c.real)
    same(run(dev, lambda a: a.imag(), c), c.imag)
    same(run(dev, lambda a: a.conj(), c), c.conj().resolve_conj())
    same(run(dev, lambda a: a.imag(), A), torch.zeros_like(A))
    same(run(dev, lambda a: a.real(), A), A)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 2)), ((3, 4), (4,)), ((4,), (4,)), ((4,), (4, 5))])
def test_dot(dev, sa, sb):
    a, b = torch.randn(sa), torch.randn(sb)
    same(run(dev, lambda x, y: x @ y, a, b), torch.matmul(a, b))


def test_dot_precision_config(dev):
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    same(run(dev, lambda x, y: xb.mkop("Dot", (x.op, y.op), precision_config="highest"), a, b),
         a @ b)
    with pytest.raises(RuntimeError, match="Invalid precision config"):
        run(dev, lambda x, y: xb.mkop("Dot", (x.op, y.op), precision_config="fast"), a, b)


def test_movement(dev):
    x = torch.randn(2, 3, 4)
    same(run(dev, lambda a: a.reshape([6, 4]), x), x.reshape(6, 4))
    same(run(dev, lambda a: a.reshape([4, 6], dimensions=[2, 0, 1]), x),
         x.permute(2, 0, 1).reshape(4, 6))
    same(run(dev, lambda a: a.dynamic_reshape([3, 8]), x), x.reshape(3, 8))
    same(run(dev, lambda a: a.transpose([1, 2, 0]), x), x.permute(1, 2, 0))
    same(run(dev, lambda a: a.broadcast([5]), A), A.expand(5, 3, 4))
    v = torch.randn(3)
    same(run(dev, lambda a: a.broadcast_in_dim([3, 2], [0]), v), v[:, None].expand(3, 2))
    same(run(dev, lambda a: a.broadcast_in_dim([2, 3], [1]), v), v.expand(2, 3))
    same(run(dev, lambda a: a.slice([0, 1, 0], [2, 3, 4], [1, 1, 2]), x), x[0:2, 1:3, 0:4:2])
    same(run(dev, lambda a: a.slice([1, 0, 1], [2, 3, 3]), x), x[1:2, 0:3, 1:3])
    same(run(dev, lambda a: a.slice_in_dim(1, 4, dimno=2, stride=2), x), x[:, :, 1:4:2])
    same(run(dev, lambda a: a.rev([0, 2]), x), x.flip(0, 2))
    same(run(dev, lambda a, b: xb.Op.concat_in_dim([a, b, a], 1), A, B), torch.cat([A, B, A], 1))


def test_dynamic_slice_clamps_like_xla(dev):
    x = torch.randn(4, 5)

    def fn(a, i, j):
        return a.dynamic_slice([i, j], [2, 3])

    same(run(dev, fn, x, torch.tensor(1), torch.tensor(2)), x[1:3, 2:5])
    # starts past the end are clamped so the window stays inside
    same(run(dev, fn, x, torch.tensor(9), torch.tensor(-3)), x[2:4, 0:3])


def test_dynamic_update_slice(dev):
    x, u = torch.randn(4, 5), torch.randn(2, 2)

    def fn(a, b, i, j):
        return a.dynamic_update_slice(b, [i, j])

    want = x.clone()
    want[1:3, 3:5] = u
    same(run(dev, fn, x, u, torch.tensor(1), torch.tensor(4)), want)  # 4 clamped to 3


def test_pad(dev):
    x = torch.randn(3, 4)
    v = torch.tensor(-1.0)

    def ref(lo0, hi0, in0, lo1, hi1, in1):
        out = x
        for d, (lo, hi, interior) in enumerate([(lo0, hi0, in0), (lo1, hi1, in1)]):
            n = out.shape[d]
            size = n + (n - 1) * interior
            shape = list(out.shape)
            shape[d] = size
            spread = torch.full(shape, -1.0)
            idx = [slice(None)] * 2
            idx[d] = slice(0, size, interior + 1)
            spread[tuple(idx)] = out
            if lo < 0:
                spread = spread.narrow(d, -lo, spread.shape[d] + lo)
            if hi < 0:
                spread = spread.narrow(d, 0, spread.shape[d] + hi)
            parts = []
            for edge in (lo, None, hi):
                if edge is None:
                    parts.append(spread)
                elif edge > 0:
                    s = list(spread.shape)
                    s[d] = edge
                    parts.append(torch.full(s, -1.0))
            out = torch.cat(parts, d)
        return out

    for cfg in [(1, 2, 0, 0, 1, 0), (0, 0, 1, 2, 0, 2), (-1, 1, 0, 1, -2, 1)]:
        got = run(dev, lambda a, p: a.pad(p, [cfg[0:3], cfg[3:6]]), x, v)
        same(got, ref(*cfg))


def test_select_clamp_cast_bitcast(dev):
    same(run(dev, lambda p, a, b: p.select(a, b), A > 0, A, B), torch.where(A > 0, A, B))
    same(run(dev, lambda p, a, b: p.select(a, b), torch.tensor(False), A, B), B)
    lo, hi = torch.tensor(-0.5), torch.tensor(0.5)
    same(run(dev, lambda a, l, h: a.clamp(l, h), A, lo, hi), A.clamp(-0.5, 0.5))
    same(run(dev, lambda a: a.cast(xb.Type.S32), A * 10), (A * 10).to(torch.int32))
    same(run(dev, lambda a: a.cast(xb.Type.PRED), I1), I1.to(torch.bool))
    same(run(dev, lambda a: a.bitcast(xb.Type.S32), A), A.view(torch.int32))
    same(run(dev, lambda a: a.bitcast(xb.Type.U8), A), A.unsqueeze(-1).view(torch.uint8))


def test_leaves(dev):
    const = torch.arange(6.0).reshape(2, 3)

    def fn(a):
        b = a.builder()
        iota = xb.Op.iota(b, xb.mkshape(xb.Type.S32, (2, 3)), 1)
        return xb.Op.tuple((a + xb.Op.constant(b, const), iota, a.zeros_like(), a.ones_like(),
                            a.scalar_like(3), xb.Op.zero(b, xb.Type.S64),
                            xb.Op.one(b, xb.Type.BF16), a.get_dimension_size(1)))

    x = torch.randn(2, 3)
    got = run(dev, fn, x)
    same(got[0], x + const)
    same(got[1], torch.arange(3, dtype=torch.int32).expand(2, 3))
    same(got[2], torch.zeros(2, 3))
    same(got[3], torch.ones(2, 3))
    same(got[4], torch.full((2, 3), 3.0))
    same(got[5], torch.tensor(0))
    same(got[6], torch.tensor(1, dtype=torch.bfloat16))
    same(got[7], torch.tensor(3, dtype=torch.int32))


def _add(a, b):
    return a + b


@pytest.mark.parametrize("combiner,dims,init,want", [
    (_add, [1], 0.0, lambda x: x.sum(1)),
    (_add, [0, 1], 1.5, lambda x: x.sum() + 1.5),
    (lambda a, b: a * b, [0], 1.0, lambda x: x.prod(0)),
    (lambda a, b: a.max(b), [1], float("-inf"), lambda x: x.amax(1)),
    (lambda a, b: b.min(a), [0], float("inf"), lambda x: x.amin(0)),
    (_add, [], 1.0, lambda x: x + 1),
])
def test_reduce(dev, combiner, dims, init, want):

    def fn(a):
        return a.reduce(xb.Op.scalar(a.builder(), init), combiner, dims)

    same(run(dev, fn, A), want(A))


def test_reduce_int_and_pred_and_all(dev):
    same(run(dev, lambda a: a.reduce(xb.Op.zero(a.builder(), xb.Type.S32), _add, [1]), I1),
         I1.sum(1, dtype=torch.int32))
    same(run(dev, lambda a: a.reduce_all(xb.Op.scalar(a.builder(), True, xb.Type.PRED),
                                         lambda x, y: x & y), P1), P1.all())
    same(run(dev, lambda a: a.reduce_all(xb.Op.scalar(a.builder(), 0.0), _add), A), A.sum())


def test_reduce_unsupported_computation(dev):
    with pytest.raises(NotImplementedError, match="Reduce"):
        run(dev, lambda a: a.reduce(xb.Op.zero(a.builder()), lambda x, y: x + y * y, [0]), A)


@pytest.mark.parametrize("k0", [0.1, 0.9])
def test_conditional_both_ways(dev, k0):

    def fn(k, a, b, k0=None):
        cond = k > xb.Op.scalar(k.builder(), k0, dtype=k.shape().dtype)
        return cond.mkconditional((a, b), lambda a, b: a + b, lambda a, b: a - b)

    same(run(dev, fn, torch.tensor(0.2), A, B, k0=k0), A + B if 0.2 > k0 else A - B)


def test_conditional_tuple_result_and_operands(dev):

    def fn(p, a, b):
        return p.conditional(xb.Op.tuple((a, b)), a, lambda x, y: (x * y, y),
                             lambda x: (x, x))

    got = run(dev, fn, torch.tensor(True), A, B)
    same(got[0], A * B)
    same(got[1], B)
    got = run(dev, fn, torch.tensor(False), A, B)
    same(got[0], A)
    same(got[1], A)


def test_while_tuple_state(dev):

    def fn(a, b, limit=None):

        def cond(counter, a, b):
            return counter < xb.Op.scalar(counter.builder(), limit, dtype=xb.Type.S32)

        def body(counter, a, b):
            one = xb.Op.scalar(counter.builder(), 1, dtype=xb.Type.S32)
            return xb.Op.tuple((counter + one, a + b, b))

        zero = xb.Op.scalar(a.builder(), 0, dtype=xb.Type.S32)
        w = xb.Op.mkwhile((zero, a, b), cond, body)
        return xb.Op.tuple((w.get_tuple_element(0), w.get_tuple_element(1)))

    want = A.clone()
    for _ in range(7):
        want = want + B
    counter, got = run(dev, fn, A, B, limit=7)
    same(counter, torch.tensor(7, dtype=torch.int32))
    same(got, want)
    counter, got = run(dev, fn, A, B, limit=0)  # condition false at once
    same(counter, torch.tensor(0, dtype=torch.int32))
    same(got, A)


def test_mixed_dtype_tuple(dev):
    op = xor.register("mixed", lambda a: xb.Op.tuple((a, a.cast(xb.Type.BF16))))
    x = torch.randn(2, 3)
    out = op(x.to(dev))
    assert isinstance(out, list) and len(out) == 2
    same(out[0].cpu(), x)
    same(out[1].cpu(), x.to(torch.bfloat16))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [True, False])
@pytest.mark.parametrize("trans", [True, False])
def test_triangular_solve(dev, left, lower, unit, trans):
    a = torch.randn(3, 3) + 4 * torch.eye(3)  # both triangles set: only one may be read
    b = torch.randn(3, 2) if left else torch.randn(2, 3)
    tri = a.tril() if lower else a.triu()
    if unit:
        tri = tri - torch.diag(tri.diagonal()) + torch.eye(3)
    op_a = tri.T if trans else tri
    want = torch.linalg.solve(op_a, b) if left else torch.linalg.solve(op_a.T, b.T).T

    def fn(a, b):
        return a.triangualr_solve(b, left, lower, unit, trans)

    same(run(dev, fn, a, b), want, atol=1e-4)


def test_triangular_solve_upstream_form(dev):
    b, a = torch.randn(2, 3), torch.randn(2, 2).triu() + 2 * torch.eye(2)
    got = run(dev, lambda b, A: A.triangualr_solve(b, True, False, False, False), b, a)
    same(got, torch.linalg.solve_triangular(a, b, upper=True), atol=1e-4)


def test_manual_builder_and_computation(dev):
    b = xb.create_builder("manual")
    p0 = xb.mkparam(b, 0, xb.mkshape(xb.Type.F32, (3, 4)))
    p1 = xb.mkparam(b, 1, xb.mkshape(xb.Type.F32, (3, 4)))
    root = xb.Op.tuple((p0 * p1, p0 - p1))
    assert root.shape().is_tuple() and root.shape().tuple_size() == 2
    assert root.shape().tuple_shape(0) == {"type": "f32", "sizes": (3, 4)}
    comp = root.build("manual")
    out = xb.xla_computation_as_func(comp)([A.to(dev), B.to(dev)])
    same(out[0].cpu(), A * B)
    same(out[1].cpu(), A - B)
    hlo = xb.get_computation_hlo(comp)
    assert "HloModule manual" in hlo and "ROOT tuple" in hlo and "parameter(1)" in hlo
    with pytest.raises(RuntimeError, match="parameter 0 is f32\\[3,4\\], got f32\\[2,2\\]"):
        xb.xla_computation_as_func(comp)([torch.ones(2, 2, device=dev), B.to(dev)])
    called = xb.create_computation("caller", lambda x: xb.Op.call(comp, [x, x]),
                                   [xb.mkshape(xb.Type.F32, (3, 4))])
    out = xb.xla_computation_as_func(called)([A.to(dev)])
    same(out[0].cpu(), A * A)


def test_registry_caches_per_shape_and_kwargs(dev):
    op = xor.register("scale", lambda a, k=1: a * xb.Op.scalar(a.builder(), k))
    same(op(A.to(dev), k=2).cpu(), A * 2)
    same(op(A.to(dev), k=2).cpu(), A * 2)
    assert len(op._computations) == 1
    same(op(A.to(dev), k=3).cpu(), A * 3)
    same(op(torch.ones(2).to(dev), k=3).cpu(), torch.full((2,), 3.0))
    assert len(op._computations) == 3


def test_results_are_new_tensors(dev):
    x = A.to(dev)
    out = xor.register("ident", lambda a: xb.Op.tuple((a, a.reshape([12]), a)))(x)
    assert out[0] is not x and out[2] is not out[0]
    x.add_(1)
    same(out[0].cpu(), A)
    same(out[1].cpu(), A.reshape(12))
    assert not out[0].requires_grad


def test_results_are_lazy(dev, clean_metrics):
    out = xor.register("lazy", lambda a, b: (a + b) * a)(A.to(dev), B.to(dev))
    assert (met.metric_data("ExecuteTime") or (0,))[0] == 0  # nothing ran yet
    same(out.cpu(), (A + B) * A)


@pytest.mark.parametrize("fn,match", [
    (lambda a, b: a + b.cast(xb.Type.S32), "same element type"),
    (lambda a, b: a + b.reshape([4, 3]), "incompatible shapes"),
    (lambda a, b: a + b.reshape([12]), "incompatible shapes"),
    (lambda a, b: a & b, "pred or integer"),
    (lambda a, b: a.exp().cast(xb.Type.S32).sqrt(), "floating point"),
    (lambda a, b: a @ b, "cannot multiply"),
    (lambda a, b: a.reshape([5, 3]), "cannot reshape"),
    (lambda a, b: a.slice([0, 0], [4, 4]), "invalid slice"),
    (lambda a, b: a.transpose([0, 0]), "permutation"),
    (lambda a, b: a.get_tuple_element(0), "not a tuple"),
    (lambda a, b: xb.Op.tuple((a, b)).get_tuple_element(2), "out of range"),
    (lambda a, b: a.cast("f8"), "unknown XLA element type"),
    (lambda a, b: (a > b).mkconditional((a, b), lambda x, y: x, lambda x, y: y),
     "pred scalar"),
    (lambda a, b: xb.Op.scalar(a.builder(), True, xb.Type.PRED).mkconditional(
        (a,), lambda x: x, lambda x: x.reshape([12])), "different shapes"),
    (lambda a, b: xb.Op.mkwhile((a,), lambda x: x, lambda x: x), "pred scalar"),
    (lambda a, b: xb.mkop("Fancy", (a.op,)), "Unknown XLA op name: Fancy"),
])
def test_build_errors_are_runtime_errors(dev, fn, match):
    with pytest.raises(RuntimeError, match=match):
        run(dev, fn, A, B)


def test_ops_from_another_builder_refused(dev):
    other = xb.mkparam(xb.create_builder("other"), 0, xb.mkshape(xb.Type.F32, (3, 4)))
    with pytest.raises(RuntimeError, match="belongs to builder 'other'"):
        run(dev, lambda a: a + other, A)


@pytest.mark.parametrize("fn,name", [
    (lambda a: a.clz(), "Clz"),
    (lambda a: a.conv(a, [1, 1]), "Conv"),
    (lambda a: a.gather(a, [0], [1], [1], 1), "Gather"),
    (lambda a: a.reduce_window(a, None, [2, 2], [1, 1]), "ReduceWindow"),
    (lambda a: a.max_pool([2, 2], [1, 1], 0, 1, []), "MaxPool"),
])
def test_unsupported_ops_name_themselves(dev, fn, name):
    with pytest.raises(NotImplementedError, match=f"op {name} is not supported"):
        run(dev, fn, A)


def test_input_must_be_xla_tensor():
    op = xor.register("cpu_in", lambda a: a + a)
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        op(torch.ones(2))


def test_types_and_shapes():
    for name in xb._XLA_PT_TYPE_MAP:
        assert xb.Op.from_torch_type(xb.Op.to_torch_type(name)) == name
    assert xb.Op.to_torch_type(None) == torch.float32
    s = xb.mkshape(xb.Type.F32, (2, 3))
    assert (s.rank, s.sizes, s.dtype, s.is_tuple(), s.is_dynamic()) == (2, (2, 3), "f32", False,
                                                                         False)
    assert s.as_scalar().shape == {"type": "f32", "sizes": ()}
    with pytest.raises(AssertionError):
        s.tuple_size()
    shapes = xb.tensor_shape([torch.ones(2, dtype=torch.int64), torch.ones(())])
    assert [x.shape for x in shapes] == [{"type": "s64", "sizes": (2,)},
                                         {"type": "f32", "sizes": ()}]


def test_xla_callable_structured_io(dev):

    def f(pair, scale=None):
        a, b = pair
        return {"sum": a + b, "prod": a * b * xb.Op.scalar(a.builder(), scale)}

    call = xb.XlaCallable(f)
    out = call((A.to(dev), B.to(dev)), scale=2.0)
    assert sorted(out) == ["prod", "sum"]
    same(out["sum"].cpu(), A + B)
    same(out["prod"].cpu(), A * B * 2)
    call((A.to(dev), B.to(dev)), scale=2.0)
    assert len(call._cache) == 1
    out = call((torch.ones(2).to(dev), torch.ones(2).to(dev)), scale=3.0)
    same(out["prod"].cpu(), torch.full((2,), 3.0))
    assert len(call._cache) == 2


def test_sort(dev):
    x = torch.tensor([[3.0, 1.0, 2.0, 1.0], [0.5, -1.0, 4.0, 2.0], [9.0, 8.0, -7.0, 6.0]])
    y = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    same(run(dev, lambda a: xb.Op.sort([a], lambda l, r: l < r), x), x.sort(dim=1).values)
    # descending along dimension 0, the second operand following the keys
    got = run(dev, lambda a, b: xb.Op.sort([a, b], lambda la, ra, lb, rb: ra < la, dimension=0),
              x, y)
    keys, idx = x.sort(dim=0, descending=True, stable=True)
    same(got[0], keys)
    same(got[1], torch.take_along_dim(y, idx, 0))
    # a built comparator, as PyTorch/XLA takes it; equal keys keep their order
    s, si = xb.mkshape(xb.Type.F32, ()), xb.mkshape(xb.Type.S32, ())
    comparator = xb.create_computation("cmp", lambda l, r, lb, rb: l > r, [s, s, si, si])
    got = run(dev, lambda a, b: xb.Op.sort([a, b], comparator, is_stable=True), x, y)
    keys, idx = x.sort(dim=1, descending=True, stable=True)
    same(got[0], keys)
    same(got[1], torch.take_along_dim(y, idx, 1))


def test_sort_errors(dev):
    with pytest.raises(NotImplementedError, match="Sort: only comparators"):
        run(dev, lambda a: xb.Op.sort([a], lambda l, r: l * l < r * r), A)
    with pytest.raises(RuntimeError, match="pred scalar"):
        run(dev, lambda a: xb.Op.sort([a], lambda l, r: l + r), A)
    two_params = xb.create_computation("cmp2", lambda l, r: l < r, [xb.mkshape("f32", ())] * 2)
    with pytest.raises(RuntimeError, match="takes 2 parameters, got 4"):
        run(dev, lambda a, b: xb.Op.sort([a, b], two_params), A, B)


def test_print_computations_env(dev, monkeypatch, capsys):
    monkeypatch.setenv("XLA_OP_PRINT_COMPUTATIONS", "1")
    op = xor.register("printed", lambda a, b: (a + b).exp())
    same(op(A.to(dev), B.to(dev)).cpu(), (A + B).exp())
    err = capsys.readouterr().err
    assert "HloModule printed" in err and "add." in err and "ROOT exp." in err
    op(A.to(dev), B.to(dev))  # cached: built and printed once
    assert capsys.readouterr().err == ""
