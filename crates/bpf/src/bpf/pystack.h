/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython frames read at sample time.
 *
 * For a process the daemon registered as CPython (`py_procs`: where
 * `_PyRuntime` is and the structure offsets of its version, found in user
 * space once per process), the sampled thread's interpreter frames are
 * walked here, in the interrupt, so a busy thread's Python stack is the
 * one it had when sampled (read later from user space it has moved on).
 * The thread state leads to the current frame (through `cframe` in 3.11
 * and 3.12, directly in 3.13). Each frame becomes two words: the code
 * object's address, and (instruction byte offset | co_firstlineno << 32 |
 * entry << 63), innermost first; entry is 3.11's `is_entry`, or in 3.12+
 * the frame leafward of an interpreter entry's shim frame (owned by the C
 * stack, left out). They go in a `struct stack` (an odd `nr`: the chain
 * was longer than PY_MAX_FRAMES and its outer frames are missing). The daemon names code
 * objects once (address, checked by co_firstlineno) and computes lines.
 *
 * A sample counted in the kernel carries the frames' hash in its key; a
 * sample handed to the perf ring leaves them in `py_pending` under (thread,
 * its count of such samples), with the user pc and sp the perf sample
 * carries: the daemon takes them in order, matching the registers, and
 * skips entries of samples the ring lost. (A key of the registers alone
 * was tried first: a tight loop repeats them between two drains, and the
 * later sample overwrote the earlier one's frames.)
 */
#pragma once

/* Two words a frame in one struct stack (127 words). */
#define PY_MAX_FRAMES 63
/* Thread states looked at to find the sampled thread's. */
#define PY_MAX_THREADS 64

/* Where the interpreter is and its structures' offsets (bytes); kept in
 * step with `PythonLayout` in stacks.rs. */
struct py_proc {
	__u64 runtime;
	__u16 runtime_interpreters_head;
	__u16 interp_threads_head;
	__u16 tstate_next;
	__u16 tstate_native_thread_id;
	/* cframe (3.11, 3.12), or current_frame with PY_FRAME_DIRECT (3.13) */
	__u16 tstate_frame;
	__u16 cframe_current_frame;
	/* f_code (3.11, 3.12), or f_executable (3.13) */
	__u16 frame_code;
	__u16 frame_previous;
	/* prev_instr (3.11, 3.12), or instr_ptr (3.13) */
	__u16 frame_instr;
	/* is_entry (3.11), or owner with PY_ENTRY_BY_OWNER (3.12+) */
	__u16 frame_entry;
	__u16 code_firstlineno;
	__u16 code_code_adaptive;
	__u16 flags;
	__u16 pad[3];
};

/* The thread state points at the current frame, not at a _PyCFrame. */
#define PY_FRAME_DIRECT 1
/* A call from C links a shim frame rootward of the first frame it runs,
 * owned by the C stack; the frame leafward of it is the entry. */
#define PY_ENTRY_BY_OWNER 2
/* FRAME_OWNED_BY_CSTACK in 3.12's and 3.13's enum _frameowner. */
#define PY_OWNED_BY_CSTACK 3

struct py_sample_key {
	__u32 tid;
	__u32 pad;
	__u64 seq;
};

/* A streamed sample's frames: pc and sp as the perf sample's user
 * registers will say, then the frames (nr 0: no Python code running). */
struct py_sample {
	__u64 pc;
	__u64 sp;
	struct stack frames;
};

/* Per thread: its thread state (0: none found), and how many of its
 * samples went to the perf ring with an entry in `py_pending`. */
struct py_thread {
	__u64 tstate;
	__u64 seq;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/* Thread id -> its thread state, so the list is walked once per thread. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_thread);
} py_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_sample);
} py_scratch SEC(".maps");

/* Python frames of samples sent to the perf ring, until the daemon takes
 * them; LRU: a sample the daemon never asks for ages out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct py_sample_key);
	__type(value, struct py_sample);
} py_pending SEC(".maps");

/* A process's Python stack the daemon has not been told of, so that it
 * names the code objects while the process lives: a stack counted here
 * reaches the daemon only at its next drain (seconds later), when a
 * short-lived process is gone and its code objects with it. */
struct py_fresh_key {
	__u32 tgid;
	__u32 pad;
	__u64 hash;
};

/* Stacks told of already (LRU: one told of again after it aged out costs
 * the daemon a cache hit). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct py_fresh_key);
	__type(value, __u8);
} py_told SEC(".maps");

/* Taken (and deleted) by the daemon at every side-band drain. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct py_fresh_key);
	__type(value, struct stack);
} py_fresh SEC(".maps");

struct py_walk {
	struct py_proc p;
	__u64 at;
	__u32 tid;
	__u32 found;
};

static __always_inline int py_read(void *dst, __u32 size, __u64 addr)
{
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

/* bpf_loop body over the interpreter's thread states. */
static long py_thread_step(__u64 i, void *ctx)
{
	struct py_walk *w = ctx;
	__u64 id = 0;

	if (!w->at || py_read(&id, sizeof(id), w->at + w->p.tstate_native_thread_id))
		return 1;
	if (id == w->tid) {
		w->found = 1;
		return 1;
	}
	if (py_read(&w->at, sizeof(w->at), w->at + w->p.tstate_next))
		w->at = 0;
	return 0;
}

/* The thread state of `w->tid` (0: none): remembered, else found in the list. */
static __always_inline __u64 py_thread_state(struct py_walk *w, struct py_thread *t)
{
	__u64 id = 0, interp = 0;

	if (t->tstate && !py_read(&id, sizeof(id), t->tstate + w->p.tstate_native_thread_id) && id == w->tid)
		return t->tstate;
	t->tstate = 0;
	if (py_read(&interp, sizeof(interp), w->p.runtime + w->p.runtime_interpreters_head) || !interp)
		return 0;
	if (py_read(&w->at, sizeof(w->at), interp + w->p.interp_threads_head))
		return 0;
	w->found = 0;
	bpf_loop(PY_MAX_THREADS, py_thread_step, w, 0);
	if (w->found)
		t->tstate = w->at;
	return t->tstate;
}

/* The current thread's entry in `py_threads`, made on first sight. */
static __always_inline struct py_thread *py_thread(__u32 tid)
{
	struct py_thread fresh = {};
	struct py_thread *t = bpf_map_lookup_elem(&py_threads, &tid);

	if (t)
		return t;
	bpf_map_update_elem(&py_threads, &tid, &fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&py_threads, &tid);
}

/* Marks the innermost frame read so far as entered from C: the frame
 * just read was the shim of a 3.12+ interpreter entry. */
static __always_inline void py_mark_entry(struct stack *out)
{
	__u64 n = out->nr;

	if (n >= 2 && n <= MAX_DEPTH)
		out->pcs[n - 1] |= 1ULL << 63;
}

/* bpf_loop body over the frame chain: appends one frame's two words. */
static long py_frame_step(__u64 i, void *ctx)
{
	struct py_walk *w = ctx;
	__u32 zero = 0;
	struct py_sample *s = bpf_map_lookup_elem(&py_scratch, &zero);
	struct stack *out = s ? &s->frames : 0;
	__u64 frame = w->at, code = 0, prev = 0, instr = 0, n;
	__u32 first = 0;
	__u8 entry = 0;

	if (!out || !frame)
		return 1;
	if (py_read(&code, sizeof(code), frame + w->p.frame_code) ||
	    py_read(&prev, sizeof(prev), frame + w->p.frame_previous) ||
	    py_read(&entry, sizeof(entry), frame + w->p.frame_entry))
		return 1;
	w->at = prev;
	if (w->p.flags & PY_ENTRY_BY_OWNER) {
		if (entry == PY_OWNED_BY_CSTACK) {
			py_mark_entry(out);
			return 0;
		}
		entry = 0;
	}
	if (py_read(&instr, sizeof(instr), frame + w->p.frame_instr) ||
	    py_read(&first, sizeof(first), code + w->p.code_firstlineno))
		return 1;
	n = out->nr;
	if (n > MAX_DEPTH - 2) {
		/* Longer than the room: an odd count says so. */
		if (n < MAX_DEPTH) {
			out->pcs[n] = 0;
			out->nr = n + 1;
		}
		return 1;
	}
	out->pcs[n] = code;
	out->pcs[n + 1] = ((instr - code - w->p.code_code_adaptive) & 0xffffffffULL) |
			  ((__u64)(first & 0x7fffffff) << 32) | ((__u64)(entry != 0) << 63);
	out->nr = n + 2;
	return 0;
}

/* Verified once on its own (a global function): inlined, its paths
 * multiplied the caller's. 1 when `tgid` is a registered CPython process
 * (its frames, possibly none, are in py_scratch), else 0. */
__noinline int python_walk(__u32 tgid)
{
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);
	struct py_walk w = {};
	__u32 zero = 0;
	struct py_sample *s;
	struct py_thread *t;
	__u64 tstate, at = 0;

	if (!p)
		return 0;
	s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!s)
		return 0;
	s->frames.nr = 0;
	w.p = *p;
	w.tid = (__u32)bpf_get_current_pid_tgid();
	t = py_thread(w.tid);
	if (!t)
		return 1;
	tstate = py_thread_state(&w, t);
	if (!tstate || py_read(&at, sizeof(at), tstate + w.p.tstate_frame) || !at)
		return 1;
	/* 3.11, 3.12: the thread state points at a _PyCFrame holding it. */
	if (!(w.p.flags & PY_FRAME_DIRECT) && py_read(&at, sizeof(at), at + w.p.cframe_current_frame))
		return 1;
	w.at = at;
	/* Room for every frame and a shim frame under each. */
	bpf_loop(2 * PY_MAX_FRAMES + 2, py_frame_step, &w, 0);
	return 1;
}

