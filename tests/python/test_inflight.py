"""How far the host may run ahead of the device (TORCHTPU_MAX_INFLIGHT,
src/runtime/device.c tt_runtime_throttle): a loop that never reads a value
queues at most that many step graphs per device, then each step boundary
waits (counted as DeviceQueueWait) instead of queueing every step's inputs
without bound. Results do not depend on the limit.

The assertions hold whatever the relative speed of recording and
execution: a device finishes a graph (its ExecuteTime sample) before it
leaves the queue, so once a step boundary has passed, at most limit - 1 of
the graphs queued before it can still be unfinished. How often the host
actually had to wait depends on the speeds and is not asserted; the
workload (execution far slower than recording) is what lets a broken limit
show."""
import pytest

from child import run_json

STEPS = 8

LOOP = r"""
import json, torch, torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
torch.manual_seed(0)
dev = torch_xla.device()
w = torch.randn(384, 384).to(dev) / 20
x = torch.randn(384, 384).to(dev)
torch_xla.sync(wait=True)
met.clear_counters()

def finished():
    data = met.metric_data("ExecuteTime")
    return data[0] if data else 0

base = finished()
in_flight = []
for k in range(%d):
    with torch_xla.step():
        # The step's opening boundary has passed: of the k step graphs
        # queued before, this many are not finished yet.
        in_flight.append(k - (finished() - base))
        for _ in range(12):
            x = torch.tanh(x @ w)
xm.wait_device_ops()
done = finished() - base
print(json.dumps({"waits": met.counter_value("DeviceQueueWait") or 0,
                  "in_flight": in_flight, "finished": done,
                  "sum": x.sum().item()}))
""" % STEPS


def check_bounded(out, limit):
    """Every step started with at most limit - 1 earlier step graphs
    unfinished, and every step ran exactly one graph."""
    assert len(out["in_flight"]) == STEPS, out
    assert all(0 <= n <= limit - 1 for n in out["in_flight"]), out
    assert out["finished"] == STEPS, out


@pytest.fixture(scope="module")
def unbounded():
    return run_json(LOOP, TORCHTPU_MAX_INFLIGHT="100", TORCHTPU_TIER="0")


def test_a_limit_past_the_loop_never_waits(unbounded):
    """With room for 100 graphs, eight steps never fill the queue: no
    boundary waits, and each step still runs one graph."""
    assert unbounded["waits"] == 0, unbounded
    check_bounded(unbounded, 100)


@pytest.mark.parametrize("limit", ["1", None], ids=["1", "default"])
def test_step_boundaries_wait_for_the_device_past_the_limit(limit, unbounded):
    """With the limit at 1 every step starts with the device idle; at the
    default 2 with at most one earlier step unfinished; the values agree
    with the unbounded loop's."""
    env = {"TORCHTPU_MAX_INFLIGHT": limit} if limit else {}
    bounded = run_json(LOOP, TORCHTPU_TIER="0", **env)
    check_bounded(bounded, int(limit or 2))
    if limit == "1":
        assert bounded["in_flight"] == [0] * STEPS, bounded
    assert bounded["sum"] == pytest.approx(unbounded["sum"], rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("value", ["0", "two"])
def test_bad_limits_fall_back_to_the_default(value, unbounded):
    """A value that is not a positive integer is ignored, as for
    TORCHTPU_NUM_THREADS: the default limit of 2 applies."""
    out = run_json(LOOP, TORCHTPU_MAX_INFLIGHT=value, TORCHTPU_TIER="0")
    check_bounded(out, 2)
    assert out["sum"] == pytest.approx(unbounded["sum"], rel=1e-6, abs=1e-6)
