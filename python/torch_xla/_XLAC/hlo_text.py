"""HLO text (XLA's HloModule syntax) from the engine's StableHLO.

PyTorch/XLA's _get_xla_tensors_hlo prints the graph as XLA HLO text. This
engine emits StableHLO (src/backends/stablehlo, xm.get_stablehlo) in MLIR's
generic form, one op a line; to_hlo_text() rewrites that into HLO syntax
instruction by instruction: `%multiply.4 = f32[3]{0} multiply(f32[3]{0}
%p0.1, f32[3]{0} %broadcast.3)`, regions (reduce, sort, all-reduce, ...)
as separate computations named by to_apply, multi-result ops as tuples
read through get-tuple-element (opt-barrier over a tuple of its operands,
as XLA has it), layouts as XLA's builder infers them (a transpose's result
permuted, elementwise results their first operand's, else the default),
and an ENTRY whose ROOT is the tuple of
the requested tensors. Op names follow HLO's (dot_general -> dot,
broadcast_in_dim -> broadcast, log_plus_one -> log-plus-one, ...);
attributes become HLO's where the two differ in spelling (dimensions=,
direction=, slice=, padding=, *_dims=), else they are carried over as
key=value. It is text for reading and matching, not for XLA's parser:
instruction ids are this printer's, and constants larger than 16
elements are elided as {...}.
"""
import re
import struct

_DTYPES = {"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16", "i1": "pred", "i8": "s8",
           "i16": "s16", "i32": "s32", "i64": "s64", "ui8": "u8", "ui16": "u16", "ui32": "u32",
           "ui64": "u64", "complex<f32>": "c64", "complex<f64>": "c128"}
_RENAME = {"broadcast_in_dim": "broadcast", "dot_general": "dot",
           "optimization_barrier": "opt-barrier", "convolution": "convolution"}
_OP = re.compile(r'^(?:(%[\w]+)(?::(\d+))? = )?"([\w.]+)"\((.*?)\)(.*)$')
_TENSOR = re.compile(r"tensor<([^<>]*(?:<[^<>]*>)?[^<>]*)>")


class _Shape:
    __slots__ = ("dims", "dtype", "layout")

    def __init__(self, dims, dtype, layout=None):
        # layout: minor-to-major dims, None for the default (major first)
        self.dims, self.dtype, self.layout = dims, dtype, layout

    def minor_to_major(self):
        return self.layout or list(reversed(range(len(self.dims))))

    def with_layout(self, layout):
        default = list(reversed(range(len(self.dims))))
        return _Shape(self.dims, self.dtype, None if list(layout) == default else list(layout))

    def __str__(self):
        if not self.dims:
            return f"{self.dtype}[]"
        layout = ",".join(str(i) for i in self.minor_to_major())
        return f"{self.dtype}[{','.join(map(str, self.dims))}]{{{layout}}}"

    def bare(self):
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


def _shape(mlir_type):
    """'tensor<2x4xf32>' (or its body) -> _Shape([2, 4], 'f32')."""
    body = mlir_type.strip()
    m = _TENSOR.fullmatch(body)
    if m:
        body = m.group(1)
    dims = []
    while "x" in body and body.split("x", 1)[0].isdigit():
        head, body = body.split("x", 1)
        dims.append(int(head))
    return _Shape(dims, _DTYPES.get(body, body))


def _types(text):
    """Shapes of a type list '(tensor<..>, ..)' or one type."""
    return [_shape(t) for t in _TENSOR.findall(text)] or []


def _ints(text):
    text = re.sub(r"array<\w+:?", "", text)
    return [int(v) for v in re.findall(r"-?\d+", text)]


def _braces(values):
    return "{" + ",".join(str(v) for v in values) + "}"


def _split_attrs(text):
    """'{a = x, b = y<...>}' -> [('a', 'x'), ...], respecting brackets."""
    text = text.strip()
    if not text.startswith("{"):
        return []
    depth, out, cur = 0, [], ""
    for ch in text[1:]:
        if ch in "<[({":
            depth += 1
        elif ch in ">])}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    pairs = []
    for item in out:
        if "=" in item:
            k, _, v = item.partition("=")
            pairs.append((k.strip(), v.strip()))
    return pairs


_ALL_REPLICATED = re.compile(r"\{devices=\[(?:1,)*\d+\][\d,]+ last_tile_dim_replicate\}")


