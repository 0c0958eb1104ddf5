// SPDX-License-Identifier: GPL-2.0
/*
 * Off-CPU time: how long threads are switched out, with the stacks they
 * blocked in, summed in the kernel.
 *
 * At every context switch (tp_btf/sched_switch) the program
 *  - records for the thread switched out (the current task) the time, why
 *    it left the CPU (`reason`, below) and its kernel and user call chains
 *    (named by hash as stacks.bpf.c names them, stackwalk.h), and adds the
 *    time it ran since it was switched in to its on-CPU total;
 *    the user chain is walked by the compact unwind tables of dwarfwalk.h
 *    (the stack program's maps, shared: `use_tables`) when the daemon has
 *    described the process, so code without frame pointers (Debian's libc,
 *    -O2 builds) does not cut it; by frame pointers otherwise, or where
 *    the table walk stops early;
 *  - for the thread switched in, adds the nanoseconds since its switch-out
 *    to a per-CPU counter of (tgid, tid, reason, user stack, kernel stack).
 * Two generations of count tables and stack maps, flipped by the daemon,
 * as in stacks.bpf.c. Only the counters reach user space.
 *
 * Reasons (from the switched-out state, and the system call it is in):
 *  RUNNING         on-CPU time (no stack): the thread ran, for its wall-clock total
 *  SLEEP           TASK_INTERRUPTIBLE outside the calls below: timers, wait4, pause, signals
 *  UNINTERRUPTIBLE TASK_UNINTERRUPTIBLE (D): usually disk I/O, page faults, kernel mutexes
 *  LOCK            blocked in futex(2): a user-space lock or condition variable
 *  RUNNABLE        preempted while runnable: time waiting for a CPU
 *  IO              TASK_INTERRUPTIBLE in an I/O call: read/write (pipes, sockets,
 *                  terminals), poll/select/epoll, recv/send/accept/connect
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "codes.h"
#include "stackwalk.h"
#include "dwarfwalk.h"

char LICENSE[] SEC("license") = "GPL";

#define REASON_RUNNING 0
#define REASON_SLEEP 1
#define REASON_UNINTERRUPTIBLE 2
#define REASON_LOCK 3
#define REASON_RUNNABLE 4
#define REASON_IO 5

/* Task states (include/linux/sched.h). */
#define S_INTERRUPTIBLE 0x1
#define S_UNINTERRUPTIBLE 0x2
#define S_DEAD 0x80
#define S_NOLOAD 0x400
#define PF_KTHREAD_FLAG 0x00200000
/* x86-64 system call numbers of the futex waits. */
#define NR_FUTEX 202
#define NR_FUTEX_WAITV 449

struct offcpu_key {
	__u32 tgid;
	__u32 tid;
	__u32 reason;
	/* UNWIND_KEY_* flags: how the user stack was walked. */
	__u32 flags;
	__u64 user_stack;
	__u64 kernel_stack;
};

struct offcpu_value {
	__u64 count;
	__u64 ns;
};

/* A thread switched out, waiting to be switched in. */
struct blocked {
	__u64 since;
	__u64 user_stack;
	__u64 kernel_stack;
	__u32 tgid;
	__u32 reason;
	__u32 flags;
	__u32 pad;
};

#define TABLE(name)                                   \
	struct {                                      \
		__uint(type, BPF_MAP_TYPE_PERCPU_HASH);   \
		__uint(max_entries, 16384);               \
		__type(key, struct offcpu_key);           \
		__type(value, struct offcpu_value);       \
	} name SEC(".maps")

TABLE(counts0);
TABLE(counts1);
STACKS(stacks0);
STACKS(stacks1);
SCRATCH(scratch);

/* Blocked threads by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct blocked);
} blocked SEC(".maps");

/* When each running followed thread was switched in, by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
} running SEC(".maps");

/* Followed processes (tgids) when `follow_only` is set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOUPE_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

volatile __u32 generation = 0;
/* 0: every thread but the idle tasks; 1: only processes in `targets`
 * and those they fork. */
