"""The replicas of a launch running in this process: torch_xla.launch and
xmp.spawn run one thread per device (torch_xla._internal.pjrt), and each of
those threads is a replica with its own ordinal, device and replica count.

Contract: a thread is a replica between enter() and leave() (the launcher
calls them around fn); every other thread, the launching one included, is
outside a launch and sees ordinal 0 and a world of 1, as before any launch,
except in a process of a multi-process job (torchrun, torchtpu.processes):
there such a thread is the replica of its current device, global ordinal
process index x local devices + device index, in a world of every device
of every process.
The engine's collectives read the launch's replica count from the
collective layer (_C.collective_set_world_size), which the launcher sets
for the whole process while its replicas run."""
import threading

_local = threading.local()


def enter(ordinal, world_size):
    """Makes the calling thread replica `ordinal` of `world_size`."""
    _local.replica = (int(ordinal), int(world_size))


def leave():
    _local.replica = None


def current():
    """(ordinal, world_size) of the calling thread, None outside a launch."""
    return getattr(_local, "replica", None)


def ordinal():
    r = current()
    if r:
        return r[0]
    from torchtpu import processes
    if processes.launched():
        from torchtpu import bridge
        return processes.device_base() + bridge.current_device_index()
    return 0


def world_size():
    r = current()
    if r:
        return r[1]
    from torchtpu import processes
    return processes.world_size()


def sync_device():
    """The device a sync from this thread cuts: a replica's own device
    (its peers sync theirs), every device (-1) outside a launch."""
    if current() is None:
        return -1
    from torchtpu import bridge
    return bridge.current_device_index()
