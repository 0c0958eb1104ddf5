/* Loupe trace runtime for C and C++: header-only, no dependencies beyond libc.
 *
 * Implements the writer side of the lock-free per-CPU buffer described in
 * crates/trace/src/buffer.rs (same layout, same protocol): space is reserved
 * with one compare-and-swap on the CPU's head, the CLOCK_MONOTONIC timestamp
 * is read inside every attempt, a full buffer drops the event and counts it.
 * The timestamp is the TSC converted with the factors the recorder put in
 * the buffer header (crates/trace/src/tsc.rs: the kernel's perf time_mult/
 * time_shift, anchored to CLOCK_MONOTONIC), read with RDTSCP so it is taken
 * after the head load; clock_gettime where the header has none. The CPU is
 * read from glibc's rseq area (__rseq_offset, glibc 2.35+), else sched_getcpu.
 * The buffer is the file named by $LOUPE_TRACE_SHM (set by `loupe trace
 * record`); without it every event costs one load and a branch.
 * Generated headers (loupe trace gen --lang c) include this file. */
#ifndef LOUPE_TRACE_H
#define LOUPE_TRACE_H

#include <fcntl.h>
#include <stddef.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* glibc declares it only under _GNU_SOURCE, which may be set too late. */
extern int sched_getcpu(void);

#define LOUPE_TRACE_MAGIC 0x4352544550554f4cull /* "LOUPETRC" little-endian */
#define LOUPE_PACKET_MAGIC 0xC1FC1FC1u
#define LOUPE_PACKET_HEADER 64u
#define LOUPE_MAX_STRING 1024u
#define LOUPE_MAX_LIST 128u

struct loupe_trace_map {
    uint8_t *base;
    uint64_t sub, nsub, ncpu, ctl_stride, data_off;
    uint64_t sub_shift, nsub_mask; /* sizes are powers of two: shifts and masks, no divisions */
    uint64_t ring, ring_mask;      /* one CPU's data: nsub * sub bytes; a position's offset in it is pos & ring_mask */
    ptrdiff_t rseq_cpu; /* thread pointer offset of this thread's rseq cpu_id; 0: sched_getcpu */
    uint64_t tsc_mult, tsc_shift, tsc_base, ns_base; /* tsc_mult 0: clock_gettime */
};

/* glibc 2.35+: this thread's struct rseq is at thread pointer + __rseq_offset (weak: absent on older libcs). */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

/* Per translation unit: 0 = not looked yet, 1 = tracing, -1 = off. */
static int loupe_trace_state;
static struct loupe_trace_map loupe_trace_m;

