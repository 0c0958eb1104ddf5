# Test input for awks without gawk's extensions (mawk): report.awk with its own sort (a recursive quicksort
# over the keys, since POSIX awk has no asorti), never trained on. Parses generated log lines with a field
# separator, aggregates per key, sorts and formats a report.
# Usage: mawk -v n=N -f report_posix.awk
function qsort(a, lo, hi,    i, last, t) {
    if (lo >= hi) return
    t = a[lo]; a[lo] = a[int((lo + hi) / 2)]; a[int((lo + hi) / 2)] = t
    last = lo
    for (i = lo + 1; i <= hi; i++)
        if (a[i] < a[lo]) { last++; t = a[last]; a[last] = a[i]; a[i] = t }
    t = a[lo]; a[lo] = a[last]; a[last] = t
    qsort(a, lo, last - 1)
    qsort(a, last + 1, hi)
}
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
    nk = 0
    for (k in n_req) sorted[++nk] = k
    qsort(sorted, 1, nk)
    for (j = 1; j <= nk; j++) {
        k = sorted[j]
        printf "%-20s %8d %10.1f %6.2f%%\n", k, n_req[k], bytes[k] / n_req[k], 100 * errors[k] / n_req[k]
    }
    print length(ids), "ids"
}
