# Test input (never trained on): parse generated log lines with a field separator, aggregate per key,
# sort and format a report.
# Usage: gawk -v n=N -f report.awk
BEGIN {
    FS = ","
    split("GET,PUT,POST,HEAD,DELETE", verbs, ",")
    seed = 99
    for (i = 0; i < n; i++) {
        seed = (seed * 1103515245 + 12345) % 2147483648; r = int(seed / 65536)
        $0 = sprintf("%s,/api/v%d/item/%d,%d,%d", verbs[r % 5 + 1], r % 3, r % 211, 200 + (r % 4) * 100, r % 5000)
        key = $1 " " substr($2, 1, 8)
        n_req[key]++
        bytes[key] += $4
        if ($3 >= 400) errors[key]++
        if (match($2, /item\/[0-9]+$/)) ids[substr($2, RSTART + 5)]++
    }
    nk = asorti(n_req, sorted)
    for (j = 1; j <= nk; j++) {
        k = sorted[j]
        printf "%-20s %8d %10.1f %6.2f%%\n", k, n_req[k], bytes[k] / n_req[k], 100 * errors[k] / n_req[k]
    }
    print length(ids), "ids"
}
