"""Fused scaled dot-product attention on xla (python/torchtpu/lowering/
attention_ops.py, src/kernels/attention.c) against eager PyTorch CPU:
forward and gradients, masks, narrow dtypes, the calls that keep PyTorch's
decomposition, the aten op it lowers, errors, and (in a child process with
the execution profile on) which instructions a step really runs."""
import pytest
import torch
import torch.nn.functional as F

import torch_xla
from child import run_json

DEV = torch_xla.device()


def _run(fn, tensors, grad_out_seed=0):
    """fn's output and the gradients of its tensor inputs that require
    grad, for a fixed cotangent."""
    out = fn(*tensors)
    g = torch.Generator().manual_seed(grad_out_seed)
    cot = torch.randn(out.shape, generator=g).to(out.dtype).to(out.device)
    leaves = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(out, leaves, cot)
    return out, grads


def _pair(tensors):
    cpu = [t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor)
           else t for t in tensors]
    xla = [t.detach().to(DEV).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor)
           else t for t in tensors]
    return cpu, xla


def _compare(fn, tensors, atol=2e-5, rtol=1e-4):
    cpu, xla = _pair(tensors)
    oc, gc = _run(fn, cpu)
    ox, gx = _run(fn, xla)
    assert ox.device.type == "xla" and ox.shape == oc.shape and ox.dtype == oc.dtype
    torch.testing.assert_close(ox.cpu(), oc, atol=atol, rtol=rtol)
    assert len(gx) == len(gc)
    for a, b in zip(gx, gc):
        torch.testing.assert_close(a.cpu(), b, atol=atol, rtol=rtol)


def _qkv(B, H, L, S, E, Ev=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype).requires_grad_()  # noqa: E731
    return mk(B, H, L, E), mk(B, H, S, E), mk(B, H, S, Ev or E)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 64, 64, 32), (1, 3, 70, 33, 8), (2, 2, 5, 100, 16),
                                   (1, 1, 1, 1, 4)])
def test_sdpa_matches_cpu(shape, causal):
    q, k, v = _qkv(*shape)
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
             [q, k, v])


def test_sdpa_scale():
    q, k, v = _qkv(2, 2, 9, 12, 8)
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.7), [q, k, v])


@pytest.mark.parametrize("mask_shape", [(9, 12), (2, 1, 1, 12), (2, 3, 9, 12), (1, 3, 1, 12)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masks(mask_shape, kind):
    q, k, v = _qkv(2, 3, 9, 12, 8)
    g = torch.Generator().manual_seed(1)
    keep = torch.rand(mask_shape, generator=g) > 0.3
    if len(mask_shape) == 4 and mask_shape[2] == 9:
        keep[0, 0, 4] = False  # a query row that sees no key
    mask = keep if kind == "bool" else torch.where(keep, torch.randn(mask_shape, generator=g),
                                                   float("-inf"))
    _compare(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             [q, k, v, mask])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sdpa_half_types(dtype):
    """Stored narrow, computed in f32: at least as close to the float64
    result as PyTorch's CPU kernel is, up to the dtype's tolerance."""
    q, k, v = _qkv(2, 2, 33, 33, 16, dtype=dtype)
    cpu, xla = _pair([q, k, v])
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    oc, gc = _run(fn, cpu)
    ox, gx = _run(fn, xla)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    orf, grf = _run(fn, ref)
    assert ox.dtype == dtype and all(g.dtype == dtype for g in gx)
    for a, e, r in zip([ox, *gx], [oc, *gc], [orf, *grf], strict=True):
        err_x = (a.cpu().double() - r.detach()).abs()
        err_c = (e.double() - r.detach()).abs()
        assert (err_x <= err_c + 1e-2 + 1e-2 * r.detach().abs()).all()


def test_sdpa_decomposed_cases_match_cpu():
    """Calls the fused op does not take keep PyTorch's decomposition:
    grouped-query heads, value head size != query's, a mask that needs a
    gradient, 3-d inputs."""
    q, k, v = _qkv(2, 4, 6, 7, 8)
    kg, vg = k[:, :2].detach().requires_grad_(), v[:, :2].detach().requires_grad_()
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
             [q, kg, vg])
    q2, k2, v2 = _qkv(2, 2, 6, 7, 8, Ev=5)
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q2, k2, v2])
    m = torch.randn(6, 7, requires_grad=True)
    _compare(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             [q, k, v, m])
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             [q[0], k[0], v[0]])


