"""Runs the shared test vectors through the generated Python stub: values
encode to the vector's bytes, and the bytes decode and re-encode to themselves."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import loupe_events  # noqa: E402

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


if __name__ == '__main__':
    unittest.main()
