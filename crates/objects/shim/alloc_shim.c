// SPDX-License-Identifier: Apache-2.0
/*
 * Loupe's LD_PRELOAD allocation shim: interposes the C library's allocator
 * and the C++ runtime's operator new/delete and appends one record per
 * allocation and free to $LOUPE_ALLOC_DIR/preload-<pid>.alog, in the layout
 * of crates/objects/src/log.rs (little-endian, x86-64 and aarch64 only).
 *
 * - The real allocator is glibc's __libc_* entry points (no dlsym needed,
 *   which itself allocates); operator new/delete come from dlsym(RTLD_NEXT)
 *   with a per-thread depth counter so the malloc inside them is not
 *   recorded twice.
 * - Records go to a per-thread buffer, flushed with one write() (O_APPEND)
 *   when full, at thread exit and at process exit; a kill -9 loses at most
 *   each thread's unflushed buffer, never the file's structure.
 * - A fork's child drops the parent's buffered records and opens its own
 *   file; exec keeps LD_PRELOAD, so the whole process tree is covered.
 * - /proc/self/maps goes into the log when the file is opened and at exit,
 *   to place allocation sites in images afterwards.
 * - Each allocation also keeps up to CALLERS return addresses above its site,
 *   so a block returned through `void *` wrappers is typed where a caller
 *   stores it. No frame pointers are needed: the unwinder (libgcc's, from
 *   .eh_frame) runs once per new return address and teaches a table each
 *   one's frame size; known ones are then walked in a few loads (a full
 *   unwind per allocation made gawk 5x slower). LOUPE_ALLOC_CALLERS=0 turns
 *   it off.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <unwind.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

enum { KIND_ALLOC = 1, KIND_FREE = 2, KIND_MAPS = 3 };
enum { F_MALLOC = 1, F_CALLOC = 2, F_REALLOC = 3, F_NEW = 4, F_NEW_ARRAY = 5, F_ALIGNED = 6,
       F_FREE = 7, F_DELETE = 8, F_DELETE_ARRAY = 9 };

struct record {
	uint16_t kind, func;
	uint32_t pid, tid, payload_len;
	uint64_t time_ns, base, size, site;
};
_Static_assert(sizeof(struct record) == 48, "log.rs record layout");

/* log.rs CALLERS: return addresses above the site kept per allocation. */
#define CALLERS 4
#define MAX_RECORD (sizeof(struct record) + CALLERS * sizeof(uint64_t))
#define BUF_BYTES (256 * MAX_RECORD)

struct tbuf {
	unsigned char b[BUF_BYTES];
	size_t n;
	int depth; /* inside one of our entry points: inner calls are not recorded */
	uint32_t tid;
	int registered;
	uint64_t stack_lo, stack_hi; /* this thread's stack, for the frame walk (hi 0: not known yet) */
};

static __thread struct tbuf tb __attribute__((tls_model("initial-exec")));
static int log_fd = -1;
static int disabled;
static int callers_on = 1;
static uint32_t log_pid;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t flush_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		c += w;
		n -= (size_t)w;
	}
}

/* /proc/self/maps as one record, read into anonymous memory (no malloc). */
static void write_maps(void)
{
	size_t cap = 4 << 20, len = 0;
	char *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r;
		while (len < cap && (r = read(fd, buf + len, cap - len)) > 0)
			len += (size_t)r;
		close(fd);
	}
	struct record h = { .kind = KIND_MAPS, .pid = log_pid, .tid = log_pid, .payload_len = (uint32_t)len, .time_ns = now_ns() };
	struct iovec iov[2] = { { &h, sizeof h }, { buf, len } };
	/* One writev: records of other threads cannot land inside it (O_APPEND). */
	if (writev(log_fd, iov, 2) < 0) { /* nothing to do: the log is best effort */ }
	munmap(buf, cap);
}

