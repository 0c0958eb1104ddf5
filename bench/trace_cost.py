#!/usr/bin/env python3
"""Per-event logging cost of the generated C stub (Loupe::App::Progress:
u64, f64, a 5-byte string, a 2-element int32 list = 48-byte record), single
thread, enabled (under `loupe trace record`, consumer draining) and disabled
(no $LOUPE_TRACE_SHM), beside the floor: one clock_gettime(CLOCK_MONOTONIC).
Alternating rounds; prints medians and min-max.
Usage: bench/trace_cost.py [ROUNDS] (run from the repository root after cargo build --release)."""
import os, re, statistics, subprocess, sys, tempfile, shutil

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
N = 5_000_000
FLOOR = r'''#include <stdio.h>
#include <time.h>
#include <stdint.h>
int main(void){struct timespec t,a,b;long n=20000000;clock_gettime(CLOCK_MONOTONIC,&a);
for(long i=0;i<n;i++){clock_gettime(CLOCK_MONOTONIC,&t);__asm__ volatile(""::"r"(&t):"memory");}
clock_gettime(CLOCK_MONOTONIC,&b);printf("%.2f ns/event\n",((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/n);}'''

def ns(out):
    return float(re.search(r'([\d.]+) ns/event', out).group(1))

tmp = tempfile.mkdtemp()
try:
    prog = os.path.join(tmp, 'tp')
    subprocess.check_call(['gcc', '-O2', '-Isdk/c', '-o', prog, 'testdata/workloads/trace_phases.c'])
    floor = os.path.join(tmp, 'floor')
    open(floor + '.c', 'w').write(FLOOR)
    subprocess.check_call(['gcc', '-O2', '-o', floor, floor + '.c'])
    res = {'clock_gettime floor': [], 'C stub disabled': [], 'C stub enabled': []}
    for r in range(ROUNDS):
        res['clock_gettime floor'].append(ns(subprocess.check_output([floor], text=True)))
        env = {k: v for k, v in os.environ.items() if k != 'LOUPE_TRACE_SHM'}
        res['C stub disabled'].append(ns(subprocess.check_output([prog, 'bench', str(N * 4)], text=True, env=env)))
        out = os.path.join(tmp, f't{r}')
        p = subprocess.run(['target/release/loupe', 'trace', 'record', '-o', out, '--', prog, 'bench', str(N)],
                           capture_output=True, text=True, check=True)
        res['C stub enabled'].append(ns(p.stdout))
        shutil.rmtree(out)
    for k, v in res.items():
        print(f'{k:22} median {statistics.median(v):7.2f} ns/event  (min {min(v):.2f}, max {max(v):.2f}, {len(v)} rounds)')
finally:
    shutil.rmtree(tmp)
