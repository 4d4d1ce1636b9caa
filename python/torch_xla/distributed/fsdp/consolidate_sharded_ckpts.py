"""python -m torch_xla.distributed.fsdp.consolidate_sharded_ckpts
--ckpt_prefix P [--ckpt_suffix S] [--save_path F]: consolidates the
per-rank FSDP checkpoints P+S into one model checkpoint (see
state_dict_utils.consolidate_sharded_model_checkpoints)."""
from argparse import ArgumentParser

from torch_xla.distributed.fsdp.state_dict_utils import consolidate_sharded_model_checkpoints


def main(argv=None):
  parser = ArgumentParser()
  parser.add_argument("--ckpt_prefix", type=str, required=True,
                      help="path prefix of the per-rank FSDP checkpoint files")
  parser.add_argument("--ckpt_suffix", type=str, default="*.pth",
                      help="path suffix (glob) of the per-rank checkpoint files")
  parser.add_argument("--save_path", type=str, default="",
                      help="output path (default: ckpt_prefix + '_consolidated.pth')")
  args = parser.parse_args(argv)
  consolidate_sharded_model_checkpoints(args.ckpt_prefix, args.ckpt_suffix, args.save_path)


if __name__ == "__main__":
  main()
