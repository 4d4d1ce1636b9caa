"""Runs one of PyTorch/XLA's decoder-only example scripts, unmodified, at a
small size.

Usage: run_upstream_example_small.py EXAMPLE.py [--steps N] [--batch B]
           [--seq S] [--hidden H] [--intermediate I] [--vocab V]
           [--layers L] [--heads A] [--kv-heads K]

EXAMPLE.py is a path inside a PyTorch/XLA checkout's examples/ folder (for
instance examples/eager/train_decoder_only_eager_spmd_data_parallel.py).
The examples build TrainDecoderOnlyBase (examples/train_decoder_only_base.py)
with its built-in sizes (batch 16 x 512 tokens, a 1024-wide model with a
32768-wide MLP, 200 steps), too big for a CPU test. Before the example runs,
this wrapper imports the base module from the example's folder, as the
example itself would, and patches it in memory only:

- TrainDecoderOnlyBase.__init__'s defaults: num_steps and a small
  DecoderOnlyConfig;
- after the base __init__, batch_size and seq_len (the subclasses in the
  examples scale batch_size by the device count and rebuild their loader
  from these attributes after calling the base __init__).

Then the example runs as __main__ with sys.argv[0] set to its own path (the
examples find their folder from sys.argv[0]). Nothing is copied or written;
the example prints its usual 'epoch: 1, step: N, loss: X, rate: R' lines,
and at the end this wrapper prints one line 'ENGINE_COUNTERS {json}' (the
engine's SpmdPartitionedExecution, SpmdPartitionFallback, UncachedCompile
and CachedCompile counters).
"""
import argparse
import os
import runpy
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("example")
    p.add_argument("--steps", type=int, default=21)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--intermediate", type=int, default=64)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    args = p.parse_args()

    example = os.path.abspath(args.example)
    if not os.path.isfile(example):
        sys.exit(f"no such example: {example}")
    examples_dir = os.path.dirname(os.path.dirname(example))
    sys.path.insert(0, examples_dir)
    import decoder_only_model  # noqa: E402  (the checkout's, found on sys.path)
    import train_decoder_only_base as base  # noqa: E402

    config = decoder_only_model.DecoderOnlyConfig(
        hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        intermediate_size=args.intermediate, vocab_size=args.vocab)
    cls = base.TrainDecoderOnlyBase
    init = cls.__init__
    defaults = list(init.__defaults__)
    # (decoder_cls, num_steps, config): keep the model class, shrink the rest.
    defaults[1], defaults[2] = args.steps, config
    init.__defaults__ = tuple(defaults)

    def small_init(self, *a, **kw):
        init(self, *a, **kw)
        self.batch_size, self.seq_len = args.batch, args.seq

    cls.__init__ = small_init
    sys.argv = [example]
    runpy.run_path(example, run_name="__main__")
    # How the engine ran the steps, for tests: partitioned SPMD programs,
    # runs that fell back to one device, and compiles.
    import json
    import torch_xla.debug.metrics as met
    print("ENGINE_COUNTERS " + json.dumps({
        name: met.counter_value(name) or 0
        for name in ("SpmdPartitionedExecution", "SpmdPartitionFallback",
                     "UncachedCompile", "CachedCompile")}))


if __name__ == "__main__":
    main()