def _sharding_text(v):
    """An mhlo.sharding string as HLO's sharding= value. A tiling whose
    only non-1 tile dim is the replicated one is whole replication, which
    XLA's HloSharding prints as {replicated}."""
    text = v.strip().strip('"')
    return "{replicated}" if _ALL_REPLICATED.fullmatch(text) else text


def _float_text(v):
    if v.startswith("0x"):
        bits = int(v, 16)
        v = struct.unpack("<f", struct.pack("<I", bits))[0] if len(v) <= 10 else \
            struct.unpack("<d", struct.pack("<Q", bits))[0]
    else:
        v = float(v)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return repr(int(v)) if v == int(v) and abs(v) < 1e16 else repr(v)


def _constant_text(value, shape):
    m = re.match(r"dense<(.*)>", value.split(" : ")[0].strip())
    body = m.group(1) if m else value
    n = 1
    for d in shape.dims:
        n *= d
    if body.startswith("["):
        items = re.findall(r"[^\[\],\s]+", body)
    else:
        items = [body] * n
    conv = []
    for it in items:
        it = it.strip('"')
        if shape.dtype == "pred":
            conv.append("true" if it in ("true", "1") else "false")
        elif shape.dtype.startswith(("f", "bf")):
            conv.append(_float_text(it))
        else:
            conv.append(it)
    if not shape.dims:
        return conv[0] if conv else "0"
    if n > 16:
        return "{...}"
    return "{" + ", ".join(conv) + "}"


def _attr_text(op, attrs, shapes_in):
    """HLO attribute text for a StableHLO op's attribute dict."""
    out = []
    for k, v in attrs:
        if k == "broadcast_dimensions":
            out.append("dimensions=" + _braces(_ints(v)))
        elif k == "permutation":
            out.append("dimensions=" + _braces(_ints(v)))
        elif k in ("dimension", "dimensions") and op in ("concatenate", "reduce", "sort",
                                                          "reverse"):
            out.append("dimensions=" + _braces(_ints(v if "array<" in v else v.split(":")[0])))
        elif k == "comparison_direction":
            out.append("direction=" + re.search(r"direction (\w+)", v).group(1))
        elif k == "compare_type":
            continue
        elif k == "iota_dimension":
            out.append("iota_dimension=" + str(_ints(v.split(":")[0])[0]))
        elif k == "is_stable":
            out.append("is_stable=" + v)
        elif k == "dot_dimension_numbers":
            for name, hlo in (("lhs_batching_dimensions", "lhs_batch_dims"),
                              ("lhs_contracting_dimensions", "lhs_contracting_dims"),
                              ("rhs_batching_dimensions", "rhs_batch_dims"),
                              ("rhs_contracting_dimensions", "rhs_contracting_dims")):
                m = re.search(name + r" = \[([^\]]*)\]", v)
                if m and m.group(1).strip():
                    out.append(f"{hlo}={_braces(_ints(m.group(1)))}")
        elif k in ("start_indices", "limit_indices", "strides"):
            continue  # slice, below
        elif k in ("edge_padding_low", "edge_padding_high", "interior_padding"):
            continue  # pad, below
        elif k == "value":
            continue
        elif k == "call_target_name":
            out.append(f"custom_call_target={v}")
        elif k == "mhlo.sharding":
            out.append("sharding=" + _sharding_text(v))
        else:
            inner = re.sub(r"#stablehlo[.<]\w*<?", "", v).rstrip(">")
            inner = re.sub(r"array<i64:?\s*([^>]*)>?", r"{\1}", inner)
            inner = inner.replace("[", "{").replace("]", "}").replace(" = ", "=")
            out.append(f"{k}={inner.split(' : ')[0]}")
    d = dict(attrs)
    if "start_indices" in d:
        starts, limits = _ints(d["start_indices"]), _ints(d["limit_indices"])
        strides = _ints(d.get("strides", "")) or [1] * len(starts)
        out.append("slice={" + ", ".join(
            f"[{s}:{e}{'' if st == 1 else ':' + str(st)}]"
            for s, e, st in zip(starts, limits, strides)) + "}")
    if "edge_padding_low" in d:
        lo, hi = _ints(d["edge_padding_low"]), _ints(d["edge_padding_high"])
        it = _ints(d.get("interior_padding", "")) or [0] * len(lo)
        out.append("padding=" + "x".join(
            f"{a}_{b}" + (f"_{c}" if c else "") for a, b, c in zip(lo, hi, it)))
    return out