volatile __u32 follow_only = 0;
/* 1: unwind_procs and unwind_rows are the stack program's, filled by the
 * daemon; walk user chains by them. */
volatile __u32 use_tables = 0;

static __always_inline void bump(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += 1;
}

static __always_inline int followed(__u32 tid, __u32 tgid)
{
	if (tid == 0)
		return 0;
	return !follow_only || bpf_map_lookup_elem(&targets, &tgid);
}

/* x86-64 system calls that wait for I/O on files, pipes and sockets. */
static __always_inline int io_call(long nr)
{
	switch (nr) {
	case 0: case 1: case 17: case 18: case 19: case 20: /* read write pread64 pwrite64 readv writev */
	case 7: case 23: case 232: case 270: case 271: case 281: case 441: /* poll select epoll_wait pselect6 ppoll epoll_pwait(2) */
	case 40: case 42: case 43: case 44: case 45: case 46: case 47: case 288: case 299: case 307: /* sendfile connect accept send/recv* accept4 */
	case 208: case 275: case 276: case 295: case 296: case 426: /* io_getevents splice tee preadv pwritev io_uring_enter */
		return 1;
	}
	return 0;
}

/* Why `prev` leaves the CPU. `prev` is the current task here, so its user
 * registers say which system call it blocks in. */
static __always_inline __u32 reason_of(struct task_struct *prev, bool preempt, unsigned int state)
{
	struct pt_regs *regs;
	long nr = -1;

	if (preempt || !(state & (S_INTERRUPTIBLE | S_UNINTERRUPTIBLE)))
		return REASON_RUNNABLE;
	if (!(BPF_CORE_READ(prev, flags) & PF_KTHREAD_FLAG)) {
		regs = (struct pt_regs *)bpf_task_pt_regs(prev);
		if (regs)
			nr = BPF_CORE_READ(regs, orig_ax);
	}
	if (nr == NR_FUTEX || nr == NR_FUTEX_WAITV)
		return REASON_LOCK;
	if ((state & S_UNINTERRUPTIBLE) && !(state & S_NOLOAD))
		return REASON_UNINTERRUPTIBLE;
	return io_call(nr) ? REASON_IO : REASON_SLEEP;
}

static __always_inline void add(void *table, struct offcpu_key *k, __u64 ns)
{
	struct offcpu_value one = { .count = 1, .ns = ns };
	struct offcpu_value *v = bpf_map_lookup_elem(table, k);

	if (!v && bpf_map_update_elem(table, k, &one, BPF_NOEXIST) == 0)
		return;
	if (!v)
		v = bpf_map_lookup_elem(table, k);
	if (!v) {
		bump(LOUPE_STAT_OFFCPU_TABLE_FULL);
		return;
	}
	/* Per-CPU value: only this CPU writes it. */
	v->count += 1;
	v->ns += ns;
}

static __always_inline void *counts(void)
{
	return (generation & 1) ? (void *)&counts1 : (void *)&counts0;
}

static __always_inline void *stacks(void)
{
	return (generation & 1) ? (void *)&stacks1 : (void *)&stacks0;
}

/* Names a chain of the current task, 0 when it has none or the map is full. */
static __always_inline __u64 name_chain(void *ctx, __u32 slot, __u64 flags, int *full)
{
	struct stack *s = copy_chain(ctx, &scratch, slot, flags);
	__u64 h;

	if (!s || !s->nr)
		return 0;
	h = intern(stacks(), s);
	*full |= !h;
	return h;
}

/* Names the current task's user chain walked by the unwind tables, 0 when
 * the walk stopped early or the process is not described yet (counted in
 * `stats` under the UNWIND_* and STREAM_UNKNOWN codes: the caller falls
 * back to frame pointers); `*flags` says how far the walk went. At a
 * context switch the task is in the kernel: the walk starts from the user
 * registers saved at kernel entry. */
