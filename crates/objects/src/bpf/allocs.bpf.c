// SPDX-License-Identifier: GPL-2.0
/*
 * Heap allocation tracking (DProf §4.2 b): uprobes on the C library's
 * allocator and the C++ runtime's operator new/delete, for one process tree.
 *
 *   allocator entry  -> pending[thread] = (function, size, caller), or depth++
 *                       when already inside an allocator (operator new calls malloc)
 *   allocator return -> depth--; at depth 0 an alloc event (and a free of the old
 *                       block for a realloc that returned a block), with the
 *                       registers and a window of the user stack as the caller
 *                       sees them once the allocator has returned, which user
 *                       space unwinds (.eh_frame) to the allocation's callers
 *   free entry       -> a free event, unless inside operator delete (which frees once)
 *
 * Events go through a ring buffer in exactly the allocation log's record layout
 * (crates/objects/src/log.rs), so user space appends them unchanged. Times are
 * bpf_ktime_get_ns, i.e. CLOCK_MONOTONIC. Children are followed from the
 * sched_process_fork raw tracepoint (CO-RE read of the child's tgid).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <asm/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

/* Only the fields read here; CO-RE relocates them against the running kernel's BTF. */
struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

enum { KIND_ALLOC = 1, KIND_FREE = 2 };
enum { F_MALLOC = 1, F_CALLOC = 2, F_REALLOC = 3, F_NEW = 4, F_NEW_ARRAY = 5, F_ALIGNED = 6,
       F_FREE = 7, F_DELETE = 8, F_DELETE_ARRAY = 9, F_POSIX_MEMALIGN = 100 };

/* The log record (48 bytes), see log.rs. */
struct event {
	__u16 kind;
	__u16 func;
	__u32 pid;
	__u32 tid;
	__u32 payload_len;
	__u64 time_ns;
	__u64 base;
	__u64 size;
	__u64 site;
};

/*
 * An allocation with what user space needs to find its callers (EV_ALLOC_STACK,
 * never in the log: user space unwinds it into an alloc record whose payload is
 * the callers). At the return probe the registers are the caller's after the
 * call: ip = the site, sp just above the consumed return address, rbp
 * callee-saved, so the caller frames are all above sp, untouched.
 */
#define STACK_WINDOW 2048
#define RING_BYTES (32 << 20)
#define STACK_CHUNK 256
struct stack_event {
	struct event e;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 len; /* bytes of stack[] read from sp: whole chunks up to the first unreadable one */
	__u8 stack[STACK_WINDOW];
};

struct pending {
	__u64 size;
	__u64 site;
	__u64 old; /* realloc: the block passed in; posix_memalign: where the pointer goes */
	__u32 func;
	__u32 depth;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} tracked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct pending);
} pendings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid inside operator delete */
	__type(value, __u32);
} deleting SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RING_BYTES);
} events SEC(".maps");

/* Events the ring buffer had no room for. */
__u64 dropped = 0;
/* Allocations logged without a stack copy (so without callers): the ring was half full. */
__u64 no_stack = 0;
/*
 * Set by user space before the probes attach when the allocations' callers are
 * wanted (typing blocks through void * wrappers): a 2 KiB copy per allocation that
 * the reader must unwind, too slow for the access histories, which must read each
 * allocation in time to watch it.
 */
__u64 want_callers = 0;

/*
 * Object access histories (DProf §4.3): user space sets `want` when it is
 * ready to watch one more object; the first allocation that matches the
 * selection takes it (compare-and-swap), reports itself (EV_ARMED) and stops
 * its process with SIGSTOP before the allocator returns to user code, so
 * user space can set the hardware breakpoints before the object's first
 * use; user space sends SIGCONT. Its free reports EV_UNWATCHED. Both carry
 * the CPU in the payload_len slot (they never reach the log).
 *
 * Until user space knows where the selected site function lies (it needs the
 * process's maps, which exist only after exec) `hold` is set: the first
 * allocation of a traced process reports itself (EV_HELD) and stops the
 * process the same way, so user space reads the maps, configures the site
 * and may watch that very block — objects of a program's first milliseconds
 * are not missed.
 */
enum { EV_ARMED = 4, EV_UNWATCHED = 5, EV_HELD = 6, EV_ALLOC_STACK = 7 };
#define SIGSTOP 19

struct arm_cfg {
	__u64 size;    /* 0: any */
	__u64 site_lo; /* site range [lo, hi); hi 0: any */
	__u64 site_hi;
	__u64 base;    /* the object being watched, 0: none */
	__u64 want;    /* 64-bit: BPF compare-and-swap */
	__u64 hold;    /* 1: stop at the next allocation (EV_HELD), the site is not configured yet */
	__u32 tgid;    /* 0: any traced process */
	__u32 pad;
};
struct arm_cfg arm = {};

