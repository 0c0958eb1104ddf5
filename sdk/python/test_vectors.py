"""Runs the shared test vectors through the generated Python stub: values
encode to the vector's bytes, and the bytes decode and re-encode to themselves."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import loupe_events  # noqa: E402
import loupe_trace  # noqa: E402

VECTORS = os.path.join(os.path.dirname(__file__), '..', 'vectors', 'loupe.json')


class Vectors(unittest.TestCase):
    def test_vectors(self):
        with open(VECTORS) as f:
            vectors = json.load(f)
        self.assertGreater(len(vectors), 0)
        for v in vectors:
            want = bytes.fromhex(v['hex'])
            _, _, enc = loupe_events._EVENTS[v['id']]
            self.assertEqual(enc(v['ts'], *v['fields']), want, v['event'])
            name, ts, fields, size = loupe_events.decode(want)
            self.assertEqual((name, ts, size), (v['event'], v['ts'], len(want)))
            self.assertEqual(loupe_events.reencode(want), want, v['event'])

    def test_phase_marker_known_bytes(self):
        # Hand-derived: ts 1, size 24 (12 + 4 + 8, no padding), id 1, phase 7 (u32), iteration 2 (u64).
        got = loupe_events.encode_loupe_phase_begin(1, 7, 2)
        self.assertEqual(got.hex(), '0100000000000000' + '1800' + '0100' + '07000000' + '0200000000000000')

    def test_vectors_through_buffer(self):
        # Every vector logged through the runtime into a one-CPU buffer file laid out as
        # crates/trace/src/buffer.rs creates it: the packet holds the vectors' bytes in order (timestamps
        # aside, the writer's own, never decreasing), its header is filled in, and every byte is committed.
        import struct
        import tempfile
        with open(VECTORS) as f:
            vectors = json.load(f)
        sub, nsub, data_off = 1 << 16, 2, 8192
        with tempfile.NamedTemporaryFile() as f:
            header = struct.pack('<QIIIIIIQQ', loupe_trace.MAGIC, 1, 1, nsub, sub, 1, 256, 4096, data_off)
            f.write(header + bytes(data_off + nsub * sub - len(header)))
            f.flush()
            buf = loupe_trace.Buffer(f.name)
            for v in vectors:
                self.assertTrue(buf.write(bytes.fromhex(v['hex']), cpu=0))
            packet = bytes(buf.mm[data_off:data_off + sub])
            magic, _, _, cpu, ts_begin = struct.unpack_from('<IIIIQ', packet, 0)
            self.assertEqual((magic, cpu), (loupe_trace.PACKET_MAGIC, 0))
            at, last = 64, ts_begin
            for v in vectors:
                want = bytes.fromhex(v['hex'])
                got = packet[at:at + len(want)]
                self.assertEqual(got[8:], want[8:], v['event'])
                ts, = struct.unpack_from('<Q', got, 0)
                self.assertGreaterEqual(ts, last)
                at, last = at + len(want), ts
            head, = struct.unpack_from('<Q', buf.mm, 4096)
            commit, = struct.unpack_from('<Q', buf.mm, 4096 + 192)
            self.assertEqual((head, commit), (at, at))


if __name__ == '__main__':
    unittest.main()
