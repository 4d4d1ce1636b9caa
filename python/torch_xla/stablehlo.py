"""torch_xla.stablehlo: torch.export programs as StableHLO.

exported_program_to_stablehlo runs an ExportedProgram's graph module on xla
tensors (its parameters, buffers and constants moved to the device), so
every op goes through the engine's lowering table, then writes the graph of
the outputs as StableHLO (torch_xla.core.xla_model.get_stablehlo). The
result keeps the function's metadata: which positional arguments of @main
are user inputs, parameters (state_dict entries) or extra constants.

save_as_stablehlo writes PyTorch/XLA's directory layout:
  functions/<name>.mlir      the module as text
  functions/<name>.bytecode  MLIR bytecode (only when mlir-opt is installed)
  functions/<name>.meta      JSON: signatures and input locations
  data/<state_dict key>      numpy.save of each state_dict tensor
  constants/<i>              numpy.save of each extra constant
bfloat16 arrays are stored as their uint16 bit patterns (numpy has no
bfloat16). See docs/stablehlo.md.
"""
import copy
import dataclasses
import enum
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
from torch.utils import _pytree as pytree

import torch_xla
from torch_xla.core import xla_model as xm
from torchtpu import _C, bridge

# Engine dtype codes (tt_dtype_t) -> names as torch prints them, and numpy.
_TT_NAMES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
             "int64", "bool"]
_TT_NUMPY = [np.float32, np.float64, np.float16, np.uint16, np.int8, np.uint8, np.int16,
             np.int32, np.int64, np.bool_]


class VariableType(enum.Enum):
    INPUT_ARG = "input_arg"
    PARAMETER = "parameter"
    CONSTANT = "constant"


@dataclass
class VariableSignature:
    shape: List[int]
    dtype: str


@dataclass
class InputLocation:
    type_: VariableType
    position: int = -1
    name: str = ""

    @classmethod
    def parameter(cls, name):
        return cls(type_=VariableType.PARAMETER, name=name)

    @classmethod
    def input_arg(cls, position):
        return cls(type_=VariableType.INPUT_ARG, position=position)

    @classmethod
    def constant(cls, position):
        return cls(type_=VariableType.CONSTANT, position=position)


@dataclass
class StableHLOFunctionMeta:
    name: str
    stablehlo_version: str
    input_signature: List[VariableSignature]
    output_signature: List[VariableSignature]
    input_locations: List[InputLocation]
    unused_inputs: List[Tuple[InputLocation, VariableSignature]]
    input_pytree_spec: Optional[str] = None
    output_pytree_spec: Optional[str] = None


@dataclass
class StableHLOFunc:
    meta: StableHLOFunctionMeta
    bytecode: Optional[bytes]
    text: Optional[str]


@dataclass
class StableHLOModelBundle:
    state_dict: Dict[str, Any]
    additional_constants: List[np.ndarray]
    stablehlo_funcs: List[StableHLOFunc]


@dataclass
class StableHLOExportOptions:
    include_human_readable_text: bool = True
    override_tracing_arguments: Optional[Tuple[Any]] = None
    override_tracing_kwargs: Optional[Mapping[str, Any]] = None


class _MetaEncoder(json.JSONEncoder):
    def default(self, obj):
        if dataclasses.is_dataclass(obj):
            return dataclasses.asdict(obj)
        if isinstance(obj, VariableType):
            return obj.value
        return super().default(obj)


def _meta_from_json(d):
    def sig(x):
        return VariableSignature(shape=list(x["shape"]), dtype=x["dtype"])

    def loc(x):
        return InputLocation(type_=VariableType(x["type_"]), position=x.get("position", -1),
                             name=x.get("name", ""))

    return StableHLOFunctionMeta(
        name=d["name"], stablehlo_version=d.get("stablehlo_version", ""),
        input_signature=[sig(x) for x in d["input_signature"]],
        output_signature=[sig(x) for x in d["output_signature"]],
        input_locations=[loc(x) for x in d["input_locations"]],
        unused_inputs=[(loc(a), sig(b)) for a, b in d.get("unused_inputs", [])],
        input_pytree_spec=d.get("input_pytree_spec"),
        output_pytree_spec=d.get("output_pytree_spec"))


def _to_numpy(t):
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