static __always_inline int traced(__u64 id)
{
	__u32 tgid = id >> 32;
	return bpf_map_lookup_elem(&tracked, &tgid) != 0;
}

/* The caller's return address: the word on top of the stack at function entry. */
static __always_inline __u64 caller(struct pt_regs *ctx)
{
	__u64 ret = 0;
	bpf_probe_read_user(&ret, sizeof ret, (void *)PT_REGS_SP(ctx));
	return ret;
}

/* One event into the ring; `cpu` rides in payload_len (0 for allocation records, which carry no payload). 0: no room. */
static __always_inline int put_event(__u64 id, __u16 kind, __u16 func, __u64 now, __u64 base, __u64 size, __u64 site,
				      __u32 cpu, __u64 wakeup)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof *e, 0);
	if (!e) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	e->kind = kind;
	e->func = func;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->payload_len = cpu;
	e->time_ns = now;
	e->base = base;
	e->size = size;
	e->site = site;
	bpf_ringbuf_submit(e, wakeup);
	return 1;
}

/* An allocation record. No wakeup per event: user space drains every few ms (a wakeup per allocation costs more
 * than the probe). */
static __always_inline void emit(__u64 id, __u16 kind, __u16 func, __u64 now, __u64 base, __u64 size, __u64 site)
{
	put_event(id, kind, func, now, base, size, site, 0, BPF_RB_NO_WAKEUP);
}

/* A watch event with the CPU it happened on, delivered at once (the watcher is waiting on it). 0: no room. */
static __always_inline int emit_cpu(__u64 id, __u16 kind, __u16 func, __u64 now, __u64 base, __u64 size, __u64 site)
{
	return put_event(id, kind, func, now, base, size, site, bpf_get_smp_processor_id(), BPF_RB_FORCE_WAKEUP);
}

/* An alloc event with the caller's registers and stack window, see struct stack_event. */
static __always_inline void emit_alloc(struct pt_regs *ctx, __u64 id, __u16 func, __u64 now, __u64 base, __u64 size,
				       __u64 site)
{
	if (!want_callers) {
		emit(id, KIND_ALLOC, func, now, base, size, site);
		return;
	}
	/* A reader starved on a loaded machine: keep logging allocations, at 48 bytes each, without callers. */
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > RING_BYTES / 2) {
		__sync_fetch_and_add(&no_stack, 1);
		emit(id, KIND_ALLOC, func, now, base, size, site);
		return;
	}
	struct stack_event *s = bpf_ringbuf_reserve(&events, sizeof *s, 0);
	if (!s) {
		__sync_fetch_and_add(&dropped, 1);
		return;
	}
	__u64 sp = PT_REGS_SP(ctx);
	s->e = (struct event){ .kind = EV_ALLOC_STACK, .func = func, .pid = id >> 32, .tid = (__u32)id, .time_ns = now,
			       .base = base, .size = size, .site = site };
	s->ip = site;
	s->sp = sp;
	s->bp = PT_REGS_FP(ctx);
	s->len = 0;
	/* Chunks, so a window running past the stack's top still yields the frames below it. */
	for (int i = 0; i < STACK_WINDOW / STACK_CHUNK; i++) {
		if (bpf_probe_read_user(&s->stack[i * STACK_CHUNK], STACK_CHUNK, (void *)(sp + i * STACK_CHUNK)))
			break;
		s->len += STACK_CHUNK;
	}
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
}

static __always_inline int matches_arm(__u64 id, __u64 size, __u64 site)
{
	if (arm.tgid && arm.tgid != (__u32)(id >> 32))
		return 0;
	if (arm.size && arm.size != size)
		return 0;
	return arm.site_hi == 0 || (site >= arm.site_lo && site < arm.site_hi);
}

static __always_inline int enter(struct pt_regs *ctx, __u32 func, __u64 size, __u64 old)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	__u32 tid = id;
	struct pending *p = bpf_map_lookup_elem(&pendings, &tid);
	if (p) {
		p->depth++;
		return 0;
	}
	struct pending n = { .size = size, .site = caller(ctx), .old = old, .func = func, .depth = 1 };
	bpf_map_update_elem(&pendings, &tid, &n, BPF_ANY);
	return 0;
}

