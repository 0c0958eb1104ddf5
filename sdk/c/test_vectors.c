/* Runs the shared test vectors through the generated C stub: every record
 * decodes and re-encodes through its typed encoder to the same bytes. Also
 * compiled as C++ (test.sh builds both). */
#include <stdio.h>
#include "loupe_events.h"

static int unhex(const char *s, uint8_t *out) {
    int n = 0;
    unsigned v;
    while (s[0] && s[0] != '\n' && sscanf(s, "%2x", &v) == 1) { out[n++] = (uint8_t)v; s += 2; }
    return n;
}

int main(int argc, char **argv) {
    static char line[65536];
    static uint8_t in[16384], out[16384];
    int count = 0, bad = 0;
    FILE *f = fopen(argc > 1 ? argv[1] : "../vectors/loupe.txt", "r");
    if (!f) { perror("vectors"); return 2; }
    while (fgets(line, sizeof line, f)) {
        int n = unhex(line, in);
        uint32_t m = trace_reencode(in, out);
        count++;
        if ((int)m != n || memcmp(in, out, n) != 0) {
            uint16_t id; memcpy(&id, in + 10, 2);
            fprintf(stderr, "vector %d (%s): %u bytes re-encoded, want %d\n", count, trace_event_name(id), m, n);
            bad++;
        }
    }
    fclose(f);
    printf("c: %d vectors, %d mismatches\n", count, bad);
    return bad || count == 0;
}
