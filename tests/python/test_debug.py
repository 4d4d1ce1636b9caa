"""Issue 6, part 2 and 4: PT_XLA_DEBUG analysis blocks, recompilation diffs,
XLA_SAVE_TENSORS_FILE, XLA_IR_DEBUG, TORCHTPU_DUMP_DIR, the XRT warning and
the "runtime already initialized" check.

The output is parsed the way PyTorch/XLA's own debug tests parse it (line
after "Compilation Cause", fixed offsets after "Graph Info", frames up to
the dashed line). Graphs are compiled only once per process, so every test
uses shapes no other test uses."""
import inspect
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp
from torchtpu import config, debugging

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


# ----------------------------------------------------- PyTorch/XLA-style parsers
def blocks(text, prefix):
    """The lines of each block with the given prefix, prefix stripped."""
    out, cur = [], None
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        body = line[len(prefix):]
        if body.startswith("=" * 80) and cur is None:
            cur = []
        elif body.startswith("=" * 80):
            out.append(cur)
            cur = None
        elif cur is not None:
            cur.append(body)
    return out


def parse_block(lines):
    """{'cause', 'name', 'hash', 'inputs', 'outputs', 'recompile', 'frames'}."""
    info = {"name": None, "recompile": [], "frames": []}
    i = 0
    assert lines[0] in ("Compilation Cause", "Execution Cause"), lines
    info["cause"] = lines[1].strip()
    assert lines[2] == "Graph Info: ", lines
    i = 3
    if lines[i].startswith("  Graph Name: "):
        info["name"] = lines[i].split("Graph Name: ")[1]
        i += 1
    info["hash"] = lines[i].split("Graph Hash: ")[1]
    info["inputs"] = int(lines[i + 1].split("Number of Graph Inputs: ")[1])
    info["outputs"] = int(lines[i + 2].split("Number of Graph Outputs: ")[1])
    i += 3
    if lines[i] == "Recompilation Cause":
        i += 1
        while lines[i].startswith("  "):
            info["recompile"].append(lines[i][2:])
            i += 1
    assert lines[i] == "Python Frame Triggered Execution: ", lines
    i += 1
    while not lines[i].startswith("-" * 80):
        info["frames"].append(lines[i][2:])
        i += 1
    return info


def post_compilation(text):
    out = []
    for b in blocks(text, "Post Compilation Analysis: "):
        d = {}
        for line in b[:-1]:
            k, v = line.split(": ")
            assert v.endswith(" GB"), line
            d[k] = float(v[:-3])
        out.append(d)
    return out


@pytest.fixture
def debug_file(tmp_path, dev):
    path = tmp_path / "debug.txt"
    torch_xla.sync(wait=True)
    with debugging.settings(level=2, debug_file=str(path), max_frames=8):
        yield path


def read(path):
    return path.read_text() if path.exists() else ""


def lineno():
    return inspect.currentframe().f_back.f_lineno


# ---------------------------------------------------------------- analysis
def test_compilation_post_compilation_and_execution_blocks(debug_file, dev):
    a = torch.ones(256, 1024).to(dev)
    b = torch.full((256, 1024), 2.0).to(dev)
    c = (a + b) * 3
    line = lineno() + 1
    torch_xla.sync()
    text = read(debug_file)
    comp = [parse_block(b) for b in blocks(text, "Compilation Analysis: ")]
    execs = [parse_block(b) for b in blocks(text, "Execution Analysis: ")]
    assert len(comp) == 1 and len(execs) == 1, text
    assert comp[0]["cause"] == "user torch_xla.sync"
    assert re.fullmatch(r"[0-9a-f]{16}", comp[0]["hash"])
    assert comp[0]["hash"] == execs[0]["hash"]
    assert (comp[0]["inputs"], comp[0]["outputs"]) == (execs[0]["inputs"], 1)
    assert comp[0]["recompile"] == []
    # Frames: innermost first, torch_xla.sync, then this test's line.
    assert re.fullmatch(r"sync \(.*torch_xla/__init__\.py:\d+\)", comp[0]["frames"][0])
    assert f"test_compilation_post_compilation_and_execution_blocks ({__file__}:{line})" in \
        comp[0]["frames"]
    assert execs[0]["frames"] == comp[0]["frames"]
    # "Computation hash" precedes the post-compilation block, as in PyTorch/XLA.
    assert f"\nComputation hash: {comp[0]['hash']}\n" in text
    post = post_compilation(text)
    assert len(post) == 1
    mb = 1 / 1024  # 1 MiB in GiB; a, b and c are 1 MiB each
    assert post[0]["Graph output size"] == pytest.approx(mb, abs=1e-6)
    assert post[0]["Graph input size"] >= 2 * mb - 1e-6
    assert post[0]["Graph input size"] < 2 * mb + 1e-4  # plus scalar inputs
    assert post[0]["Aliased Input size"] == 0.0
    assert 0.0 <= post[0]["Intermediate tensor size"] <= mb + 1e-6
    assert post[0]["Compiled program size"] > 0.0
    assert torch.equal(c.cpu(), torch.full((256, 1024), 9.0))