class _Printer:
    def __init__(self):
        self.counts = {}  # name base -> how many names it has given
        self.computations = []  # finished sub-computations (text)

    def fresh(self, base):
        # Each base counts on its own from 1 (add.1, add.2, custom-call.1,
        # p0.1, p1.1), as names in PyTorch/XLA's HLO dumps are numbered.
        n = self.counts.get(base, 0) + 1
        self.counts[base] = n
        return f"{base}.{n}"


# Ops whose result XLA's shape inference gives the layout of their first
# operand (elementwise, as XlaBuilder infers them; the Sharding call takes
# its operand's shape in PyTorch/XLA's lowering).
_KEEPS_LAYOUT = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                 "remainder", "and", "or", "xor", "compare", "negate", "exponential", "log",
                 "abs", "sqrt", "rsqrt", "tanh", "logistic", "convert", "sign", "floor", "ceil",
                 "exponential_minus_one", "log_plus_one", "not", "sine", "cosine"}


def _result_layout(op, attrs, args, out):
    """out with the layout XLA's builder gives op's result: a transpose
    permutes its operand's layout (f32[64,1]{1,0} -> f32[1,64]{0,1}),
    elementwise ops keep their first operand's, select its on-true
    operand's; everything else has the default layout."""
    short = op.split(".")[-1]
    if not args or out.dims is None:
        return out
    if short == "transpose":
        perm = _ints(dict(attrs).get("permutation", ""))
        x = args[0][1]
        if len(perm) == len(out.dims) == len(x.dims):
            return out.with_layout([perm.index(m) for m in x.minor_to_major()])
        return out
    src = None
    if short in _KEEPS_LAYOUT or (short == "custom_call" and
                                  '"Sharding"' in dict(attrs).get("call_target_name", "")):
        src = args[0][1]
    elif short == "select" and len(args) == 3:
        src = args[1][1]
    if src is not None and src.dims == out.dims and src.layout:
        return out.with_layout(src.layout)
    return out


def _hlo_name(op):
    short = op.split(".", 1)[1] if "." in op else op
    return _RENAME.get(short, short.replace("_", "-"))


def _convert_block(lines, pos, printer, env, params, name_of_comp):
    """Converts ops from lines[pos] until a return; returns (instrs, root
    names, root shapes, next pos)."""
    instrs = []
    while pos < len(lines):
        line = lines[pos].strip()
        pos += 1
        if not line or line.startswith("^bb"):
            continue
        if line.startswith('"stablehlo.return"') or line.startswith("return "):
            if line.startswith("return "):
                refs = re.findall(r"%[\w#]+", line.split(" : ")[0])
            else:
                refs = re.findall(r"%[\w#]+", line[line.index("(") + 1:line.index(")")])
            return instrs, [env[r] for r in refs], pos
        m = _OP.match(line)
        if not m:
            continue
        result, count, op, operands, rest = m.groups()
        refs = re.findall(r"%[\w#]+", operands)
        args = [env[r] for r in refs]
        to_apply = None
        if rest.strip().startswith("({"):
            # A region: its block arguments, body and return become a
            # computation of its own.
            header = lines[pos].strip()
            pos += 1
            block_args = re.findall(r"(%\w+): (tensor<[^>]*>)", header)
            sub_env = dict(env)
            sub_params = []
            for i, (ref, ty) in enumerate(block_args):
                pname = printer.fresh(f"Arg_{i}")
                shape = _shape(ty)
                sub_env[ref] = (pname, shape)
                sub_params.append((i, pname, shape))
            body, roots, pos = _convert_block(lines, pos, printer, sub_env, sub_params, None)
            comp = printer.fresh("region")
            to_apply = comp
            printer.computations.append(_computation_text(
                comp, sub_params, body, roots, entry=False,
                # a region returning one value has no tuple to name
                tuple_name=printer.fresh("tuple") if len(roots) > 1 else None))
            rest = lines[pos - 1].strip()
            # the closing line: '}) {attrs} : (types) -> types'
            close = lines[pos].strip() if not rest.startswith("})") else rest
            if not rest.startswith("})"):
                pos += 1
            rest = close[2:]
        attr_part, _, type_part = rest.rpartition(" : ")
        out_types = type_part.split("->", 1)[1] if "->" in type_part else type_part
        outs = _types(out_types)
        hop = _hlo_name(op)
        attrs = _split_attrs(attr_part)
        if op == "stablehlo.constant":
            value = dict(attrs).get("value", "0")
            name = printer.fresh("constant")
            instrs.append(f"{name} = {outs[0]} constant({_constant_text(value, outs[0])})")
            env[result] = (name, outs[0])
            continue
        if len(outs) == 1 and not count:
            outs = [_result_layout(op, attrs, args, outs[0])]
        elif op == "stablehlo.optimization_barrier":
            outs = [s for _, s in args]  # each result is its operand, layout and all
        operand_text = ", ".join(f"{s} %{n}" for n, s in args)
        extra = _attr_text(op.split(".")[-1], attrs, [s for _, s in args])
        if to_apply:
            extra.append(f"to_apply=%{to_apply}")
        if op.startswith("chlo.") and hop not in ("erf",):
            extra.insert(0, f'custom_call_target="{op}"')
            hop = "custom-call"
        tail = (", " + ", ".join(extra)) if extra else ""
        name = printer.fresh(hop.replace("-", "_") if hop != "custom-call" else "custom-call")
        if op == "stablehlo.optimization_barrier":
            # HLO's opt-barrier takes one tuple operand: the operands are
            # tupled first, as PyTorch/XLA's lowering writes it.
            tup = "(" + ", ".join(str(s) for _, s in args) + ")"
            tname = printer.fresh("tuple")
            instrs.append(f"{tname} = {tup} tuple({operand_text})")
            operand_text = f"{tup} %{tname}"
            name = printer.fresh("opt-barrier")
            count = count or "1"
        if len(outs) == 1 and not count:
            instrs.append(f"{name} = {outs[0]} {hop}({operand_text}){tail}")
            env[result] = (name, outs[0])
        else:
            tup = "(" + ", ".join(str(s) for s in outs) + ")"
            instrs.append(f"{name} = {tup} {hop}({operand_text}){tail}")
            for i, s in enumerate(outs):
                g = printer.fresh("get-tuple-element")
                instrs.append(f"{g} = {s} get-tuple-element({tup} %{name}), index={i}")
                env[f"{result}#{i}"] = (g, s)
            if not m.group(2):  # one result (a barrier over one tensor): %N itself
                env[result] = env[f"{result}#0"]
    return instrs, [], pos


