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
and an ENTRY whose ROOT is the tuple of the requested tensors. Op names
follow HLO's (dot_general -> dot, broadcast_in_dim -> broadcast,
log_plus_one -> log-plus-one, ...); attributes become HLO's where the two
differ in spelling (dimensions=, direction=, slice=, padding=, *_dims=),
else they are carried over as key=value. It is text for reading and
matching, not for XLA's parser: constants larger than 16 elements are
elided as {...}.

Names, parameter numbers and computation names follow PyTorch/XLA's
lowering (LoweringContext over XLA's XlaBuilder):
- instructions are made in torch::lazy's post order from each root (the
  last operand first); an entry parameter is numbered, p<i>, when that
  order first meets it (x + 5: the scalar is parameter 0);
- XlaBuilder puts every name through its NameUniquer twice, when the
  instruction is made and when the computation is built, so the k-th of n
  instructions of one opcode is <opcode>.<n+k-1>: add.1 alone, add.2 and
  add.3 for two; a parameter p<i> is p<i>.1;
- a reduction region over one binary op is the computation PyTorch/XLA's
  helpers build (AddComputation, MaxComputation, ... with arguments x, y),
  by a builder of its own; it is imported when its caller is made: its
  names go through the caller's uniquer, it takes the caller's next
  computation id (from 1) and the entry computation, IrToHlo, the id after
  the last import.
Each computation lists its instructions in the order they are made.
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


_TOKEN = "\x01%d\x02"           # an instruction's name, filled in at the end
_TOKEN_RE = re.compile("\x01(\\d+)\x02")
_CTOKEN = "\x03%d\x04"          # a computation's name
_CTOKEN_RE = re.compile("\x03(\\d+)\x04")


class _Uniquer:
    """XLA's NameUniquer: a name's numeric suffix is the id it asks for
    under its root; an id already given out gives the root's next free one;
    id 0 is the bare root."""

    def __init__(self):
        self.roots = {}  # root -> [ids given out, next id to try]

    def get(self, name):
        root, suffixed, want = name, False, 0
        dot = name.rfind(".")
        if 0 < dot < len(name) - 1 and name[dot + 1:].isdigit():
            root, suffixed, want = name[:dot], True, int(name[dot + 1:])
        used = self.roots.setdefault(root, [set(), 0])
        if want in used[0]:
            while used[1] in used[0]:
                used[1] += 1
            want = used[1]
            used[1] += 1
        used[0].add(want)
        if want == 0:
            return root + ".0" if suffixed else root
        return f"{root}.{want}"


class _Instr:
    """One HLO instruction: base is the name its builder asks for (the
    opcode, p<i> for a parameter), text what follows `%name = `, with
    operands and called computations as tokens."""
    __slots__ = ("id", "base", "text", "param", "gtes", "of")

    def __init__(self, iid, base, param=None):
        self.id, self.base, self.text, self.param = iid, base, "", param
        self.gtes = []   # get-tuple-elements that read this one's results
        self.of = None   # for a get-tuple-element: the instruction it reads


class _Comp:
    """A computation: parameters (index order), body (text order), roots,
    and the tuple instruction that returns several roots."""

    def __init__(self, printer, base):
        self.id = len(printer.comps)
        printer.comps.append(self)
        self.base, self.params, self.body, self.roots = base, [], [], []
        self.root_tuple = None
        self.param_shardings = {}
        self.order = []  # creation order (_Printer.build)

    def instrs(self):
        return self.params + self.body + ([self.root_tuple] if self.root_tuple else [])


