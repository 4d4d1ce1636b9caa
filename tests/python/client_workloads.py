"""Small training runs through the client libraries (accelerate,
transformers' Trainer), written once so that tests/python/test_clients.py
runs each on xla in its process and on the CPU in a child with
USE_TORCH_XLA=0 (where the libraries ignore torch_xla), and compares.

Each run returns plain numbers (JSON-serialisable): per-step losses and
whatever the test checks. Models are tiny and built from configs with
random weights; nothing is downloaded."""
import os
import tempfile

import torch


def _reset_accelerate():
    # Accelerator and Trainer share accelerate's process-wide state; each
    # run sets up its own (mixed precision, device).
    from accelerate.state import AcceleratorState, GradientState, PartialState
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    PartialState._reset_state()


def accelerate_run(mixed_precision="no"):
    from accelerate import Accelerator
    _reset_accelerate()
    acc = Accelerator(mixed_precision=mixed_precision)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x_all = torch.randn(32, 8, generator=g)
    data = torch.utils.data.TensorDataset(x_all, x_all.sum(1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses, batch_devices = [], set()
    for x, y in loader:
        batch_devices.add(x.device.type)
        out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    acc.wait_for_everyone()
    gathered = acc.gather(torch.stack(losses))
    # What a linear computes in inside accelerate's autocast (the prepared
    # model's own output is cast back to float32 by accelerate).
    with acc.autocast():
        inner_dtype = str(torch.nn.functional.linear(x, acc.unwrap_model(model)[0].weight).dtype)
    # save_state/load_state round trip. safe_serialization=False: safetensors
    # cannot load into xla parameters (docs/clients.md), as on PyTorch/XLA.
    d = tempfile.mkdtemp()
    acc.save_state(d, safe_serialization=False)
    saved = [p.detach().cpu().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    acc.load_state(d)
    restored = all(torch.equal(a, p.detach().cpu()) for a, p in zip(saved, model.parameters()))
    return {"device": str(acc.device), "distributed_type": str(acc.distributed_type),
            "batch_devices": sorted(batch_devices),
            "losses": [float(v) for v in gathered.cpu()], "gathered_shape": list(gathered.shape),
            "inner_dtype": inner_dtype, "restored": restored,
            "saved_files": sorted(os.listdir(d))}


class _TokenData(torch.utils.data.Dataset):
    def __init__(self, n, kind, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 64, (n, 12), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)
        self.kind = kind

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        if self.kind == "bert":
            return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long),
                    "labels": self.labels[i]}
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _tiny_model(kind):
    from transformers import (BertConfig, BertForSequenceClassification, GPT2Config,
                              GPT2LMHeadModel)
    torch.manual_seed(0)
    if kind == "bert":
        return BertForSequenceClassification(BertConfig(
            vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0))
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2,
                                      n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0))


def trainer_run(kind, bf16=False, use_cpu=False):
    """Trainer with its default optimizer (AdamW fused=True on torch >= 2.8),
    linear schedule and gradient clipping: train, evaluate, save."""
    from safetensors.torch import load_file
    from transformers import Trainer, TrainingArguments
    _reset_accelerate()
    model = _tiny_model(kind)
    out = tempfile.mkdtemp()
    args = TrainingArguments(
        output_dir=out, per_device_train_batch_size=4, per_device_eval_batch_size=4,
        num_train_epochs=1, learning_rate=1e-3, logging_steps=1, save_strategy="no",
        report_to=[], bf16=bf16, use_cpu=use_cpu, seed=0, disable_tqdm=True, dataloader_pin_memory=False)
    trainer = Trainer(model=model, args=args, train_dataset=_TokenData(16, kind, 1),
                      eval_dataset=_TokenData(8, kind, 2))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    eval_loss = trainer.evaluate()["eval_loss"]
    trainer.save_model(out)
    saved = load_file(os.path.join(out, "model.safetensors"))
    params = dict(model.named_parameters())
    saved_match = all(torch.equal(t, params[k].detach().cpu()) for k, t in saved.items()
                      if k in params)
    return {"device": str(args.device), "optim": str(args.optim.value), "losses": losses,
            "eval_loss": eval_loss, "param_device": next(model.parameters()).device.type,
            "saved_keys": sorted(saved), "saved_match": saved_match,
            "weight_sum": float(sum(float(saved[k].double().sum()) for k in saved
                                      if k in params))}


def cpu_reference():
    """Every run above on the CPU (call with USE_TORCH_XLA=0 set before the
    libraries are imported)."""
    return {"accelerate": {mp: accelerate_run(mp) for mp in ("no", "bf16")},
            "trainer": {f"{kind}-{bf16}": trainer_run(kind, bf16, use_cpu=True)
                        for kind in ("bert", "gpt2") for bf16 in (False, True)}}


def lightning_bf16_true_run(accelerator):
    """Lightning with precision="bf16-true": on xla its precision plugin
    sets XLA_USE_BF16=1 (read by the first xla tensor made afterwards, so
    run this in a fresh process); on the CPU it converts the module to
    bfloat16. Returns the losses, the dtype PyTorch reports for the
    parameters after fit, and (on xla) the device dtype of the first weight
    while training."""
    import warnings
    import lightning as L

    class Regressor(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                           torch.nn.Linear(16, 1))
            self.losses = []
            self.device_dtype = None

        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y.to(self.net[0].weight.dtype))
            self.losses.append(loss.detach())
            w = self.net[0].weight
            if w.device.type == "xla" and not self.device_dtype:
                import torch_xla
                text = torch_xla._XLAC._get_xla_tensors_text([w])
                self.device_dtype = "bfloat16" if "bf16[16,8]" in text else text
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    model = Regressor()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(accelerator=accelerator, devices=1, precision="bf16-true",
                            max_epochs=2, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False,
                            default_root_dir=tempfile.mkdtemp())
        trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=8))
    return {"losses": [float(v) for v in model.losses],
            "param_dtype": str(model.net[0].weight.dtype), "device_dtype": model.device_dtype}
