"""The client libraries run on xla end to end, one device: accelerate,
transformers' Trainer (tiny BERT and GPT-2 from configs) and Lightning
(accelerator="tpu"). Each run's losses are compared with the same run on
the CPU: for accelerate and Trainer in one child process with
USE_TORCH_XLA=0 (there the libraries ignore torch_xla; in this process they
always pick xla), for Lightning in this process with accelerator="cpu".
The workloads are in client_workloads.py. Tolerances: f32 runs agree to
float32 rounding (rtol 1e-4 over a few steps); bf16 runs compute products
in bfloat16 (8-bit mantissa), rtol 2e-2."""
import json
import os
import subprocess
import sys
import tempfile
import warnings

import pytest
import torch

import client_workloads as workloads

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module", autouse=True)
def _restore_environment():
    # accelerate and torch's inductor set variables as they run
    # (PYTORCH_NVML_BASED_CUDA_CHECK, TORCHINDUCTOR_CACHE_DIR); the tests
    # after these in the same process start from the same environment.
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def cpu_ref():
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES")}
    env["USE_TORCH_XLA"] = "0"
    code = "import json, client_workloads as w; print(json.dumps(w.cpu_reference()))"
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _close(got, want, rtol):
    assert len(got) == len(want) and len(got) > 0
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64),
                               torch.tensor(want, dtype=torch.float64), rtol=rtol, atol=0)


# ------------------------------------------------------------ accelerate
def test_accelerate_f32_matches_cpu(cpu_ref):
    got = workloads.accelerate_run("no")
    ref = cpu_ref["accelerate"]["no"]
    # USE_TORCH_XLA=0 (the reference child) turns xla off for accelerate.
    assert ref["device"] == "cpu" and ref["distributed_type"] == "DistributedType.NO"
    assert got["device"] == "xla:0" and got["distributed_type"] == "DistributedType.XLA"
    assert got["batch_devices"] == ["xla"]   # the prepared loader feeds the device
    assert got["gathered_shape"] == [4] and got["inner_dtype"] == "torch.float32"
    _close(got["losses"], ref["losses"], 1e-4)
    assert got["restored"] is True
    assert got["saved_files"] == ref["saved_files"]


def test_accelerate_bf16_matches_cpu(cpu_ref):
    got = workloads.accelerate_run("bf16")
    ref = cpu_ref["accelerate"]["bf16"]
    assert got["device"] == "xla:0"
    # Inside accelerator.autocast() a linear runs in bfloat16, as on the CPU.
    assert got["inner_dtype"] == ref["inner_dtype"] == "torch.bfloat16"
    _close(got["losses"], ref["losses"], 2e-2)
    # ... and the run is not the f32 one.
    assert got["losses"] != cpu_ref["accelerate"]["no"]["losses"]
    assert got["restored"] is True


# ------------------------------------------------------------ transformers
@pytest.mark.parametrize("kind", ["bert", "gpt2"])
@pytest.mark.parametrize("bf16", [False, True], ids=["f32", "bf16"])
def test_trainer_matches_cpu(cpu_ref, kind, bf16):
    got = workloads.trainer_run(kind, bf16)
    ref = cpu_ref["trainer"][f"{kind}-{bf16}"]
    assert ref["device"] == "cpu" and ref["param_device"] == "cpu"
    assert got["device"] == "xla:0" and got["param_device"] == "xla"
    # The default optimizer (AdamW fused=True) runs on xla.
    assert got["optim"] == ref["optim"] == "adamw_torch_fused"
    rtol = 2e-2 if bf16 else 1e-4
    assert len(got["losses"]) == 4
    _close(got["losses"], ref["losses"], rtol)
    _close([got["eval_loss"]], [ref["eval_loss"]], rtol)
    # save_model wrote the trained weights (read back from the file).
    assert got["saved_match"] is True
    # GPT-2's lm_head.weight is tied to transformer.wte.weight. Moving to xla
    # and back to the CPU for saving unties the copies (as on PyTorch/XLA,
    # where the CPU copies never share storage), so the file holds the tied
    # weight under both names; the CPU run stores it once.
    extra = set(got["saved_keys"]) - set(ref["saved_keys"])
    assert set(ref["saved_keys"]) <= set(got["saved_keys"])
    assert extra == ({"lm_head.weight"} if kind == "gpt2" else set())
    _close([got["weight_sum"]], [ref["weight_sum"]], 1e-3 if bf16 else 1e-5)


# ------------------------------------------------------------ lightning
class _Regressor:
    @staticmethod
    def make():
        import lightning as L

        class Regressor(L.LightningModule):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                               torch.nn.Linear(16, 1))
                self.losses = []
                self.devices = set()

            def _loss(self, batch):
                x, y = batch
                self.devices.add(x.device.type)
                return torch.nn.functional.mse_loss(self.net(x), y)

            def training_step(self, batch, i):
                loss = self._loss(batch)
                self.losses.append(loss.detach())
                self.log("train_loss", loss)
                return loss

            def validation_step(self, batch, i):
                self.log("val_loss", self._loss(batch))

            def test_step(self, batch, i):
                self.log("test_loss", self._loss(batch))

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.05)

        return Regressor()


