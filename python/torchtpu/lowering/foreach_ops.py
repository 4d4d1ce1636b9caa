"""The _foreach_* ops: each lowers to its per-tensor op, element by element.

An optimizer's foreach path (torch.optim with foreach=True, the default on
xla: torchtpu/optim_foreach.py) issues one _foreach_* call per update step for
a whole parameter group. Functionalization turns the in-place forms
(_foreach_mul_, ...) into these functional ones, so one dispatch through
PyTorch records the op for every tensor of the list; the per-tensor path
paid PyTorch's dispatch and functionalization once per tensor.

The element ops are the ones the per-tensor loop would call (add.Tensor
for _foreach_add.Scalar, addcdiv.default with the element's value for
_foreach_addcdiv.ScalarList, ...), resolved once per foreach overload and
run through the lowering table, so results are the per-tensor ones bit for
bit. Length mismatches raise PyTorch's errors.
"""
import torch

from torchtpu import lowering
from torchtpu.lowering.core import aten, lowers

# What the element op is for each overload kind of a binary family:
# (List / Tensor, Scalar / ScalarList).
_BINARY = {
    "add": (aten.add.Tensor, aten.add.Tensor),
    "sub": (aten.sub.Tensor, aten.sub.Tensor),
    "mul": (aten.mul.Tensor, aten.mul.Tensor),
    "div": (aten.div.Tensor, aten.div.Tensor),
    "pow": (aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar),
    "clamp_min": (aten.clamp_min.Tensor, aten.clamp_min.default),
    "clamp_max": (aten.clamp_max.Tensor, aten.clamp_max.default),
    "maximum": (aten.maximum.default, aten.clamp_min.default),
    "minimum": (aten.minimum.default, aten.clamp_max.default),
}

_UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
          "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
          "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
          "zero"]


def _same_length(a, b):
    if len(a) != len(b):
        raise RuntimeError(
            f"Tensor lists must have the same number of tensors, got {len(a)} and {len(b)}")


def _scalar_list(tensors, scalars):
    if len(tensors) != len(scalars):
        raise RuntimeError("Tensor list must have same number of elements as scalar list, "
                           f"got {len(tensors)} and {len(scalars)}")


def _check(self, *lists):
    if len(self) == 0:
        raise RuntimeError("Tensor list must have at least one tensor.")
    for other in lists:
        _same_length(self, other)


def _each(op, self, *lists, **kwargs):
    """[op(self[i], lists[0][i], ..., **kwargs)], each through the lowering
    table (complex, decompositions and the counted fallback included)."""
    _check(self, *lists)
    for other in lists:
        _same_device(self, other)
    return [lowering._dispatch(op, args, kwargs) for args in zip(self, *lists)]


def _same_device(self, other):
    """A list of CPU tensors stays an error, as PyTorch's foreach check
    gives it, though add/mul/... of one CPU tensor copies it over
    (elementwise._on_device)."""
    for t in other:
        if isinstance(t, torch.Tensor) and t.device.type != "xla" and t.dim() > 0:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {self[0].device} and {t.device}!")


def _unary(name):
    op = getattr(aten, name).default
    return lambda self: _each(op, self)


for _name in _UNARY:
    lowers(getattr(aten, "_foreach_" + _name).default)(_unary(_name))


@lowers(aten._foreach_clone.default)
def foreach_clone(self, memory_format=None):
    return _each(aten.clone.default, self, memory_format=memory_format)


@lowers(aten._foreach_copy.default)
def foreach_copy(self, src, non_blocking=False):
    return _each(aten.copy.default, self, src, [non_blocking] * len(self))


def _binary(name, tensor_op, scalar_op):
    def with_list(self, other, alpha=None):
        return _each(tensor_op, self, other, **({} if alpha is None else {"alpha": alpha}))

    def with_tensor(self, other, alpha=None):
        return with_list(self, [other] * len(self), alpha)

    def with_scalar(self, scalar):
        return _each(scalar_op, self, [scalar] * len(self))

    def with_scalars(self, scalars):
        _scalar_list(self, scalars)
        return _each(scalar_op, self, scalars)

    packet = getattr(aten, "_foreach_" + name)
    for overload, fn in (("List", with_list), ("Tensor", with_tensor), ("Scalar", with_scalar),
                         ("ScalarList", with_scalars)):
        if overload in packet.overloads():
            lowers(getattr(packet, overload))(fn)


for _name, (_t, _s) in _BINARY.items():
    _binary(_name, _t, _s)


@lowers(aten._foreach_pow.ScalarAndTensor)
def foreach_pow_scalar_and_tensor(self, exponent):
    return _each(aten.pow.Scalar, [self] * len(exponent), exponent)


def _addc(name):
    op = getattr(aten, name).default

    def run(self, tensor1, tensor2, values):
        # value is keyword-only in the element op: not one of _each's lists
        _check(self, tensor1, tensor2)
        return [lowering._dispatch(op, (x, a, b), {"value": v})
                for x, a, b, v in zip(self, tensor1, tensor2, values)]

    def with_scalar(self, tensor1, tensor2, value=1):
        return run(self, tensor1, tensor2, [value] * len(self))

    def with_scalars(self, tensor1, tensor2, scalars):
        _scalar_list(self, scalars)
        return run(self, tensor1, tensor2, scalars)

    def with_tensor(self, tensor1, tensor2, scalars):
        if scalars.dim() != 1:
            raise RuntimeError(f"Expected scalars to be a 1-D tensor, got {scalars.dim()}-D")
        if scalars.device.type != "cpu":
            # PyTorch reads the values on the host as well.
            scalars = scalars.cpu()
        return with_scalars(self, tensor1, tensor2, scalars.tolist())

    packet = getattr(aten, "_foreach_" + name)
    lowers(packet.Scalar)(with_scalar)
    lowers(packet.ScalarList)(with_scalars)
    lowers(packet.Tensor)(with_tensor)


_addc("addcmul")
_addc("addcdiv")


@lowers(aten._foreach_lerp.Scalar)
def foreach_lerp_scalar(self, tensors1, weight):
    return _each(aten.lerp.Scalar, self, tensors1, [weight] * len(self))


@lowers(aten._foreach_lerp.ScalarList)
def foreach_lerp_scalars(self, tensors1, weight):
    _scalar_list(self, weight)
    return _each(aten.lerp.Scalar, self, tensors1, weight)


@lowers(aten._foreach_lerp.List)
def foreach_lerp_list(self, tensors1, weights):
    return _each(aten.lerp.Tensor, self, tensors1, weights)


@lowers(aten._foreach_norm.Scalar)
def foreach_norm(self, ord=2, dtype=None):
    return _each(aten.linalg_vector_norm.default, self, [ord] * len(self), dtype=dtype)


@lowers(aten._foreach_max.default)
def foreach_max(self):
    return _each(aten.max.default, self)


@lowers(aten._foreach_mm.default)
def foreach_mm(self, mat2):
    return _each(aten.mm.default, self, mat2)
