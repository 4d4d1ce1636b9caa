"""torch_xla.distributed.parallel_loader: background host-to-device input
pipelines (ParallelLoader, MpDeviceLoader), as in PyTorch/XLA.

A loader thread pulls batches from the CPU loader and round-robins them to
one queue per device; a transfer thread per device moves each batch to its
device ahead of use. Iterating a PerDeviceLoader cuts the graph (torch_xla.sync)
every `batches_per_execution` batches.
"""
import queue
import threading

import torch

import torch_xla
from torch_xla.core import xla_model as xm

_END = object()


class PerDeviceLoader:
    def __init__(self, loader, device):
        self._loader = loader
        self._device = device
        self._mark_step_batch_count = loader.batches_per_execution - 1
        self._batches_yielded = 0

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def __len__(self):
        return self._loader.per_device_samples()

    def next(self):
        if self._mark_step_batch_count <= self._batches_yielded:
            self._batches_yielded = 0
            torch_xla.sync()
        else:
            self._batches_yielded += 1
        item = self._loader.next_item(self._device)
        if item is _END:
            torch_xla.sync()
            raise StopIteration
        return item


class ParallelLoader:
    """Wraps a CPU data loader and feeds each of `devices` in the background.

    Args:
      cpu_loader: any iterable of batches (nested tensors).
      devices: the xla devices to feed.
      batchdim: the batch dimension (kept for API compatibility).
      batches_per_execution: batches per graph cut (mark_step).
      loader_prefetch_size: capacity of the host-side queue per device.
      device_prefetch_size: capacity of the on-device queue per device.
      host_to_device_transfer_threads: transfer threads per device.
      input_sharding: a ShardingSpec, or a dict of them keyed like the batch,
        applied to each batch once on its device (spmd/input_sharding.py).
    """

    def __init__(self, cpu_loader, devices, batchdim=0, batches_per_execution=1,
                 loader_prefetch_size=16, device_prefetch_size=1,
                 host_to_device_transfer_threads=1, input_sharding=None):
        self._input_sharding = input_sharding
        if batches_per_execution < 1:
            raise ValueError(f"batches_per_execution must be >= 1, got {batches_per_execution}")
        self._cpu_loader = cpu_loader
        self._devices = [torch.device(d) for d in devices]
        self._batchdim = batchdim
        self.batches_per_execution = batches_per_execution
        self._done = False
        self._queues = {d: queue.Queue(maxsize=loader_prefetch_size) for d in self._devices}
        self._device_queues = {d: queue.Queue(maxsize=max(device_prefetch_size, 1))
                               for d in self._devices}
        self._errors = []
        self._threads = []
        t = threading.Thread(target=self._loader_worker, daemon=True)
        t.start()
        self._threads.append(t)
        for dev in self._devices:
            for _ in range(max(host_to_device_transfer_threads, 1)):
                t = threading.Thread(target=self._transfer_worker, args=(dev,), daemon=True)
                t.start()
                self._threads.append(t)
                break  # one ordered transfer thread per device keeps batch order

    def per_device_loader(self, device):
        return PerDeviceLoader(self, torch.device(device))

    def per_device_samples(self):
        try:
            return len(self._cpu_loader) // len(self._devices)
        except TypeError:
            return 0

    def close(self):
        self._done = True

    def _loader_worker(self):
        try:
            it = iter(self._cpu_loader)
            while not self._done:
                batches = []
                for _ in self._devices:
                    try:
                        batches.append(next(it))
                    except StopIteration:
                        break
                if len(batches) < len(self._devices):
                    break
                for dev, batch in zip(self._devices, batches):
                    self._queues[dev].put(batch)
        except BaseException as e:  # surfaced to the consumer
            self._errors.append(e)
        finally:
            for dev in self._devices:
                self._queues[dev].put(_END)

    def _transfer_worker(self, device):
        while True:
            item = self._queues[device].get()
            if item is _END:
                self._device_queues[device].put(_END)
                return
            try:
                # One batch in a list, so a batch that is a lone tensor comes
                # back as that tensor (send_cpu_data_to_device lists it).
                item = xm.send_cpu_data_to_device([item], device)[0]
                if self._input_sharding is not None:
                    from torch_xla.distributed.spmd.input_sharding import shard_batch
                    item = shard_batch(item, self._input_sharding)
            except BaseException as e:
                self._errors.append(e)
                self._device_queues[device].put(_END)
                return
            self._device_queues[device].put(item)

    def next_item(self, device):
        item = self._device_queues[device].get()
        if item is _END:
            self._device_queues[device].put(_END)  # stay exhausted
            if self._errors:
                raise self._errors[0]
        return item


class MpDeviceLoader:
    """Wraps a DataLoader for one device: iterating it yields batches already
    on `device` and cuts the graph every `batches_per_execution` batches."""

    def __init__(self, loader, device, **kwargs):
        self._loader = loader
        self._device = device
        self._parallel_loader_kwargs = kwargs

    def __iter__(self):
        parallel_loader = ParallelLoader(self._loader, [self._device],
                                         **self._parallel_loader_kwargs)
        return parallel_loader.per_device_loader(self._device)

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):
        # Everything else is the wrapped DataLoader's (dataset, batch_size,
        # sampler): accelerate's save_state/load_state read loader.dataset
        # through its MpDeviceLoader subclass.
        if name.startswith('_'):
            raise AttributeError(name)
        return getattr(self._loader, name)


_ = torch_xla