def test_level_1_prints_compilations_only_and_cache_hits_print_nothing(tmp_path, dev):
    path = tmp_path / "l1.txt"
    torch_xla.sync(wait=True)
    with debugging.settings(level=1, debug_file=str(path)):
        for _ in range(3):
            # A graph no other test builds: the process-wide cache is shared.
            x = (torch.arange(4099.0).to(dev) * 5).fmod(7)
            torch_xla.sync()
    text = read(path)
    assert len(blocks(text, "Compilation Analysis: ")) == 1
    assert len(blocks(text, "Post Compilation Analysis: ")) == 1
    assert blocks(text, "Execution Analysis: ") == []
    assert torch.equal(x.cpu(), (torch.arange(4099.0) * 5).fmod(7))


def test_level_2_prints_execution_for_cached_graphs(debug_file, dev):
    for _ in range(3):
        y = (torch.arange(4111.0).to(dev) * 3).sum()  # noqa: F841  (live tensors sync)
        torch_xla.sync()
    text = read(debug_file)
    assert len(blocks(text, "Compilation Analysis: ")) == 1
    execs = [parse_block(b) for b in blocks(text, "Execution Analysis: ")]
    assert len(execs) == 3
    assert len({e["hash"] for e in execs}) == 1


def test_value_read_cause(debug_file, dev):
    t = torch.arange(13.0).to(dev) * 2
    assert t.sum().item() == 156.0
    comp = [parse_block(b) for b in blocks(read(debug_file), "Compilation Analysis: ")]
    assert comp and comp[0]["cause"] == \
        "most likely user code trying to access tensor value before torch_xla.sync"
    # No torchtpu frame is shown (PyTorch/XLA's equivalent code is C++).
    assert not any("/torchtpu/" in f for f in comp[0]["frames"])
    assert any(f.startswith("test_value_read_cause (") for f in comp[0]["frames"])


def test_step_trace_and_compile_and_explicit_causes(debug_file, dev):
    with xp.StepTrace("train", step_num=0):
        y1 = torch.arange(17.0).to(dev) + 1
    compiled = torch_xla.compile(lambda x: x * 7)
    x = torch.arange(19.0).to(dev)
    torch_xla.sync()
    y2 = compiled(x)
    with debugging.cause("dynamo is executing a compiled program"):
        y3 = torch.arange(23.0).to(dev) - 1
        torch_xla.sync()
    assert y1.cpu()[0] == 1 and y2.cpu()[1] == 7 and y3.cpu()[0] == -1
    causes = [parse_block(b)["cause"] for b in blocks(read(debug_file), "Compilation Analysis: ")]
    assert causes == ["torch_xla.sync when exiting a profiler StepTrace region", "torch_xla.compile", "dynamo is executing a compiled program"], causes


