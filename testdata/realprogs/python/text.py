"""Training workload: text processing (string building, splitting, dicts, sorting, formatting).
Usage: python text.py N   (N sentences); prints a checksum. Output is independent of hash order."""
import sys

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "qu", "an", "el", "or", "ish", "th", "pre"]


def words(seed, count):
    state = seed
    out = []
    for _ in range(count):
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        k = 1 + (state >> 8) % 3
        w = ""
        for j in range(k):
            w += SYLLABLES[(state >> (8 + 4 * j)) % len(SYLLABLES)]
        out.append(w)
    return out


def sentences(n):
    vocab = words(7, 3000)
    state = 99
    for i in range(n):
        state = (state * 69069 + 1) & 0xFFFFFFFF
        length = 4 + state % 12
        ws = []
        for _ in range(length):
            state = (state * 69069 + 1) & 0xFFFFFFFF
            ws.append(vocab[(state >> 8) % len(vocab)])
        ws[0] = ws[0].capitalize()
        yield " ".join(ws) + (". " if i % 3 else "! ")


def main():
    n = int(sys.argv[1])
    text = "".join(sentences(n))
    counts = {}
    bigrams = {}
    prev = None
    for raw in text.split():
        w = raw.strip(".!").lower()
        counts[w] = counts.get(w, 0) + 1
        if prev is not None:
            key = prev + " " + w
            bigrams[key] = bigrams.get(key, 0) + 1
        prev = w
    letters = {}
    for ch in text:
        if ch.isalpha():
            letters[ch] = letters.get(ch, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    topb = sorted(bigrams.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    lines = [f"{w:>12} {c:6d}" for w, c in top]
    upper = text.upper().replace("KA", "ak").count("ak")
    rev = sum(1 for w in counts if w == w[::-1])
    check = 0
    for w in sorted(counts):
        check = (check * 131 + len(w) * counts[w]) % 1000000007
    for line in lines:
        check = (check * 131 + sum(map(ord, line))) % 1000000007
    print(f"text {n}: {len(text)} chars, {len(counts)} words, {len(bigrams)} bigrams, letters {sorted(letters.items())[:3]}, "
          f"top {top[0]}, bigram {topb[0]}, {upper} ak, {rev} palindromes, checksum {check}")


if __name__ == "__main__":
    main()
