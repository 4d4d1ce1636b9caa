"""Issue 5, part 2: torch_xla.compile (decorator, wrapper, context manager)
and torch_xla.step with PyTorch/XLA's semantics: pending work synced first,
the region cut as one graph, the name in metrics and debug output,
full_graph=True refusing anything that forces execution (naming the line),
max_different_graphs naming what differed."""
import inspect

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torchtpu import bridge


def pending(t):
    return bridge.handle_of(t).pending


def sin_plus_cos(x):
    return torch.sin(x) + torch.cos(x)


def test_wrapper_syncs_before_and_after(clean_metrics, dev):
    before = torch.ones(3, device=dev) * 2
    assert pending(before)
    cf = torch_xla.compile(sin_plus_cos)
    x = torch.randn(5)
    out = cf(x.to(dev))
    assert not pending(before)      # pending work was synced first
    assert not pending(out)         # the region's graph was cut at the end
    torch.testing.assert_close(out.cpu(), sin_plus_cos(x))
    assert met.counter_value("MarkStep") == 2
    assert cf.__wrapped__ is sin_plus_cos and cf.__name__ == "sin_plus_cos"


def test_decorator_forms(dev):
    @torch_xla.compile
    def a(x):
        return x * 3

    @torch_xla.compile(name="named_b")
    def b(x):
        return x - 1

    @torch_xla.compile()
    def c(x):
        return x + 1

    x = torch.arange(4.0)
    for fn, want in ((a, x * 3), (b, x - 1), (c, x + 1)):
        out = fn(x.to(dev))
        assert not pending(out)
        torch.testing.assert_close(out.cpu(), want)


def test_context_manager(clean_metrics, dev):
    x = torch.randn(4)
    xd = x.to(dev)
    with torch_xla.compile(name="ctx_region"):
        y = xd * 2
        z = y.exp()
        assert pending(z)   # traced lazily inside the region
    assert not pending(z) and not pending(y)
    torch.testing.assert_close(z.cpu(), (x * 2).exp())
    assert met.counter_value("CompiledRegion_ctx_region") == 1


def test_one_graph_per_region(clean_metrics, dev):
    cf = torch_xla.compile(lambda x: ((x + 1) * 2).relu().sum())
    for _ in range(3):
        cf(torch.randn(8).to(dev))
    # one compile for the region's graph, the cache after that
    assert met.counter_value("UncachedCompile") == 1
    assert met.counter_value("CachedCompile") == 2


def test_name_in_metrics_and_debug_output(clean_metrics, dev, monkeypatch, capfd):
    monkeypatch.setenv("PT_XLA_DEBUG", "1")
    cf = torch_xla.compile(sin_plus_cos)
    cf(torch.randn(3).to(dev))
    cf(torch.randn(3).to(dev))
    assert met.counter_value("CompiledRegion_sin_plus_cos") == 2
    assert met.metric_data("CompiledRegionTime_sin_plus_cos")[0] == 2
    report = met.metrics_report()
    assert "Counter: CompiledRegion_sin_plus_cos\n  Value: 2" in report
    err = capfd.readouterr().err
    assert "torch_xla.compile region 'sin_plus_cos': graph compiled" in err
    assert "torch_xla.compile region 'sin_plus_cos': graph found in the cache" in err


def _line_of(fn, text):
    src, start = inspect.getsourcelines(fn)
    for i, line in enumerate(src):
        if text in line:
            return start + i
    raise AssertionError(text)


def reads_item(x):
    y = x * 2
    return y.sum().item()


def prints_value(x):
    y = x + 1
    print(y)
    return y


@pytest.mark.parametrize("fn,text", [(reads_item, "y.sum().item()"), (prints_value, "print(y)")])
def test_full_graph_refuses_execution_and_names_the_line(dev, fn, text):
    cf = torch_xla.compile(fn, full_graph=True)
    with pytest.raises(RuntimeError) as e:
        cf(torch.randn(3).to(dev))
    msg = str(e.value)
    assert "full_graph=True" in msg and f"name='{fn.__name__}'" in msg
    assert text in msg.split("`")[1]
    assert f"test_compile_api.py:{_line_of(fn, text)}" in msg
    # State is restored: the same function runs without full_graph.
    out = torch_xla.compile(fn)(torch.ones(3).to(dev))
    assert out == 6.0 if fn is reads_item else torch.equal(out.cpu(), torch.full((3,), 2.0))


