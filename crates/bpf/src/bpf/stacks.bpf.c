// SPDX-License-Identifier: GPL-2.0
/*
 * Call stacks walked and counted in the kernel.
 *
 * Runs on every sample of the sampling perf events. The sample's call
 * chains (kernel part by the kernel's unwinder, user part by frame
 * pointers) are named by a hash of their frames and stored once in a hash
 * map; the sample is counted per (tgid, event, mode, pc, user stack,
 * kernel stack) in one of two generations of per-CPU hash maps (a user-mode
 * sample's user stack is stored without its leaf, which the key's pc names): the daemon
 * flips `generation`, drains the other generation's counts and reads only
 * the stacks it has not seen before, so after a stack's first sample only
 * counts reach user space. (A stack-trace map was tried first: its
 * bucket-per-hash design refused ~40% of stacks as collisions on a busy
 * machine.)
 *
 * Frame-pointer chains are wrong where code has no frame pointers. The
 * daemon lists, per process, the executable ranges built with them; a
 * sample whose user chain has a frame outside them below its root (code
 * without frame pointers, or mapped since the daemon last looked), of a
 * process the daemon has not described yet, or of a process it marked,
 * returns 1: the kernel
 * then writes the sample with its user stack copy to the perf ring, and
 * the daemon unwinds it with DWARF CFI as the stream backend does. So do
 * samples whose stack or key cannot be placed. Every path is counted.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "codes.h"
#include "eventindex.h"
#include "stackwalk.h"
#include "pystack.h"
#include "dwarfwalk.h"

char LICENSE[] SEC("license") = "GPL";

#define MAX_RANGES 12

/* Stacks are named by a 64-bit hash of their frames; 0 = no stack. */
struct stack_key {
	__u32 tgid;
	__u16 event;
	__u8 kernel;
	/* UNWIND_KEY_* flags: how the user stack was walked. */
	__u8 pad;
	__u64 ip;
	__u64 user_stack;
	__u64 kernel_stack;
	/* The sampled thread's Python frames (pystack.h), 0 = none. */
	__u64 py_stack;
};

struct sample_value {
	__u64 count;
	__u64 period;
};

struct pc_range {
	__u64 start;
	__u64 end;
};

/* What the daemon knows of a process: mode 0 = walk in the kernel when the
 * user chain below its root lies in `ranges` (code with frame pointers);
 * mode 1 = always send stack copies. */
struct proc_info {
	__u32 mode;
	__u32 nranges;
	struct pc_range ranges[MAX_RANGES];
};

#define TABLE(name)                                   \
	struct {                                      \
		__uint(type, BPF_MAP_TYPE_PERCPU_HASH);   \
		__uint(max_entries, 16384);               \
		__type(key, struct stack_key);            \
		__type(value, struct sample_value);       \
	} name SEC(".maps")

TABLE(counts0);
TABLE(counts1);
STACKS(stacks0);
STACKS(stacks1);

/* Per-CPU room for the two chains of the sample being handled. */
SCRATCH(scratch);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct proc_info);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOUPE_STAT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

/* Which generation the program fills; the daemon drains the other one. */
volatile __u32 generation = 0;
/* Frame pointers only (no stack copies wanted): never consult `procs`. */
volatile __u32 fp_only = 0;

static __always_inline void bump(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += 1;
}

/* Returning 1 lets the kernel write the sample to the perf ring. */
static __always_inline int stream(__u32 why)
{
	bump(why);
	return 1;
}

/* Copies one of the sample's chains into scratch slot `slot`. */
static __always_inline struct stack *chain(struct bpf_perf_event_data *ctx, __u32 slot, __u64 flags)
{
	return copy_chain(ctx, &scratch, slot, flags);
}

static __always_inline int in_ranges(const struct proc_info *p, __u64 pc)
{
	for (int i = 0; i < MAX_RANGES; i++) {
		if (i >= p->nranges)
			break;
		if (pc >= p->ranges[i].start && pc < p->ranges[i].end)
			return 1;
	}
	return 0;
}

struct chain_check {
	const struct stack *user;
	const struct proc_info *p;
	__u64 first;
	__u32 hit;
};

/* bpf_loop body over the callers below the root: one verification of the
 * body instead of one per frame and range, which the verifier refused. */
static long check_caller(__u64 i, void *ctx)
{
	struct chain_check *c = ctx;
	__u64 at = c->first + i;

	if (at >= MAX_DEPTH)
		return 1;
	if (!in_ranges(c->p, c->user->pcs[at])) {
		c->hit = 1;
		return 1;
	}
	return 0;
}

/* Why a sample must take the stack-copy path, or 0. A frame-pointer chain
 * is wrong above any frame in code that keeps no frame pointer: at the
 * leaf its caller is skipped, higher up the frames above it come from a
 * register that code used for something else. Only the root frame, with
 * nothing above it, may lie outside code known to keep one.
 * (`trustworthy_prefix` in the collector's kstacks.rs applies the same rule.) */
