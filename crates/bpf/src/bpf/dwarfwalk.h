/* SPDX-License-Identifier: GPL-2.0 */
/*
 * User stacks walked in the kernel by compact unwind tables, for code
 * without frame pointers (Debian's libc and most binaries).
 *
 * The daemon compiles each image's .eh_frame into rows (unwindtable.rs in
 * the collector: pc, CFA = rsp+N | rbp+N | the PLT expression, rbp saved
 * at CFA+N or unchanged, return address at CFA-8), writes them once into
 * `unwind_rows` (one big array, an image's rows contiguous: its shard), and
 * describes each process that needs them in `unwind_procs`: its executable
 * mappings, sorted, each with its image's shard and load bias, or marked as
 * code with frame pointers. Per frame, one bpf_loop iteration: find the
 * mapping, binary-search the shard for the pc, compute the CFA, read the
 * return address and the saved rbp with bpf_probe_read_user, continue.
 * `walk` in unwindtable.rs is the same walk in user space, which the tests
 * replay recorded stacks through.
 *
 * A walk that cannot go on (a pc with no row, a rule it does not evaluate,
 * a read that faults) says why; the caller counts the reason per image in
 * `unwind_failures` and sends the sample with its stack copy to the ring.
 * A process it has no description of is put in `unwind_wanted` for the
 * daemon to describe.
 */
#pragma once

#define UNWIND_MAX_MAPPINGS 64
/* Binary-search steps: enough for 2^22 rows in one shard. */
#define UNWIND_SEARCH_STEPS 22

enum {
	UNWIND_CFA_UNKNOWN = 0,
	UNWIND_CFA_RSP = 1,
	UNWIND_CFA_RBP = 2,
	UNWIND_CFA_PLT = 3,
	UNWIND_CFA_EXPRESSION = 4,
	UNWIND_CFA_END = 5,
};

enum {
	UNWIND_RBP_UNCHANGED = 0,
	UNWIND_RBP_AT_CFA = 1,
	UNWIND_RBP_LOST = 2,
};

/* How a mapping's code is unwound. */
enum {
	UNWIND_MAP_TABLE = 0,
	UNWIND_MAP_FRAME_POINTERS = 1,
	UNWIND_MAP_NONE = 2,
};

/* Bit flags in stack_key.pad for a user stack walked by the tables. */
#define UNWIND_KEY_TABLES 1
#define UNWIND_KEY_DEPTH 2

/* 16 bytes: `Row::encode` in unwindtable.rs writes this layout. */
struct unwind_row {
	__u64 pc;
	__s32 cfa_off;
	__s16 rbp_off;
	__u8 cfa_kind;
	__u8 rbp_kind;
};

struct unwind_mapping {
	__u64 start;
	__u64 end;
	/* Runtime address of the image's virtual address 0. */
	__u64 bias;
	/* The daemon's image index, for failure counts. */
	__u32 image;
	__u32 first_row;
	__u32 nrows;
	__u32 kind;
};

struct unwind_proc {
	__u32 nmappings;
	__u32 pad;
	struct unwind_mapping m[UNWIND_MAX_MAPPINGS];
};

struct unwind_failure_key {
	__u32 image;
	__u32 reason;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1 << 19);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct unwind_failure_key);
	__type(value, __u64);
} unwind_failures SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} unwind_wanted SEC(".maps");

struct table_walk {
	struct stack *out;
	const struct unwind_proc *p;
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u32 n;
	/* 0 while walking; then a LOUPE_STAT_UNWIND_* reason, or ~0 at the root. */
	__u32 stop;
	__u32 image;
	__u32 bp_lost;
};

#define UNWIND_ROOT ((__u32)~0)
#define UNWIND_NO_IMAGE ((__u32)~0)

/* The index of the mapping of `p` that holds `pc`, or -1 (a global
 * function, verified once; see unwind_find_row_index). */
