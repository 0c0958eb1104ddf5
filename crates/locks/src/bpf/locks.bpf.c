// SPDX-License-Identifier: GPL-2.0
/*
 * Lock hold and wait times (McKenney, "Pinpointing Contention"), from
 * uprobes on the C library's pthread lock functions.
 *
 *   lock entry   -> pending[thread] = (lock, kind, now)
 *   lock return  -> if it succeeded: wait += now - t0, held[(lock, thread)] = now
 *   unlock entry -> hold += now - held[(lock, thread)]
 *
 * pthread_cond_wait and _timedwait release the mutex while they sleep and
 * take it back before returning: entry ends the hold, return starts a new
 * one without counting the sleep as waiting for the lock. *_init records
 * the caller. With allocation tracking on (one traced process), malloc and
 * calloc record (size, caller) per live block and free forgets it; the
 * first time a lock is seen, the block that contains it is looked up by
 * stepping back over malloc's 16-byte alignment, which names heap locks by
 * the call site that allocated them.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <asm/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

enum kind { MUTEX = 0, RWLOCK_READ = 1, RWLOCK_WRITE = 2, SPIN = 3, COND = 4 };

struct lock_key {
	__u32 tgid;
	__u32 pad;
	__u64 addr;
};

struct lock_stats {
	__u64 hold_ns;
	__u64 wait_ns;
	__u64 acquisitions;
	__u64 max_hold_ns;
	__u64 max_wait_ns;
	__u64 init_site;
	__u64 alloc_site;
	__u32 kind;
	__u32 pad;
};

struct alloc_key {
	__u32 tgid;
	__u32 pad;
	__u64 ptr;
};

struct alloc {
	__u64 size;
	__u64 site;
};

struct pending {
	__u64 addr;
	__u64 t0;
	__u32 kind;
	__u32 pad;
};

struct held_key {
	__u64 addr;
	__u64 thread; /* pid_tgid */
};

/* 0 traces every process; otherwise only this one. */
const volatile __u32 target_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pending);
} pendings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct held_key);
	__type(value, __u64);
} helds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lock_key);
	__type(value, struct lock_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct alloc);
} alloc_pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, struct alloc_key);
	__type(value, struct alloc);
} allocs SEC(".maps");

/* How far into its block a lock may sit and still be named by the block's allocation site. */
#define ALLOC_SEARCH 64 /* x 16 bytes */

/* Counts of events the maps had no room for, so user space can say so. */
__u64 dropped = 0;

static __always_inline int traced(__u64 id)
{
	return target_tgid == 0 || (__u32)(id >> 32) == target_tgid;
}

/* The caller's return address: the word on top of the stack at function entry. */
static __always_inline __u64 caller(struct pt_regs *ctx)
{
	__u64 ret = 0;
	bpf_probe_read_user(&ret, sizeof ret, (void *)PT_REGS_SP(ctx));
	return ret;
}

static __always_inline __u64 alloc_site_of(__u64 id, __u64 addr)
{
	struct alloc_key ak = { .tgid = id >> 32, .ptr = addr & ~15ULL };
	for (int i = 0; i < ALLOC_SEARCH; i++) {
		struct alloc *a = bpf_map_lookup_elem(&allocs, &ak);
		if (a)
			return addr - ak.ptr < a->size ? a->site : 0;
		ak.ptr -= 16;
	}
	return 0;
}

static __always_inline struct lock_stats *stats_of(__u64 id, __u64 addr, __u32 kind)
{
	struct lock_key k = { .tgid = id >> 32, .addr = addr };
	struct lock_stats *s = bpf_map_lookup_elem(&stats, &k);
	if (s)
		return s;
	struct lock_stats zero = { .kind = kind, .alloc_site = alloc_site_of(id, addr) };
	if (bpf_map_update_elem(&stats, &k, &zero, BPF_NOEXIST) && bpf_map_lookup_elem(&stats, &k) == 0)
		__sync_fetch_and_add(&dropped, 1);
	return bpf_map_lookup_elem(&stats, &k);
}

static __always_inline int enter(struct pt_regs *ctx, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	struct pending p = { .addr = PT_REGS_PARM1(ctx), .t0 = bpf_ktime_get_ns(), .kind = kind };
	if (bpf_map_update_elem(&pendings, &id, &p, BPF_ANY))
		__sync_fetch_and_add(&dropped, 1);
	return 0;
}