def test_sdpa_dropout_takes_the_decomposition():
    q, k, v = _qkv(2, 2, 8, 8, 4)
    _, (qx, kx, vx) = _pair([q, k, v])
    out = F.scaled_dot_product_attention(qx, kx, vx, dropout_p=0.5)
    out.sum().backward()
    assert out.shape == (2, 2, 8, 4) and qx.grad.shape == qx.shape
    assert torch.isfinite(out.cpu()).all()


def test_sdpa_mask_and_causal_together():
    """CPU applies both (its flash kernel adds the mask, then hides the
    upper triangle); so does the fused op."""
    q, k, v = _qkv(2, 2, 6, 6, 8)
    m = torch.randn(6, 6)
    _compare(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                               is_causal=True), [q, k, v, m])


def test_sdpa_errors_match_cpu():
    q, k, v = _qkv(1, 2, 4, 4, 8)
    for args, kwargs in (((q, k[..., :6], v), {}),
                         ((q, k, v), {"attn_mask": torch.ones(3, 4)})):
        with pytest.raises(RuntimeError) as cpu_err:
            F.scaled_dot_product_attention(*args, **kwargs)
        xargs = [a.detach().to(DEV) for a in args]
        xkw = {n: (t.to(DEV) if isinstance(t, torch.Tensor) else t) for n, t in kwargs.items()}
        with pytest.raises(RuntimeError) as xla_err:
            F.scaled_dot_product_attention(*xargs, **xkw)
        # (The engine may add the shapes involved after PyTorch's words.)
        assert str(xla_err.value).startswith(str(cpu_err.value).split("\n")[0])


def test_flash_op_outputs_and_errors():
    """The aten op the fused path records: output, logsumexp (a row that
    sees no key: zeros and 0) and CPU's errors."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    q, k, v = (t.detach() for t in _qkv(2, 3, 5, 6, 4))
    mask = torch.zeros(5, 6)
    mask[2] = float("-inf")
    mask[3, :3] = float("-inf")
    for causal, m in ((True, None), (False, mask)):
        oc, lc = op(q, k, v, 0.0, causal, attn_mask=m)
        ox, lx = op(q.to(DEV), k.to(DEV), v.to(DEV), 0.0, causal,
                    attn_mask=None if m is None else m.to(DEV))
        assert lx.shape == lc.shape and lx.dtype == lc.dtype == torch.float32
        torch.testing.assert_close(ox.cpu(), oc, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(lx.cpu(), lc, atol=2e-6, rtol=1e-5)
    qx = q.to(DEV)
    for kwargs, dropout in (({}, 0.5), ({"attn_mask": mask.to(DEV).double()}, 0.0)):
        with pytest.raises(RuntimeError) as cpu_err:
            op(q, k, v, dropout, False, **{n: t.cpu() for n, t in kwargs.items()})
        with pytest.raises(RuntimeError) as xla_err:
            op(qx, qx[..., :6, :], qx[..., :6, :], dropout, False, **kwargs)
        assert str(xla_err.value) == str(cpu_err.value)


def test_transformer_layer_training_matches_cpu():
    """PyTorch's own encoder layer (causal self-attention through
    MultiheadAttention and SDPA): loss and every parameter gradient."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                             norm_first=True)
    x = torch.randn(3, 10, 32)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(10)
    xl = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                          norm_first=True)
    xl.load_state_dict(layer.state_dict())
    xl = xl.to(DEV)
    lc = layer(x, src_mask=mask, is_causal=True).square().mean()
    lc.backward()
    lx = xl(x.to(DEV), src_mask=mask.to(DEV), is_causal=True).square().mean()
    lx.backward()
    torch.testing.assert_close(lx.cpu(), lc, atol=1e-5, rtol=1e-5)
    for (n, a), b in zip(layer.named_parameters(), xl.parameters(), strict=True):
        torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-4, msg=n)


