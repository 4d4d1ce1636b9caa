"""torch_xla._dynamo.dynamo_backend2: PyTorch/XLA's experimental dynamo
backend that traces the FX graph through torchax (JAX) and lowers it to
HLO. It needs torchax and jax, which this project does not install:
importing the module works, calling the backend raises ImportError as
PyTorch/XLA does without torchax."""


def _require_torchax():
    try:
        import torchax  # noqa: F401
        import jax  # noqa: F401
    except ImportError:
        print('To use this dynamo backend, please install torchax')
        raise
    raise NotImplementedError(
        "dynamo_backend2 lowers JAX computations (xb.call_jax), which this engine does not "
        "run: use torch.compile(backend='openxla')")


def _dynamo_backend(model, sample_args):
    _require_torchax()


def dynamo_backend(fx, args):
    _require_torchax()
