/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Call chains copied and named in the kernel, shared by the programs that
 * walk stacks (stacks.bpf.c on samples, offcpu.bpf.c at context switches).
 *
 * A chain (the kernel's unwinder for the kernel part, frame pointers for
 * the user part) is copied by bpf_get_stack into per-CPU scratch, named by
 * a 64-bit hash of its frames, and stored once in a hash map of stacks;
 * after that only the hash travels. Each including program declares its
 * own `scratch` array of two `struct stack` and its own stack maps.
 */
#pragma once

#define MAX_DEPTH 127

/* One call chain, leaf first: exactly 1 KiB. */
struct stack {
	__u64 nr;
	__u64 pcs[MAX_DEPTH];
};

/* Stacks by hash. Any generation's map holds the same frames for a hash;
 * two let the daemon empty one while the program fills the other. */
#define STACKS(name)                                  \
	struct {                                      \
		__uint(type, BPF_MAP_TYPE_HASH);          \
		__uint(max_entries, 8192);                \
		__type(key, __u64);                       \
		__type(value, struct stack);              \
	} name SEC(".maps")

/* Per-CPU room for the two chains being handled. */
#define SCRATCH(name)                                 \
	struct {                                      \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);  \
		__uint(max_entries, 2);                   \
		__type(key, __u32);                       \
		__type(value, struct stack);              \
	} name SEC(".maps")

/* Copies one of the current task's chains (flags: 0 = kernel,
 * BPF_F_USER_STACK = user) into slot `slot` of `scratch`. */
static __always_inline struct stack *copy_chain(void *ctx, void *scratch, __u32 slot, __u64 flags)
{
	struct stack *s = bpf_map_lookup_elem(scratch, &slot);
	long n;

	if (!s)
		return 0;
	n = bpf_get_stack(ctx, s->pcs, sizeof(s->pcs), flags);
	s->nr = n > 0 ? n / sizeof(__u64) : 0;
	return s;
}

/* Kept in step with `stack_hash` in stacks.rs (checked by its tests). */
static __always_inline __u64 hash_stack(const struct stack *s)
{
	__u64 h = 0xcbf29ce484222325ULL ^ s->nr;

	for (int i = 0; i < MAX_DEPTH; i++) {
		if (i >= s->nr)
			break;
		h = (h ^ s->pcs[i]) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	return h ? h : 1;
}

/* Names a chain by its hash, storing its frames the first time:
 * 0 = the map is full. */
static __always_inline __u64 intern(void *stacks, const struct stack *s)
{
	__u64 h = hash_stack(s);

	if (bpf_map_lookup_elem(stacks, &h))
		return h;
	/* -EEXIST: another CPU stored it meanwhile. */
	if (bpf_map_update_elem(stacks, &h, s, BPF_NOEXIST) == 0 || bpf_map_lookup_elem(stacks, &h))
		return h;
	return 0;
}
