"""What the benchmark scripts share: paths, the workloads, /proc readings,
and starting and stopping a `loupe daemon`."""
import json, os, signal, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
WL = os.path.join(ROOT, "target/bench-workloads")


def build():
    """Builds testdata/workloads into WL."""
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={WL}"], check=True)


def burn():
    """Runs `burn` on every CPU; returns the elapsed seconds it measured itself."""
    out = subprocess.run([os.path.join(WL, "burn"), "--threads", str(os.cpu_count())], check=True, capture_output=True, text=True).stdout
    return float(out.strip().split("=")[1])


def proc_cpu(pid):
    """User + system CPU seconds of a process, from /proc."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def proc_hwm_kib(pid):
    """Peak resident set of a process, KiB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def start_daemon(db, args):
    """Starts `loupe daemon --db DB ARGS...` and waits until it samples (its socket exists)."""
    p = subprocess.Popen([LOUPE, "daemon", "--db", db, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while not os.path.exists(os.path.join(db, "daemon.sock")):
        time.sleep(0.05)
    return p


def stop_daemon(p, timeout=120):
    """SIGTERMs the daemon; returns (its final JSON report or None, its stderr)."""
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=timeout)
    for line in err.splitlines():
        if line.startswith("loupe: daemon stopped: "):
            return json.loads(line.split(": ", 2)[2]), err
    return None, err


# personality(2)'s ADDR_NO_RANDOMIZE, what `setarch -R` sets.
ADDR_NO_RANDOMIZE = 0x0040000


def cpu_time(args, cpu=None, no_aslr=False, env=None):
    """Child's user+sys seconds and its stdout. `cpu`: pin the child to that CPU; `no_aslr`: run it without
    address randomization; `env`: its environment (default: ours)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        if no_aslr:
            import ctypes
            ctypes.CDLL(None).personality(ADDR_NO_RANDOMIZE)
        os.execve(args[0], args, os.environ if env is None else env)
    os.close(w)
    out = b""
    while chunk := os.read(r, 65536):
        out += chunk
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    if status != 0:
        sys.exit(f"{args} failed: {status}")
    return ru.ru_utime + ru.ru_stime, out.decode()
