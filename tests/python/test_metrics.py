"""Part 6 of issue 2: torch_xla.debug.metrics names and report format."""
import re

import torch

import torch_xla
import torch_xla.debug.metrics as met


def test_names_and_values(clean_metrics, dev):
    x = torch.randn(3, 3).to(dev)
    (x @ x).cpu()
    torch_xla.sync()
    names = met.metric_names()
    for n in ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime"):
        assert n in names, names
    counters = met.counter_names()
    for n in ("UncachedCompile", "CreateXlaTensor", "MarkStep"):
        assert n in counters, counters
    assert met.counter_value("UncachedCompile") >= 1
    assert met.counter_value("NoSuchCounter") is None
    total, acc, samples = met.metric_data("CompileTime")
    assert total >= 1 and acc > 0 and len(samples) == total
    assert all(isinstance(ts, int) and v > 0 for ts, v in samples)
    assert met.metric_data("NoSuchMetric") is None


BLOCK = (r"Metric: {}\n  TotalSamples: (\d+)\n  Accumulator: (\S+)\n"
         r"  ValueRate: (\S+) / second\n  Rate: (\S+) / second\n"
         r"  Percentiles: 1%=(\S+); 5%=\S+; 10%=\S+; 20%=\S+; 50%=\S+; 80%=\S+; "
         r"90%=\S+; 95%=\S+; 99%=(\S+)\n")
TIME = (r"(\d+[dhms])*\d{3}ms\d{3}\.\d{3}us|\d{3}\.\d{3}us|\d{3}ms\d{3}\.\d{3}us"
        r"|\d{2}s\d{3}ms\d{3}\.\d{3}us")


def test_report_format(clean_metrics, dev):
    # A graph no other test builds (shape and op chain), so it compiles here.
    x = torch.ones(1301).to(dev)
    (((x + 1) * 7.25 - 3).cos().floor_divide(2) * -1).cpu()
    report = met.metrics_report()
    for name in ("CompileTime", "ExecuteTime"):
        block = re.search(BLOCK.format(name), report)
        assert block, (name, report)
        assert int(block.group(1)) >= 1
        assert re.fullmatch(TIME, block.group(2)), block.group(2)
        assert re.fullmatch(TIME, block.group(5)), block.group(5)
    assert re.search(r"Counter: UncachedCompile\n  Value: \d+\n", report)
    assert report.index("Metric:") < report.index("Counter:")


def test_short_report_and_fallbacks(clean_metrics, dev):
    x = torch.tensor([3.0, 1.0, 2.0]).to(dev)
    # An op with no lowering (the Airy function): CPU fallback, counted.
    # (nonzero, used here before, is now lowered with a counted sync.)
    torch.special.airy_ai(x).cpu()
    short = met.short_metrics_report()
    assert "Metric: CompileTime" in short or "Metric: TransferToDeviceTime" in short
    assert "Counter: aten::special_airy_ai\n  Value: 1\n" in short
    assert "CreateXlaTensor" not in short
    assert met.executed_fallback_ops() == ["aten::special_airy_ai"]
    assert met.counter_value("aten::special_airy_ai") == 1


def test_clear(dev):
    (torch.ones(2).to(dev) * 3).cpu()
    met.clear_counters()
    assert met.counter_names() == []
    assert met.metric_names() != []
    met.clear_all()
    assert met.metric_names() == [] and met.counter_names() == []
    assert met.metrics_report() == ""


def test_exec_profile_metrics_per_op():
    """TORCHTPU_EXEC_PROFILE=1 times every executed instruction into
    ExecuteOp.<op> metrics (checked in a fresh process: the switch is read
    once)."""
    import subprocess
    import sys
    code = ("import torch, torch_xla, torch_xla.debug.metrics as met\n"
            "a = torch.randn(64, 64).to('xla'); b = torch.randn(64, 64).to('xla')\n"
            "((a @ b).t().reshape(-1) * 2).sum().item()\n"
            "names = [n for n in met.metric_names() if n.startswith('ExecuteOp.')]\n"
            "print(sorted(names)); print(all(met.metric_data(n)[1] > 0 for n in names))\n")
    env = dict(__import__("os").environ, TORCHTPU_EXEC_PROFILE="1", TORCHTPU_TIER="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    names_line, positive = r.stdout.strip().splitlines()[-2:]
    assert "'ExecuteOp.dot'" in names_line and positive == "True", r.stdout
    env["TORCHTPU_EXEC_PROFILE"] = "0"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.stdout.strip().splitlines()[-2] == "[]", r.stdout