class StableHLOGraphModule:
    """StableHLO functions of a model with their weights and constants.

    Calling it runs the model's exported program on the xla device (the
    engine computes what the StableHLO describes); a module loaded from disk
    has no program to run and only gives its StableHLO and metadata."""

    def __init__(self, bundle, exported_program=None):
        self._bundle = bundle
        self._by_name = {f.meta.name: f for f in bundle.stablehlo_funcs}
        self._default = bundle.stablehlo_funcs[0].meta.name
        self._program = exported_program

    def get_stablehlo_text(self, method_name=None):
        f = self._by_name[method_name or self._default]
        if f.text is None:
            raise ValueError(f"StableHLO text of {f.meta.name!r} was not kept "
                             "(include_human_readable_text=False)")
        return f.text

    def get_stablehlo_bytecode(self, method_name=None):
        f = self._by_name[method_name or self._default]
        if f.bytecode is None:
            raise RuntimeError("StableHLO bytecode needs mlir-opt (apt-get install mlir-19-tools)")
        return f.bytecode

    def meta(self, method_name=None):
        return self._by_name[method_name or self._default].meta

    @property
    def bundle(self):
        return self._bundle

    def save(self, directory_path):
        _save_bundle(self._bundle, directory_path)

    @classmethod
    def load(cls, directory_path):
        return cls(_load_bundle(directory_path))

    def evaluate(self, method_name, args):
        """Runs function method_name on args (a tuple of the user inputs;
        tensors on any device) and returns its outputs as xla tensors,
        structured as the exported program returned them. A module made by
        exported_program_to_stablehlo in this process runs its program on
        the engine; one loaded from disk runs its StableHLO through XLA's
        CPU PJRT plugin (the engine executes its own IR, not StableHLO)."""
        if self._program is not None and method_name == self._default:
            if not hasattr(self, "_module"):
                self._module = self._program.module().to(torch_xla.device())
            return self._module(*args)
        f = self._by_name[method_name]
        outs = _run_through_pjrt(f, _call_parameters(args, f.meta, self._bundle))
        dev = torch_xla.device()
        outs = [o.to(dev) for o in outs]
        if f.meta.output_pytree_spec is not None:
            return pytree.tree_unflatten(outs, pytree.treespec_loads(f.meta.output_pytree_spec))
        return outs

    def __call__(self, *args, **kwargs):
        if kwargs:
            if self._program is None:
                raise TypeError("a StableHLOGraphModule loaded from disk takes positional "
                                "inputs only")
            if not hasattr(self, "_module"):
                self._module = self._program.module().to(torch_xla.device())
            return self._module(*args, **kwargs)
        return self.evaluate(self._default, args)