static inline uint64_t loupe_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static inline uint32_t loupe_rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t loupe_rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static __attribute__((noinline, cold)) int loupe_trace_attach(void) {
    const char *path = getenv("LOUPE_TRACE_SHM");
    struct stat st;
    int fd;
    uint8_t *p;
    loupe_trace_state = -1;
    if (!path || (fd = open(path, O_RDWR | O_CLOEXEC)) < 0) return 0;
    if (fstat(fd, &st) != 0 || st.st_size < 4096) { close(fd); return 0; }
    p = (uint8_t *)mmap(0, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return 0;
    if (__atomic_load_n((uint64_t *)p, __ATOMIC_ACQUIRE) != LOUPE_TRACE_MAGIC || loupe_rd32(p + 8) != 1) {
        munmap(p, (size_t)st.st_size);
        return 0;
    }
    loupe_trace_m.base = p;
    loupe_trace_m.ncpu = loupe_rd32(p + 12);
    loupe_trace_m.nsub = loupe_rd32(p + 16);
    loupe_trace_m.sub = loupe_rd32(p + 20);
    loupe_trace_m.ctl_stride = loupe_rd32(p + 28);
    loupe_trace_m.data_off = loupe_rd64(p + 40);
    loupe_trace_m.sub_shift = (uint64_t)__builtin_ctzll(loupe_trace_m.sub);
    loupe_trace_m.nsub_mask = loupe_trace_m.nsub - 1;
    loupe_trace_m.ring = loupe_trace_m.nsub * loupe_trace_m.sub;
    loupe_trace_m.ring_mask = loupe_trace_m.ring - 1;
#if defined(__x86_64__)
    if (&__rseq_size && __rseq_size) loupe_trace_m.rseq_cpu = __rseq_offset + 4; /* struct rseq.cpu_id */
#endif
#if defined(__x86_64__)
    loupe_trace_m.tsc_mult = loupe_rd32(p + 48);
    loupe_trace_m.tsc_shift = loupe_rd32(p + 52);
    loupe_trace_m.tsc_base = loupe_rd64(p + 56);
    loupe_trace_m.ns_base = loupe_rd64(p + 64);
#endif
    loupe_trace_state = 1;
    return 1;
}

/* Whether events go anywhere; attaches on first use. */
static inline int loupe_trace_on(void) {
    if (__builtin_expect(loupe_trace_state > 0, 1)) return 1;
    return loupe_trace_state == 0 && loupe_trace_attach();
}

static inline uint64_t *loupe_ctl(uint64_t cpu, uint64_t off) {
    return (uint64_t *)(loupe_trace_m.base + 4096 + cpu * loupe_trace_m.ctl_stride + off);
}

static inline uint64_t loupe_slot(uint64_t pos) { return (pos >> loupe_trace_m.sub_shift) & loupe_trace_m.nsub_mask; }

static inline uint8_t *loupe_at(uint64_t cpu, uint64_t pos) {
    const struct loupe_trace_map *m = &loupe_trace_m;
    return m->base + m->data_off + (cpu * m->nsub + loupe_slot(pos)) * m->sub + (pos & (m->sub - 1));
}

static inline void loupe_commit(uint64_t cpu, uint64_t pos, uint64_t n) {
    __atomic_fetch_add(loupe_ctl(cpu, 192 + 8 * loupe_slot(pos)), n, __ATOMIC_RELEASE);
}

/* The timestamp of a reservation attempt: after the head load (RDTSCP waits for earlier loads). */
static inline uint64_t loupe_stamp(void) {
#if defined(__x86_64__)
    const struct loupe_trace_map *m = &loupe_trace_m;
    if (__builtin_expect(m->tsc_mult != 0, 1)) {
        uint32_t lo, hi; /* RDTSCP without storing its CPU number (ecx) anywhere */
        __asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi) : : "rcx");
        unsigned __int128 d = (((uint64_t)hi << 32) | lo) - m->tsc_base;
        return m->ns_base + (uint64_t)((d * m->tsc_mult) >> (m->tsc_shift & 63)); /* shift < 64: one SHRD */
    }
#endif
    return loupe_now();
}

static inline uint64_t loupe_cpu(void) {
#if defined(__x86_64__)
    if (__builtin_expect(loupe_trace_m.rseq_cpu != 0, 1)) {
        const uint8_t *tp;
        __asm__("mov %%fs:0, %0" : "=r"(tp));
        return *(volatile const uint32_t *)(tp + loupe_trace_m.rseq_cpu);
    }
#endif
    int c = sched_getcpu();
    return (uint64_t)(c < 0 ? 0 : c);
}

/* A reservation: where the record goes (its timestamp already written) and
 * the commit counter of its packet; p is NULL when the event is dropped. */
struct loupe_resv {
    uint8_t *p;
    uint64_t *commit;
};

/* The rare reservation: the record opens a packet (the head sits at a packet
 * boundary or the record does not fit in the rest of the current one), or
 * the record can never fit. Writes the packet header and closes the previous
 * packet; commits the header's 64 bytes itself (the consumer takes a packet
 * only when all of it is committed, so the order of commits is free). */
