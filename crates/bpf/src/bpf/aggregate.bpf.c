// SPDX-License-Identifier: GPL-2.0
/*
 * DCPI's per-CPU sample aggregation (§4.2), rebuilt with eBPF.
 *
 * Runs on every sample of the sampling perf events. Counts
 * (tgid, event, mode, pc) in one of two generations of per-CPU hash maps;
 * the daemon flips `generation` and drains the other one, so the program
 * never waits on the daemon. Entries that cannot be placed (table full) go
 * to a ring buffer as single samples; if that is full too, they are counted
 * as drops. Returning 0 stops the kernel from also writing the sample to
 * the perf ring buffer (side-band records still flow there).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "codes.h"
#include "eventindex.h"

char LICENSE[] SEC("license") = "GPL";

struct sample_key {
	__u32 tgid;
	__u16 event;
	__u8 kernel;
	__u8 pad;
	__u64 ip;
};

struct sample_value {
	__u64 count;
	__u64 period;
};

struct eviction {
	struct sample_key key;
	__u64 period;
};

#define TABLE(name)                                   \
	struct {                                          \
		__uint(type, BPF_MAP_TYPE_PERCPU_HASH);       \
		__uint(max_entries, 16384);                   \
		__type(key, struct sample_key);                      \
		__type(value, struct sample_value);                  \
	} name SEC(".maps")

TABLE(counts0);
TABLE(counts1);

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} evictions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOUPE_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Which table the program fills; the daemon drains the other one. */
volatile __u32 generation = 0;

static __always_inline void bump(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += 1;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	struct sample_key k = {};
	struct sample_value one = {};
	struct sample_value *v;
	void *table;

	k.tgid = bpf_get_current_pid_tgid() >> 32;
	k.event = event_index(ctx);
	k.ip = PT_REGS_IP(&ctx->regs);
	/* x86-64: kernel text lives in the upper canonical half. */
	k.kernel = k.ip >= 0xffff800000000000ULL;
	bump(LOUPE_STAT_SAMPLES);

	table = generation & 1 ? (void *)&counts1 : (void *)&counts0;
	v = bpf_map_lookup_elem(table, &k);
	if (v) {
		/* Per-CPU value: only this CPU writes it, no atomics needed. */
		v->count += 1;
		v->period += ctx->sample_period;
		return 0;
	}
	one.count = 1;
	one.period = ctx->sample_period;
	if (bpf_map_update_elem(table, &k, &one, BPF_NOEXIST) == 0) {
		bump(LOUPE_STAT_CREATED);
		return 0;
	}
	/* Another CPU may have created it meanwhile. */
	v = bpf_map_lookup_elem(table, &k);
	if (v) {
		v->count += 1;
		v->period += ctx->sample_period;
		return 0;
	}
	struct eviction *e = bpf_ringbuf_reserve(&evictions, sizeof(*e), 0);
	if (!e) {
		bump(LOUPE_STAT_DROPPED);
		return 0;
	}
	e->key = k;
	e->period = ctx->sample_period;
	bpf_ringbuf_submit(e, 0);
	bump(LOUPE_STAT_EVICTED);
	return 0;
}