__noinline int unwind_find_mapping_index(const struct unwind_proc *p, __u64 pc)
{
	__u32 lo = 0, hi, mid;

	if (!p)
		return -1;
	hi = p->nmappings;
	if (hi > UNWIND_MAX_MAPPINGS)
		hi = UNWIND_MAX_MAPPINGS;
	for (int i = 0; i < 8; i++) {
		if (lo >= hi)
			break;
		mid = (lo + hi) / 2;
		if (mid >= UNWIND_MAX_MAPPINGS)
			return -1;
		if (pc < p->m[mid].start)
			hi = mid;
		else if (pc >= p->m[mid].end)
			lo = mid + 1;
		else
			return mid;
	}
	return -1;
}

static __always_inline const struct unwind_mapping *unwind_find_mapping(const struct unwind_proc *p, __u64 pc)
{
	int at = unwind_find_mapping_index(p, pc);

	if (at < 0)
		return 0;
	/* The mask bounds the index for the verifier (64 is a power of two). */
	return &p->m[at & (UNWIND_MAX_MAPPINGS - 1)];
}

/* The index of the last row of rows [first, first + n) whose pc is <=
 * `pc`, or -1. A global function, verified once: inlined into the walk's
 * loop body its 22 unrolled steps were verified again and again. */
__noinline int unwind_find_row_index(__u32 first, __u32 n, __u64 pc)
{
	__u32 lo = first, hi = first + n, mid;
	const struct unwind_row *r;

	for (int i = 0; i < UNWIND_SEARCH_STEPS; i++) {
		if (lo >= hi)
			break;
		mid = lo + (hi - lo) / 2;
		r = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!r)
			return -1;
		if (r->pc <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == first)
		return -1;
	return lo - 1;
}

/* The last row of rows [first, first + n) whose pc is <= `pc`. */
static __always_inline const struct unwind_row *unwind_find_row(__u32 first, __u32 n, __u64 pc)
{
	int at = unwind_find_row_index(first, n, pc);
	__u32 i = at;

	if (at < 0)
		return 0;
	return bpf_map_lookup_elem(&unwind_rows, &i);
}

static __always_inline long unwind_stop(struct table_walk *w, __u32 why)
{
	w->stop = why;
	return 1;
}

/* bpf_loop body: one frame. */
static long unwind_step(__u64 i, void *ctx)
{
	struct table_walk *w = ctx;
	const struct unwind_mapping *m;
	const struct unwind_row *r;
	__u64 at, cfa, ra, bp;
	__s32 cfa_off = 16, rbp_off = -16;
	__u8 cfa_kind = UNWIND_CFA_RBP, rbp_kind = UNWIND_RBP_AT_CFA;
	__u32 n = w->n;

	if (n >= MAX_DEPTH)
		return unwind_stop(w, LOUPE_STAT_UNWIND_DEPTH);
	w->out->pcs[n] = w->pc;
	w->n = n + 1;
	/* A return address points after its call; the call's rule applies. */
	at = i == 0 ? w->pc : w->pc - 1;
	m = unwind_find_mapping(w->p, at);
	w->image = m ? m->image : UNWIND_NO_IMAGE;
	if (!m || m->kind == UNWIND_MAP_NONE)
		return unwind_stop(w, LOUPE_STAT_UNWIND_NO_TABLE);
	if (m->kind == UNWIND_MAP_TABLE) {
		r = unwind_find_row(m->first_row, m->nrows, at - m->bias);
		if (!r)
			return unwind_stop(w, LOUPE_STAT_UNWIND_NO_TABLE);
		cfa_kind = r->cfa_kind;
		cfa_off = r->cfa_off;
		rbp_kind = r->rbp_kind;
		rbp_off = r->rbp_off;
	}
	switch (cfa_kind) {
	case UNWIND_CFA_RSP:
		cfa = w->sp + cfa_off;
		break;
	case UNWIND_CFA_RBP:
		if (w->bp_lost)
			return unwind_stop(w, LOUPE_STAT_UNWIND_EXPRESSION);
		cfa = w->bp + cfa_off;
		break;
	case UNWIND_CFA_PLT:
		cfa = w->sp + cfa_off + ((w->pc & 15) >= 11 ? 8 : 0);
		break;
	case UNWIND_CFA_END:
		return unwind_stop(w, UNWIND_ROOT);
	case UNWIND_CFA_EXPRESSION:
		return unwind_stop(w, LOUPE_STAT_UNWIND_EXPRESSION);
	default:
		return unwind_stop(w, LOUPE_STAT_UNWIND_NO_TABLE);
	}
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
		return unwind_stop(w, LOUPE_STAT_UNWIND_READ_FAULT);
	if (rbp_kind == UNWIND_RBP_AT_CFA) {
		if (bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + rbp_off)))
			return unwind_stop(w, LOUPE_STAT_UNWIND_READ_FAULT);
		w->bp = bp;
		w->bp_lost = 0;
	} else if (rbp_kind == UNWIND_RBP_LOST) {
		w->bp_lost = 1;
	}
	if (!ra)
		return unwind_stop(w, UNWIND_ROOT);
	w->pc = ra;
	w->sp = cfa;
	return 0;
}

