"""Logs 3 iterations of phase 7, each with 100 progress events, through the
generated Python module; run it under `loupe trace record`.
`tracedemo.py bench N` logs N progress events and prints ns/event instead."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loupe_events as ev  # noqa: E402
import loupe_trace  # noqa: E402


def main():
    if len(sys.argv) > 2 and sys.argv[1] == 'bench':
        n = int(sys.argv[2])
        t0 = time.monotonic_ns()
        for i in range(n):
            ev.trace_loupe_app_progress(i, 1.0, 'bench', [1, -1])
        print('%.2f ns/event' % ((time.monotonic_ns() - t0) / n))
        return
    if not loupe_trace.enabled():
        print('tracedemo: $LOUPE_TRACE_SHM is not set; events go nowhere', file=sys.stderr)
    for it in range(3):
        ev.trace_loupe_phase_begin(7, it)
        for k in range(100):
            ev.trace_loupe_app_progress(k, 0.5, 'python', [k, -1])
        ev.trace_loupe_phase_end(7, it)


if __name__ == '__main__':
    main()
