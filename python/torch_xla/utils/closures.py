"""torch_xla.utils.closures: the runners of step closures
(xm.add_step_closure), as PyTorch/XLA has them.

AsyncClosureHandler runs closures on one background worker thread, in the
order they were queued, so the training loop does not wait for them. A
closure that raises stops the worker; the exception is handed back to the
caller of the next run() as the cause of a RuntimeError (the failing closure
ran on another thread, so this is the first place it can surface).
"""
import abc
import os
import queue
import threading


class ClosureHandler(abc.ABC):
  """Runs closures (callables without arguments)."""

  def __init__(self):
    pass

  @abc.abstractmethod
  def run(self, closure):
    """Runs one closure."""

  def run_all(self, closures):
    for closure in closures:
      self.run(closure)


class AsyncClosureHandler(ClosureHandler):
  """Runs closures asynchronously on a worker thread.

  Args:
    max_queue_size: closures that may wait before run() blocks (default 100,
      or the XLA_MAX_ASYNC_QUEUE environment variable).
  """

  # Seconds an idle worker waits for more closures before it exits.
  _IDLE_EXIT_S = 3

  def __init__(self, max_queue_size=100):
    super().__init__()
    self._closure_queue = queue.Queue(
        int(os.environ.get('XLA_MAX_ASYNC_QUEUE', max_queue_size)))
    self._closure_exception = queue.Queue()
    self._closure_lock = threading.Lock()
    self._closure_event_loop_finished = threading.Event()
    self._closure_event_loop = None

  def _event_loop(self):
    while True:
      try:
        closure = self._closure_queue.get(block=True, timeout=self._IDLE_EXIT_S)
      except queue.Empty:
        with self._closure_lock:
          if self._closure_queue.empty():
            self._closure_event_loop_finished.set()
            return
        continue
      try:
        closure()
      except Exception as e:  # handed to the next run() call
        self._closure_exception.put(e)
        self._drop_queued()
        return
      finally:
        self._closure_queue.task_done()

  def _drop_queued(self):
    # Closures queued behind a failed one never run (as in PyTorch/XLA's
    # handler); mark them done so wait() returns.
    while True:
      try:
        self._closure_queue.get(block=False)
      except queue.Empty:
        return
      self._closure_queue.task_done()

  def start_event_loop(self):
    """Starts the worker thread unless it is running."""
    if self._closure_event_loop is None:
      self._closure_event_loop_finished.clear()
      self._closure_event_loop = threading.Thread(
          target=self._event_loop, name='xla-async-closures', daemon=True)
      self._closure_event_loop.start()

  def run(self, closure):
    with self._closure_lock:
      try:
        e = self._closure_exception.get(block=False)
      except queue.Empty:
        e = None
      if e is not None:
        raise RuntimeError(
            'Cannot run asynchronous closure due to previously raised exception'
        ) from e
      self._closure_queue.put(closure, block=True)
      if (self._closure_event_loop is None or
          not self._closure_event_loop.is_alive()):
        self._closure_event_loop = None
        self.start_event_loop()

  def wait(self):
    """Blocks until every queued closure has run (or one has raised)."""
    self._closure_queue.join()
