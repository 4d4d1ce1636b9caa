"""The Python front end against the engine's op table: every typed builder
matches its op's schema, the values Python keeps by name equal the
engine's, and a builder that drifts from the table is reported."""
import inspect
import io
import pathlib
import re
import tokenize

import pytest
import torch

from torchtpu import _C, bridge, ir
from torchtpu.lowering import complex_ops, core, extra_ops, linalg_ops

TABLE = _C.op_table()


def test_every_recorded_op_has_a_matching_builder():
    assert len(TABLE) == len(ir.OPS) > 50
    assert ir.check_against_engine() == []
    for name, lo, hi, _flags, fields in TABLE:
        if name in ("param", "scalar", "fused"):
            continue
        assert callable(getattr(ir, name)), name
        assert lo >= 0 and (hi == -1 or hi >= lo), name
        for fname, kind, count, _fflags in fields:
            assert kind in ("int", "ints", "list", "float"), (name, fname)
            assert count >= 1, (name, fname)


def test_check_reports_a_renamed_a_missing_and_an_undefaulted_field():
    ns = dict(vars(ir))

    def concat(*xs, axis):  # the engine calls the field `dim`
        raise AssertionError("not called")

    def softmax(x, *, dim, log, packed):  # optional field without a default
        raise AssertionError("not called")

    ns["concat"] = concat
    ns["softmax"] = softmax
    del ns["gather"]
    problems = ir.check_against_engine(ns)
    assert len(problems) == 3, problems
    assert any(p.startswith("concat: builder fields ['axis']") for p in problems)
    assert "gather: no builder in torchtpu.ir" in problems
    assert "softmax: optional field packed needs a default" in problems


def test_op_codes_are_the_engines():
    for code, (name, *_rest) in enumerate(TABLE):
        assert getattr(core, name.upper()) == code == ir.OPS[name]


def test_kernel_enumerations_are_the_engines():
    e = _C.enums()
    assert core.UN == e["unary"] and core.UNARY_OPS == sorted(e["unary"], key=e["unary"].get)
    assert core.BIN == e["binary"] and core.BINARY_OPS == sorted(e["binary"],
                                                                 key=e["binary"].get)
    assert [core.RED_SUM, core.RED_MEAN, core.RED_PROD, core.RED_MAX, core.RED_MIN,
            core.RED_ARGMAX, core.RED_ARGMIN, core.RED_ANY, core.RED_ALL] == [
        e["reduce"][n] for n in ("sum", "mean", "prod", "max", "min", "argmax", "argmin",
                                 "any", "all")]
    assert [core.SR_SUM, core.SR_PROD, core.SR_MEAN, core.SR_AMAX, core.SR_AMIN] == [
        e["scatter_reduce"][n] for n in ("sum", "prod", "mean", "amax", "amin")]
    assert [core.CUM_MAX, core.CUM_MAX_INDEX, core.CUM_MIN, core.CUM_MIN_INDEX,
            core.CUM_LOGSUMEXP] == [e["cumulative"][n] for n in ("max", "max_index", "min",
                                                                 "min_index", "logsumexp")]
    assert [core.RNG_UNIFORM, core.RNG_NORMAL, core.RNG_BERNOULLI] == [
        e["rng"][n] for n in ("uniform", "normal", "bernoulli")]
    assert [linalg_ops.CHOLESKY, linalg_ops.LU, linalg_ops.TRSM, linalg_ops.GEQRF,
            linalg_ops.ORGQR, linalg_ops.ORMQR, linalg_ops.EIGH, linalg_ops.SVD] == [
        e["linalg"][n] for n in ("cholesky", "lu", "trsm", "geqrf", "orgqr", "ormqr", "eigh",
                                 "svd")]
    assert [complex_ops.FFT_C2C_FORWARD, complex_ops.FFT_C2C_INVERSE, complex_ops.FFT_R2C,
            complex_ops.FFT_C2R] == [e["fft"][n] for n in ("c2c_forward", "c2c_inverse",
                                                          "r2c", "c2r")]
    assert {n: i for i, n in enumerate(extra_ops._SP)} == e["special"]


def test_dtype_codes_are_the_engines():
    e = _C.enums()["dtype"]
    assert len(bridge.TORCH_TO_TT) == len(e) == 11
    for torch_dtype, code in bridge.TORCH_TO_TT.items():
        assert e[str(torch_dtype).removeprefix("torch.")] == code
    assert bridge.TT_TO_TORCH[e["bfloat16"]] is torch.bfloat16


