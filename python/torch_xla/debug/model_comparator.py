"""torch_xla.debug.model_comparator: save a model's intermediate tensors in
two runs (e.g. CPU and xla) and report where they differ (PyTorch/XLA's
module and file layout).

save(name, tensor, step=None) writes tensor (moved to the CPU) as
<dir>[/step-<step>]/<name>.<n>, n counting saves of name, when a directory
is configured (configure(dir) or MODELCMP_SAVEDIR); otherwise it does
nothing. compare(dir1, dir2) returns a text report: one block per tensor
whose values differ beyond rtol/atol (largest differences first) and one
line per file present in only one directory; '' when they agree.
Run as a script: model_comparator.py DIR1 DIR2 exits 1 with the report
when they differ.
"""
import argparse
import os
import re
import sys
import traceback

import torch

_SAVE_DIR = None
_TENSOR_IDS = {}
_STEP = None
_SAVED_NAME_RE = re.compile(r'(.*)\.(\d+)$')


def _is_master_ordinal():
  try:
    import torch_xla.core.xla_model as xm
    return xm.is_master_ordinal()
  except ImportError:
    return True


def _index_of(sizes, lindex):
  """The multi-dimensional index of flat index lindex."""
  index = []
  for size in reversed(sizes):
    index.append(lindex % size)
    lindex //= size
  return list(reversed(index))


def _get_save_dir():
  return _SAVE_DIR if _SAVE_DIR is not None else os.environ.get('MODELCMP_SAVEDIR')


def _get_tensor_name(name):
  if name is not None:
    return name
  # An unnamed save is named after its caller's file and line.
  here = os.path.basename(__file__)
  for frame in reversed(traceback.extract_stack(limit=8)[:-1]):
    if os.path.basename(frame.filename) != here:
      return '{}.l{}'.format(os.path.basename(frame.filename), frame.lineno)
  return 'noname'


def compare_tensors(tensor1, tensor2, rtol=1e-05, atol=1e-08, max_diffs=25):
  """Report lines '<index>: v1 vs. v2\\terror=e' for elements differing by
  more than max(rtol * max(|v1|, |v2|), atol), at most max_diffs of them,
  largest first; '' when none do."""
  sizes1, sizes2 = list(tensor1.size()), list(tensor2.size())
  if sizes1 != sizes2:
    return 'Tensors have different shape: {} vs. {}\n'.format(sizes1, sizes2)
  diffs = []
  for i, (v1, v2) in enumerate(zip(tensor1.flatten().tolist(), tensor2.flatten().tolist())):
    error = abs(v1 - v2)
    if error > max(max(abs(v1), abs(v2)) * rtol, atol):
      diffs.append((error, i, v1, v2))
  diffs.sort(key=lambda d: d[0], reverse=True)
  lines = ['{}: {} vs. {}\terror={}\n'.format(_index_of(sizes1, i), v1, v2, e)
           for e, i, v1, v2 in diffs[:max_diffs]]
  if len(diffs) > max_diffs:
    lines.append('... aborting after {} differences\n'.format(max_diffs))
  return ''.join(lines)


def _collect_saved_tensors(path):
  found = set()
  for _, _, filenames in os.walk(path):
    found.update(f for f in filenames if _SAVED_NAME_RE.match(f))
  return found


def configure(save_dir):
  """Saves go to save_dir from now on (None turns saving off)."""
  global _SAVE_DIR, _TENSOR_IDS, _STEP
  _SAVE_DIR = save_dir
  _TENSOR_IDS = {}
  _STEP = None


def save(name, tensor, step=None):
  """Saves tensor under name (see the module docstring); returns tensor."""
  global _TENSOR_IDS, _STEP
  save_dir = _get_save_dir()
  if save_dir is None:
    return tensor
  data = tensor.cpu()
  if not _is_master_ordinal():
    return tensor
  name = _get_tensor_name(name)
  path = save_dir
  if step is not None:
    path = os.path.join(save_dir, 'step-{}'.format(step))
    os.makedirs(path, exist_ok=True)
    if step != _STEP:
      _STEP = step
      _TENSOR_IDS = {}
  n = _TENSOR_IDS.get(name, 0)
  _TENSOR_IDS[name] = n + 1
  torch.save(data, os.path.join(path, '{}.{}'.format(name, n)))
  return tensor


def _parse_path(path):
  """(name, id, step or None, directory) of a saved tensor's path."""
  rpath = os.path.dirname(path)
  step = None
  m = re.match(r'step-(\d+)$', os.path.basename(rpath))
  if m:
    step = int(m.group(1))
    rpath = os.path.dirname(rpath)
  m = _SAVED_NAME_RE.match(os.path.basename(path))
  assert m, path
  return m.group(1), int(m.group(2)), step, rpath


def tensor_file_compare(path1, path2, rtol=1e-05, atol=1e-08, max_diffs=25):
  report = compare_tensors(torch.load(path1), torch.load(path2), rtol=rtol, atol=atol,
                           max_diffs=max_diffs)
  if not report:
    return ''
  name, n, step, _ = _parse_path(path1)
  out = 'Changes in saved tensor "{}" with id={}{}\n'.format(
      name, n, ' at step={}'.format(step) if step else '')
  return out + ''.join('  {}\n'.format(line) for line in report.split('\n'))


def compare(save_dir1, save_dir2, rtol=1e-05, atol=1e-08, max_diffs=25):
  """The difference report of two save directories ('' when equal)."""
  files1 = _collect_saved_tensors(save_dir1)
  files2 = _collect_saved_tensors(save_dir2)
  report = ''
  for f in sorted(files1):
    if f not in files2:
      report += 'Mismatch: {} not in {}\n'.format(f, save_dir2)
    else:
      report += tensor_file_compare(os.path.join(save_dir1, f), os.path.join(save_dir2, f),
                                    rtol=rtol, atol=atol, max_diffs=max_diffs)
  for f in sorted(files2 - files1):
    report += 'Mismatch: {} not in {}\n'.format(f, save_dir1)
  return report


def main(argv=None):
  parser = argparse.ArgumentParser()
  parser.add_argument('--rtol', type=float, default=1e-05)
  parser.add_argument('--atol', type=float, default=1e-08)
  parser.add_argument('--max_diffs', type=int, default=25)
  parser.add_argument('savedir1', metavar='SAVEDIR1')
  parser.add_argument('savedir2', metavar='SAVEDIR2')
  args = parser.parse_args(argv)
  report = compare(args.savedir1, args.savedir2, rtol=args.rtol, atol=args.atol,
                   max_diffs=args.max_diffs)
  if report:
    print(report, file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
