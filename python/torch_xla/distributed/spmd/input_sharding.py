"""Sharding loaded batches: MpDeviceLoader / ParallelLoader input_sharding.

Contract: shard_batch(batch, input_sharding) annotates the xla tensors of
a batch already on its device and returns the batch.
- input_sharding a ShardingSpec: every tensor whose rank equals the spec's
  length is marked with it (PyTorch/XLA's "compatible" tensors); the
  others are left unsharded.
- input_sharding a dict {key: ShardingSpec}: the batch must be a dict
  (else ValueError); each key's tensor is marked with its spec; keys the
  dict lacks are a KeyError naming them (as PyTorch/XLA's loader raises).
- A spec with minibatch=True requires the batch dim (0) of each marked
  tensor to divide by the local runtime device count (RuntimeError, as
  PyTorch/XLA).
"""
import torch


def _apply(t, spec):
    import torch_xla.runtime as xr
    if not isinstance(t, torch.Tensor) or not spec.can_apply(t):
        return t
    if spec.minibatch and t.dim() > 0:
        n = xr.addressable_runtime_device_count()
        if t.shape[0] % n:
            raise RuntimeError(
                "When minibatch is configured, the per-host batch size must be divisible by "
                f"local runtime device count. Per host input data shape = {t.size()}, "
                f"local_runtime_device_count = {n}")
    spec.apply(t)
    return t


def _each_tensor(data, fn):
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, (list, tuple)):
        for d in data:
            _each_tensor(d, fn)
    elif isinstance(data, dict):
        for d in data.values():
            _each_tensor(d, fn)
    return data


def shard_batch(batch, input_sharding):
    if input_sharding is None:
        return batch
    if isinstance(input_sharding, dict):
        if not isinstance(batch, dict):
            raise ValueError("input batch should be a dict when input sharding is a dict.")
        missing = [k for k in batch if k not in input_sharding]
        if missing:
            raise KeyError(f"Keys: {missing} are missing from input_sharding.")
        for k, v in batch.items():
            _each_tensor(v, lambda t, s=input_sharding[k]: _apply(t, s))
        return batch
    return _each_tensor(batch, lambda t: _apply(t, input_sharding))
