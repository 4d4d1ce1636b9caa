"""Training runs through the client libraries on several xla devices (the
CPU backend's virtual devices, CPU_NUM_DEVICES), launched the way each
library launches multi-device XLA, and the single-device references they
are compared with (tests/python/test_clients_multi_device.py).

The accelerate and Lightning runs train the same tiny regressor on the
same 32 rows with SGD; with R replicas of per-device batch B the global
batch is R*B, and data parallel training must equal plain full-batch
training of R*B rows on the CPU (reference_sgd). The Trainer run (tiny
GPT-2) is compared with the same Trainer on one device. Each replica
writes what it saw and computed as JSON (rank<i>.json in the output
directory) for the test to compare; nothing is downloaded."""
import json
import os
import sys
import threading

import torch

ROWS = 32


def data():
    """The rows the regressor trains on: x and y = sum of x (the runs add
    the row index, so a replica can report which rows it was given)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, 8, generator=g)
    return x, x.sum(1, keepdim=True)


def regressor():
    """The model every run starts from. Its initial weights come from a
    generator of its own, not torch.manual_seed: replicas are threads of one
    process (as PyTorch/XLA's on a CPU host), and torch's default CPU
    generator is one per process, so seeding it in each replica races."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=g) - 0.5)
    return model


def reference_sgd(batches, lr):
    """Plain CPU training, one SGD step per global batch (a list of row
    indices): per-step losses and the final parameters (as lists)."""
    x, y = data()
    model = regressor()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for rows in batches:
        loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": [p.detach().flatten().tolist() for p in model.parameters()]}


def reference_mse(params):
    """The loss over all rows of regressor() holding params (CPU)."""
    x, y = data()
    model = regressor()
    with torch.no_grad():
        for p, v in zip(model.parameters(), params):
            p.copy_(torch.tensor(v).view(p.shape))
        return float(torch.nn.functional.mse_loss(model(x), y))


def _write(out_dir, name, result):
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(result, f)


def _params(model):
    return [p.detach().cpu().flatten().tolist() for p in model.parameters()]


# ------------------------------------------------------------ accelerate
def accelerate_main():
    """`accelerate launch --tpu --main_training_function accelerate_main
    <this file> OUT_DIR`: accelerate's TPU launcher imports this file and
    runs this function in every replica through xmp.spawn."""
    accelerate_train(sys.argv[1])


def notebook_main(out_dir, num_processes):
    """accelerate's notebook_launcher outside Colab/Kaggle: num_processes
    processes through torch's elastic launch (torchrun's environment), one
    xla device each."""
    from accelerate import notebook_launcher
    notebook_launcher(accelerate_train, args=(out_dir,), num_processes=num_processes)


def accelerate_train(out_dir):
    """One epoch of the 32 rows through a prepared model, optimizer and
    loader (per-device batch 4), then gather, reduce, broadcast,
    pad_across_processes, save_state and load_state; writes
    rank<process_index>.json."""
    from accelerate import Accelerator
    from accelerate.utils import broadcast, pad_across_processes
    acc = Accelerator()
    x, y = data()
    dataset = torch.utils.data.TensorDataset(x, y, torch.arange(ROWS))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    model = regressor()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses, rows = [], []
    for xb, yb, ib in loader:
        rows.append(ib.cpu().tolist())
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    acc.wait_for_everyone()
    rank = acc.process_index
    local = torch.stack(losses)
    gathered = acc.gather(local)
    reduced_sum = acc.reduce(local, "sum")
    reduced_mean = acc.reduce(local, "mean")
    mine = torch.full((2,), float(rank + 10), device=acc.device)
    from_one = broadcast(mine, from_process=1)
    padded = pad_across_processes(torch.ones(rank + 1, device=acc.device), dim=0, pad_index=-1)
    save_dir = os.path.join(out_dir, "state")
    acc.save_state(save_dir, safe_serialization=False)
    acc.wait_for_everyone()
    trained = _params(model)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    acc.load_state(save_dir)
    _write(out_dir, f"rank{rank}", {
        "process_index": rank, "num_processes": acc.num_processes,
        "is_main_process": acc.is_main_process, "local_process_index": acc.local_process_index,
        "device": str(acc.device), "distributed_type": str(acc.distributed_type),
        "fork_launched": bool(acc.state.fork_launched),
        "rows": rows, "losses": local.cpu().tolist(), "gathered": gathered.cpu().tolist(),
        "reduced_sum": reduced_sum.cpu().tolist(), "reduced_mean": reduced_mean.cpu().tolist(),
        "broadcast": from_one.cpu().tolist(), "padded": padded.cpu().tolist(),
        "params": trained, "restored": _params(model) == trained,
        "saved_files": sorted(os.listdir(save_dir))})


# ------------------------------------------------------------ transformers
def trainer_run(out_dir, per_device_batch):
    """transformers' Trainer (tiny GPT-2 from client_workloads, its default
    AdamW and gradient clipping) for one epoch of 32 rows; returns the
    logged losses, the evaluation loss, what the arguments say about the
    replicas and the trained weights' sum."""
    import client_workloads
    with _ONE_REPLICA_AT_A_TIME:
        # The replicas are threads of one process. transformers' lazy module
        # fails an import racing another thread's (a script imports it at
        # its top, before xmp.spawn starts the threads), and both
        # _tiny_model and Trainer() seed torch's generator, one per process:
        # a replica seeding, or drawing a loader's base seed, while another
        # builds its model changes that model's initial weights. So the
        # replicas build one at a time, and none trains before all have.
        from transformers import Trainer, TrainingArguments
        client_workloads._reset_accelerate()
        model = client_workloads._tiny_model("gpt2")
        args = TrainingArguments(
            output_dir=out_dir, per_device_train_batch_size=per_device_batch,
            per_device_eval_batch_size=4, num_train_epochs=1, learning_rate=1e-3,
            logging_steps=1, save_strategy="no", report_to=[], seed=0, disable_tqdm=True,
            dataloader_pin_memory=False)
        trainer = Trainer(model=model, args=args,
                          train_dataset=client_workloads._TokenData(ROWS, "gpt2", 1),
                          eval_dataset=client_workloads._TokenData(8, "gpt2", 2))
    import torch_xla.core.xla_model as xm
    xm.rendezvous("models built")
    initial_sum = _weight_sum(model)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    eval_loss = trainer.evaluate()["eval_loss"]
    return {"device": str(args.device), "world_size": args.world_size,
            "process_index": args.process_index, "losses": losses, "eval_loss": eval_loss,
            "initial_sum": initial_sum, "weight_sum": _weight_sum(model)}


def _weight_sum(model):
    return float(sum(float(p.detach().cpu().double().sum()) for p in model.parameters()))


_ONE_REPLICA_AT_A_TIME = threading.Lock()


def _trainer_replica(index, out_dir):
    # xla_spawn.py's _mp_fn: every replica runs the same script.
    _write(out_dir, f"rank{index}", trainer_run(os.path.join(out_dir, f"run{index}"), 4))


def trainer_main(out_dir):
    """Two replicas through xmp.spawn (as transformers' xla_spawn.py
    launches), per-device batch 4; then, in this process, the same run on
    one xla device with batch 8, the same global batch. The launch forks,
    so the replicas' process has transformers imported already."""
    import client_workloads  # noqa: F401
    from transformers import Trainer, TrainingArguments  # noqa: F401
    import torch_xla.distributed.xla_multiprocessing as xmp
    xmp.spawn(_trainer_replica, args=(out_dir,), start_method="fork")
    _write(out_dir, "single", trainer_run(os.path.join(out_dir, "single"), 8))
