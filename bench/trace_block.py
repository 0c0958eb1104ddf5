#!/usr/bin/env python3
"""Block I/O completions seen by the trace's kernel layer: the BPF program
(`--kernel block`) beside perf (`--kernel block-perf`), recording the same
`dd` at the same time. Per round: a perf-path recorder runs machine-wide
(`loupe trace record --kernel block-perf -- sleep 3`); meanwhile a BPF-path
recorder runs `dd if=/dev/zero of=FILE bs=64k count=64 oflag=direct` (4 MiB in
64 requests, each write returning only once its request completed). The
file's extents on the disk (FIEMAP) are the ground truth: each recorder's
write issues and completions that overlap them are counted (other I/O of the
machine is ignored). Prints one line per round, with the load average and
whether both recorders decoded the file's write issues into the same fields
(dev, sector, bytes, rwbs, tid, comm), then the medians. Counts, not timings: fine on a loaded machine, but perf misses
completions only while a CPU is idle, so the gap shows on a quiet one.
Usage (root, from the repository root):
    cargo build --release -p loupe && bench/trace_block.py [ROUNDS]"""
import fcntl, json, os, re, statistics, struct, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
FS_IOC_FIEMAP = 0xC020660B


def extents(path):
    """(first sector, sectors) of the file on its file system's device, from FIEMAP."""
    n = 64
    out = bytearray(struct.pack("QQIIII", 0, 2**64 - 1, 1, 0, n, 0) + b"\0" * (56 * n))  # FIEMAP_FLAG_SYNC
    with open(path, "rb") as f:
        fcntl.ioctl(f.fileno(), FS_IOC_FIEMAP, out, True)
    mapped = struct.unpack_from("QQIIII", out)[3]
    return [(phys // 512, length // 512) for _, phys, length in (struct.unpack_from("QQQ", out, 32 + 56 * i) for i in range(mapped))]


def disk_of(path):
    """The block tracepoints' device number (major << 20 | minor) of the disk holding `path`, and its
    file system's first sector on that disk."""
    st = os.stat(path)
    sysdir = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if os.path.exists(f"{sysdir}/start"):
        disk, start = open(f"{sysdir}/../dev").read().strip(), int(open(f"{sysdir}/start").read())
    else:
        disk, start = open(f"{sysdir}/dev").read().strip(), 0
    ma, mi = map(int, disk.split(":"))
    return ma << 20 | mi, start


EVENT = re.compile(r"OS::Block::(Issue|Complete): \{ cpu_id = \d+ \}, \{ dev = (\d+), sector = (\d+), bytes = (\d+)(.*)\}")


def counts(trace, dev, exts):
    """(write issues, completions, the issues' decoded text from `dev = ` on) in `trace` on `dev` overlapping
    the extents."""
    text = subprocess.run(["babeltrace2", os.path.join(trace, "ctf")], capture_output=True, text=True, check=True).stdout
    got = {"Issue": [], "Complete": []}
    for m in EVENT.finditer(text):
        kind, d, sector, nbytes, rest = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5)
        if d != dev or (kind == "Issue" and "W" not in rest.split("rwbs = ")[-1]):
            continue
        if any(sector < s + n and sector + nbytes // 512 > s for s, n in exts):
            got[kind].append(m.group(0).split("dev = ", 1)[1])
    return len(got["Issue"]), len(got["Complete"]), sorted(got["Issue"])


def main():
    target = os.path.join(ROOT, "target")
    dev, start = disk_of(target)
    rows = []
    print("round  load1  dd writes  bpf: issues completions lost  perf: issues completions lost  same issues")
    for r in range(ROUNDS):
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(target, f"trace_block.{os.getpid()}.dat")
            perf = subprocess.Popen([LOUPE, "trace", "record", "--kernel", "block-perf", "-o", f"{tmp}/perf", "--", "sleep", "3"],
                                    stderr=subprocess.DEVNULL)
            time.sleep(1)
            load = os.getloadavg()[0]
            dd = ["dd", "if=/dev/zero", f"of={data}", "bs=64k", "count=64", "oflag=direct"]
            subprocess.run([LOUPE, "trace", "record", "--kernel", "block", "-o", f"{tmp}/bpf", "--"] + dd, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            exts = [(start + s, n) for s, n in extents(data)]
            perf.wait()
            os.unlink(data)  # after the perf recorder: its discard requests would overlap the extents
            b, p = counts(f"{tmp}/bpf", dev, exts), counts(f"{tmp}/perf", dev, exts)
            lost = [json.load(open(f"{tmp}/{k}/trace.json"))["kernel_events_lost"] for k in ("bpf", "perf")]
            rows.append((load, b, p))
            # Issues run in the writer's context, where perf misses none: both paths must decode them alike.
            same = "yes" if b[2] == p[2] else "NO"
            print(f"{r + 1:5}  {load:5.2f}  {64:9}  {b[0]:11} {b[1]:11} {lost[0]:4}  {p[0]:12} {p[1]:11} {lost[1]:4}  {same:>11}", flush=True)
    med = lambda f: statistics.median(f(x) for x in rows)
    print(f"median        {64:9}  {med(lambda x: x[1][0]):11} {med(lambda x: x[1][1]):11}       {med(lambda x: x[2][0]):12} "
          f"{med(lambda x: x[2][1]):11}")


if __name__ == "__main__":
    main()