class _Printer:
    def __init__(self):
        self.instrs = []  # by id
        self.comps = []   # by id

    def new(self, comp, base, param=None):
        ins = _Instr(len(self.instrs), base, param)
        self.instrs.append(ins)
        if param is None:
            comp.body.append(ins)
        else:
            comp.params.append(ins)
        return ins

    def deps(self, ins):
        """The instructions ins reads (a get-tuple-element's: its tuple's
        maker, which writes the get-tuple-elements with it)."""
        out = []
        for m in _TOKEN_RE.finditer(ins.text):
            d = self.instrs[int(m.group(1))]
            out.append(d.of if d.of is not None else d)
        return out

    def subs(self, ins):
        return [self.comps[int(m.group(1))] for m in _CTOKEN_RE.finditer(ins.text)]

    def creation_order(self, comp, entry):
        """The order PyTorch/XLA's lowering makes comp's instructions in:
        IR nodes in torch::lazy's post order from each root in turn (a
        stack: the last operand is lowered first), parameters as that order
        meets them in the entry computation (first, by index, in a
        reduction computation), a multi-result op's get-tuple-elements
        right after it, the returned tuple last."""
        order, state = [], {}
        if not entry:
            order += comp.params
            state.update((p.id, 2) for p in comp.params)

        def emit(ins):
            order.append(ins)
            for g in ins.gtes:
                state[g.id] = 2
                order.append(g)

        for root, _ in comp.roots:
            root = root.of if root.of is not None else root
            stack = [root]
            while stack:
                ins = stack[-1]
                st = state.get(ins.id)
                if st is None:
                    state[ins.id] = 1
                    stack += [d for d in self.deps(ins) if d.id not in state]
                elif st == 1:
                    state[ins.id] = 2
                    stack.pop()
                    emit(ins)
                else:
                    stack.pop()
        for ins in comp.params + comp.body:  # nothing reads them: text order
            if ins.id not in state and ins.of is None:
                state[ins.id] = 2
                emit(ins)
        if comp.root_tuple is not None:
            order.append(comp.root_tuple)
        return order

    def build(self, comp, entry):
        """Names comp's instructions as XlaBuilder does: each name goes
        through the builder's uniquer when the instruction is made and once
        more when the computation is built (so the k-th of n instructions
        of one opcode is opcode.(n+k-1): add.1 alone, add.2 and add.3 for
        two); a called computation, built by its own builder, is imported
        when its caller is made: its names go through the caller's uniquer
        and it takes the caller's next computation id (from 1), the caller
        the one after. Returns ([(comp, id, [(instr, name)])] of the
        imported computations, (comp, id, [(instr, name)]))."""
        uniq, embedded, first = _Uniquer(), [], {}
        order = comp.order = self.creation_order(comp, entry)
        if entry:
            for i, p in enumerate(ins for ins in order if ins.param is not None):
                p.base = f"p{i}"
                p.param = (p.param[0], i)  # (index in the StableHLO, number here)
        for ins in order:
            for sub in self.subs(ins):
                sub_embedded, sub_entry = self.build(sub, False)
                for c, _, names in sub_embedded + [sub_entry]:
                    embedded.append((c, len(embedded) + 1,
                                     [(i, uniq.get(n)) for i, n in names]))
            first[ins.id] = uniq.get(ins.base)
        final = [(ins, uniq.get(first[ins.id])) for ins in order]
        return embedded, (comp, len(embedded) + 1, final)


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


# A reduction region whose body is one of these ops over its two scalar
# arguments is the computation PyTorch/XLA's helpers build for it
# (XlaHelpers::CreateAddComputation, ...: arguments x and y).
_REDUCER_NAMES = {"add": "AddComputation", "multiply": "MulComputation",
                  "maximum": "MaxComputation", "minimum": "MinComputation",
                  "and": "AndComputation", "or": "OrComputation"}


def _region_name(lines, pos, nargs):
    """The computation name of the region whose body starts at lines[pos]
    (and its arguments' names)."""
    body = []
    for line in lines[pos:]:
        line = line.strip()
        if line.startswith('"stablehlo.return"') or line.startswith("})"):
            break
        m = _OP.match(line)
        if m:
            body.append(m.group(3).split(".")[-1])
    if nargs == 2 and len(body) == 1 and body[0] in _REDUCER_NAMES:
        return _REDUCER_NAMES[body[0]], ["x", "y"]
    return "region", [f"Arg_{i}" for i in range(nargs)]


def _ref(ins):
    return _TOKEN % ins.id


