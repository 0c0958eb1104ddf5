/* Spill slots by construction (issue 28): at -O2, `pressure` keeps ten
 * `long` values live across calls to an opaque function; six callee-saved
 * registers hold some and the rest are stored to stack slots no DWARF
 * variable owns, then loaded back. With -fstack-protector-all the function
 * also stores the stack protector's guard in its frame. Built by the
 * dataprof unit tests (crates/dataprof/src/types/spill.rs). */
struct rec {
    long key;
    double weight;
    struct rec *next;
};

__attribute__((noinline)) long opaque(long x) {
    __asm__ volatile("" ::: "memory");
    return x + 1;
}

__attribute__((noinline)) long pressure(struct rec *r, long n) {
    long a = r->key * n, b = a ^ n, c = b * 3, d = c + a, e = d * b;
    long f = e - c, g = f * d, h = g ^ e, i = h + f, j = i * g;
    long t = opaque(n);
    t += opaque(t + a);
    return a + b + c + d + e + f + g + h + i + j + t + opaque(a ^ j);
}

int main(int argc, char **argv) {
    struct rec r = {argc, 1.0, 0};
    (void)argv;
    return (int)pressure(&r, argc);
}