SEC("uretprobe") int BPF_KRETPROBE(alloc_ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = id;
	struct pending *p = bpf_map_lookup_elem(&pendings, &tid);
	if (!p)
		return 0;
	if (--p->depth > 0)
		return 0;
	struct pending pv = *p;
	bpf_map_delete_elem(&pendings, &tid);
	__u64 now = bpf_ktime_get_ns();
	__u64 ptr = PT_REGS_RC(ctx);
	__u32 func = pv.func;
	if (func == F_POSIX_MEMALIGN) {
		if (ptr != 0) /* an error code */
			return 0;
		bpf_probe_read_user(&ptr, sizeof ptr, (void *)pv.old);
		func = F_ALIGNED;
	}
	if (func == F_REALLOC && pv.old && (ptr || pv.size == 0))
		emit(id, KIND_FREE, F_REALLOC, now, pv.old, 0, pv.site);
	if (ptr)
		emit_alloc(ctx, id, func, now, ptr, pv.size, pv.site);
	if (ptr && arm.hold && __sync_val_compare_and_swap(&arm.hold, 1, 0) == 1) {
		/* Stopped only when user space will hear of it (else the site is placed later, from the maps). */
		if (emit_cpu(id, EV_HELD, func, now, ptr, pv.size, pv.site))
			bpf_send_signal_thread(SIGSTOP);
		return 0;
	}
	if (ptr && arm.want && matches_arm(id, pv.size, pv.site) && __sync_val_compare_and_swap(&arm.want, 1, 0) == 1) {
		arm.base = ptr;
		emit_cpu(id, EV_ARMED, func, now, ptr, pv.size, pv.site);
		bpf_send_signal_thread(SIGSTOP);
	}
	return 0;
}

SEC("uprobe") int BPF_KPROBE(malloc_enter, __u64 n) { return enter(ctx, F_MALLOC, n, 0); }
SEC("uprobe") int BPF_KPROBE(calloc_enter, __u64 n, __u64 each) { return enter(ctx, F_CALLOC, n * each, 0); }
SEC("uprobe") int BPF_KPROBE(realloc_enter, __u64 old, __u64 n) { return enter(ctx, F_REALLOC, n, old); }
SEC("uprobe") int BPF_KPROBE(memalign_enter, __u64 align, __u64 n) { return enter(ctx, F_ALIGNED, n, 0); }
SEC("uprobe") int BPF_KPROBE(posix_memalign_enter, __u64 out, __u64 align, __u64 n) { return enter(ctx, F_POSIX_MEMALIGN, n, out); }
SEC("uprobe") int BPF_KPROBE(new_enter, __u64 n) { return enter(ctx, F_NEW, n, 0); }
SEC("uprobe") int BPF_KPROBE(new_array_enter, __u64 n) { return enter(ctx, F_NEW_ARRAY, n, 0); }

static __always_inline int freed(struct pt_regs *ctx, __u16 func, __u64 ptr)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!ptr || !traced(id))
		return 0;
	__u64 now = bpf_ktime_get_ns(), site = caller(ctx);
	emit(id, KIND_FREE, func, now, ptr, 0, site);
	if (arm.base == ptr && (!arm.tgid || arm.tgid == (__u32)(id >> 32))) {
		arm.base = 0;
		emit_cpu(id, EV_UNWATCHED, func, now, ptr, 0, site);
	}
	return 0;
}

SEC("uprobe") int BPF_KPROBE(free_enter, __u64 ptr)
{
	__u32 tid = bpf_get_current_pid_tgid();
	if (bpf_map_lookup_elem(&deleting, &tid))
		return 0;
	return freed(ctx, F_FREE, ptr);
}

static __always_inline int delete_enter(struct pt_regs *ctx, __u16 func, __u64 ptr)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!traced(id))
		return 0;
	__u32 tid = id, one = 1;
	bpf_map_update_elem(&deleting, &tid, &one, BPF_ANY);
	return freed(ctx, func, ptr);
}

SEC("uprobe") int BPF_KPROBE(delete_enter_p, __u64 ptr) { return delete_enter(ctx, F_DELETE, ptr); }
SEC("uprobe") int BPF_KPROBE(delete_array_enter, __u64 ptr) { return delete_enter(ctx, F_DELETE_ARRAY, ptr); }

SEC("uretprobe") int BPF_KRETPROBE(delete_ret)
{
	__u32 tid = bpf_get_current_pid_tgid();
	bpf_map_delete_elem(&deleting, &tid);
	return 0;
}

SEC("raw_tp/sched_process_fork") int on_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx->args[0];
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	if (!bpf_map_lookup_elem(&tracked, &ptgid))
		return 0;
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;
	bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY);
	return 0;
}