def _convert_block(lines, pos, printer, comp, env):
    """Converts ops from lines[pos] until a return into comp's
    instructions; returns (root (instr, shape) list, next pos)."""
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
            return [env[r] for r in refs], pos
        m = _OP.match(line)
        if not m:
            continue
        result, count, op, operands, rest = m.groups()
        refs = re.findall(r"%[\w#]+", operands)
        args = [env[r] for r in refs]
        to_apply = None
        if rest.strip().startswith("({"):
            # A region: its block arguments, body and return become a
            # computation of its own, built (as PyTorch/XLA's helpers build
            # their reduction computations) by a builder of its own.
            header = lines[pos].strip()
            pos += 1
            block_args = re.findall(r"(%\w+): (tensor<[^>]*>)", header)
            base, arg_names = _region_name(lines, pos, len(block_args))
            sub = _Comp(printer, base)
            sub_env = dict(env)
            for i, (ref, ty) in enumerate(block_args):
                shape = _shape(ty)
                ins = printer.new(sub, arg_names[i], param=(i, i))
                ins.text = f"{shape} parameter({i})"
                sub_env[ref] = (ins, shape)
            sub.roots, pos = _convert_block(lines, pos, printer, sub, sub_env)
            if len(sub.roots) > 1:
                sub.root_tuple = _Instr(len(printer.instrs), "tuple")
                printer.instrs.append(sub.root_tuple)
            to_apply = sub
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
            ins = printer.new(comp, "constant")
            ins.text = f"{outs[0]} constant({_constant_text(value, outs[0])})"
            env[result] = (ins, outs[0])
            continue
        if len(outs) == 1 and not count:
            outs = [_result_layout(op, attrs, [(None, s) for _, s in args], outs[0])]
        elif op == "stablehlo.optimization_barrier":
            outs = [s for _, s in args]  # each result is its operand, layout and all
        operand_text = ", ".join(f"{s} %{_ref(i)}" for i, s in args)
        extra = _attr_text(op.split(".")[-1], attrs, [s for _, s in args])
        if to_apply:
            extra.append("to_apply=%" + _CTOKEN % to_apply.id)
        if op.startswith("chlo.") and hop not in ("erf",):
            extra.insert(0, f'custom_call_target="{op}"')
            hop = "custom-call"
        tail = (", " + ", ".join(extra)) if extra else ""
        if op == "stablehlo.optimization_barrier":
            # HLO's opt-barrier takes one tuple operand: the operands are
            # tupled first, as PyTorch/XLA's lowering writes it.
            tup = "(" + ", ".join(str(s) for _, s in args) + ")"
            tins = printer.new(comp, "tuple")
            tins.text = f"{tup} tuple({operand_text})"
            operand_text = f"{tup} %{_ref(tins)}"
            count = count or "1"
        ins = printer.new(comp, hop)
        if len(outs) == 1 and not count:
            ins.text = f"{outs[0]} {hop}({operand_text}){tail}"
            env[result] = (ins, outs[0])
        else:
            tup = "(" + ", ".join(str(s) for s in outs) + ")"
            ins.text = f"{tup} {hop}({operand_text}){tail}"
            for i, s in enumerate(outs):
                g = printer.new(comp, "get-tuple-element")
                g.text = f"{s} get-tuple-element({tup} %{_ref(ins)}), index={i}"
                g.of = ins
                ins.gtes.append(g)
                env[f"{result}#{i}"] = (g, s)
            if not m.group(2):  # one result (a barrier over one tensor): %N itself
                env[result] = env[f"{result}#0"]
    return [], pos