def test_full_graph_context_manager(dev):
    x = torch.ones(7).to(dev)
    torch_xla.sync()
    with pytest.raises(RuntimeError, match="full_graph=True"):
        with torch_xla.compile(full_graph=True):
            (x + 1).cpu()
    # reading data that needs no execution is allowed
    with torch_xla.compile(full_graph=True):
        assert x.cpu().tolist() == [1.0] * 7
        y = x * 3
    assert y.cpu().tolist() == [3.0] * 7


def test_full_graph_allows_a_clean_region(dev):
    cf = torch_xla.compile(sin_plus_cos, full_graph=True)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x.to(dev)).cpu(), sin_plus_cos(x))


# --- max_different_graphs (PyTorch/XLA's dynamic shape detector) ---------
def _graphs_looked_up():
    """Graphs the compile cache was asked for since the metrics were
    cleared: one per region call whose region cut a graph, whether compiled
    or found in the cache (the cache outlives a test, so only the total and
    the lower bound on hits are exact)."""
    return (met.counter_value("UncachedCompile") or 0) + (met.counter_value("CachedCompile") or 0)


def test_max_graphs_same_graph_many_times(clean_metrics, dev):
    """The same graph traced three times is one graph: each call is right
    and cuts one graph, the second and third find it in the cache, and the
    limit of 1 is then full (a second graph is refused)."""
    def double(x):
        return x + x

    cf = torch_xla.compile(double, max_different_graphs=1)
    for _ in range(3):
        x = torch.rand(3, 11)
        torch.testing.assert_close(cf(x.to(dev)).cpu(), x + x)
    assert met.counter_value("CompiledRegion_double") == 3
    assert _graphs_looked_up() == 3
    assert met.counter_value("CachedCompile") >= 2
    with pytest.raises(RuntimeError, match=r"exceeded: 1\nGot: \[\] aten::add, "
                       r"xla_shape=f32\[3,12\]\{1,0\}, dynamic_dims: \(\)"):
        cf(torch.rand(3, 12).to(dev))


def test_max_graphs_many_graphs_within_limit(clean_metrics, dev):
    """Six calls tracing three op sequences (steps 1, 2 and 4 are the same
    sequence: the multiplier is a scalar, not an op) stay within a limit of
    4; the engine compiles at most those three graphs. The session then
    holds exactly three: a fourth sequence is accepted, a fifth refused."""
    def foo(x, step):
        r0 = x + x + x
        r = r0 + x
        if step in (0, 3):
            return r + x
        if step in (1, 4):
            return r * 2
        if step == 2:
            return r * 4
        return r0

    cf = torch_xla.compile(foo, max_different_graphs=4)
    inp = torch.rand(10)
    for i in range(6):
        torch.testing.assert_close(cf(inp.to(dev), i).cpu(), foo(inp, i))
    assert met.counter_value("CompiledRegion_foo") == 6
    assert _graphs_looked_up() == 6
    assert met.counter_value("CachedCompile") >= 3
    other = torch.rand(9)
    torch.testing.assert_close(cf(other.to(dev), 5).cpu(), foo(other, 5))  # the fourth
    with pytest.raises(RuntimeError, match=r"exceeded: 4\n"):
        cf(torch.rand(8).to(dev), 5)


def test_max_graphs_exceeded_by_a_new_shape(dev):
    def foo(x):
        return x + x

    cf = torch_xla.compile(foo, max_different_graphs=1)
    cf(torch.rand(10).to(dev))
    with pytest.raises(RuntimeError) as e:
        cf(torch.rand(5).to(dev))
    assert str(e.value) == (
        "Maximum number of different graphs allowed per function exceeded: 1\n"
        "Got: [] aten::add, xla_shape=f32[5]{0}, dynamic_dims: ()\n"
        "Expected: [] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()\n")


def test_max_graphs_exceeded_by_a_different_op(dev):
    def foo(x, step):
        return x + x if step == 0 else x * 5

    cf = torch_xla.compile(foo, max_different_graphs=1)
    cf(torch.rand(10).to(dev), 0)
    with pytest.raises(RuntimeError, match=r"(?s)exceeded: 1\nGot: \[\] aten::mul, "
                       r"xla_shape=f32\[10\]\{0\}, dynamic_dims: \(\)\nExpected: \[\] aten::add"):
        cf(torch.rand(10).to(dev), 2)


