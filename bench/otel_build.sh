#!/bin/sh
# Builds the OpenTelemetry eBPF profiler from a source tree for
# bench/otel_compare.py: its BPF objects with Debian's clang-16 (the
# project's Makefile wants clang-17, which Debian 12 lacks; clang-16 takes
# the C23 attributes it uses with -fdouble-square-bracket-attributes), then
# the Go agent (modules from the Go proxy), with two changes: bench/otel/
# rlimit.patch, because raising RLIMIT_MEMLOCK needs CAP_SYS_RESOURCE, which
# these VMs' root lacks (kernels since 5.11 charge BPF memory to the memory
# cgroup, so the limit does not matter); bench/otel/cgroup.patch, which with
# OTEL_BENCH_CGROUP=DIR set opens its sampling events on that cgroup only
# (perf's cgroup events; unset, nothing changes), so the comparison can keep
# a shared machine's other processes out, as `loupe record -p` does.
# Prints the agent's path.
# Get the source with `git clone https://github.com/open-telemetry/opentelemetry-ebpf-profiler`
# (measured: commit b442421a32ccfa07a527084c7c93b0f2b260b28f, 2026-08-21).
# Usage: bench/otel_build.sh SRC_DIR   (needs clang-16 llvm-16 and Go >= 1.26)
set -eu
SRC=${1:?usage: otel_build.sh SRC_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$SRC"
grep -q "No CAP_SYS_RESOURCE" rlimit/rlimit.go || patch -p1 < "$HERE/otel/rlimit.patch"
grep -q OTEL_BENCH_CGROUP tracer/tracer.go || patch -p1 < "$HERE/otel/cgroup.patch"
# errors.h is generated and committed; keep it newer than its source so make
# does not regenerate it (that step wants clang-format-17).
touch support/ebpf/errors.h
rm -f support/ebpf/*.amd64.o support/ebpf/tracer.ebpf.amd64
make -s -C support/ebpf "BPF_CLANG=clang-16 -fdouble-square-bracket-attributes" \
  BPF_LINK=llvm-link-16 STRIP=llvm-strip-16 LLC=llc-16 TRACER_NAME=tracer.ebpf.amd64 | grep "Total instructions"
CGO_ENABLED=0 go build -tags osusergo,netgo -o ebpf-profiler .
echo "$SRC/ebpf-profiler"