static __always_inline __u64 walked_chain(void *ctx, __u32 tgid, __u32 *flags, int *full)
{
	__u32 slot = 0, why;
	struct stack *s = bpf_map_lookup_elem(&scratch, &slot);
	__u8 f = 0;
	__u64 h;

	if (!s)
		return 0;
	why = unwind_user((struct bpf_perf_event_data *)ctx, tgid, 1, s, &f, LOUPE_STAT_STREAM_UNKNOWN);
	if (why) {
		bump(why);
		return 0;
	}
	bump(f & UNWIND_KEY_DEPTH ? LOUPE_STAT_UNWIND_DEPTH : LOUPE_STAT_UNWIND_WALKED);
	if (!s->nr)
		return 0;
	h = intern(stacks(), s);
	*full |= !h;
	*flags = h ? f : 0;
	return h;
}

/* The current task leaves the CPU: count the run that ends, note the block that begins. */
static __always_inline void switch_out(void *ctx, struct task_struct *prev, bool preempt, unsigned int state, __u64 now)
{
	__u32 tid = BPF_CORE_READ(prev, pid);
	struct offcpu_key k = { .tgid = BPF_CORE_READ(prev, tgid), .tid = tid, .reason = REASON_RUNNING };
	struct blocked b = { .since = now, .tgid = k.tgid };
	__u64 *ran = bpf_map_lookup_elem(&running, &tid);
	int full = 0;

	if (ran) {
		add(counts(), &k, now - *ran);
		bpf_map_delete_elem(&running, &tid);
	}
	if (state & S_DEAD)
		return;
	b.reason = reason_of(prev, preempt, state);
	b.kernel_stack = name_chain(ctx, 1, 0, &full);
	if (use_tables && !(BPF_CORE_READ(prev, flags) & PF_KTHREAD_FLAG))
		b.user_stack = walked_chain(ctx, k.tgid, &b.flags, &full);
	if (!b.user_stack)
		b.user_stack = name_chain(ctx, 0, BPF_F_USER_STACK, &full);
	if (full)
		bump(LOUPE_STAT_OFFCPU_STACK_FULL);
	if (bpf_map_update_elem(&blocked, &tid, &b, BPF_ANY))
		bump(LOUPE_STAT_OFFCPU_START_FULL);
}

/* `next` gets the CPU: count the block that ends, note the run that begins. */
static __always_inline void switch_in(struct task_struct *next, __u64 now)
{
	__u32 tid = BPF_CORE_READ(next, pid);
	struct blocked *b = bpf_map_lookup_elem(&blocked, &tid);
	struct offcpu_key k = { .tid = tid };

	bpf_map_update_elem(&running, &tid, &now, BPF_ANY);
	if (!b) {
		bump(LOUPE_STAT_OFFCPU_NO_START);
		return;
	}
	k.tgid = b->tgid;
	k.reason = b->reason;
	k.flags = b->flags;
	k.user_stack = b->user_stack;
	k.kernel_stack = b->kernel_stack;
	add(counts(), &k, now - b->since);
	bump(LOUPE_STAT_OFFCPU_COUNTED);
	bpf_map_delete_elem(&blocked, &tid);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();

	if (followed(BPF_CORE_READ(prev, pid), BPF_CORE_READ(prev, tgid))) {
		bump(LOUPE_STAT_OFFCPU_SWITCHES);
		switch_out(ctx, prev, preempt, prev_state, now);
	}
	if (followed(BPF_CORE_READ(next, pid), BPF_CORE_READ(next, tgid)))
		switch_in(next, now);
	return 0;
}

/* Children of followed processes are followed (threads share the tgid). */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	if (follow_only && ptgid != ctgid && bpf_map_lookup_elem(&targets, &ptgid))
		bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	return 0;
}
