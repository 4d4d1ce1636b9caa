"""Issue 6, part 3: torch_xla.debug.profiler (Trace, StepTrace, trace_me,
start_trace/stop_trace, start_server + trace) writing Chrome/Perfetto trace
JSON with the engine's compile, execute and transfer spans. The JSON is
loaded and its spans are checked for names, categories, threads, nesting
and causal order."""
import gzip
import json
import os
import threading
import time

import pytest
import torch

import torch_xla
import torch_xla.debug.profiler as xp
from torchtpu import debugging


def spans(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def thread_names(trace):
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def end(e):
    return e["ts"] + e["dur"]


def inside(inner, outer):
    return (inner["tid"] == outer["tid"] and outer["ts"] <= inner["ts"]
            and end(inner) <= end(outer))


def assert_well_nested(trace):
    """On each thread, any two spans are disjoint or one contains the other."""
    by_tid = {}
    for e in spans(trace):
        assert e["dur"] >= 0 and e["ts"] >= 0, e
        by_tid.setdefault(e["tid"], []).append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and end(stack[-1]) <= e["ts"]:
                stack.pop()
            if stack:
                assert end(e) <= end(stack[-1]), (e, stack[-1])
            stack.append(e)


def one(trace, name, **match):
    found = [e for e in spans(trace) if e["name"] == name and
             all(e.get("args", {}).get(k) == v for k, v in match.items())]
    assert len(found) == 1, (name, match, found)
    return found[0]


def test_step_trace_run_written_as_chrome_trace(tmp_path, dev):
    torch_xla.sync(wait=True)
    xp.start_trace(str(tmp_path))
    with xp.StepTrace("train_step", step_num=3):
        with xp.Trace("forward", batch=2):
            x = torch.randn(97, 89).to(dev)
            y = (x @ x.T).relu()
    total = y.sum().item()
    path = xp.stop_trace()
    # TensorBoard's profile-plugin layout, gzipped Chrome trace JSON.
    rel = os.path.relpath(path, tmp_path).split(os.sep)
    assert rel[:2] == ["plugins", "profile"] and rel[3].endswith(".trace.json.gz")
    trace = json.loads(gzip.open(path).read())
    assert trace["otherData"]["dropped_events"] == 0
    assert_well_nested(trace)
    names = thread_names(trace)
    step = one(trace, "train_step")
    fwd = one(trace, "forward")
    assert step["cat"] == "step" and step["args"] == {"step_num": 3}
    assert fwd["cat"] == "user" and fwd["args"] == {"batch": 2}
    assert inside(fwd, step)
    assert names[step["tid"]] == "python MainThread"
    # The upload happens in the forward region, on the same thread.
    up = [e for e in spans(trace) if e["name"] == "TransferToDevice"
          and e["args"]["bytes"] == 97 * 89 * 4]
    assert len(up) == 1 and up[0]["cat"] == "transfer" and inside(up[0], fwd)
    # Leaving the StepTrace cuts the graph: build, compile inside the sync,
    # inside the step region.
    syncs = [e for e in spans(trace) if e["name"] == "SyncTensorsGraph" and inside(e, step)]
    assert len(syncs) == 1
    compiles = [e for e in spans(trace) if e["name"] == "Compile" and inside(e, syncs[0])]
    builds = [e for e in spans(trace) if e["name"] == "BuildGraph" and inside(e, syncs[0])]
    assert len(compiles) == 1 and len(builds) == 1
    assert compiles[0]["cat"] == "compile"
    assert compiles[0]["args"]["hash"] == builds[0]["args"]["hash"]
    assert builds[0]["args"]["cached"] == 0 and end(builds[0]) <= compiles[0]["ts"]
    # It executes on the device's worker thread, after the compile.
    ex = one(trace, "Execute", hash=compiles[0]["args"]["hash"])
    assert ex["cat"] == "execute" and names[ex["tid"]] == "xla:0"
    assert ex["tid"] != step["tid"] and ex["ts"] >= end(compiles[0])
    # .item() cuts the sum's graph, runs it, then copies 4 bytes back.
    down = [e for e in spans(trace) if e["name"] == "TransferFromDevice"]
    assert [d["args"]["bytes"] for d in down] == [4]
    last_exec = max((e for e in spans(trace) if e["name"] == "Execute"), key=end)
    assert down[0]["ts"] >= end(last_exec)
    assert total == pytest.approx(torch.relu(x.cpu() @ x.cpu().T).sum().item(), rel=1e-4)


def test_only_one_trace_at_a_time(tmp_path):
    with pytest.raises(RuntimeError, match="No profile started"):
        xp.stop_trace()
    xp.start_trace(str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="Profile has already been started"):
            xp.start_trace(str(tmp_path))
        with pytest.raises(RuntimeError, match="a trace is already being recorded"):
            debugging.start_trace()
    finally:
        xp.stop_trace()


def test_trace_me_threads_and_chrome_json_file(tmp_path, dev):
    @xp.trace_me("decorated")
    def work(n):
        return (torch.ones(n).to(dev) * 2).sum().item()

    debugging.start_trace()
    results = []

    def worker():
        with xp.Trace("in_thread"):
            results.append(work(101))

    t = threading.Thread(target=worker, name="loader")
    t.start()
    with xp.Trace("in_main"):
        results.append(work(103))
    t.join()
    path = debugging.stop_trace(tmp_path / "trace.json")
    trace = json.load(open(path))
    assert_well_nested(trace)
    names = thread_names(trace)
    main, other = one(trace, "in_main"), one(trace, "in_thread")
    assert main["tid"] != other["tid"]
    assert names[main["tid"]] == "python MainThread" and names[other["tid"]] == "python loader"
    decorated = [e for e in spans(trace) if e["name"] == "decorated"]
    assert sorted(e["tid"] for e in decorated) == sorted([main["tid"], other["tid"]])
    assert all(inside(d, main) or inside(d, other) for d in decorated)
    assert sorted(results) == [202.0, 206.0]
    # Names with quotes and newlines stay valid JSON.
    debugging.start_trace()
    with xp.Trace('odd "name"\n\twith\\escapes'):
        pass
    trace = debugging.stop_trace()
    assert one(trace, 'odd "name"\n\twith\\escapes')["cat"] == "user"


def test_spans_outside_a_session_are_not_recorded(dev):
    with xp.Trace("before"):
        debugging.start_trace()
        with xp.Trace("during"):
            pass
    with xp.Trace("opened_during"):
        trace = debugging.stop_trace()
    assert [e["name"] for e in spans(trace)] == ["during"]
    assert not debugging.trace_active()


def test_start_server_and_trace_detached_capture_this_process(tmp_path, dev):
    server = xp.start_server(9012)
    try:
        with pytest.raises(RuntimeError, match="already running on port 9012"):
            xp.start_server(9012)
        with pytest.raises(RuntimeError, match="captures traces in-process only"):
            xp.trace("10.0.0.2:8466", str(tmp_path), duration_ms=10)
        thread = xp.trace_detached("localhost:9012", str(tmp_path), duration_ms=1500)
        deadline = time.time() + 10
        while not debugging.trace_active() and time.time() < deadline:
            time.sleep(0.01)
        assert debugging.trace_active()
        with xp.Trace("captured"):
            v = (torch.ones(107).to(dev) + 1).sum().item()
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        server.close()
    files = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs]
    assert len(files) == 1 and files[0].endswith(".trace.json.gz")
    trace = json.loads(gzip.open(files[0]).read())
    assert one(trace, "captured")["cat"] == "user"
    assert v == 214.0
    with pytest.raises(RuntimeError, match="captures traces in-process only"):
        xp.trace("localhost:9012", str(tmp_path), duration_ms=10)  # closed


def test_checkpoint_spans(tmp_path, dev):
    import torch_xla.utils.serialization as xser
    debugging.start_trace()
    xser.save({"a": torch.ones(109).to(dev)}, str(tmp_path / "c"))
    xser.load(str(tmp_path / "c"))
    trace = debugging.stop_trace()
    save, load = one(trace, "xser.save"), one(trace, "xser.load")
    assert save["cat"] == load["cat"] == "checkpoint" and save["args"] == {"tensors": 1}
    assert end(save) <= load["ts"]
    downs = [e for e in spans(trace) if e["name"] == "TransferFromDevice"]
    assert len(downs) == 1 and inside(downs[0], save) and downs[0]["args"]["bytes"] == 109 * 4