static __always_inline __u32 needs_copy(__u32 tgid, const struct stack *user)
{
	struct proc_info *p = bpf_map_lookup_elem(&procs, &tgid);
	struct chain_check c = { .user = user, .p = p };
	__u64 leaf = 0;

	if (!p)
		return LOUPE_STAT_STREAM_UNKNOWN;
	if (p->mode)
		return LOUPE_STAT_STREAM_PROCESS;
	if (!user->nr)
		return 0;
	/* The perf call chain's context marker (PERF_CONTEXT_USER) may lead. */
	if (user->pcs[0] >= (__u64)-4095)
		leaf = 1;
	if (leaf >= user->nr || leaf >= MAX_DEPTH)
		return 0;
	if (!in_ranges(p, user->pcs[leaf]))
		return LOUPE_STAT_STREAM_LEAF;
	/* Callers leaf+1 .. nr-2: every frame but the leaf and the root. */
	if (user->nr > leaf + 2) {
		c.first = leaf + 1;
		bpf_loop(user->nr - leaf - 2, check_caller, &c, 0);
	}
	return c.hit ? LOUPE_STAT_STREAM_CHAIN : 0;
}

static __always_inline int count(void *table, struct stack_key *k, __u64 period)
{
	struct sample_value one = { .count = 1, .period = period };
	struct sample_value *v = bpf_map_lookup_elem(table, k);

	if (!v && bpf_map_update_elem(table, k, &one, BPF_NOEXIST) == 0) {
		bump(LOUPE_STAT_STACK_NEW_KEY);
		bump(LOUPE_STAT_STACK_COUNTED);
		return 0;
	}
	/* Present, or created by another CPU meanwhile. */
	if (!v)
		v = bpf_map_lookup_elem(table, k);
	if (!v)
		return stream(LOUPE_STAT_STREAM_TABLE_FULL);
	/* Per-CPU value: only this CPU writes it, no atomics needed. */
	v->count += 1;
	v->period += period;
	bump(LOUPE_STAT_STACK_COUNTED);
	return 0;
}

/* Interns both chains in `stacks` and counts the sample in `table`. */
static __always_inline int walk(struct bpf_perf_event_data *ctx, struct stack_key *k, struct stack *user, const struct stack *py,
				void *stacks, void *table)
{
	struct stack *kern;

	if (py && py->nr) {
		k->py_stack = intern(stacks, py);
		if (!k->py_stack) {
			python_pending(py);
			return stream(LOUPE_STAT_STREAM_STACKID);
		}
		python_tell(py, k->py_stack);
	}

	if (user->nr) {
		/* The leaf pc is in the key already: a user-mode stack is stored
		 * with a 0 leaf, so one entry serves every pc of a procedure
		 * under the same callers (the daemon puts the key's pc back).
		 * With the leaf in, a busy loop filled the map with one stack per
		 * instruction and sent the rest to the ring as stack copies. */
		if (!k->kernel && user->pcs[0] == k->ip)
			user->pcs[0] = 0;
		k->user_stack = intern(stacks, user);
		if (!k->user_stack)
			return stream(LOUPE_STAT_STREAM_STACKID);
	}
	if (k->kernel) {
		kern = chain(ctx, 1, 0);
		if (!kern || !kern->nr)
			return stream(LOUPE_STAT_STREAM_STACKID);
		k->kernel_stack = intern(stacks, kern);
		if (!k->kernel_stack)
			return stream(LOUPE_STAT_STREAM_STACKID);
	}
	return count(table, k, ctx->sample_period);
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	struct stack_key k = {};
	struct stack *user, *py;
	__u32 why;

	k.tgid = bpf_get_current_pid_tgid() >> 32;
	k.event = event_index(ctx);
	k.ip = PT_REGS_IP(&ctx->regs);
	/* x86-64: kernel text lives in the upper canonical half. */
	k.kernel = k.ip >= 0xffff800000000000ULL;
	bump(LOUPE_STAT_SAMPLES);
	user = chain(ctx, 0, BPF_F_USER_STACK);
	if (!user)
		return stream(LOUPE_STAT_STREAM_STACKID);
	py = python_stack(k.tgid);
	if (!fp_only && k.tgid != 0) {
		why = needs_copy(k.tgid, user);
		/* Code without frame pointers: walk it by the unwind tables. */
		if (why == LOUPE_STAT_STREAM_LEAF || why == LOUPE_STAT_STREAM_CHAIN)
			why = unwind_user(ctx, k.tgid, k.kernel, user, &k.pad, why);
		if (why) {
			python_pending(py);
			return stream(why);
		}
		if (k.pad)
			bump(k.pad & UNWIND_KEY_DEPTH ? LOUPE_STAT_UNWIND_DEPTH : LOUPE_STAT_UNWIND_WALKED);
	}
	if (generation & 1)
		return walk(ctx, &k, user, py, &stacks1, &counts1);
	return walk(ctx, &k, user, py, &stacks0, &counts0);
}