def test_collective_header_is_the_fixed_ints_before_the_groups():
    fields = TABLE[ir.OPS["all_reduce"]][4]
    assert [f[0] for f in fields][-1] == "groups"
    assert core.COLLECTIVE_HEADER == ir.COLLECTIVE_HEADER == 5


def test_builders_record_the_schema_order():
    import torch_xla  # noqa: F401 - starts the runtime

    x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    h = bridge.handle_of(x.to("xla"))
    s = ir.slice(h, start=[0, 1, 0], limit=[2, 3, 4], step=[1, 1, 2])
    assert list(s.shape) == [2, 2, 2]
    out = core.wrap(s).cpu()
    torch.testing.assert_close(out, x[:, 1:3, 0:4:2], rtol=0, atol=0)
    with pytest.raises(TypeError):
        ir.slice(h, start=[0, 1, 0], limit=[2, 3, 4])  # step missing
    sig = inspect.signature(ir.layer_norm)
    assert [p.name for p in sig.parameters.values()
            if p.kind == p.KEYWORD_ONLY] == ["axis", "has_weight", "has_bias", "form", "eps"]


# ------------------------------------------- no positional recording left
PYTHON_SRC = pathlib.Path(__file__).resolve().parents[2] / "python"
# A call recording an op from a code and raw attribute tuples: the lowering's
# op(CODE, ...) (but not an aten op called as op(*args)), _C.op / core.op
# anywhere but the builders' own module, or any f(CODE, [operands], ...).
POSITIONAL = re.compile(r"(?<!def )(?<![\w.])op\(\s*(?!\*)|\b(?:_C|core)\.op\(|"
                        r"\(\s*(?:core\.)?[A-Z][A-Z0-9_]*\s*,\s*\[")


def _code_only(src):
    """src's lines with strings and comments blanked (a docstring may say
    `op(a) X = b`)."""
    lines = [list(line) for line in src.splitlines()]
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in (tokenize.STRING, tokenize.COMMENT):
            continue
        (r0, c0), (r1, c1) = tok.start, tok.end
        for r in range(r0, r1 + 1):
            line = lines[r - 1]
            lo = c0 if r == r0 else 0
            hi = c1 if r == r1 else len(line)
            line[lo:hi] = " " * (hi - lo)
    return ["".join(line) for line in lines]


def positional_calls(src, name="<src>"):
    """'name:line: text' for every positional recording call in src."""
    code = _code_only(src)
    raw = src.splitlines()
    return [f"{name}:{i}: {raw[i - 1].strip()}" for i, line in enumerate(code, 1)
            if POSITIONAL.search(line)]


def test_the_positional_scan_finds_each_form_and_skips_prose():
    src = ('"""op(a) X = b: prose, not a call."""\n'
           "def op(code, operands):  # op(CODE, ...) in a comment\n"
           "    return _C.op(code, operands)\n"
           "x = op(SLICE, [h], (0, 1))\n"
           "y = op(_c3('TRANSPOSE'), [h], (1, 0))\n"
           "z = _record(core.ALL_REDUCE, [h], (0,))\n"
           "w = ir.slice(h, start=[0], limit=[1], step=[1])\n"
           "v = op(*args, **kwargs)\n")
    assert positional_calls(src, "m.py") == [
        "m.py:3: return _C.op(code, operands)",
        "m.py:4: x = op(SLICE, [h], (0, 1))",
        "m.py:5: y = op(_c3('TRANSPOSE'), [h], (1, 0))",
        "m.py:6: z = _record(core.ALL_REDUCE, [h], (0,))"]


def test_no_positional_op_calls_remain_in_python():
    """Issue 27: Python records IR only through torchtpu.ir's builders."""
    found = []
    for path in sorted(PYTHON_SRC.rglob("*.py")):
        if path == PYTHON_SRC / "torchtpu" / "ir.py":  # the builders record with _C.op
            continue
        found += positional_calls(path.read_text(), str(path.relative_to(PYTHON_SRC)))
    assert found == [], "positional op recording left:\n" + "\n".join(found)