def _as_torch_input(value, sig):
    """A CPU tensor for one @main argument (numpy arrays from disk keep
    bfloat16 as uint16 bit patterns)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    a = np.asarray(value)
    if sig is not None and sig.dtype == "bfloat16" and a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _call_parameters(args, meta, bundle):
    """@main's arguments in order: parameters from the state dict, user
    inputs (flattened as the program's input pytree), extra constants."""
    if meta.input_pytree_spec is not None:
        args, _ = pytree.tree_flatten(args)
    sigs = list(meta.input_signature) + [None] * len(meta.input_locations)
    params = []
    for i, loc in enumerate(meta.input_locations):
        if loc.type_ == VariableType.PARAMETER:
            value = bundle.state_dict[loc.name]
        elif loc.type_ == VariableType.INPUT_ARG:
            if loc.position >= len(args):
                raise TypeError(f"{meta.name} takes at least {loc.position + 1} inputs, "
                                f"got {len(args)}")
            value = args[loc.position]
        else:
            value = bundle.additional_constants[loc.position]
        params.append(_as_torch_input(value, sigs[i]))
    return params


_pjrt_state = {}


def _run_through_pjrt(func, params):
    from torchtpu import pjrt
    client = _pjrt_state.get("client")
    if client is None:
        path = pjrt.find_cpu_plugin()
        if path is None:
            raise RuntimeError("running a StableHLO module loaded from disk needs XLA's CPU "
                               "PJRT plugin (pip install xla-cpu-pjrt)")
        client = _pjrt_state["client"] = pjrt.Client(path)
    program = func.text if func.text is not None else func.bytecode
    if program is None:
        raise RuntimeError(f"{func.meta.name}: the bundle has neither StableHLO text nor "
                           "bytecode")
    key = (id(func), len(program))
    exe = _pjrt_state.get(key)
    if exe is None:
        exe = _pjrt_state[key] = client.compile(program)
    return exe.run_torch(params)


class _XlaInterpreter(torch.fx.Interpreter):
    """Runs an FX graph on xla tensors; ops that create tensors on a device
    create them on the xla device."""

    def __init__(self, module, device):
        super().__init__(module)
        self._device = device

    def call_function(self, target, args, kwargs):
        if "device" in kwargs:
            kwargs = dict(kwargs, device=self._device)
        return super().call_function(target, args, kwargs)


def _flat_user_inputs(ep, options):
    if options.override_tracing_arguments is not None:
        args = options.override_tracing_arguments
        kwargs = options.override_tracing_kwargs or {}
    elif getattr(ep, "example_inputs", None) is not None:
        args, kwargs = ep.example_inputs
    else:
        raise ValueError("No example inputs: the ExportedProgram has none, and "
                         "options.override_tracing_arguments is not set")
    flat, _ = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return [copy.deepcopy(x) if not isinstance(x, torch.Tensor) else x for x in flat]


def _fallback_counters():
    return {n: _C.counter_value(n) for n in _C.counter_names() if n.startswith("aten::")}


def _exported_program_to_bundle(ep, options):
    from torch.export.graph_signature import InputKind, OutputKind
    ep = ep.run_decompositions()
    device = torch_xla.device()
    user_inputs = _flat_user_inputs(ep, options)
    xla_inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in user_inputs]
    state = {k: v.to(device) for k, v in ep.state_dict.items() if isinstance(v, torch.Tensor)}
    constants = {k: v.to(device) for k, v in getattr(ep, "constants", {}).items()
                 if isinstance(v, torch.Tensor)}
    call_args, user_pos = [], iter(range(len(xla_inputs)))
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            call_args.append(xla_inputs[next(user_pos)])
        elif spec.target in state:
            call_args.append(state[spec.target])
        elif spec.target in constants:
            call_args.append(constants[spec.target])
        else:
            raise RuntimeError(f"exported program input {spec.target!r} ({spec.kind}) has no value")
    torch_xla.sync()
    before = _fallback_counters()
    with torch.no_grad():
        outs = _XlaInterpreter(ep.graph_module, device).run(*call_args, enable_io_processing=False)
    if not isinstance(outs, (list, tuple)):
        outs = (outs,)
    after = _fallback_counters()
    fallbacks = sorted(n for n, v in after.items() if v != before.get(n, 0))
    if fallbacks:
        raise RuntimeError("This model contains ops not lowered to the xla device (they ran on "
                           "the CPU fallback): " + ", ".join(fallbacks))
    results = [o for o, spec in zip(outs, ep.graph_signature.output_specs)
               if spec.kind == OutputKind.USER_OUTPUT]
    for r in results:
        if not isinstance(r, torch.Tensor):
            raise RuntimeError(f"exported program output of type {type(r).__name__} is not a tensor")
    handles = [bridge.handle_of(r) for r in results]
    text, inputs = _C.stablehlo_emit(handles, True)

    user_keys = {}
    for pos, x in enumerate(xla_inputs):
        if isinstance(x, torch.Tensor):
            user_keys.setdefault(_C.stablehlo_tensor_key(bridge.handle_of(x)), pos)
    state_keys = {}
    for name, v in list(state.items()) + list(constants.items()):
        state_keys.setdefault(_C.stablehlo_tensor_key(bridge.handle_of(v)), name)

    locations, signatures, extra = [], [], []
    unused = set(range(len(xla_inputs)))
    for key, kind, dtype, shape, value in inputs:
        if kind == "param" and key in user_keys:
            loc = InputLocation.input_arg(user_keys[key])
            unused.discard(user_keys[key])
        elif kind == "param" and key in state_keys and state_keys[key] in ep.state_dict:
            loc = InputLocation.parameter(state_keys[key])
        else:
            loc = InputLocation.constant(len(extra))
            if kind == "scalar" and _TT_NAMES[dtype] == "bfloat16":
                extra.append(_to_numpy(torch.tensor(value, dtype=torch.bfloat16)))
            elif kind == "scalar":
                extra.append(np.array(value, dtype=_TT_NUMPY[dtype]))
            else:
                extra.append(np.frombuffer(value, dtype=_TT_NUMPY[dtype]).reshape(shape).copy())
        locations.append(loc)
        signatures.append(VariableSignature(shape=list(shape), dtype=_TT_NAMES[dtype]))
    unused_inputs = []
    for i in sorted(unused):
        x = user_inputs[i]
        if isinstance(x, torch.Tensor):
            s = VariableSignature(shape=list(x.shape), dtype=str(x.dtype).replace("torch.", ""))
        else:
            s = VariableSignature(shape=[], dtype=str(type(x)))
        unused_inputs.append((InputLocation.input_arg(i), s))
    out_sigs = [VariableSignature(shape=list(r.shape), dtype=str(r.dtype).replace("torch.", ""))
                for r in results]
    call_spec = ep.call_spec
    meta = StableHLOFunctionMeta(
        name="forward", stablehlo_version="1.0.0", input_signature=signatures,
        output_signature=out_sigs, input_locations=locations, unused_inputs=unused_inputs,
        input_pytree_spec=pytree.treespec_dumps(call_spec.in_spec) if call_spec.in_spec else None,
        output_pytree_spec=(pytree.treespec_dumps(call_spec.out_spec)
                            if call_spec.out_spec else None))
    try:
        bytecode = xm.get_stablehlo_bytecode(results)
    except RuntimeError:
        bytecode = None
    func = StableHLOFunc(meta=meta, bytecode=bytecode,
                         text=text if options.include_human_readable_text else None)
    weights = {k: _to_numpy(v) for k, v in ep.state_dict.items() if isinstance(v, torch.Tensor)}
    return StableHLOModelBundle(state_dict=weights, additional_constants=extra,
                                stablehlo_funcs=[func]), ep


