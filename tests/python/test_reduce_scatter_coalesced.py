"""xm.reduce_scatter of a list of tensors: one collective per dtype
(torchtpu/collectives.py), results equal to reducing each tensor alone.
The test process has 4 xla devices (conftest): one replica thread each."""
import re

import torch


def _inputs(i):
    g = torch.Generator().manual_seed(7 + i)
    return [torch.randint(-9, 9, (3, 8), generator=g).float(),
            torch.randint(-9, 9, (2, 4, 3), generator=g).float(),
            torch.randint(-9, 9, (5, 4), generator=g).int(),
            torch.randint(-9, 9, (1, 12), generator=g).float(),
            torch.randint(-9, 9, (2, 4), generator=g).to(torch.bfloat16)]


def test_list_is_one_collective_per_dtype_and_matches_one_by_one():
    import torch_xla
    import torch_xla.core.xla_model as xm
    from torch_xla._internal import pjrt
    got = {}

    def fn(i):
        d = torch_xla.device()
        xs = [t.to(d) for t in _inputs(i)]
        res = xm.reduce_scatter(xm.REDUCE_SUM, xs, 0.5, 1, 4)
        text = torch_xla._XLAC._get_xla_tensors_text(res)
        last = [xs[0], xs[2], xs[4], xs[1].transpose(1, 2)]  # last dims divide by 4
        outs = [torch.zeros(1, device=d) for _ in last]  # other shapes: take the result's
        assert xm.reduce_scatter(xm.REDUCE_MAX, last, 1.0, -1, 4, output=outs) is outs
        singles = [xm.reduce_scatter(xm.REDUCE_SUM, t, 0.5, 1, 4) for t in xs]
        got[i] = (text, [r.cpu() for r in res], [o.cpu() for o in outs],
                  [r.cpu() for r in singles])

    pjrt.spawn_threads(fn)
    all_inputs = [_inputs(i) for i in range(4)]
    for i in range(4):
        text, res, outs, singles = got[i]
        # float32 (3 tensors), int32 and bfloat16: three collectives.
        assert len(re.findall(r"\breduce_scatter\b", text)) == 3, text
        for k in range(5):
            xs = [all_inputs[q][k] for q in range(4)]
            acc = torch.float32 if xs[0].dtype == torch.bfloat16 else xs[0].dtype
            total = sum(x.to(acc) for x in xs)
            want = (total * 0.5).chunk(4, dim=1)[i]
            torch.testing.assert_close(res[k].to(acc), want.to(acc))
            assert res[k].dtype == singles[k].dtype and torch.equal(res[k], singles[k])
        for k, src in enumerate([0, 2, 4, 1]):
            xs = [all_inputs[q][src] for q in range(4)]
            if src == 1:
                xs = [x.transpose(1, 2) for x in xs]
            want_max = torch.stack(xs).amax(0).chunk(4, dim=-1)[i]
            torch.testing.assert_close(outs[k], want_max)