static __always_inline void unwind_count_failure(__u32 image, __u32 reason)
{
	struct unwind_failure_key key = { .image = image, .reason = reason };
	__u64 one = 1, *v = bpf_map_lookup_elem(&unwind_failures, &key);

	if (v)
		__sync_fetch_and_add(v, 1);
	else
		bpf_map_update_elem(&unwind_failures, &key, &one, BPF_NOEXIST);
}

/* Where a walk starts: the user registers, and the process. */
struct unwind_start {
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u32 tgid;
	__u32 pad;
};

/* The user registers at the sample: the interrupted ones in user mode,
 * those saved at kernel entry otherwise. */
static __always_inline void unwind_user_regs(struct bpf_perf_event_data *ctx, int in_kernel, struct unwind_start *w)
{
	struct pt_regs *regs;

	if (!in_kernel) {
		w->pc = PT_REGS_IP(&ctx->regs);
		w->sp = PT_REGS_SP(&ctx->regs);
		w->bp = PT_REGS_FP(&ctx->regs);
		return;
	}
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	w->pc = BPF_CORE_READ(regs, ip);
	w->sp = BPF_CORE_READ(regs, sp);
	w->bp = BPF_CORE_READ(regs, bp);
}

/* unwind_walk's answer for a process not described yet. */
#define UNWIND_UNDESCRIBED ((__u32)~0)

/* Walks a user stack by the tables into `out`: 0 when it reached the root
 * or the depth limit (`*flags` says which), else the reason it stopped
 * (counted per image here), or UNWIND_UNDESCRIBED (the process is asked
 * for). A global function, so the verifier checks it once on its own:
 * inlined, it was checked again for every path into it, and the stack
 * program took 557,000 instructions to verify instead of 50,000. */
__noinline __u32 unwind_walk(const struct unwind_start *start, struct stack *out, __u8 *flags)
{
	struct table_walk w = {};
	__u32 zero = 0, tgid;

	if (!start || !out || !flags)
		return UNWIND_UNDESCRIBED;
	tgid = start->tgid;
	w.p = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (!w.p) {
		bpf_map_update_elem(&unwind_wanted, &tgid, &zero, BPF_NOEXIST);
		return UNWIND_UNDESCRIBED;
	}
	w.out = out;
	w.pc = start->pc;
	w.sp = start->sp;
	w.bp = start->bp;
	bpf_loop(MAX_DEPTH + 1, unwind_step, &w, 0);
	if (w.stop == LOUPE_STAT_UNWIND_DEPTH || w.stop == 0) {
		unwind_count_failure(w.image, LOUPE_STAT_UNWIND_DEPTH);
		*flags = UNWIND_KEY_TABLES | UNWIND_KEY_DEPTH;
	} else if (w.stop == UNWIND_ROOT) {
		*flags = UNWIND_KEY_TABLES;
	} else {
		unwind_count_failure(w.image, w.stop);
		return w.stop;
	}
	out->nr = w.n;
	return 0;
}

/* Walks the current task's user stack by the tables into `out` (see
 * unwind_walk); a process not described yet keeps the caller's reason `why`. */
static __always_inline __u32 unwind_user(struct bpf_perf_event_data *ctx, __u32 tgid, int in_kernel, struct stack *out, __u8 *flags, __u32 why)
{
	struct unwind_start start = { .tgid = tgid };
	__u32 stop;

	unwind_user_regs(ctx, in_kernel, &start);
	stop = unwind_walk(&start, out, flags);
	return stop == UNWIND_UNDESCRIBED ? why : stop;
}