def test_graph_name_and_max_frames(debug_file, dev):
    def deep(n):
        if n == 0:
            y = torch.arange(29.0).to(dev).neg()  # noqa: F841
            with debugging.graph_name("my_step"):
                torch_xla.sync()
            return
        deep(n - 1)

    with debugging.settings(max_frames=3):
        deep(5)
    comp = [parse_block(b) for b in blocks(read(debug_file), "Compilation Analysis: ")]
    assert comp[-1]["name"] == "my_step"
    assert len(comp[-1]["frames"]) == 4 and comp[-1]["frames"][-1] == ".........."
    assert comp[-1]["frames"][1].startswith("deep (")
    from torchtpu import _C
    assert _C.graph_name() is None  # restored after the with block


# ------------------------------------------------------------- recompiles
def recompile_lines(text):
    comp = [parse_block(b) for b in blocks(text, "Compilation Analysis: ")]
    return [c["recompile"] for c in comp]


def test_recompile_names_the_input_shape(debug_file, dev):
    for n in (31, 37):
        x = torch.ones(n).to(dev)
        y = (x * 2).sum()  # noqa: F841
        site = lineno() + 1
        torch_xla.sync()
    rec = recompile_lines(read(debug_file))
    assert rec[0] == []
    assert rec[1][0].startswith("differs from graph ") and \
        rec[1][0].endswith(f"compiled before for test_recompile_names_the_input_shape "
                           f"({__file__}:{site}):")
    assert "input 0: shape [31] -> [37]" in rec[1], rec
    assert debugging.last_recompile().splitlines() == rec[1]


def test_recompile_names_the_dtype(debug_file, dev):
    for dt in (torch.float32, torch.float64):
        x = torch.ones(41, dtype=dt).to(dev)
        y = x + 1  # noqa: F841
        torch_xla.sync()
    rec = recompile_lines(read(debug_file))
    assert "input 0: dtype float32 -> float64" in rec[1], rec


def test_recompile_names_the_attribute(debug_file, dev):
    x = torch.ones(43, 47).to(dev)
    torch_xla.sync()
    for dim in (0, 1):
        y = x.sum(dim)  # noqa: F841
        torch_xla.sync()
    rec = recompile_lines(read(debug_file))
    assert any(re.fullmatch(r"instruction %\d+ \(reduce\): attribute i\[1\] 1 -> 2", r)
               for r in rec[-1]), rec
    assert "output 0: shape [47] -> [43]" in rec[-1]


def test_recompile_keyed_by_graph_name_across_call_sites(debug_file, dev):
    with debugging.graph_name("shared"):
        y = torch.ones(53).to(dev).exp()  # noqa: F841
        torch_xla.sync()
    with debugging.graph_name("shared"):
        y = torch.ones(53).to(dev).exp().neg()  # noqa: F841
        torch_xla.sync()
    rec = recompile_lines(read(debug_file))
    assert rec[1][0].endswith("compiled before for graph shared:"), rec
    assert "number of instructions: 2 -> 3" in rec[1] or any("op " in r for r in rec[1]), rec


def test_recompile_names_a_convert_attribute(dev):
    with debugging.settings(level=1, debug_file=os.devnull):
        a = torch.ones(59, 61).to(dev)
        torch_xla.sync()
        for dt in (torch.float16, torch.bfloat16):
            y = a.to(dt)  # noqa: F841
            torch_xla.sync()
    last = debugging.last_recompile()
    assert re.search(r"instruction %\d+ \(convert\): attribute i\[0\] 2 -> 3", last), last
    assert "output 0: dtype float16 -> bfloat16" in last