static __attribute__((noinline, cold)) struct loupe_resv loupe_reserve_slow(uint32_t len, uint64_t cpu) {
    const struct loupe_trace_map *m = &loupe_trace_m;
    const uint64_t s = m->sub;
    uint64_t *head = loupe_ctl(cpu, 0);
    uint64_t h, ts, pos, start = 0;
    int fresh;
    struct loupe_resv r = {0, 0};
    if (len > s - LOUPE_PACKET_HEADER) { /* cannot fit a packet: drop and count */
        __atomic_fetch_add(loupe_ctl(cpu, 64), 1, __ATOMIC_RELAXED);
        return r;
    }
    do {
        h = __atomic_load_n(head, __ATOMIC_ACQUIRE);
        ts = loupe_stamp();
        fresh = (h & (s - 1)) == 0 || (h & (s - 1)) + len > s;
        if (fresh) {
            start = (h + s - 1) & ~(s - 1);
            if ((start >> m->sub_shift) >= __atomic_load_n(loupe_ctl(cpu, 128), __ATOMIC_ACQUIRE) + m->nsub) {
                __atomic_fetch_add(loupe_ctl(cpu, 64), 1, __ATOMIC_RELAXED);
                return r;
            }
            pos = start + LOUPE_PACKET_HEADER;
        } else {
            pos = h;
        }
    } while (!__atomic_compare_exchange_n(head, &h, pos + len, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    r.p = loupe_at(cpu, pos);
    r.commit = loupe_ctl(cpu, 192 + 8 * loupe_slot(pos));
    memcpy(r.p, &ts, 8);
    if (fresh) {
        /* CTF packet header + context; the consumer completes end, sizes, drops. */
        uint8_t hdr[LOUPE_PACKET_HEADER] = {0};
        uint32_t magic = LOUPE_PACKET_MAGIC, c32 = (uint32_t)cpu;
        uint64_t seq = start >> m->sub_shift, dropped = __atomic_load_n(loupe_ctl(cpu, 64), __ATOMIC_RELAXED);
        memcpy(hdr, &magic, 4);
        memcpy(hdr + 8, &c32, 4);
        memcpy(hdr + 12, &c32, 4);
        memcpy(hdr + 16, &ts, 8);
        memcpy(hdr + 48, &seq, 8);
        memcpy(hdr + 56, &dropped, 8);
        memcpy(loupe_at(cpu, start), hdr, LOUPE_PACKET_HEADER);
        loupe_commit(cpu, start, LOUPE_PACKET_HEADER);
        if (h & (s - 1)) { /* close the previous packet: zero its tail and commit it */
            memset(loupe_at(cpu, h), 0, s - (h & (s - 1)));
            loupe_commit(cpu, h, s - (h & (s - 1)));
        }
    }
    return r;
}

/* Reserves `len` bytes (a multiple of 8) on this CPU's buffer and writes the
 * timestamp of the winning attempt into their first 8 bytes. One load of
 * the head, then per attempt one timestamp and one compare-and-swap (a
 * failed CAS reloads the head); anything but "fits in the current packet"
 * goes out of line. The caller fills the record, then loupe_publish. */
static inline __attribute__((always_inline)) struct loupe_resv loupe_reserve(uint32_t len) {
    /* Locals: the CAS is a compiler barrier, globals would be loaded again after it. */
    const struct loupe_trace_map *m = &loupe_trace_m;
    const uint64_t s = m->sub, sub_shift = m->sub_shift, nsub_mask = m->nsub_mask, ring_mask = m->ring_mask;
    uint64_t cpu = loupe_cpu(), h, off, ts;
    struct loupe_resv r;
    if (__builtin_expect(cpu >= m->ncpu, 0)) cpu %= m->ncpu;
    uint8_t *const ctl = m->base + 4096 + cpu * m->ctl_stride;
    uint8_t *const data = m->base + m->data_off + cpu * m->ring;
    uint64_t *const head = (uint64_t *)ctl;
    h = __atomic_load_n(head, __ATOMIC_ACQUIRE);
    do {
        ts = loupe_stamp();
        off = h & (s - 1);
        if (__builtin_expect(off == 0 || off + len > s, 0)) return loupe_reserve_slow(len, cpu);
    } while (!__atomic_compare_exchange_n(head, &h, h + len, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    r.p = data + (h & ring_mask); /* slot * sub + offset in one mask */
    r.commit = (uint64_t *)(ctl + 192) + ((h >> sub_shift) & nsub_mask);
    memcpy(r.p, &ts, 8);
    return r;
}

/* Commits a filled record of `len` bytes: the consumer may take its packet. */
static inline void loupe_publish(struct loupe_resv r, uint32_t len) {
    __atomic_fetch_add(r.commit, len, __ATOMIC_RELEASE);
}

/* Encoding helpers used by generated code: little-endian, packed. */
static inline uint16_t loupe_strn(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return (uint16_t)(n > LOUPE_MAX_STRING ? LOUPE_MAX_STRING : n);
}
static inline uint16_t loupe_listn(size_t n) { return (uint16_t)(n > LOUPE_MAX_LIST ? LOUPE_MAX_LIST : n); }
/* Zero padding in one store: the last 8 bytes, before the fields overwrite their part. */
static inline void loupe_pad(uint8_t *rec, uint32_t size) {
    uint64_t z = 0;
    memcpy(rec + size - 8, &z, 8);
}
/* Record size and event id after the timestamp, in one 32-bit store. */
static inline void loupe_tag(uint8_t *rec, uint32_t size, uint16_t id) {
    uint32_t t = size | (uint32_t)id << 16;
    memcpy(rec + 8, &t, 4);
}

#ifdef __cplusplus
}
#endif
#endif
