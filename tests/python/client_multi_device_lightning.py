"""Lightning on several xla devices: Trainer(accelerator="tpu",
devices=N) (XLAStrategy, launched through xmp.spawn with fork) trains
client_multi_device_workloads.regressor() on its rows; compared with
single-device training by tests/python/test_clients_multi_device.py.

The module class lives at module level: XLAStrategy's launcher pickles the
trainer and module into the launched process (as on PyTorch/XLA, whose
spawn does the same)."""
import warnings

import lightning as L
import torch

from client_multi_device_workloads import ROWS, _params, _write, data, regressor


class Regressor(L.LightningModule):
    """regressor() trained with SGD; each replica records the rows and
    losses of its steps and writes them, with its final weights, to
    rank<global_rank>.json in out_dir when training ends."""

    def __init__(self, out_dir):
        super().__init__()
        self.out_dir = out_dir
        self.net = regressor()
        self.losses, self.rows = [], []

    def training_step(self, batch, i):
        x, y, rows = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.detach())
        self.rows.append(rows.cpu().tolist())
        return loss

    def validation_step(self, batch, i):
        x, y, _ = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_end(self):
        rank = self.global_rank
        strategy = self.trainer.strategy
        # The strategy's collectives: all_gather (xm.all_gather; with
        # sync_grads, torch_xla.core.functions.all_gather, whose gradient
        # flows back to each replica's slice), broadcast of a picklable
        # object (xm.collective_broadcast of its bytes), reduce
        # (xm.mesh_reduce).
        mine = torch.full((2,), float(rank + 1), device=self.device, requires_grad=True)
        gathered = self.all_gather(mine, sync_grads=True)
        (gathered * torch.arange(1.0, 3.0, device=self.device)[:, None]).sum().backward()
        _write(self.out_dir, f"rank{rank}", {
            "global_rank": rank, "world_size": self.trainer.world_size,
            "device": str(self.device), "rows": self.rows,
            "losses": [float(v) for v in self.losses], "params": _params(self.net),
            "all_gather": self.all_gather(torch.tensor(rank * 10, device=self.device)).cpu().tolist(),
            "all_gather_sync_grads": gathered.detach().cpu().tolist(),
            "all_gather_grad": mine.grad.cpu().tolist(),
            "broadcast": strategy.broadcast({"from": rank, "rows": self.rows[0]}, src=1),
            "reduce_mean": float(strategy.reduce(torch.tensor(float(rank), device=self.device)))})


def lightning_main(out_dir, devices):
    """One epoch of the 32 rows with per-device batch 4 (lightning's
    DistributedSampler shuffles training rows), then a validation over all
    of them, and a checkpoint. Writes main.json: the strategy, the
    validation loss (synced across replicas), the checkpoint's path and the
    weights the main process's module holds after fit."""
    x, y = data()
    dataset = torch.utils.data.TensorDataset(x, y, torch.arange(ROWS))

    def loader():
        return torch.utils.data.DataLoader(dataset, batch_size=4)

    model = Regressor(out_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator="tpu", devices=devices, max_epochs=1, logger=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, default_root_dir=out_dir)
        trainer.fit(model, loader(), loader())
    _write(out_dir, "main", {
        "accelerator": type(trainer.accelerator).__name__,
        "strategy": type(trainer.strategy).__name__, "num_devices": trainer.num_devices,
        "val_loss": float(trainer.callback_metrics["val_loss"]),
        "checkpoint": trainer.checkpoint_callback.best_model_path,
        "params": _params(model.net)})
