#!/usr/bin/env python3
"""Per-event logging cost, side by side in one run: Loupe's generated C,
Rust, Go, Java and Python stubs and LTTng-UST, all logging the payload of Loupe::App::Progress
(u64, f64, a 5-byte string, a 2-element int32 list), each timing itself from
inside; enabled (Loupe under `loupe trace record`, LTTng in a session with the
event enabled, consumers draining) and disabled; 1 thread and 2 threads on
the 2 CPUs; C and Rust both with the clock_gettime clock and with the TSC
clock (`--clock tsc`); beside the floors: one clock_gettime(CLOCK_MONOTONIC),
one RDTSCP, one RDTSC. Rounds alternate the variants; prints medians and min-max.
Usage (root, from the repository root):
    cargo build --release -p loupe -p loupe-trace --example trace_bench
    bench/trace_cost.py [ROUNDS]
With TRACE_COST_OLD_C=DIR (a directory holding an older loupe_trace.h and
loupe_events.h, e.g. from `git show REV:sdk/c/...`) the C variants also run
built against those headers, in the same rounds: before/after in one run.
With TRACE_COST_OLD_RUST=BINARY (a trace_bench example built from an older
revision) the Rust variants also run with it, in the same rounds.
Needs gcc, go, javac, liblttng-ust-dev and lttng-tools (scripts/setup.sh installs them)."""
import os, re, shutil, statistics, subprocess, sys, tempfile

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
N = 2_000_000
FLOOR = r'''#include <stdio.h>
#include <string.h>
#include <time.h>
int main(int argc,char**argv){struct timespec t,a,b;long n=10000000;unsigned aux;volatile unsigned long long s=0;
int k=argc>1?(strcmp(argv[1],"rdtscp")==0?1:2):0;clock_gettime(CLOCK_MONOTONIC,&a);
for(long i=0;i<n;i++){if(k==1)s+=__builtin_ia32_rdtscp(&aux);else if(k==2)s+=__builtin_ia32_rdtsc();
else{clock_gettime(CLOCK_MONOTONIC,&t);__asm__ volatile(""::"r"(&t):"memory");}}
clock_gettime(CLOCK_MONOTONIC,&b);printf("%.2f ns/event\n",((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/n);}'''


def ns(out):
    return float(re.search(r'([\d.]+) ns/event', out).group(1))


def run(cmd, env=None):
    return ns(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout)


def loupe(tmp, cmd, clock='monotonic'):
    out = os.path.join(tmp, 'trace')
    shutil.rmtree(out, ignore_errors=True)
    v = run(['target/release/loupe', 'trace', 'record', '--clock', clock, '-o', out, '--'] + cmd)
    shutil.rmtree(out)
    return v


def lttng(tmp, cmd):
    out = os.path.join(tmp, 'lttng')
    subprocess.run(['lttng', 'create', 'loupebench', '--output=' + out], check=True, capture_output=True)
    subprocess.run(['lttng', 'enable-event', '-u', 'loupe_bench:progress'], check=True, capture_output=True)
    subprocess.run(['lttng', 'start'], check=True, capture_output=True)
    try:
        return run(cmd)
    finally:
        subprocess.run(['lttng', 'stop'], capture_output=True)
        subprocess.run(['lttng', 'destroy'], capture_output=True)
        shutil.rmtree(out, ignore_errors=True)


