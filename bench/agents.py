#!/usr/bin/env python3
"""The agents without a person (issue 29): a workload that reports its own
throughput runs under `loupe daemon` with the agent off (A) and on (B), in
alternating rounds (A B, B A, ...). In each round the workload starts, the
daemon starts, and once the agent has decided (B) or the same time has
passed (A), the workload's own counter is read over --measure seconds. The
gain is the median B/A ratio over rounds with a 95% bootstrap interval;
the agent's decisions (kept, reverted) are counted from its log.

  bench/agents.py hugepages [--rounds N] [--mib M] [--measure S]
      randaccess over M MiB (1024) of anonymous memory
  bench/agents.py placement [--rounds N] [--wait block|spin]
      pcqueue: a producer and a consumer thread
Raw rounds go to bench/results/agents-<which>-<time>.json."""
import argparse, json, os, random, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LOUPE, ROOT, WL, build, start_daemon, stop_daemon


def counter(path):
    try:
        return int(open(path).read().split()[0])
    except (OSError, IndexError, ValueError):
        return 0


def decision(db, pid):
    """The agent's last verdict on pid, or None while it has not decided."""
    out = subprocess.run([LOUPE, "agents", "log", "--format", "json", "--db", db], capture_output=True, text=True).stdout
    for e in reversed(json.loads(out or "[]")):
        if (e.get("target") or {}).get("pid") == pid and e["event"] in ("kept", "reverted", "left-alone", "error", "ended"):
            return e
    return None


def one(args, agent_on, settle):
    """One run: returns (rate over the measured seconds, the agent's verdict or None, seconds until it decided)."""
    with tempfile.TemporaryDirectory() as d:
        count = os.path.join(d, "count")
        if args.which == "hugepages":
            cmd = [os.path.join(WL, "randaccess"), "--mib", str(args.mib)]
        else:
            cmd = [os.path.join(WL, "pcqueue"), "--wait", args.wait]
        w = subprocess.Popen(cmd + ["--seconds", "600", "--counter", count], stdout=subprocess.DEVNULL)
        while counter(count) == 0:
            time.sleep(0.05)
        db = os.path.join(d, "db")
        extra = ["--max-overhead", "off", "--no-stacks", "--freq", "99"]
        if agent_on:
            extra += ["--agents-enable", args.which, "--agents-allow", f"pid:{w.pid}", "--agents-metric", f"counter:{count}",
                      "--agents-interval", "1"]
        t0 = time.time()
        daemon = start_daemon(db, extra)
        verdict = None
        while agent_on and verdict is None and time.time() - t0 < 600:
            time.sleep(0.5)
            verdict = decision(db, w.pid)
        took = time.time() - t0
        if not agent_on:
            time.sleep(max(settle - took, 0))
        time.sleep(1)
        c0, t1 = counter(count), time.time()
        time.sleep(args.measure)
        rate = (counter(count) - c0) / (time.time() - t1)
        stop_daemon(daemon)
        w.kill()
        w.wait()
        return rate, verdict, took


def bootstrap(ratios, n=10000):
    meds = sorted(statistics.median(random.choices(ratios, k=len(ratios))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", choices=["hugepages", "placement"])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--wait", default="block", choices=["block", "spin"])
    ap.add_argument("--measure", type=float, default=5.0)
    args = ap.parse_args()
    build()
    rounds, settle = [], 20.0
    for r in range(args.rounds):
        order = [False, True] if r % 2 == 0 else [True, False]
        got = {}
        for on in order:
            rate, verdict, took = one(args, on, settle)
            if on:
                settle = took
            got[on] = (rate, verdict)
        ratio = got[True][0] / got[False][0]
        v = got[True][1] or {}
        rounds.append({"off": got[False][0], "on": got[True][0], "ratio": ratio, "event": v.get("event"), "summary": v.get("summary")})
        print(f"round {r + 1}: off {got[False][0]:.4g}/s on {got[True][0]:.4g}/s ratio {ratio:.3f} agent: {v.get('event')}: {v.get('summary')}", flush=True)
    ratios = [x["ratio"] for x in rounds]
    lo, hi = bootstrap(ratios)
    kept = sum(x["event"] == "kept" for x in rounds)
    print(f"{args.which}: median on/off {statistics.median(ratios):.3f} (95% bootstrap {lo:.3f} .. {hi:.3f}), "
          f"min {min(ratios):.3f} max {max(ratios):.3f}, kept in {kept} of {len(rounds)} rounds")
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    out = os.path.join(ROOT, "bench/results", f"agents-{args.which}-{time.strftime('%Y%m%dT%H%M%S')}.json")
    json.dump({"args": vars(args), "rounds": rounds}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
