"""CheckpointManager: per-step distributed checkpoints (PyTorch/XLA's API).

Contract (PyTorch/XLA's names, defaults and assertions):
- CheckpointManager(path, save_interval, max_to_keep=0, max_pending_async=1,
  num_of_threads=1, process_group=None, chkpt_on_preemption=True) needs an
  initialized torch.distributed process group (AssertionError otherwise;
  process_group=None makes a new group of every rank). Each checkpoint is
  the directory `path/<step>` (step_dirs.py) written by
  torch.distributed.checkpoint with SPMDSavePlanner.
- save(step, sd, force=False) checkpoints when should_save(step) (step a
  multiple of save_interval, or the preemption sync point when
  chkpt_on_preemption) or force, returns whether it did. save_async syncs,
  copies sd to the host (_sharded_cpu_state_dict: sharded tensors as their
  shards), queues the write on a worker thread (at most max_pending_async
  queued: further calls wait) and returns at once; join() waits for them.
- restore(step, sd) loads step into sd in place (SPMDLoadPlanner: any
  mesh); a step not tracked is AssertionError naming the valid steps.
- all_steps() lists the committed steps, sorted. With max_to_keep > 0 the
  oldest checkpoints (by creation time, not step) beyond max_to_keep are
  deleted after each save; the order persists across managers (each
  checkpoint records its step and time in `.manager_metadata`).
- Crash safety (beyond PyTorch/XLA, which writes in place): a save is
  written into `path/.tmp-<step>` and renamed into place after every file
  is written and fsynced, so a process killed during a save leaves the
  previous checkpoints intact and the unfinished step unlisted; a new
  manager on the path finishes or removes what was left (step_dirs.py).
- Deviations: `path` is a local directory (PyTorch/XLA accepts any fsspec
  URL; the atomic rename needs a local file system, other URLs are
  NotImplementedError); preemption detection in a single process needs no
  master IP discovery (PyTorch/XLA's get_master_ip raises off TPU).
"""
import io
import logging
import os
import pickle
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from typing import Deque, List, Optional

import torch.distributed as dist
import torch.distributed.checkpoint as dist_cp
from torch.distributed.checkpoint.metadata import STATE_DICT_TYPE

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.experimental.distributed_checkpoint import step_dirs
from torch_xla.experimental.distributed_checkpoint._helpers import _sharded_cpu_state_dict
from torch_xla.experimental.distributed_checkpoint.planners import (SPMDLoadPlanner,
                                                                    SPMDSavePlanner)

_MANAGER_METADATA_FILE = step_dirs.MANAGER_METADATA_FILE


@dataclass
class _CheckpointMetadata:
    # The step at which the checkpoint was taken
    step: int
    # The time at which the checkpoint was taken
    ts: datetime


class _RecordUnpickler(pickle.Unpickler):
    """Reads a `.manager_metadata` record and nothing else: a checkpoint
    directory's pickle may only name the record class and datetime."""
    _allowed = {(__name__, "_CheckpointMetadata"): _CheckpointMetadata,
                ("datetime", "datetime"): datetime}

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"{module}.{name} is not a checkpoint record") from None


def _local_path(path):
    path = os.fspath(path)
    if path.startswith("file://"):
        return path[len("file://"):]
    if "://" in path:
        raise NotImplementedError(
            f"CheckpointManager writes to a local directory here (got {path}): committing a "
            "checkpoint by an atomic rename needs a local file system")
    return path