# ------------------------------------------------------------ graph dumps
def test_save_tensors_file_text_and_dot(tmp_path, dev):
    path = tmp_path / "graphs.txt"
    torch_xla.sync(wait=True)
    with debugging.settings(save_tensors_file=str(path), save_tensors_fmt="text", level=1,
                            debug_file=str(tmp_path / "dbg.txt")):
        y = torch.ones(67).to(dev).sin()
        torch_xla.sync()
        y = torch.ones(67).to(dev).sin()  # noqa: F841
        torch_xla.sync()
    assert not path.exists()  # the log of device 0 is path.0, as PyTorch/XLA names it
    text = (tmp_path / "graphs.txt.0").read_text()
    entries = text.split("[ScheduleSyncTensorsGraph]\n")[1:]
    assert len(entries) == 2
    for e in entries:
        assert e.startswith("TensorsGraphInfo:\n  sync (")
        m = re.search(r"\nHashes: \(([0-9a-f]{16})\)\n\n## BEGIN_GRAPH\nIR \{  # hash=\1\n", e)
        assert m, e
        assert "sin" in e or "unary" in e
        assert e.rstrip().endswith("## END_GRAPH")
    comp = parse_block(blocks((tmp_path / "dbg.txt").read_text(), "Compilation Analysis: ")[0])
    assert comp["hash"] == m.group(1)
    dot = tmp_path / "graphs.dot"
    with debugging.settings(save_tensors_file=str(dot), save_tensors_fmt="dot"):
        y = torch.ones(71).to(dev).cos()  # noqa: F841
        torch_xla.sync()
    assert "## BEGIN_GRAPH\ndigraph G {\n" in (tmp_path / "graphs.dot.0").read_text()
    with pytest.raises(ValueError, match="'text' or 'dot'"):
        debugging.configure(save_tensors_fmt="hlo")


def test_ir_debug_locations(tmp_path, dev):
    path = tmp_path / "ir.txt"
    torch_xla.sync(wait=True)
    with debugging.settings(ir_debug=True, save_tensors_file=str(path)):
        x = torch.ones(73).to(dev)
        y = torch.tanh(x)
        tanh_line = lineno() - 1
        z = y * 3
        mul_line = lineno() - 1
        torch_xla.sync()
    text = (tmp_path / "ir.txt.0").read_text()
    fn = "test_ir_debug_locations"
    assert f"location={fn}@{__file__}:{tanh_line}" in text, text
    assert f"location={fn}@{__file__}:{mul_line}" in text, text
    assert torch.allclose(z.cpu(), torch.tanh(torch.ones(73)) * 3)
    # Without XLA_IR_DEBUG, nodes carry no frames.
    plain = tmp_path / "plain.txt"
    with debugging.settings(save_tensors_file=str(plain)):
        y = torch.ones(79).to(dev).tanh()  # noqa: F841
        torch_xla.sync()
    assert "location=" not in (tmp_path / "plain.txt.0").read_text()


def test_dump_dir_stages(tmp_path, dev):
    d = tmp_path / "dumps"
    torch_xla.sync(wait=True)
    with debugging.settings(dump_dir=str(d), level=1, debug_file=str(tmp_path / "dbg.txt")):
        y = torch.ones(83).to(dev).sqrt()  # noqa: F841
        torch_xla.sync()
        h = parse_block(blocks((tmp_path / "dbg.txt").read_text(), "Compilation Analysis: ")[0])["hash"]
        debugging.dump(int(h, 16), "after-test", "IR { test }\n")
        debugging.dump(int(h, 16), "generated", "int main(void) { return 0; }\n", ext="c")
    names = sorted(os.listdir(d))
    mine = [n for n in names if f"-{h}-" in n]
    assert [n.split("-", 3)[3] for n in mine] == ["build.txt", "optimized.txt", "after-test.txt",
                                                   "generated.c"]
    assert all(n.startswith(f"{os.getpid()}-") for n in mine)
    build = (d / mine[0]).read_text()
    assert build.startswith(f"IR {{  # hash={h}\n")
    assert "unary(%0)" in (d / mine[1]).read_text()  # the graph the executable runs
    assert (d / mine[3]).read_text() == "int main(void) { return 0; }\n"
    # Off: nothing is written.
    debugging.dump(1, "ignored", "x")
    assert sorted(os.listdir(d)) == names