def test_max_graphs_exceeded_lists_every_expected_op(dev):
    def foo(x, step):
        r = x + x
        if step == 0:
            return r * 2
        if step == 1:
            return r + x
        return r / 3

    cf = torch_xla.compile(foo, max_different_graphs=2)
    cf(torch.rand(10).to(dev), 0)
    cf(torch.rand(10).to(dev), 1)
    with pytest.raises(RuntimeError) as e:
        cf(torch.rand(10).to(dev), 2)
    assert str(e.value) == (
        "Maximum number of different graphs allowed per function exceeded: 2\n"
        "Got: [] aten::div, xla_shape=f32[10]{0}, dynamic_dims: ()\n"
        "Expected either of:\n"
        "  - [] aten::mul, xla_shape=f32[10]{0}, dynamic_dims: ()\n"
        "  - [] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()\n")


def test_max_graphs_exceeded_by_an_early_end(dev):
    def foo(x, mul=False):
        r = x + x
        return r * 10 if mul else r

    cf = torch_xla.compile(foo, max_different_graphs=1)
    cf(torch.rand(10).to(dev), True)
    with pytest.raises(RuntimeError) as e:
        cf(torch.rand(10).to(dev), False)
    assert str(e.value) == (
        "Maximum number of different graphs allowed per function exceeded: 1\n"
        "Reached the end of the function at: [] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()\n"
        "Expected: [] aten::mul, xla_shape=f32[10]{0}, dynamic_dims: ()\n")


def test_max_graphs_is_per_function(clean_metrics, dev):
    """Two functions with the same body and a limit of 1 each keep their
    own count: each accepts a graph of its own shape (and runs it again),
    and each is then full: the other's shape is refused."""
    f1 = torch_xla.compile(lambda x: x + 1, max_different_graphs=1)
    f2 = torch_xla.compile(lambda x: x + 1, max_different_graphs=1)
    a, b = torch.rand(2, 13), torch.rand(2, 14)
    for f, x in ((f1, a), (f2, b), (f1, a), (f2, b)):
        torch.testing.assert_close(f(x.to(dev)).cpu(), x + 1)
    assert met.counter_value("CompiledRegion_<lambda>") == 4
    assert _graphs_looked_up() == 4
    assert met.counter_value("CachedCompile") >= 2
    with pytest.raises(RuntimeError, match=r"exceeded: 1\nGot: \[\] aten::add, "
                       r"xla_shape=f32\[2,14\]\{1,0\}, dynamic_dims: \(\)"):
        f1(b.to(dev))
    with pytest.raises(RuntimeError, match=r"exceeded: 1\nGot: \[\] aten::add, "
                       r"xla_shape=f32\[2,13\]\{1,0\}, dynamic_dims: \(\)"):
        f2(a.to(dev))


def test_bad_max_graphs():
    with pytest.raises(ValueError, match="max_different_graphs must be a positive int"):
        torch_xla.compile(sin_plus_cos, max_different_graphs=0)


# --- torch_xla.step ------------------------------------------------------
def test_step_syncs_before_and_after(clean_metrics, dev):
    before = torch.ones(2, device=dev) + 1
    with torch_xla.step():
        assert not pending(before)
        y = before * 3
        assert pending(y)
    assert not pending(y)
    assert y.cpu().tolist() == [6.0, 6.0]
    assert met.counter_value("MarkStep") == 2


def test_step_traces_lazily_in_eager_mode(dev):
    import torch_xla.experimental as exp
    with exp.eager_mode_context(True):
        x = torch.ones(2, device=dev)
        with torch_xla.step():
            y = x * 3
            assert pending(y)
        assert not pending(y)
        z = y + 1
        assert not pending(z)  # eager again after the step


def test_region_state_restored_after_an_exception(dev):
    def boom(x):
        x = x + 1
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        torch_xla.compile(boom, full_graph=True)(torch.ones(1).to(dev))
    # No region is left active: reads execute as usual.
    assert (torch.ones(1).to(dev) + 1).item() == 2.0