class CheckpointManager:
    """Saves and restores per-step checkpoints of a (sharded) state_dict
    under one directory. Intended use:

    >>> chkpt_mgr = CheckpointManager('/ckpt/run1', save_interval=10)
    >>> if chkpt_mgr.all_steps():
    >>>     prime_optimizer(optim)
    >>>     sd = {'model': model.state_dict(), 'optim': optim.state_dict()}
    >>>     chkpt_mgr.restore(max(chkpt_mgr.all_steps()), sd)
    >>>     model.load_state_dict(sd['model']); optim.load_state_dict(sd['optim'])
    >>> for step, batch in enumerate(loader):
    >>>     ...
    >>>     chkpt_mgr.save_async(step, {'model': model.state_dict(),
    >>>                                 'optim': optim.state_dict()})
    """

    def __init__(self,
                 path: str,
                 save_interval: int,
                 max_to_keep: Optional[int] = 0,
                 max_pending_async: Optional[int] = 1,
                 num_of_threads: Optional[int] = 1,
                 process_group: dist.ProcessGroup = None,
                 chkpt_on_preemption: bool = True):
        assert dist.is_initialized(), "A process group is required."
        assert save_interval > 0, "save_interval must be positive"
        assert max_pending_async > 0, "max_pending_async must be positive"
        assert max_to_keep >= 0, "max_to_keep must be non-negative"

        self.base_path = os.path.join(_local_path(path), "")
        self.save_interval = save_interval
        self.max_to_keep = max_to_keep
        self.num_of_threads = num_of_threads
        self.chkpt_on_preemption = chkpt_on_preemption
        self.pg = process_group or dist.new_group()

        self._async_worker_pool = ThreadPoolExecutor(max_workers=1)
        self._async_sem = threading.Semaphore(max_pending_async)
        self._async_futures = []
        # One checkpoint written at a time; _tracked_lock guards the list
        # (all_steps reads it while a background save appends).
        self._save_mutex = threading.Lock()
        self._tracked_lock = threading.Lock()

        if self._is_leader():
            os.makedirs(self.base_path, exist_ok=True)
            step_dirs.recover(self.base_path)
        self._barrier()
        self._tracked_chkpts = self._load_tracked_chkpts()

        if self.chkpt_on_preemption:
            if xr.process_count() == 1:
                master = "localhost"
            else:
                master = os.environ.get("MASTER_ADDR") or xr.get_master_ip()
            torch_xla._XLAC._ensure_xla_coordinator_initialized(xr.process_index(),
                                                                xr.process_count(), master)
            torch_xla._XLAC._activate_preemption_sync_manager()

    # ----------------------------------------------------------- helpers
    def _is_leader(self):
        return dist.get_rank(self.pg) == 0

    def _barrier(self):
        if dist.get_world_size(self.pg) > 1:
            dist.barrier(group=self.pg)

    def _load_tracked_chkpts(self) -> Deque[_CheckpointMetadata]:
        records, invalid = [], []
        for name in step_dirs.committed(self.base_path):
            try:
                with open(os.path.join(self.base_path, name, _MANAGER_METADATA_FILE), "rb") as f:
                    records.append(_RecordUnpickler(f).load())
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
                invalid.append(os.path.join(self.base_path, name))
        if invalid:
            logging.warning(f"Ignoring invalid checkpoints: {invalid}")
        return deque(sorted(records, key=lambda m: m.ts))

    def _get_path(self, step: int) -> str:
        return step_dirs.step_path(self.base_path, step)

    def _release_oldest_checkpoints(self):
        if self.max_to_keep > 0:
            while len(self._tracked_chkpts) > self.max_to_keep:
                oldest = self._tracked_chkpts.popleft()
                step_dirs.delete(self.base_path, oldest.step)

    def _wait_for_data(self):
        torch_xla.sync()
        xm.wait_device_ops()

    def _save(self, step, state_dict):
        """Writes step (shared by save and save_async); the caller has made
        state_dict's data available (_wait_for_data or a host copy)."""
        with self._save_mutex:
            tmp = step_dirs.temp_path(self.base_path, step)
            if self._is_leader():
                step_dirs.prepare_temp(self.base_path, step)
            self._barrier()
            dist_cp.save(
                state_dict=state_dict,
                storage_writer=dist_cp.FileSystemWriter(
                    tmp, thread_count=self.num_of_threads, per_thread_copy_ahead=0),
                planner=SPMDSavePlanner(),
                process_group=self.pg,
            )
            metadata = _CheckpointMetadata(step=step, ts=datetime.now())
            if self._is_leader():
                record = io.BytesIO()
                pickle.dump(metadata, record)
                step_dirs.commit(self.base_path, step, record.getvalue())
            with self._tracked_lock:
                # A step saved again replaces its earlier entry.
                self._tracked_chkpts = deque(m for m in self._tracked_chkpts if m.step != step)
                self._tracked_chkpts.append(metadata)
                if self._is_leader():
                    self._release_oldest_checkpoints()
                else:
                    while self.max_to_keep > 0 and len(self._tracked_chkpts) > self.max_to_keep:
                        self._tracked_chkpts.popleft()
            self._barrier()

    # ------------------------------------------------------------ public
    def should_save(self, step: int) -> bool:
        """True when step is a multiple of save_interval or, with
        chkpt_on_preemption, the preemption sync point."""
        preemption_detected = False
        if self.chkpt_on_preemption and self.reached_preemption(step):
            logging.warning(
                f"Preemption sync point reached at step {step}. Triggering a checkpoint.")
            preemption_detected = True
        return step % self.save_interval == 0 or preemption_detected

    def save(self, step, state_dict: STATE_DICT_TYPE, force: Optional[bool] = False) -> bool:
        """Checkpoints state_dict at step now if should_save(step) or force;
        returns whether it did."""
        if self.should_save(step) or force:
            self._wait_for_data()
            self._save(step, state_dict)
            return True
        return False

    def save_async(self, step: int, state_dict: STATE_DICT_TYPE,
                   force: Optional[bool] = False) -> bool:
        """As save, but the write runs on a worker thread from a host copy
        of state_dict; blocks only while max_pending_async saves are
        queued."""
        if self.should_save(step) or force:
            self._wait_for_data()
            cpu_state_dict = _sharded_cpu_state_dict(state_dict)
            self._async_sem.acquire()
            future = self._async_worker_pool.submit(self._save, step, cpu_state_dict)
            future.add_done_callback(lambda _: self._async_sem.release())
            self._async_futures.append(future)
            return True
        return False

    def restore(self, step: int, state_dict: STATE_DICT_TYPE) -> None:
        """Loads the checkpoint of step into state_dict in place; the caller
        then load_state_dict()s it into the model and optimizer."""
        tracked_steps = set(self.all_steps())
        assert step in tracked_steps, \
            f"Cannot restore from untracked step {step}. Valid steps are: {tracked_steps}"
        dist_cp.load(
            state_dict=state_dict,
            storage_reader=dist_cp.FileSystemReader(self._get_path(step)),
            planner=SPMDLoadPlanner(),
            process_group=self.pg,
        )

    def all_steps(self) -> List[int]:
        """The steps with a committed checkpoint, sorted."""
        with self._tracked_lock:
            return sorted(m.step for m in self._tracked_chkpts)

    def join(self):
        """Waits for the pending async checkpoints (their errors are raised
        here)."""
        futures, self._async_futures = self._async_futures, []
        wait(futures)
        for f in futures:
            f.result()

    def reached_preemption(self, step: int) -> bool:
        """True at the step all processes agreed to checkpoint at after a
        SIGTERM (the preemption sync point)."""
        assert self.chkpt_on_preemption, (
            "Preemption detection not enabled. Please set `chkpt_on_preemption` "
            " when creating the CheckpointManager")
        return torch_xla._XLAC._sync_point_reached(step)