# ------------------------------------------------ environment variables
# Scenarios that need a fresh process (the environment is read at start-up)
# run in three child processes started at once; later phases of a child
# change os.environ and re-read it with debugging.configure_from_env().
CHILD_ENV = """
    import os, torch, torch_xla
    from torchtpu import debugging
    d = torch_xla.device()
    x = torch.ones(5).to(d) * 2
    torch_xla.sync()
    torch_xla.sync()
    print(x.cpu().tolist())
    # Phase 2: PT_XLA_DEBUG=1 alone means everything, on stderr.
    del os.environ["PT_XLA_DEBUG_LEVEL"], os.environ["PT_XLA_DEBUG_FILE"]
    os.environ["PT_XLA_DEBUG"] = "1"
    debugging.configure_from_env()
    print(debugging.config()["level"])
    y = torch.ones(6).to(d) * 2
    torch_xla.sync()
    torch_xla.sync()
    # Phase 3: only local rank 0 prints.
    os.environ["PJRT_LOCAL_PROCESS_RANK"] = "1"
    debugging.configure_from_env()
    z = torch.ones(7).to(d) * 2
    torch_xla.sync()
"""

CHILD_DUMPS = """
    import torch, torch_xla
    d = torch_xla.device()
    x = torch.ones(5).to(d) * 2
    torch_xla.sync()
    print(x.cpu().tolist())
"""

CHILD_PLAIN = """
    import torch_xla
    from torchtpu import config, debugging
    print(debugging.config())
    config.check_runtime_not_initialized()
    print("ok", config.runtime_initialized())
    torch_xla.device()
    try:
        config.check_runtime_not_initialized()
    except RuntimeError as e:
        print("raised:", e)
"""


def child_env(extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("PT_XLA_DEBUG", "XLA_SAVE", "XLA_IR", "TORCHTPU_DUMP", "XRT_",
                         "PJRT_LOCAL")):
            del env[k]
    env.update(extra)
    env.setdefault("PJRT_DEVICE", "CPU")
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("children")
    runs = {
        "env": (CHILD_ENV, {"PT_XLA_DEBUG_LEVEL": "1", "PT_XLA_DEBUG_FILE": str(tmp / "env.txt"),
                            "XRT_TPU_CONFIG": "localservice;0;localhost:51011",
                            "XRT_WORKERS": "localservice:0;grpc://localhost:40934"}),
        "dumps": (CHILD_DUMPS, {"XLA_SAVE_TENSORS_FILE": str(tmp / "save.ir"),
                                "XLA_SAVE_TENSORS_FMT": "hlo", "XLA_IR_DEBUG": "1",
                                "TORCHTPU_DUMP_DIR": str(tmp / "dd")}),
        "plain": (CHILD_PLAIN, {}),
    }
    procs = {name: subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)],
                                    env=child_env(extra), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name, (code, extra) in runs.items()}
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        out[name] = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    out["tmp"] = tmp
    return out


def test_env_level_file_and_rank(children):
    r = children["env"]
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[2.0, 2.0, 2.0, 2.0, 2.0]", "100"]
    # Phase 1: level 1 into the file: one compilation, no execution analysis.
    text = (children["tmp"] / "env.txt").read_text()
    assert len(blocks(text, "Compilation Analysis: ")) == 1
    assert len(blocks(text, "Post Compilation Analysis: ")) == 1
    assert blocks(text, "Execution Analysis: ") == []
    # Phase 2 on stderr: one compilation and one execution (the second sync
    # has no work). Phase 3 (rank 1) adds nothing.
    assert len(blocks(r.stderr, "Compilation Analysis: ")) == 1
    assert len(blocks(r.stderr, "Execution Analysis: ")) == 1


def test_env_save_tensors_ir_debug_and_dump_dir(children):
    r = children["dumps"]
    assert r.returncode == 0, r.stderr
    assert "XLA_SAVE_TENSORS_FMT=hlo is not available" in r.stderr
    text = (children["tmp"] / "save.ir.0").read_text()
    assert text.count("[ScheduleSyncTensorsGraph]") == 1
    assert "location=<module>@<string>:4" in text, text
    files = sorted(os.listdir(children["tmp"] / "dd"))
    assert len(files) == 2 and files[0].endswith("-build.txt"), files
    assert files[1].endswith("-optimized.txt"), files
    assert "location=<module>@<string>:4" in (children["tmp"] / "dd" / files[0]).read_text()