def _lightning_run(accelerator):
    import lightning as L
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))

    def loader():
        return torch.utils.data.DataLoader(data, batch_size=8)

    d = tempfile.mkdtemp()
    kw = dict(accelerator=accelerator, devices=1, logger=False, enable_progress_bar=False,
              enable_model_summary=False, default_root_dir=d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _Regressor.make()
        trainer = L.Trainer(max_epochs=2, **kw)
        trainer.fit(model, loader(), loader())
        val = trainer.validate(model, loader(), verbose=False)[0]["val_loss"]
        test = trainer.test(model, loader(), verbose=False)[0]["test_loss"]
        ckpt = os.path.join(d, "state.ckpt")
        trainer.save_checkpoint(ckpt)
        resumed = _Regressor.make()
        trainer2 = L.Trainer(max_epochs=3, enable_checkpointing=False, **kw)
        trainer2.fit(resumed, loader(), loader(), ckpt_path=ckpt)
    return {"accelerator": type(trainer.accelerator).__name__,
            "strategy": type(trainer.strategy).__name__, "devices": sorted(model.devices),
            "losses": [float(v) for v in model.losses], "val": float(val), "test": float(test),
            "resumed_at": (trainer2.current_epoch, trainer2.global_step),
            "resumed_losses": [float(v) for v in resumed.losses]}


def test_lightning_tpu_fit_validate_test_resume_match_cpu():
    got = _lightning_run("tpu")
    ref = _lightning_run("cpu")
    assert (got["accelerator"], got["strategy"]) == ("XLAAccelerator", "SingleDeviceXLAStrategy")
    assert got["devices"] == ["xla"] and ref["devices"] == ["cpu"]
    assert len(got["losses"]) == 8
    _close(got["losses"], ref["losses"], 1e-4)
    _close([got["val"], got["test"]], [ref["val"], ref["test"]], 1e-4)
    # Resumed from the checkpoint: the third epoch only (4 steps), starting
    # from the saved weights, as on the CPU.
    assert got["resumed_at"] == ref["resumed_at"] == (3, 12)
    assert len(got["resumed_losses"]) == 4
    _close(got["resumed_losses"], ref["resumed_losses"], 1e-4)
    assert got["resumed_losses"][0] < got["losses"][0] / 4


# ------------------------------------------ the optimizer Trainer defaults to
def test_fused_adamw_on_xla_matches_cpu_fused():
    torch.manual_seed(0)
    w0 = torch.randn(5, 3)
    grads = [torch.randn(5, 3) for _ in range(3)]
    results = {}
    for device in ("cpu", "xla"):
        w = torch.nn.Parameter(w0.clone().to(device))
        opt = torch.optim.AdamW([w], lr=0.1, weight_decay=0.01, fused=True)
        for g in grads:
            w.grad = g.to(device)
            opt.step()
        results[device] = w.detach().cpu()
        assert opt.state[w]["step"].device.type == device
    torch.testing.assert_close(results["xla"], results["cpu"], rtol=1e-5, atol=1e-6)
    assert not torch.equal(results["cpu"], w0)


def test_other_fused_optimizers_still_refuse_xla():
    w = torch.nn.Parameter(torch.ones(3, device="xla"))
    w.grad = torch.ones(3, device="xla")
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9, fused=True)
    with pytest.raises(RuntimeError, match="`fused=True` requires all the params"):
        opt.step()


def test_mp_device_loader_answers_the_wrapped_loaders_attributes(dev):
    import torch_xla.distributed.parallel_loader as pl
    data = torch.utils.data.TensorDataset(torch.arange(6.0))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    wrapped = pl.MpDeviceLoader(loader, dev)
    # accelerate's save_state reads .dataset through its MpDeviceLoader subclass.
    assert wrapped.dataset is data and wrapped.batch_size == 4 and len(wrapped) == 2
    with pytest.raises(AttributeError):
        wrapped._not_there
    with pytest.raises(AttributeError):
        wrapped.not_an_attribute_of_either
    batches = [b[0] for b in wrapped]
    assert [b.device.type for b in batches] == ["xla", "xla"]
    assert torch.equal(torch.cat([b.cpu() for b in batches]), torch.arange(6.0))


def test_lightning_bf16_true_on_xla_computes_in_bfloat16_like_cpu():
    # precision="bf16-true" on xla sets XLA_USE_BF16, which the first xla
    # tensor reads: a fresh child per run. On the CPU lightning converts the
    # module to bfloat16; on xla PyTorch sees float32 and the device holds
    # bfloat16, with the same losses to bfloat16 rounding.
    def run(accelerator):
        env = {k: v for k, v in os.environ.items() if k not in ("XLA_USE_BF16", "CPU_NUM_DEVICES")}
        env["PJRT_DEVICE"] = "CPU"
        code = ("import json, sys, client_workloads as w; "
                f"print(json.dumps(w.lightning_bf16_true_run({accelerator!r})))")
        r = subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-4000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    got, ref = run("tpu"), run("cpu")
    assert got["device_dtype"] == "bfloat16" and got["param_dtype"] == "torch.float32"
    assert ref["param_dtype"] == "torch.bfloat16"
    assert len(got["losses"]) == len(ref["losses"]) == 8
    _close(got["losses"], ref["losses"], 3e-2)
    # Not float32 arithmetic: every loss is a bfloat16 value.
    assert all(float(torch.tensor(v).bfloat16().float()) == v for v in got["losses"])
