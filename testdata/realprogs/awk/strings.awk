# Training: string functions (substr, index, sprintf, toupper, gsub, split, length).
# Usage: gawk -v n=N -f strings.awk
BEGIN {
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    nw = split(words, w, " ")
    acc = 0
    for (i = 0; i < n; i++) {
        s = sprintf("%s-%s-%d", w[i % nw + 1], toupper(w[(i * 7) % nw + 1]), i)
        acc += length(s) + index(s, "TA")
        t = substr(s, 2, 6)
        c = gsub(/a/, "A", s)
        acc += c + split(s, parts, "-")
        if (t ~ /^[a-z]+$/) acc++
    }
    print "acc", acc
}
