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
