"""How far the host may run ahead of the device (TORCHTPU_MAX_INFLIGHT,
src/runtime/device.c tt_runtime_throttle): a loop that never reads a value
queues at most that many step graphs per device, then each step boundary
waits (counted as DeviceQueueWait) instead of queueing every step's inputs
without bound. Results do not depend on the limit."""
import pytest

from child import run_json

LOOP = r"""
import json, time, torch, torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
torch.manual_seed(0)
dev = torch_xla.device()
w = torch.randn(384, 384).to(dev) / 20
x = torch.randn(384, 384).to(dev)
torch_xla.sync(wait=True)
met.clear_counters()
for _ in range(8):
    with torch_xla.step():
        for _ in range(12):
            x = torch.tanh(x @ w)
xm.wait_device_ops()
print(json.dumps({"waits": met.counter_value("DeviceQueueWait") or 0,
                  "sum": x.sum().item()}))
"""


@pytest.fixture(scope="module")
def unbounded():
    return run_json(LOOP, TORCHTPU_MAX_INFLIGHT="100", TORCHTPU_TIER="0")


@pytest.mark.parametrize("limit", ["1", None], ids=["1", "default"])
def test_step_boundaries_wait_for_the_device_past_the_limit(limit, unbounded):
    """Eight steps whose execution (12 products of 384^3) takes far longer
    than their recording: with the limit at 1 or the default 2 the
    boundaries wait; with a limit past the loop's length none does; the
    values agree."""
    env = {"TORCHTPU_MAX_INFLIGHT": limit} if limit else {}
    bounded = run_json(LOOP, TORCHTPU_TIER="0", **env)
    assert bounded["waits"] >= 8 - int(limit or 2) - 2, bounded
    assert unbounded["waits"] == 0, unbounded
    assert bounded["sum"] == pytest.approx(unbounded["sum"], rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("value", ["0", "two"])
def test_bad_limits_fall_back_to_the_default(value, unbounded):
    """A value that is not a positive integer is ignored, as for
    TORCHTPU_NUM_THREADS: the default limit applies."""
    out = run_json(LOOP, TORCHTPU_MAX_INFLIGHT=value, TORCHTPU_TIER="0")
    assert out["sum"] == pytest.approx(unbounded["sum"], rel=1e-6, abs=1e-6)
    assert out["waits"] > 0, out
