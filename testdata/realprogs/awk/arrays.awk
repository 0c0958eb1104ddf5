# Training: associative arrays with string and numeric keys (insert, look up, delete, iterate).
# Usage: gawk -v n=N -f arrays.awk
BEGIN {
    seed = 12345
    for (i = 0; i < n; i++) {
        seed = (seed * 1103515245 + 12345) % 2147483648; r = int(seed / 65536)
        k = "k" (r % 5003)
        count[k]++
        total[r % 97] += r % 1000
        if (r % 7 == 0 && (k in count)) delete count[k]
    }
    keys = 0; sum = 0
    for (k in count) { keys++; sum += count[k] }
    for (j in total) sum += total[j] % 13
    printf "keys %d sum %d\n", keys, sum
}
