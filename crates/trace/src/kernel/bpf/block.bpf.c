// SPDX-License-Identifier: GPL-2.0
/*
 * Block I/O requests from the block:block_rq_issue and block:block_rq_complete
 * tracepoints, for the trace's kernel layer (crates/trace/src/kernel/block_bpf.rs).
 *
 * Why BPF and not perf: on the kernels this was written on (6.18), perf
 * delivers no sample of block_rq_complete taken in the idle task's softirq,
 * which is where most completions run on a quiet machine; a program attached
 * to the tracepoint runs for every hit. Each hit becomes one fixed-size record
 * in a ring buffer, stamped with bpf_ktime_get_ns (CLOCK_MONOTONIC, the
 * trace's clock) and the CPU it ran on; a record that finds the ring full is
 * counted per CPU in `drops`, never half-written. The programs return 1: the
 * kernel delivers the hit to perf users of the tracepoint only if the program
 * attached to it returns non-zero, and Loupe must not hide it from them.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

/* The tracepoints' entries, only the fields read here: CO-RE relocates them
 * against the running kernel's BTF, so their offsets are the kernel's. */
struct trace_event_raw_block_rq {
	__u32 dev;
	__u64 sector;
	unsigned int nr_sector;
	unsigned int bytes;
	char rwbs[10];
	char comm[16];
} __attribute__((preserve_access_index));

struct trace_event_raw_block_rq_completion {
	__u32 dev;
	__u64 sector;
	unsigned int nr_sector;
	int error;
	char rwbs[10];
} __attribute__((preserve_access_index));

/* Kernels before 5.19 named the completion entry differently (same fields). */
struct trace_event_raw_block_rq_complete {
	__u32 dev;
	__u64 sector;
	unsigned int nr_sector;
	int error;
	char rwbs[10];
} __attribute__((preserve_access_index));

enum { KIND_ISSUE = 1, KIND_COMPLETE = 2 };

/* One request event (64 bytes); block_bpf.rs reads this layout. */
struct block_event {
	__u64 time_ns;
	__u64 sector;
	__u32 dev;
	__u32 bytes;  /* issue: the request's bytes; completion: nr_sector * 512 */
	__s32 error;  /* completion only */
	__u32 cpu;
	__u32 tid;    /* issue only: the thread that issued it */
	__u16 kind;
	char rwbs[10];
	char comm[16]; /* issue only */
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

/* Records the ring had no room for, per CPU (CPU numbers beyond MAX_CPUS share slots).
 * A global array rather than a map: user space reads it through its mmap, while
 * a map lookup is a system call that holds off every tracing program on its
 * CPU for its duration (bpf_disable_instrumentation), completions included. */
#define MAX_CPUS 1024
__u64 drops[MAX_CPUS];

/* A zeroed record of `kind` with the time and CPU, or NULL (counted) if the ring is full. */
static __always_inline struct block_event *reserve(__u16 kind)
{
	struct block_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&drops[bpf_get_smp_processor_id() & (MAX_CPUS - 1)], 1);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->time_ns = bpf_ktime_get_ns();
	e->cpu = bpf_get_smp_processor_id();
	e->kind = kind;
	return e;
}

/* rwbs was char[8] before 5.17 and is char[10] since: read the kernel's size, at most ours. */
static __always_inline void read_rwbs(struct block_event *e, const void *src, __u32 size)
{
	bpf_probe_read_kernel(e->rwbs, size < sizeof(e->rwbs) ? size : sizeof(e->rwbs), src);
}

SEC("tp/block/block_rq_issue")
int block_issue(struct trace_event_raw_block_rq *ctx)
{
	struct block_event *e = reserve(KIND_ISSUE);
	if (!e)
		return 1;
	e->dev = BPF_CORE_READ(ctx, dev);
	e->sector = BPF_CORE_READ(ctx, sector);
	e->bytes = BPF_CORE_READ(ctx, bytes);
	read_rwbs(e, &ctx->rwbs, bpf_core_field_size(ctx->rwbs));
	bpf_core_read(e->comm, sizeof(e->comm), &ctx->comm);
	e->tid = (__u32)bpf_get_current_pid_tgid();
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP); /* user space polls on a timer */
	return 1;
}

SEC("tp/block/block_rq_complete")
int block_complete(void *ctx)
{
	struct block_event *e = reserve(KIND_COMPLETE);
	if (!e)
		return 1;
	if (bpf_core_type_exists(struct trace_event_raw_block_rq_completion)) {
		struct trace_event_raw_block_rq_completion *c = ctx;
		e->dev = BPF_CORE_READ(c, dev);
		e->sector = BPF_CORE_READ(c, sector);
		e->bytes = BPF_CORE_READ(c, nr_sector) * 512;
		e->error = BPF_CORE_READ(c, error);
		read_rwbs(e, &c->rwbs, bpf_core_field_size(c->rwbs));
	} else {
		struct trace_event_raw_block_rq_complete *c = ctx;
		e->dev = BPF_CORE_READ(c, dev);
		e->sector = BPF_CORE_READ(c, sector);
		e->bytes = BPF_CORE_READ(c, nr_sector) * 512;
		e->error = BPF_CORE_READ(c, error);
		read_rwbs(e, &c->rwbs, bpf_core_field_size(c->rwbs));
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP); /* user space polls on a timer */
	return 1;
}
