#!/usr/bin/env bash
# Each generated runtime's own test against the shared vectors (sdk/vectors),
# with the language's native toolchain. Skips a language whose toolchain is
# missing, saying so.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd c && gcc -O2 -Wall -Wextra -Werror -o "$tmp/c" test_vectors.c && "$tmp/c" \
      && g++ -x c++ -O2 -Wall -Werror -o "$tmp/cpp" test_vectors.c && "$tmp/cpp" | sed 's/^c:/c++:/')
(cd python && python3 test_vectors.py -q 2>&1 | tail -1 | sed 's/^/python: /')
if command -v go >/dev/null; then (cd go && go vet ./... && go test ./... | sed 's/^/go: /'); else echo "go: toolchain missing, skipped"; fi
if command -v javac >/dev/null; then
  (cd java && javac -Xlint:all -Werror -d "$tmp/j" LoupeEvents.java VectorsTest.java && java -cp "$tmp/j" VectorsTest)
else echo "java: toolchain missing, skipped"; fi