static void open_log(void)
{
	const char *dir = getenv("LOUPE_ALLOC_DIR");
	if (!dir) {
		disabled = 1;
		return;
	}
	char path[4096];
	log_pid = (uint32_t)getpid();
	snprintf(path, sizeof path, "%s/preload-%u.alog", dir, log_pid);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		disabled = 1;
		return;
	}
	static const char header[16] = { 'L', 'O', 'U', 'P', 'E', 'A', 'L', 0, 1, 0, 0, 0, 2, 0, 0, 0 };
	write_all(fd, header, sizeof header);
	log_fd = fd;
	write_maps();
}

static void flush(struct tbuf *t)
{
	if (t->n > 0 && log_fd >= 0)
		write_all(log_fd, t->b, t->n);
	t->n = 0;
}

/*
 * Frame sizes by return address: at a return address R in function F, F's
 * stack pointer is S and its caller's return address lies at S + k - 8, the
 * caller's stack pointer being S + k (k = CFA - S, from the unwinder). An
 * open-addressed table shared by all threads; a slot's pc is claimed with a
 * compare-and-swap, its k published after (0: not known yet, read as a miss).
 */
#define FRAME_SLOTS 8192
#define FRAME_END 1 /* the unwinder found no caller above this frame */
static uint64_t frame_pc[FRAME_SLOTS];
static uint32_t frame_k[FRAME_SLOTS];

static uint32_t frame_slot(uint64_t pc)
{
	return (uint32_t)((pc * 0x9E3779B97F4A7C15ull) >> 40) & (FRAME_SLOTS - 1);
}

static uint32_t frame_size(uint64_t pc)
{
	for (uint32_t i = frame_slot(pc), probe = 0; probe < 16; probe++, i = (i + 1) & (FRAME_SLOTS - 1)) {
		uint64_t p = __atomic_load_n(&frame_pc[i], __ATOMIC_ACQUIRE);
		if (p == pc)
			return __atomic_load_n(&frame_k[i], __ATOMIC_ACQUIRE);
		if (p == 0)
			return 0;
	}
	return 0;
}