def _computation_lines(comp, cname, names, entry, comp_names):
    """comp's text: header, parameters (by number), body (in the order its
    builder made it), ROOT."""
    def fill(text):
        text = _TOKEN_RE.sub(lambda m: names[int(m.group(1))], text)
        return _CTOKEN_RE.sub(lambda m: comp_names[int(m.group(1))], text)

    params = sorted(comp.params, key=lambda p: p.param[1])
    sig = ", ".join(f"{names[p.id]}: {_bare(p.text)}" for p in params)
    roots = comp.roots
    if entry or len(roots) > 1:
        result = "(" + ", ".join(s.bare() for _, s in roots) + ")"
    else:
        result = roots[0][1].bare()
    lines = [f"{'ENTRY ' if entry else ''}%{cname} ({sig}) -> {result} {{"]
    for p in params:
        text = p.text.replace(f"parameter({p.param[0]})", f"parameter({p.param[1]})")
        sh = comp.param_shardings.get(p.param[0])
        lines.append(f"  %{names[p.id]} = {text}" + (f", sharding={sh}" if sh else ""))
    at = {}
    for i in comp.order:
        if i.param is not None or i is comp.root_tuple:
            continue
        at[i.id] = len(lines)
        lines.append(f"  %{names[i.id]} = {fill(i.text)}")
    if comp.root_tuple is not None:
        tup = "(" + ", ".join(str(s) for _, s in roots) + ")"
        ops = ", ".join(f"{s} %{names[i.id]}" for i, s in roots)
        lines.append(f"  ROOT %{names[comp.root_tuple.id]} = {tup} tuple({ops})")
    else:
        # a region returning one value: that instruction is its ROOT
        root = roots[0][0]
        k = at.get(root.id) or next(n for n, ln in enumerate(lines)
                                    if ln.startswith(f"  %{names[root.id]} = "))
        lines[k] = "  ROOT " + lines[k].strip()
    lines.append("}")
    return "\n".join(lines)


def _bare(param_text):
    """'f32[2,3]{1,0} parameter(0)' -> 'f32[2,3]'."""
    shape = param_text.split(" parameter(")[0]
    return shape.split("{")[0] if shape.endswith("}") else shape


def to_hlo_text(stablehlo, module_id=0):
    """HLO text of the single-function StableHLO module text stablehlo, with
    names, parameter numbers and computation ids as PyTorch/XLA's
    LoweringContext and XlaBuilder give them (module_id: unused, kept for
    callers; the module is named IrToHlo.<its computation id>)."""
    lines = stablehlo.splitlines()
    printer = _Printer()
    entry = _Comp(printer, "IrToHlo")
    env = {}
    pos = 0
    for pos, line in enumerate(lines):
        if "func.func @main" in line:
            args = re.findall(r'(%arg\d+): (tensor<[^>]*>)(?: \{mhlo\.sharding = "([^"]*)"\})?',
                              line.split(") ->")[0])
            for i, (ref, ty, sharding) in enumerate(args):
                shape = _shape(ty)
                ins = printer.new(entry, f"p{i}", param=(i, i))
                ins.text = f"{shape} parameter({i})"
                env[ref] = (ins, shape)
                if sharding:
                    entry.param_shardings[i] = _sharding_text(sharding)
            break
    entry.roots, _ = _convert_block(lines, pos + 1, printer, entry, env)
    entry.root_tuple = _Instr(len(printer.instrs), "tuple")
    printer.instrs.append(entry.root_tuple)
    embedded, (_, entry_id, entry_names) = printer.build(entry, True)
    names, comp_names = {}, {}
    for c, cid, instr_names in embedded:
        comp_names[c.id] = f"{c.base}.{cid}"
        names.update((i.id, n) for i, n in instr_names)
    names.update((i.id, n) for i, n in entry_names)
    ename = f"IrToHlo.{entry_id}"
    params = sorted(entry.params, key=lambda p: p.param[1])
    layout = "(" + ", ".join(p.text.split(" parameter(")[0] for p in params) + ")->(" + \
        ", ".join(str(s) for _, s in entry.roots) + ")"
    parts = [f"HloModule {ename}, entry_computation_layout={{{layout}}}", ""]
    parts += [_computation_lines(c, comp_names[c.id], names, False, comp_names) + "\n"
              for c, _, _ in embedded]
    parts.append(_computation_lines(entry, ename, names, True, comp_names))
    return "\n".join(parts) + "\n"
