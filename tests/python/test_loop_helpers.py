"""Part 9 of issue 2: MpDeviceLoader, ParallelLoader, step closures,
RateTracker, master_print, SampleGenerator."""
import io
import time

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.distributed.parallel_loader import MpDeviceLoader, ParallelLoader
from torch_xla.utils.utils import SampleGenerator


def _loader(n=10, bs=4):
    ds = torch.utils.data.TensorDataset(torch.arange(n * bs, dtype=torch.float32).view(n * bs, 1),
                                        torch.arange(n * bs))
    return torch.utils.data.DataLoader(ds, batch_size=bs)


def test_mp_device_loader(clean_metrics, dev):
    seen = []
    for x, y in MpDeviceLoader(_loader(), dev):
        assert x.device == dev and y.device == dev
        seen.append(y.cpu())
    assert torch.equal(torch.cat(seen), torch.arange(40))
    # One mark_step per batch, plus one at the end.
    assert met.counter_value("MarkStep") >= 10
    assert len(MpDeviceLoader(_loader(), dev)) == 10


def test_batches_per_execution(clean_metrics, dev):
    n = 0
    for _ in MpDeviceLoader(_loader(8), dev, batches_per_execution=4):
        n += 1
    assert n == 8
    steps = met.counter_value("MarkStep")
    assert 2 <= steps <= 4, steps


def test_parallel_loader_two_devices():
    devices = [torch.device("xla:0"), torch.device("xla:1")]
    pl = ParallelLoader(_loader(6), devices)
    got = {d: [] for d in devices}
    for d in devices:
        for x, y in pl.per_device_loader(d):
            assert x.device == d
            got[d].append(y.cpu())
    all_y = torch.cat(got[devices[0]] + got[devices[1]]).sort().values
    assert torch.equal(all_y, torch.arange(24))
    assert len(got[devices[0]]) == 3 and len(got[devices[1]]) == 3


def test_plain_dataloader_to_xla(dev):
    total = torch.zeros((), device=dev)
    for x, _ in _loader():
        total = total + x.to(dev).sum()
    torch_xla.sync()
    assert total.item() == sum(range(40))


def test_step_closure_runs_after_sync(dev):
    out = []
    x = torch.ones(2).to(dev) * 5
    xm.add_step_closure(lambda t: out.append(t.cpu().tolist()), args=(x,))
    assert out == []
    xm.mark_step()
    assert out == [[5.0, 5.0]]
    torch_xla.sync()
    assert len(out) == 1


def test_rate_tracker():
    rt = xm.RateTracker()
    rt.add(100)
    time.sleep(0.05)
    r = rt.rate()
    assert 100 < r < 100 / 0.05 * 1.5
    assert rt.global_rate() > 0


def test_master_print():
    buf = io.StringIO()
    xm.master_print("hello", 3, fd=buf)
    assert buf.getvalue() == "hello 3\n"


def test_sample_generator():
    data = (torch.ones(2), torch.zeros(2))
    gen = SampleGenerator(data, 3)
    items = list(gen)
    assert len(items) == 3 and len(gen) == 3
    assert all(i is data for i in items)
    assert len(list(gen)) == 3  # re-iterable