static __always_inline int acquired(struct pt_regs *ctx, int count_wait)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct pending *p = bpf_map_lookup_elem(&pendings, &id);
	if (!p)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct pending pv = *p;
	bpf_map_delete_elem(&pendings, &id);
	/* trylock failed, or an error: nothing held. cond_wait holds the mutex even on timeout. */
	if (PT_REGS_RC(ctx) != 0 && pv.kind != COND)
		return 0;
	struct held_key hk = { .addr = pv.addr, .thread = id };
	if (bpf_map_update_elem(&helds, &hk, &now, BPF_ANY))
		__sync_fetch_and_add(&dropped, 1);
	__u32 kind = pv.kind == COND ? MUTEX : pv.kind;
	struct lock_stats *s = stats_of(id, pv.addr, kind);
	if (!s)
		return 0;
	if (count_wait && pv.kind != COND) {
		__u64 w = now - pv.t0;
		__sync_fetch_and_add(&s->wait_ns, w);
		if (w > s->max_wait_ns)
			s->max_wait_ns = w;
		__sync_fetch_and_add(&s->acquisitions, 1);
	}
	return 0;
}

static __always_inline int release(__u64 addr)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	struct held_key hk = { .addr = addr, .thread = id };
	__u64 *t = bpf_map_lookup_elem(&helds, &hk);
	if (!t)
		return 0; /* taken before tracing started */
	__u64 h = bpf_ktime_get_ns() - *t;
	bpf_map_delete_elem(&helds, &hk);
	struct lock_stats *s = stats_of(id, addr, MUTEX);
	if (!s)
		return 0;
	__sync_fetch_and_add(&s->hold_ns, h);
	if (h > s->max_hold_ns)
		s->max_hold_ns = h;
	return 0;
}

/* The caller of *_init names a lock that has no symbol. */
static __always_inline int init_site(struct pt_regs *ctx, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	struct lock_stats *s = stats_of(id, PT_REGS_PARM1(ctx), kind);
	if (s)
		s->init_site = caller(ctx);
	return 0;
}

SEC("uprobe") int BPF_KPROBE(mutex_lock) { return enter(ctx, MUTEX); }
SEC("uretprobe") int BPF_KRETPROBE(mutex_lock_ret) { return acquired(ctx, 1); }
SEC("uprobe") int BPF_KPROBE(mutex_unlock) { return release(PT_REGS_PARM1(ctx)); }
SEC("uprobe") int BPF_KPROBE(mutex_init) { return init_site(ctx, MUTEX); }
SEC("uprobe") int BPF_KPROBE(rwlock_rd) { return enter(ctx, RWLOCK_READ); }
SEC("uprobe") int BPF_KPROBE(rwlock_wr) { return enter(ctx, RWLOCK_WRITE); }
SEC("uretprobe") int BPF_KRETPROBE(rwlock_ret) { return acquired(ctx, 1); }
SEC("uprobe") int BPF_KPROBE(rwlock_unlock) { return release(PT_REGS_PARM1(ctx)); }
SEC("uprobe") int BPF_KPROBE(rwlock_init) { return init_site(ctx, RWLOCK_WRITE); }
SEC("uprobe") int BPF_KPROBE(spin_lock) { return enter(ctx, SPIN); }
SEC("uretprobe") int BPF_KRETPROBE(spin_ret) { return acquired(ctx, 1); }
SEC("uprobe") int BPF_KPROBE(spin_unlock) { return release(PT_REGS_PARM1(ctx)); }
SEC("uprobe") int BPF_KPROBE(spin_init) { return init_site(ctx, SPIN); }

/* pthread_cond_wait(cond, mutex): the mutex is the second argument. */
SEC("uprobe") int BPF_KPROBE(cond_wait)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	__u64 m = PT_REGS_PARM2(ctx);
	release(m);
	struct pending p = { .addr = m, .t0 = bpf_ktime_get_ns(), .kind = COND };
	bpf_map_update_elem(&pendings, &id, &p, BPF_ANY);
	return 0;
}
SEC("uretprobe") int BPF_KRETPROBE(cond_wait_ret) { return acquired(ctx, 0); }

static __always_inline int alloc_enter(__u64 size, __u64 site)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	struct alloc a = { .size = size, .site = site };
	bpf_map_update_elem(&alloc_pending, &id, &a, BPF_ANY);
	return 0;
}

SEC("uprobe") int BPF_KPROBE(malloc_enter) { return alloc_enter(PT_REGS_PARM1(ctx), caller(ctx)); }
SEC("uprobe") int BPF_KPROBE(calloc_enter) { return alloc_enter(PT_REGS_PARM1(ctx) * PT_REGS_PARM2(ctx), caller(ctx)); }

SEC("uretprobe") int BPF_KRETPROBE(alloc_ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct alloc *a = bpf_map_lookup_elem(&alloc_pending, &id);
	if (!a)
		return 0;
	struct alloc av = *a;
	bpf_map_delete_elem(&alloc_pending, &id);
	__u64 ptr = PT_REGS_RC(ctx);
	if (!ptr)
		return 0;
	struct alloc_key k = { .tgid = id >> 32, .ptr = ptr };
	bpf_map_update_elem(&allocs, &k, &av, BPF_ANY);
	return 0;
}

SEC("uprobe") int BPF_KPROBE(free_enter)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	struct alloc_key k = { .tgid = id >> 32, .ptr = PT_REGS_PARM1(ctx) };
	bpf_map_delete_elem(&allocs, &k);
	return 0;
}
