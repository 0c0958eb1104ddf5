"""Loupe trace runtime for Python: the writer side of the lock-free per-CPU
buffer of crates/trace/src/buffer.rs (same layout, same protocol as
sdk/c/loupe_trace.h). Space is reserved with one compare-and-swap on the
CPU's head (libatomic's __atomic_compare_exchange_8 through ctypes, on the
shared mapping itself), the CLOCK_MONOTONIC timestamp (time.monotonic_ns) is
read inside every attempt, a full buffer drops the event and counts it. The
buffer is the file named by $LOUPE_TRACE_SHM (set by `loupe trace record`);
without it `write` returns at once. Generated modules (loupe trace gen
--lang python) call `write` from their trace_* functions."""
import ctypes
import mmap
import os
import struct
import time

MAGIC = 0x4352544550554F4C  # "LOUPETRC" little-endian
PACKET_MAGIC = 0xC1FC1FC1
PACKET_HEADER = 64
_ACQUIRE, _RELEASE, _ACQ_REL, _RELAXED = 2, 3, 4, 0

_ops = None


def _atomics():
    """(load, compare-exchange, fetch-add) on 8-byte words of shared memory, from libatomic
    (looked up by name: a double-underscore attribute would be mangled inside a class)."""
    global _ops
    if _ops is None:
        lib = ctypes.CDLL('libatomic.so.1')
        load = getattr(lib, '__atomic_load_8')
        load.argtypes, load.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_uint64
        cas = getattr(lib, '__atomic_compare_exchange_8')
        cas.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
        cas.restype = ctypes.c_bool
        add = getattr(lib, '__atomic_fetch_add_8')
        add.argtypes, add.restype = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int], ctypes.c_uint64
        _ops = (load, cas, add)
    return _ops


class Buffer:
    """A mapped buffer file, attached as a writer."""

    def __init__(self, path):
        with open(path, 'r+b') as f:
            self.mm = mmap.mmap(f.fileno(), 0)
        magic, version, self.ncpu, self.nsub, self.sub = struct.unpack_from('<QIIII', self.mm, 0)
        if magic != MAGIC or version != 1:
            raise ValueError('%s is not a loupe trace buffer' % path)
        self.ctl_stride, = struct.unpack_from('<I', self.mm, 28)
        self.data_off, = struct.unpack_from('<Q', self.mm, 40)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.load, self.cas, self.add = _atomics()
        self.getcpu = ctypes.CDLL(None).sched_getcpu

    def _ctl(self, cpu, off):
        return self.base + 4096 + cpu * self.ctl_stride + off

    def _at(self, cpu, pos):
        slot = (pos // self.sub) % self.nsub
        return self.data_off + (cpu * self.nsub + slot) * self.sub + pos % self.sub

    def _commit(self, cpu, pos, n):
        slot = (pos // self.sub) % self.nsub
        self.add(self._ctl(cpu, 192 + 8 * slot), n, _RELEASE)

    def write(self, rec, cpu=None):
        """Logs an encoded record (its first 8 bytes get the timestamp); False if dropped."""
        s, n = self.sub, len(rec)
        if cpu is None:
            cpu = max(self.getcpu(), 0) % self.ncpu
        if n > s - PACKET_HEADER:
            self.add(self._ctl(cpu, 64), 1, _RELAXED)
            return False
        head = self._ctl(cpu, 0)
        expected = ctypes.c_uint64()
        while True:
            h = self.load(head, _ACQUIRE)
            ts = time.monotonic_ns()
            fresh = h % s == 0 or h % s + n > s
            if fresh:
                start = (h + s - 1) // s * s
                if start // s >= self.load(self._ctl(cpu, 128), _ACQUIRE) + self.nsub:
                    self.add(self._ctl(cpu, 64), 1, _RELAXED)
                    return False
                pos = start + PACKET_HEADER
            else:
                pos = h
            expected.value = h
            if self.cas(head, ctypes.addressof(expected), pos + n, _ACQ_REL, _RELAXED):
                break
        at = self._at(cpu, pos)
        self.mm[at:at + n] = struct.pack('<Q', ts) + bytes(rec[8:])
        mine = n
        if fresh:
            # CTF packet header + context; the consumer completes end, sizes, drops.
            dropped = self.load(self._ctl(cpu, 64), _RELAXED)
            hdr = struct.pack('<IIII QQQQ QQ', PACKET_MAGIC, 0, cpu, cpu, ts, 0, 0, 0, start // s, dropped)
            a = self._at(cpu, start)
            self.mm[a:a + PACKET_HEADER] = hdr
            mine += PACKET_HEADER
            if h % s:  # close the previous packet: zero its tail and commit it
                tail = s - h % s
                a = self._at(cpu, h)
                self.mm[a:a + tail] = bytes(tail)
                self._commit(cpu, h, tail)
        self._commit(cpu, pos, mine)
        return True


_buffer = None
_state = 0  # 0 = not looked yet, 1 = tracing, -1 = off


def enabled():
    """Whether events go anywhere; attaches to $LOUPE_TRACE_SHM on first use."""
    global _buffer, _state
    if _state == 0:
        _state = -1
        path = os.environ.get('LOUPE_TRACE_SHM')
        if path:
            try:
                _buffer, _state = Buffer(path), 1
            except (OSError, ValueError):
                pass
    return _state > 0


def write(rec):
    """Logs an encoded record into the attached buffer; False if off or dropped."""
    return enabled() and _buffer.write(rec)