static void learn(uint64_t pc, uint32_t k)
{
	for (uint32_t i = frame_slot(pc), probe = 0; probe < 16; probe++, i = (i + 1) & (FRAME_SLOTS - 1)) {
		uint64_t p = 0;
		if (__atomic_compare_exchange_n(&frame_pc[i], &p, pc, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || p == pc) {
			__atomic_store_n(&frame_k[i], k, __ATOMIC_RELEASE);
			return;
		}
	}
}

struct walk {
	uint64_t site;
	uint64_t last, last_sp; /* the frame reported before: return address, stack pointer */
	int found, n;
	uint64_t *out;
};

/*
 * One frame of libgcc's walk: `ip` is the frame's return address and the
 * context's CFA is its callee's, i.e. this frame's stack pointer; so the
 * frame reported before learns its size from this one.
 */
static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct walk *w = arg;
	uint64_t ip = _Unwind_GetIP(ctx), sp = _Unwind_GetCFA(ctx);
	if (!w->found && ip != w->site) /* the shim's own frames */
		return _URC_NO_REASON;
	if (w->found) {
		if (sp > w->last_sp && sp - w->last_sp < (1u << 24) && (sp - w->last_sp) % 8 == 0)
			learn(w->last, (uint32_t)(sp - w->last_sp));
		w->out[w->n++] = ip;
	}
	w->found = 1;
	w->last = ip;
	w->last_sp = sp;
	return w->n == CALLERS ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* Whether [sp, sp + k) lies in this thread's stack (found once per thread; glibc may allocate to find the main
 * thread's). A signal handler on an alternate stack is not: the unwinder walks it. */
static int on_stack(uint64_t sp, uint64_t k)
{
	if (tb.stack_hi == 0) {
		pthread_attr_t a;
		void *lo;
		size_t size;
		tb.stack_hi = 1; /* unknown: the walk stops at once, the unwinder does the work */
		tb.depth++;
		if (pthread_getattr_np(pthread_self(), &a) == 0) {
			if (pthread_attr_getstack(&a, &lo, &size) == 0) {
				tb.stack_lo = (uint64_t)(uintptr_t)lo;
				tb.stack_hi = tb.stack_lo + size;
			}
			pthread_attr_destroy(&a);
		}
		tb.depth--;
	}
	return sp >= tb.stack_lo && sp + k <= tb.stack_hi;
}

/* The return addresses above `site` (its caller's stack pointer `sp`), into out[]; how many. */
static int callers_of(uint64_t site, uint64_t sp, uint64_t out[CALLERS])
{
#ifdef __x86_64__
	/* Known frames: a load each, never outside this thread's stack. */
	uint64_t pc = site;
	int n = 0;
	for (; n < CALLERS; n++) {
		uint32_t k = frame_size(pc);
		if (k == FRAME_END)
			return n;
		if (k == 0 || !on_stack(sp, k))
			break;
		sp += k;
		pc = out[n] = *(uint64_t *)(uintptr_t)(sp - 8);
	}
	if (n == CALLERS)
		return n;
#else
	(void)sp;
#endif
	tb.depth++; /* the unwinder must not record its own allocations, if any */
	struct walk w = { .site = site, .out = out };
	_Unwind_Reason_Code rc = _Unwind_Backtrace(walk_frame, &w);
	tb.depth--;
	/* The unwinder itself ran out of frames (the callback's stop reads as an error): nothing above the last. */
	if (w.found && w.n < CALLERS && rc == _URC_END_OF_STACK)
		learn(w.last, FRAME_END);
	return w.n;
}

static void flush_at_thread_exit(void *arg)
{
	(void)arg;
	flush(&tb);
}

static void make_key(void)
{
	pthread_key_create(&flush_key, flush_at_thread_exit);
}

static void record(uint16_t kind, uint16_t func, void *base, size_t size, void *site, uint64_t sp)
{
	if (disabled)
		return;
	if (log_fd < 0) {
		pthread_mutex_lock(&open_lock);
		if (log_fd < 0 && !disabled)
			open_log();
		pthread_mutex_unlock(&open_lock);
		if (disabled)
			return;
	}
	struct tbuf *t = &tb;
	if (!t->registered) {
		t->registered = 1;
		t->tid = (uint32_t)syscall(SYS_gettid);
		pthread_once(&key_once, make_key);
		pthread_setspecific(flush_key, t);
	}
	uint64_t up[CALLERS];
	int k = kind == KIND_ALLOC && callers_on ? callers_of((uint64_t)(uintptr_t)site, sp, up) : 0;
	struct record r = { .kind = kind, .func = func, .pid = log_pid, .tid = t->tid, .time_ns = now_ns(),
			    .base = (uint64_t)(uintptr_t)base, .size = size, .site = (uint64_t)(uintptr_t)site,
			    .payload_len = (uint32_t)(k * sizeof up[0]) };
	memcpy(t->b + t->n, &r, sizeof r);
	memcpy(t->b + t->n + sizeof r, up, r.payload_len);
	t->n += sizeof r + r.payload_len;
	if (t->n + MAX_RECORD > BUF_BYTES)
		flush(t);
}

static void after_fork_in_child(void)
{
	tb.n = 0; /* the parent writes these */
	tb.tid = (uint32_t)syscall(SYS_gettid);
	if (log_fd >= 0) {
		close(log_fd);
		log_fd = -1;
	}
}

__attribute__((constructor)) static void shim_init(void)
{
	pthread_atfork(NULL, NULL, after_fork_in_child);
	const char *c = getenv("LOUPE_ALLOC_CALLERS");
	callers_on = !(c && c[0] == '0');
}

__attribute__((destructor)) static void shim_fini(void)
{
	flush(&tb);
	if (log_fd >= 0)
		write_maps();
}

#define SITE __builtin_return_address(0)
/* The caller's stack pointer after the call returns (built with frame pointers: past the saved rbp and the return address). */
#define SP ((uint64_t)(uintptr_t)__builtin_frame_address(0) + 16)

void *malloc(size_t n)
{
	tb.depth++;
	void *p = __libc_malloc(n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_MALLOC, p, n, SITE, SP);
	return p;
}

void *calloc(size_t n, size_t each)
{
	tb.depth++;
	void *p = __libc_calloc(n, each);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_CALLOC, p, n * each, SITE, SP);
	return p;
}