def _computation_text(name, params, body, roots, entry, tuple_name="tuple", param_shardings=None):
    sig = ", ".join(f"{p}: {s.bare()}" for _, p, s in params)
    if entry:
        result = "(" + ", ".join(s.bare() for _, s in roots) + ")"
    else:
        result = roots[0][1].bare() if len(roots) == 1 else \
            "(" + ", ".join(s.bare() for _, s in roots) + ")"
    lines = [f"{'ENTRY ' if entry else ''}%{name} ({sig}) -> {result} {{"]
    shardings = param_shardings or {}
    lines += [f"  %{n} = {s} parameter({i})" +
              (f", sharding={shardings[i]}" if i in shardings else "") for i, n, s in params]
    lines += ["  %" + ins for ins in body]
    if entry or len(roots) > 1:
        tup = "(" + ", ".join(str(s) for _, s in roots) + ")"
        ops = ", ".join(f"{s} %{n}" for n, s in roots)
        lines.append(f"  ROOT %{tuple_name} = {tup} tuple({ops})")
    else:
        # the region's result is its last instruction
        last = lines.pop()
        lines.append("  ROOT " + last.strip())
    lines.append("}")
    return "\n".join(lines)


def to_hlo_text(stablehlo, module_id=0):
    """HLO text of the single-function StableHLO module text stablehlo."""
    lines = stablehlo.splitlines()
    printer = _Printer()
    env, params, param_shardings = {}, [], {}
    pos = 0
    for pos, line in enumerate(lines):
        if "func.func @main" in line:
            args = re.findall(r'(%arg\d+): (tensor<[^>]*>)(?: \{mhlo\.sharding = "([^"]*)"\})?',
                              line.split(") ->")[0])
            for i, (ref, ty, sharding) in enumerate(args):
                pname = printer.fresh(f"p{i}")
                env[ref] = (pname, _shape(ty))
                params.append((i, pname, _shape(ty)))
                if sharding:
                    param_shardings[i] = _sharding_text(sharding)
            break
    body, roots, _ = _convert_block(lines, pos + 1, printer, env, params, None)
    entry = f"IrToHlo.{module_id}"
    layout = "(" + ", ".join(str(s) for _, _, s in params) + ")->(" + \
        ", ".join(str(s) for _, s in roots) + ")"
    parts = [f"HloModule {entry}, entry_computation_layout={{{layout}}}", ""]
    parts += [c + "\n" for c in printer.computations]
    parts.append(_computation_text(entry, params, body, roots, entry=True,
                                   tuple_name=printer.fresh("tuple"),
                                   param_shardings=param_shardings))
    return "\n".join(parts) + "\n"