# ----------------------------------------------------- environment hygiene
def test_xrt_variables_warn_once_naming_them(children, monkeypatch, capsys):
    lines = [line for line in children["env"].stderr.splitlines() if "XRT" in line]
    assert lines == ["WARNING: ignoring XRT environment variables XRT_TPU_CONFIG, XRT_WORKERS: "
                     "this runtime is PJRT only (PJRT_DEVICE=CPU); unset them"]
    assert "XRT" not in children["plain"].stderr
    for k in config.XRT_VARIABLES:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("XRT_DEVICE_MAP", "CPU:0;/job:localservice/replica:0/task:0/device:XLA_CPU:0")
    assert config.warn_xrt_variables("CPU") == ["XRT_DEVICE_MAP"]
    assert capsys.readouterr().err == (
        "WARNING: ignoring XRT environment variable XRT_DEVICE_MAP: this runtime is PJRT only "
        "(PJRT_DEVICE=CPU); unset them\n")
    monkeypatch.delenv("XRT_DEVICE_MAP")
    assert config.warn_xrt_variables("CPU") == []
    assert capsys.readouterr().err == ""


def test_runtime_already_initialized(dev, children):
    # This process has used a device: a launcher must refuse to start.
    with pytest.raises(RuntimeError) as e:
        config.check_runtime_not_initialized()
    assert str(e.value) == ("Runtime is already initialized. Do not use the XLA device before "
                            "calling xmp.spawn.")
    # A fresh process that has not touched a device passes the check.
    r = children["plain"]
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == [
        "ok False",
        "raised: Runtime is already initialized. Do not use the XLA device before calling "
        "xmp.spawn."]


def test_debug_off_by_default_and_configure_validation(children):
    r = children["plain"]
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == (
        "{'level': 0, 'max_frames': 8, 'local_rank': 0, 'ir_debug': False, "
        "'save_tensors_fmt': 'text', 'debug_file': None, 'save_tensors_file': None, "
        "'dump_dir': None}")
    with pytest.raises(TypeError, match="unknown debug setting"):
        debugging.configure(levle=1)
    with pytest.raises(RuntimeError, match="max_frames must be >= 0, got -1"):
        debugging.configure(max_frames=-1)


def test_dump_dir_tier1_source(tmp_path):
    """With TORCHTPU_DUMP_DIR, tier 1 writes the C it generates for a graph
    (stage `generated`) next to the graph's build dump."""
    d = tmp_path / "dumps"
    code = (
        "import torch, torch_xla\n"
        "x = torch.arange(64.).to('xla')\n"
        "y = ((x * 2 + 1).exp() - 3).sum()\n"
        "print(float(y))\n"
    )
    env = dict(os.environ, TORCHTPU_TIER="1", TORCHTPU_DUMP_DIR=str(d), PJRT_DEVICE="CPU")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    names = sorted(os.listdir(d))
    gen = [n for n in names if n.endswith("-generated.c")]
    assert gen, names
    src = (d / gen[0]).read_text()
    assert "void tt_gen_" in src and "tt_gen_key" in src
    h = gen[0].split("-")[2]
    assert any(n.endswith(f"-{h}-build.txt") for n in names), names


# ------------------------------------------- PyTorch/XLA's cause wording
def test_loader_sync_cause(debug_file, dev):
    import torch_xla.distributed.parallel_loader as pl
    data = [(torch.full((3, 31), float(i)),) for i in range(3)]
    seen = []
    for (x,) in pl.MpDeviceLoader(data, dev):
        seen.append(x + 1)
    causes = [parse_block(b)["cause"] for b in blocks(read(debug_file), "Execution Analysis: ")]
    assert causes and set(causes) == {"torch_xla.sync in parallel loader at step end"}, causes
    assert [s.cpu()[0, 0].item() for s in seen] == [1.0, 2.0, 3.0]