void *realloc(void *old, size_t n)
{
	tb.depth++;
	void *p = __libc_realloc(old, n);
	if (--tb.depth == 0) {
		if (old && (p || n == 0))
			record(KIND_FREE, F_REALLOC, old, 0, SITE, SP);
		if (p)
			record(KIND_ALLOC, F_REALLOC, p, n, SITE, SP);
	}
	return p;
}

void free(void *p)
{
	if (p && tb.depth == 0)
		record(KIND_FREE, F_FREE, p, 0, SITE, SP);
	__libc_free(p);
}

void *memalign(size_t align, size_t n)
{
	tb.depth++;
	void *p = __libc_memalign(align, n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_ALIGNED, p, n, SITE, SP);
	return p;
}

void *aligned_alloc(size_t align, size_t n)
{
	tb.depth++;
	void *p = __libc_memalign(align, n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_ALIGNED, p, n, SITE, SP);
	return p;
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	tb.depth++;
	void *p = __libc_memalign(align, n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_ALIGNED, p, n, SITE, SP);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

/* operator new/delete: the C++ runtime's own (new handlers, bad_alloc), recorded once. */
typedef void *(*new_fn)(size_t);
typedef void (*delete_fn)(void *);

static void *next(const char *name)
{
	tb.depth++;
	void *f = dlsym(RTLD_NEXT, name);
	tb.depth--;
	if (!f)
		abort();
	return f;
}

#define NEW(sym, func)                                              \
	void *sym(size_t n)                                         \
	{                                                           \
		static new_fn real;                                 \
		if (!real)                                          \
			real = (new_fn)next(#sym);                  \
		tb.depth++;                                         \
		void *p = real(n);                                  \
		if (--tb.depth == 0)                                \
			record(KIND_ALLOC, func, p, n, SITE, SP);       \
		return p;                                           \
	}

#define DELETE(sym, func)                                           \
	void sym(void *p)                                           \
	{                                                           \
		static delete_fn real;                              \
		if (!real)                                          \
			real = (delete_fn)next(#sym);               \
		if (p && tb.depth == 0)                             \
			record(KIND_FREE, func, p, 0, SITE, SP);        \
		tb.depth++;                                         \
		real(p);                                            \
		tb.depth--;                                         \
	}

NEW(_Znwm, F_NEW)
NEW(_Znam, F_NEW_ARRAY)
DELETE(_ZdlPv, F_DELETE)
DELETE(_ZdaPv, F_DELETE_ARRAY)

/* Sized delete (C++14): forwarded with the size the runtime expects. */
typedef void (*sized_delete_fn)(void *, size_t);
#define SIZED_DELETE(sym, func)                                     \
	void sym(void *p, size_t n)                                 \
	{                                                           \
		static sized_delete_fn real;                        \
		if (!real)                                          \
			real = (sized_delete_fn)next(#sym);         \
		if (p && tb.depth == 0)                             \
			record(KIND_FREE, func, p, 0, SITE, SP);        \
		tb.depth++;                                         \
		real(p, n);                                         \
		tb.depth--;                                         \
	}

SIZED_DELETE(_ZdlPvm, F_DELETE)
SIZED_DELETE(_ZdaPvm, F_DELETE_ARRAY)
