# Training: records split into fields ($0 assigned, NF, $i), numeric conversion, regex tests.
# Usage: gawk -v n=N -f fields.awk
BEGIN {
    seed = 7
    sum = 0; hits = 0
    for (i = 0; i < n; i++) {
        seed = (seed * 69069 + 1) % 4294967296; r = int(seed / 65536)
        $0 = sprintf("%d %s %d.%d user%d /path/to/%x ok", i, (r % 3 ? "GET" : "POST"), r % 1000, r % 10, r % 50, seed)
        for (f = 1; f <= NF; f++) if ($f ~ /^[0-9.]+$/) sum += $f
        if ($2 == "POST" && $4 ~ /user1/) hits++
        $3 = $3 * 2
        sum += length($0)
    }
    printf "sum %.1f hits %d\n", sum, hits
}