def test_sync_through_a_wrapper_is_named_by_its_caller(debug_file, dev, tmp_path, monkeypatch):
    """The cause names the first known caller below the sync anywhere on
    the stack, as PyTorch/XLA's does (a deprecation wrapper such as
    xm.mark_step's may sit in between): here a loader `next` reaches the
    sync through xm.mark_step and a helper."""
    (tmp_path / "parallel_loader.py").write_text(textwrap.dedent("""
        import torch_xla.core.xla_model as xm

        def _helper():
            xm.mark_step()

        def next():
            _helper()
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    fake = importlib.import_module("parallel_loader")
    y = torch.arange(89.0).to(dev) * 3
    with pytest.warns(DeprecationWarning):
        fake.next()
    comp = parse_block(blocks(read(debug_file), "Compilation Analysis: ")[0])
    assert comp["cause"] == "torch_xla.sync in parallel loader at step end"
    names = [f.split(" (")[0] for f in comp["frames"]]
    assert names[0] == "sync" and names.index("_helper") + 1 == names.index("next"), names
    assert y.cpu()[2] == 6


def test_loader_transfers_compile_one_graph(debug_file, dev, monkeypatch):
    """Batches reach the device as device data (no pending empty tensor a
    step-end sync could catch on the transfer thread): one graph, compiled
    once, whatever the thread timing."""
    import torch_xla.distributed.parallel_loader as pl
    from torchtpu import bridge

    def no_empty(*a, **k):
        raise AssertionError("a transfer made a pending empty xla tensor")
    monkeypatch.setattr(bridge, "_empty_handle", no_empty)
    sent = xm.send_cpu_data_to_device([torch.ones(2, 3)], dev)
    assert torch_xla._XLAC._check_tensor_need_materialization(sent) == [False]
    assert torch.equal(sent[0].cpu(), torch.ones(2, 3))
    data = [(torch.zeros(4, 3, 37, 37), torch.zeros(4, dtype=torch.int64))] * 10
    loader = pl.MpDeviceLoader(data, dev, loader_prefetch_size=8, device_prefetch_size=4)
    for x, _ in loader:
        y = x + 100
    comp = blocks(read(debug_file), "Compilation Analysis: ")
    assert len(comp) == 1, [parse_block(b)["inputs"] for b in comp]
    assert (parse_block(comp[0])["inputs"], parse_block(comp[0])["outputs"]) == (2, 1)
    assert len(blocks(read(debug_file), "Execution Analysis: ")) == 10
    assert torch.equal(y.cpu(), torch.full((4, 3, 37, 37), 100.0))


def test_eager_mode_prints_no_analysis(debug_file, dev):
    with torch_xla.experimental.eager_mode_context(True):
        t = torch.arange(41.0).to(dev) * 3
        torch_xla.sync()
    assert read(debug_file) == ""
    t2 = torch.arange(43.0).to(dev) * 3
    torch_xla.sync()
    assert len(blocks(read(debug_file), "Compilation Analysis: ")) == 1
    assert t.cpu()[1] == 3 and t2.cpu()[2] == 6


def test_dynamo_causes(debug_file, dev):
    """PyTorch/XLA's order: the input sync, then the FX graph's compilation
    and its execution, each named as PyTorch/XLA names them."""
    t = torch.arange(47.0).to(dev) + 2  # not x * 100's graph (scalars are inputs)
    out = torch.compile(lambda x: x * 100, backend="openxla")(t)
    text = read(debug_file)
    comp = [parse_block(b) for b in blocks(text, "Compilation Analysis: ")]
    execs = [parse_block(b) for b in blocks(text, "Execution Analysis: ")]
    assert [c["cause"] for c in comp] == ["torch_xla.sync when dynamo processing input graphs",
                                         "dynamo is compiling a FX graph to HLO"]
    assert [e["cause"] for e in execs] == ["torch_xla.sync when dynamo processing input graphs",
                                          "dynamo is executing a compiled program"]
    assert comp[1]["hash"] == execs[1]["hash"] and comp[1]["inputs"] == 2
    assert torch.equal(out.cpu(), (torch.arange(47.0) + 2) * 100)