def test_manual_sharding_spec_is_encoded_by_the_builder():
    spec = ir.ManualSharding(tile_dims=(2, 1, 4), last_tile_dim_replicate=True,
                             devices=tuple(range(8)))
    assert spec.encode() == (3, 1, 2, 1, 4, 8, 0, 1, 2, 3, 4, 5, 6, 7)
    assert spec._replace(full_dims=(4, 6)).encode()[-2:] == (4, 6)
    import torch_xla  # noqa: F401 - starts the runtime
    h = bridge.handle_of(torch.zeros(4, 6).to("xla"))
    with pytest.raises(TypeError, match="spec must be a torchtpu.ir.ManualSharding"):
        ir.spmd_full_to_shard(h, spec=spec.encode())
    with pytest.raises(ValueError, match="spmd_full_to_shard takes no full_dims"):
        ir.spmd_full_to_shard(h, spec=spec._replace(full_dims=(4, 6)))


def _handles(*tensors):
    import torch_xla  # noqa: F401 - starts the runtime

    return [bridge.handle_of(t.to("xla")) for t in tensors]


def _dump(*handles):
    return _C.graph_dump(list(handles))


def test_generated_builders_record_what_the_handwritten_ones_do():
    x, w, b = _handles(torch.arange(24, dtype=torch.float32).reshape(2, 3, 4),
                       torch.ones(4), torch.zeros(4))
    q, k, v = _handles(*(torch.randn(1, 2, 3, 4) for _ in range(3)))
    cases = [
        ("slice", (x,), dict(start=[0, 1, 0], limit=[2, 3, 4], step=[1, 1, 2])),
        ("layer_norm", (x, w, b), dict(axis=2, has_weight=1, has_bias=1, form=0, eps=1e-5)),
        ("softmax", (x,), dict(dim=2, log=0)),  # optional `packed` left out
        ("softmax", (x,), dict(dim=2, log=1, packed=0)),
        ("all_reduce", (x,), dict(reduce=0, channel_id=0, group_size=1, groups=[0])),  # reserved
        ("attention", (q, k, v), dict(causal=1, scale=0.5)),  # pass-only fields not taken
        ("attention", (q, k, v), dict(causal=0, lse=1, scale=0.5)),
        ("iota", (), dict(dtype=_C.enums()["dtype"]["float32"], n=5, start=1.0, step=2.0)),
        ("unary", (x,), dict(op=_C.enums()["unary"]["leaky_relu"], alpha=0.1, beta=0.0)),
    ]
    for name, operands, attrs in cases:
        made = ir.make_builder(name)(*operands, **attrs)
        hand = getattr(ir, name)(*operands, **attrs)
        assert list(made.shape) == list(hand.shape), name
        assert _dump(made) == _dump(hand), (name, attrs)
    # The dump shows attributes: a different value makes a different graph.
    other = ir.make_builder("slice")(x, start=[0, 0, 0], limit=[2, 3, 4], step=[1, 1, 2])
    assert _dump(other) != _dump(ir.slice(x, start=[0, 1, 0], limit=[2, 3, 4], step=[1, 1, 2]))


def test_generated_builder_refuses_bad_attributes_by_name():
    (x,) = _handles(torch.zeros(2, 3, 4))
    make = ir.make_builder("slice")
    with pytest.raises(TypeError, match="slice\\(\\): missing a required argument: 'step'"):
        make(x, start=[0, 0, 0], limit=[2, 3, 4])
    with pytest.raises(TypeError, match="unexpected keyword argument 'stride'"):
        make(x, start=[0, 0, 0], limit=[2, 3, 4], step=[1, 1, 1], stride=[1, 1, 1])
    with pytest.raises(ValueError, match="conv2d\\(\\): stride takes 2 values, got 3"):
        ir.make_builder("conv2d")(x, x, stride=[1, 1, 1], padding=[0, 0], dilation=[1, 1],
                                  groups=1)
    with pytest.raises(TypeError, match="attention\\(\\): missing a required argument: 'scale'"):
        ir.make_builder("attention")(x, x, x, causal=0)


def test_every_recorded_op_gets_a_generated_builder_the_check_accepts():
    ns = {}
    ir._install_generated_builders(ns)
    recorded = [e[0] for e in TABLE if e[0] not in ("param", "scalar", "fused")]
    assert sorted(ns) == sorted(recorded)
    # Without any handwritten builder the import check still passes: a new
    # op in the engine's table needs no edit in torchtpu/ir.py.
    assert ir.check_against_engine(ns) == []
    sig = inspect.signature(ns["softmax"])
    assert [(p.name, p.default) for p in sig.parameters.values()
            if p.kind == p.KEYWORD_ONLY] == [("dim", inspect.Parameter.empty),
                                             ("log", inspect.Parameter.empty),
                                             ("packed", None)]