def exported_program_to_stablehlo(exported_program, options=None):
    """Converts a torch.export ExportedProgram to a StableHLOGraphModule by
    tracing it on the xla device. Raises RuntimeError when an op of the
    program has no lowering (it would run on the CPU fallback)."""
    options = options or StableHLOExportOptions()
    bundle, ep = _exported_program_to_bundle(exported_program, options)
    return StableHLOGraphModule(bundle, ep)


def save_as_stablehlo(exported_model, stablehlo_dir, options=None):
    """exported_program_to_stablehlo(exported_model, options).save(stablehlo_dir)."""
    exported_program_to_stablehlo(exported_model, options).save(stablehlo_dir)


def save_torch_model_as_stablehlo(torchmodel, args, path, options=None):
    """torch.export.export(torchmodel, args) then save_as_stablehlo."""
    save_as_stablehlo(torch.export.export(torchmodel, tuple(args)), path, options)


def _save_bundle(bundle, stablehlo_dir):
    for sub in ("data", "functions", "constants"):
        os.makedirs(os.path.join(stablehlo_dir, sub), exist_ok=True)
    for key, val in bundle.state_dict.items():
        with open(os.path.join(stablehlo_dir, "data", key), "wb") as f:
            np.save(f, val)
    for func in bundle.stablehlo_funcs:
        base = os.path.join(stablehlo_dir, "functions", func.meta.name)
        with open(base + ".meta", "w") as f:
            json.dump(func.meta, f, cls=_MetaEncoder)
        if func.bytecode is not None:
            with open(base + ".bytecode", "wb") as f:
                f.write(func.bytecode)
        if func.text is not None:
            with open(base + ".mlir", "w") as f:
                f.write(func.text)
    for i, const in enumerate(bundle.additional_constants):
        with open(os.path.join(stablehlo_dir, "constants", str(i)), "wb") as f:
            np.save(f, const)


def _load_bundle(stablehlo_dir):
    def files(sub):
        path = os.path.join(stablehlo_dir, sub)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    state = {}
    for name in files("data"):
        with open(os.path.join(stablehlo_dir, "data", name), "rb") as f:
            state[name] = np.load(f, allow_pickle=False)
    consts = []
    for name in sorted(files("constants"), key=int):
        with open(os.path.join(stablehlo_dir, "constants", name), "rb") as f:
            consts.append(np.load(f, allow_pickle=False))
    funcs = []
    fdir = os.path.join(stablehlo_dir, "functions")
    for name in files("functions"):
        if not name.endswith(".meta"):
            continue
        with open(os.path.join(fdir, name)) as f:
            meta = _meta_from_json(json.load(f))
        base = os.path.join(fdir, meta.name)
        text = bytecode = None
        if os.path.exists(base + ".mlir"):
            with open(base + ".mlir") as f:
                text = f.read()
        if os.path.exists(base + ".bytecode"):
            with open(base + ".bytecode", "rb") as f:
                bytecode = f.read()
        funcs.append(StableHLOFunc(meta=meta, bytecode=bytecode, text=text))
    if not funcs:
        raise FileNotFoundError(f"no functions/*.meta under {stablehlo_dir}")
    return StableHLOModelBundle(state_dict=state, additional_constants=consts,
                                stablehlo_funcs=funcs)