static __always_inline struct stack *python_stack(__u32 tgid)
{
	__u32 zero = 0;
	struct py_sample *s;

	if (!python_walk(tgid))
		return 0;
	s = bpf_map_lookup_elem(&py_scratch, &zero);
	return s ? &s->frames : 0;
}

/* Leaves a streamed sample's Python frames for the daemon, numbered in the
 * thread's order, with the user registers the perf sample will carry: the
 * ones saved at the top of the thread's kernel stack, by the interrupt of
 * a sample in user mode or by the kernel's entry (as perf's regs_user). */
static __always_inline void python_pending(const struct stack *py)
{
	struct py_sample_key k = { .tid = (__u32)bpf_get_current_pid_tgid() };
	struct py_thread *t;
	struct py_sample *s;
	struct pt_regs *regs;
	__u32 zero = 0;

	if (!py)
		return;
	t = bpf_map_lookup_elem(&py_threads, &k.tid);
	s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!t || !s)
		return;
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	s->pc = regs->ip;
	s->sp = regs->sp;
	k.seq = t->seq++;
	bpf_map_update_elem(&py_pending, &k, s, BPF_ANY);
}

/* Tells the daemon of a Python stack of this process it has not seen
 * (`hash`: the stack's name in the stacks map). */
static __always_inline void python_tell(const struct stack *py, __u64 hash)
{
	struct py_fresh_key k = { .tgid = bpf_get_current_pid_tgid() >> 32, .hash = hash };
	__u8 one = 1;

	if (bpf_map_lookup_elem(&py_told, &k))
		return;
	/* Full (the daemon is behind): told of at a later sample. */
	if (bpf_map_update_elem(&py_fresh, &k, py, BPF_NOEXIST) == 0)
		bpf_map_update_elem(&py_told, &k, &one, BPF_ANY);
}