def main():
    tmp = tempfile.mkdtemp()
    sessiond = None
    if subprocess.run(['pgrep', '-x', 'lttng-sessiond'], capture_output=True).returncode != 0:
        sessiond = subprocess.Popen(['lttng-sessiond'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(['sleep', '1'])
    try:
        c = os.path.join(tmp, 'tp')
        subprocess.check_call(['gcc', '-O2', '-pthread', '-Isdk/c', '-o', c, 'testdata/workloads/trace_phases.c'])
        old_dir = os.environ.get('TRACE_COST_OLD_C')
        old = os.path.join(tmp, 'tp_old')
        if old_dir:
            subprocess.check_call(['gcc', '-O2', '-pthread', '-I' + old_dir, '-o', old, 'testdata/workloads/trace_phases.c'])
        lt = os.path.join(tmp, 'lt')
        subprocess.check_call(['gcc', '-O2', '-pthread', '-Ibench/lttng', '-o', lt, 'bench/lttng/bench_lttng.c', '-llttng-ust', '-ldl'])
        floor = os.path.join(tmp, 'floor')
        open(floor + '.c', 'w').write(FLOOR)
        subprocess.check_call(['gcc', '-O2', '-o', floor, floor + '.c'])
        rs = 'target/release/examples/trace_bench'
        go = os.path.join(tmp, 'tracedemo')
        subprocess.check_call(['go', 'build', '-o', go, './cmd/tracedemo'], cwd='sdk/go')
        jdir = os.path.join(tmp, 'java')
        subprocess.check_call(['javac', '-d', jdir, 'sdk/java/LoupeEvents.java', 'sdk/java/TraceDemo.java'])
        java = ['java', '-cp', jdir, 'TraceDemo']
        py = ['python3', 'sdk/python/tracedemo.py']
        env = {k: v for k, v in os.environ.items() if k != 'LOUPE_TRACE_SHM'}
        variants = [
            ('clock_gettime floor', lambda: run([floor])),
            ('RDTSCP floor', lambda: run([floor, 'rdtscp'])),
            ('RDTSC floor', lambda: run([floor, 'rdtsc'])),
            ('Loupe C, disabled', lambda: run([c, 'bench', str(5 * N)], env)),
            ('Loupe Rust, disabled', lambda: run([rs, str(5 * N)], env)),
            ('LTTng-UST, no session', lambda: run([lt, str(5 * N)])),
            ('Loupe Go, disabled', lambda: run([go, 'bench', str(5 * N)], env)),
            ('Loupe Java, disabled', lambda: run([*java, 'bench', str(5 * N)], env)),
            ('Loupe Python, disabled', lambda: run([*py, 'bench', str(N // 10)], env)),
            ('Loupe C, 1 thread', lambda: loupe(tmp, [c, 'bench', str(N)])),
            ('Loupe C TSC, 1 thread', lambda: loupe(tmp, [c, 'bench', str(N)], 'tsc')),
            ('Loupe Rust, 1 thread', lambda: loupe(tmp, [rs, str(N)])),
            ('Loupe Rust TSC, 1 thread', lambda: loupe(tmp, [rs, str(N)], 'tsc')),
            ('LTTng-UST, 1 thread', lambda: lttng(tmp, [lt, str(N)])),
            ('Loupe Go, 1 thread', lambda: loupe(tmp, [go, 'bench', str(N)])),
            ('Loupe Java, 1 thread', lambda: loupe(tmp, [*java, 'bench', str(N)])),
            ('Loupe Python, 1 thread', lambda: loupe(tmp, [*py, 'bench', str(N // 100)])),
            ('Loupe C, 2 threads', lambda: loupe(tmp, [c, 'bench', str(N), '2'])),
            ('Loupe C TSC, 2 threads', lambda: loupe(tmp, [c, 'bench', str(N), '2'], 'tsc')),
            ('Loupe Rust, 2 threads', lambda: loupe(tmp, [rs, str(N), '2'])),
            ('LTTng-UST, 2 threads', lambda: lttng(tmp, [lt, str(N), '2'])),
        ]
        if old_dir:
            variants += [
                ('Loupe C old, 1 thread', lambda: loupe(tmp, [old, 'bench', str(N)])),
                ('Loupe C old TSC, 1 thread', lambda: loupe(tmp, [old, 'bench', str(N)], 'tsc')),
                ('Loupe C old, 2 threads', lambda: loupe(tmp, [old, 'bench', str(N), '2'])),
                ('Loupe C old TSC, 2 threads', lambda: loupe(tmp, [old, 'bench', str(N), '2'], 'tsc')),
            ]
        old_rs = os.environ.get('TRACE_COST_OLD_RUST')
        if old_rs:
            variants += [
                ('Loupe Rust old, 1 thread', lambda: loupe(tmp, [old_rs, str(N)])),
                ('Loupe Rust old TSC, 1 thread', lambda: loupe(tmp, [old_rs, str(N)], 'tsc')),
                ('Loupe Rust old, 2 threads', lambda: loupe(tmp, [old_rs, str(N), '2'])),
            ]
        res = {name: [] for name, _ in variants}
        for _ in range(ROUNDS):
            for name, f in variants:
                res[name].append(f())
        print(f'{"variant":28} {"median ns/event":>16}  min - max  ({ROUNDS} rounds)')
        for k, v in res.items():
            print(f'{k:28} {statistics.median(v):16.2f}  {min(v):.2f} - {max(v):.2f}')
    finally:
        if sessiond:
            sessiond.terminate()
            sessiond.wait()
        shutil.rmtree(tmp)


main()
