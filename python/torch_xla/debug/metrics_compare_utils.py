"""torch_xla.debug.metrics_compare_utils: parse metrics reports into numbers
and compare a report against earlier ones (PyTorch/XLA's module, same
names and keys).

parse_metrics_report() turns a report into {key: number}: for a metric,
'<name>__TotalSamples', '<name>__Accumulator_<unit>' and
'<name>__Percentile_<p>_<unit>' (p in 1 5 10 20 50 80 90 95 99); for a
counter '<name>__Value'. Durations ('01m02s', '005ms239.672us') become
seconds (unit 'sec'), sizes ('1.50GB', '12.00KB') megabytes (unit 'mb'),
plain numbers keep no unit.
"""
import collections
import re

import numpy

_PERCENTILES = (1, 5, 10, 20, 50, 80, 90, 95, 99)
_SERVER_PERCENTILES = (25, 50, 80, 90, 95, 99)
# A metric block: name, samples, accumulator, then (after other lines)
# its percentile line.
_METRIC_RE = re.compile(r'Metric: (?P<name>\S+)\s+TotalSamples: (?P<samples>\d+)\s+'
                        r'Accumulator: (?P<acc>\S+)[^P]+Percentiles: (?P<pct>[^\n]*)')
_COUNTER_RE = re.compile(r'Counter: (\S+)\s+Value: (\d+)')
# Duration and size units, in seconds and megabytes.
_TIME_UNITS = (('d', 86400.0), ('h', 3600.0), ('m', 60.0), ('s', 1.0), ('ms', 1e-3),
               ('us', 1e-6), ('ns', 1e-9))
_SIZE_UNITS = (('PB', 1e9), ('TB', 1e6), ('GB', 1e3), ('MB', 1.0), ('KB', 1e-3), ('B', 1e-6))
_TIME_RE = re.compile(r'^(?:[\d.]+(?:d|h|ms|us|ns|m|s))+$')
_TIME_PART_RE = re.compile(r'([\d.]+)(d|h|ms|us|ns|m|s)')
_SIZE_RE = re.compile(r'^(?:[\d.]+(?:PB|TB|GB|MB|KB|B))+$', re.IGNORECASE)
_SIZE_PART_RE = re.compile(r'([\d.]+)(PB|TB|GB|MB|KB|B)', re.IGNORECASE)


def _metric_str_to_number(metric_str):
  """(value, unit) of one report value: unit '' for a plain number, 'sec'
  for a duration, 'mb' for a size. Raises ValueError for anything else."""
  try:
    return float(metric_str), ''
  except ValueError:
    pass
  if _TIME_RE.match(metric_str):
    scale = dict(_TIME_UNITS)
    return sum(float(v) * scale[u] for v, u in _TIME_PART_RE.findall(metric_str)), 'sec'
  if _SIZE_RE.match(metric_str):
    scale = dict(_SIZE_UNITS)
    return sum(float(v) * scale[u.upper()]
               for v, u in _SIZE_PART_RE.findall(metric_str)), 'mb'
  raise ValueError('Unknown metric_str format: {}'.format(metric_str))


def _key(name, field, unit):
  return '{}__{}{}{}'.format(name, field, '_' if unit else '', unit)


def parse_metrics_report(report, dehumanize=True):
  """{key: value} of every metric and counter in report (see the module
  docstring); with dehumanize=False each value is (number, original
  text)."""
  points = {}

  def put(name, field, text):
    value, unit = _metric_str_to_number(text)
    points[_key(name, field, unit)] = value if dehumanize else (value, text)

  for m in _METRIC_RE.finditer(report):
    name = m.group('name')
    put(name, 'TotalSamples', m.group('samples'))
    put(name, 'Accumulator', m.group('acc'))
    for part in m.group('pct').split(';'):
      p, _, text = part.strip().partition('=')
      if not p.endswith('%') or not text:
        continue
      p = int(p[:-1])
      # Server reports' 25% stands where client reports have 20%.
      put(name, 'Percentile_{}'.format(20 if p == 25 else p), text)
  for name, value in _COUNTER_RE.findall(report):
    points[_key(name, 'Value', '')] = int(value)
  return points


def get_data_points_from_metrics_reports(metrics_reports):
  """{key: [value in report 0, value in report 1, ...]} over the reports
  (None where a report lacks the key)."""
  points = collections.defaultdict(lambda: [None] * len(metrics_reports))
  for i, report in enumerate(metrics_reports):
    for k, v in parse_metrics_report(report).items():
      points[k][i] = v
  return points


def _compute_aggregates(data_points):
  aggregates = {}
  for k, values in data_points.items():
    values = [v for v in values if v is not None]
    if values:
      aggregates[k] = {'mean': numpy.mean(values), 'stddev': numpy.std(values)}
  return aggregates


def compare_metrics(data_points,
                    metrics_report,
                    config={'base_expression': 'v <= v_mean + (v_stddev * 2.0)'}):
  """A text report, one line per metric of metrics_report that fails its
  check against data_points' mean and stddev (the expression
  config['<key>_expression'] or config['base_expression'], over v, v_mean
  and v_stddev), plus one line per aten:: counter absent from
  data_points."""
  parsed = parse_metrics_report(metrics_report)
  aggregates = _compute_aggregates(data_points)
  lines = []
  for k, v in sorted(parsed.items()):
    if k not in aggregates:
      if k.startswith('aten::'):
        lines.append('Found new aten counter: {}: {}\n'.format(k, v))
      continue
    v_mean, v_stddev = aggregates[k]['mean'], aggregates[k]['stddev']
    expression = config.get('{}_expression'.format(k)) or config['base_expression']
    if not eval(expression, None, {'v': v, 'v_mean': v_mean, 'v_stddev': v_stddev}):
      lines.append('{} failed its expression check. Expression: {}.  Mean: {}.  '
                   'Stddev: {}.  Actual Value: {}\n'.format(k, expression, v_mean,
                                                            v_stddev, v))
  return ''.join(lines)