PROFILE_CHILD = r"""
import json, torch, torch_xla, torch.nn.functional as F
import torch_xla.debug.metrics as met
dev = torch_xla.device()
q, k, v = (torch.randn(2, 2, 16, 8, device=dev, requires_grad=True) for _ in range(3))
for _ in range(2):
    with torch_xla.step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum().backward()
torch_xla.sync(wait=True)
ops = {n: met.metric_data(n)[0] for n in met.metric_names() if n.startswith("ExecuteOp.")}
print(json.dumps(ops))
"""


def _profiled_ops(**env):
    return run_json(PROFILE_CHILD, TORCHTPU_EXEC_PROFILE="1", **env)


def test_step_runs_one_attention_instruction_each_way():
    """Two training steps: one forward and one backward attention
    instruction each (the logsumexp node is dead code, never run), no
    softmax; TORCHTPU_FUSED_ATTENTION=0 runs PyTorch's decomposition."""
    ops = _profiled_ops()
    assert ops.get("ExecuteOp.attention") == 2 and ops.get("ExecuteOp.attention_bwd") == 2, ops
    assert "ExecuteOp.softmax" not in ops and "ExecuteOp.dot" not in ops, ops
    off = _profiled_ops(TORCHTPU_FUSED_ATTENTION="0")
    assert "ExecuteOp.attention" not in off and "ExecuteOp.softmax" in off, off


KEEP_CHILD = r"""
import json, sys, torch, torch_xla, torch.nn.functional as F
import torch_xla.debug.metrics as met
dev = torch_xla.device()
S = int(sys.argv[1])
g = torch.Generator().manual_seed(0)
q = torch.randn(2, 3, 40, 8, generator=g).to(dev).requires_grad_()
k, v = (torch.randn(2, 3, S, 8, generator=g).to(dev).requires_grad_() for _ in range(2))
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                         norm_first=True).to(dev)
x = torch.randn(3, 10, 32, generator=g).to(dev)
mask = torch.nn.Transformer.generate_square_subsequent_mask(10).to(dev)
for causal in (True, False):
    with torch_xla.step():
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).square().sum().backward()
        layer(x, src_mask=mask, is_causal=True).square().mean().backward()
torch_xla.sync(wait=True)
grads = [t.grad.cpu().flatten().tolist() for t in (q, k, v)]
grads += [p.grad.cpu().flatten().tolist() for p in layer.parameters()]
print(json.dumps({"kept": met.counter_value("AttentionProbsKept") or 0, "grads": grads}))
"""


def _keep_run(S, **env):
    return run_json(KEEP_CHILD, S, **env)


def test_backward_reads_the_forwards_probabilities():
    """A step's attention backward reads the probabilities its forward kept
    (src/runtime/executable.c, attention pairs) instead of recomputing
    them: dense SDPA and the encoder layer's strided form, four pairs over
    two steps, gradients equal bit for bit to the recomputing path
    (TORCHTPU_ATTENTION_KEEP_PROBS=0). Keys far past the head width (S =
    200, E = 8) are not kept: the flash form's memory."""
    kept = _keep_run(24)
    off = _keep_run(24, TORCHTPU_ATTENTION_KEEP_PROBS="0")
    assert kept["kept"] == 4 and off["kept"] == 0
    assert kept["grads"] == off["grads"]
    assert _keep_run(200)["kept"] == 2  # only the encoder layer's
