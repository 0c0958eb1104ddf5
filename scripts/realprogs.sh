#!/usr/bin/env bash
# Builds six real programs from source for the accuracy and optimization benchmarks:
#   lua           Lua 5.4.7 interpreter (testdata/realprogs/lua_main.c + the Lua library)
#   sqlite-bench  SQLite 3 amalgamation + testdata/realprogs/sqlite_bench.c (in-memory SQL workloads)
#   zstd-bench    zstd 1.5.7 library + testdata/realprogs/zstd_bench.c (compress/decompress a corpus)
#   cpython       CPython 3.11.2's `python` (static libpython, no PGO/LTO), from Debian's upstream tarball
#   gawk          GNU Awk 5.2.1 (no readline, NLS, MPFR, extensions or persistent memory), same source
#   mawk          mawk 1.3.4-20200120 (Debian 12's awk: a bytecode interpreter), same source
# The first three's C sources come from crates.io's vendored-source crates (lua-src, libsqlite3-sys, zstd-sys)
# through `cargo fetch`; CPython's, gawk's and mawk's tarballs from deb.debian.org's pool (checked against their sha256),
# unpacked once into testdata/realprogs/build/ and built out of tree. Run it with that tree's Lib:
# PYTHONHOME=<tree> PYTHONPATH=<tree>/Lib python -S SCRIPT (bench/optimize_realprogs.py does).
#
# Usage: scripts/realprogs.sh [--out DIR] [--cflags "FLAGS"] [--ldflags "FLAGS"] [PROGRAM...]
#   --out DIR       where the binaries go (default testdata/realprogs/build/default)
#   --cflags FLAGS  compiler flags (default "-O2 -g"); e.g. "-O2 -g -falign-functions=64"
#   --ldflags FLAGS linker flags (default none); e.g. "-no-pie -Wl,--emit-relocs" for llvm-bolt
#   --cc CC         compiler (default gcc; clang-19 for -fprofile-sample-use rebuilds)
#   PROGRAM         any of lua, sqlite-bench, zstd-bench, cpython, gawk, mawk (default the first three)
# Prints the directory of the binaries on its last line. Rebuilds only what is older than its sources
# or was built with other flags.
set -euo pipefail
# The bench's PYTHONHOME/PYTHONPATH (for running the built CPython) must not steer this script's Pythons.
unset PYTHONHOME PYTHONPATH
root=$(cd "$(dirname "$0")/.." && pwd)
here=$root/testdata/realprogs
out=$here/build/default
cflags="-O2 -g"
ldflags=""
cc=gcc
progs=()
while [ $# -gt 0 ]; do
    case $1 in
        --out) out=$2; shift 2 ;;
        --cflags) cflags=$2; shift 2 ;;
        --ldflags) ldflags=$2; shift 2 ;;
        --cc) cc=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        lua|sqlite-bench|zstd-bench|cpython|gawk|mawk) progs+=("$1"); shift ;;
        *) echo "realprogs.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ ${#progs[@]} -gt 0 ] || progs=(lua sqlite-bench zstd-bench)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Where cargo unpacked each crate: ask cargo, not a guessed $CARGO_HOME layout.
manifest=$here/sources/Cargo.toml
case " ${progs[*]} " in *" lua "*|*" sqlite-bench "*|*" zstd-bench "*) cargo fetch --quiet --manifest-path "$manifest" ;; esac
crate_dir() {
    cargo metadata --quiet --format-version 1 --manifest-path "$manifest" |
        python3 -c "import json,sys,os; m=json.load(sys.stdin); print(next(os.path.dirname(p['manifest_path']) for p in m['packages'] if p['name']=='$1'))"
}

jobs=$(nproc)
stamp="$cc $cflags | $ldflags"
# up_to_date NAME: NAME exists and was built with these flags (says so).
up_to_date() {
    [ -x "$out/$1" ] && [ "$(cat "$out/$1.flags" 2>/dev/null)" = "$stamp" ] && echo "realprogs: $1 up to date" >&2
}
# build NAME OBJDIR SOURCES... -- EXTRA_CFLAGS...: compiles each source to an object (in parallel), links NAME.
build() {
    local name=$1 objdir=$out/obj-$1 srcs=() extra=()
    shift
    while [ "$1" != "--" ]; do srcs+=("$1"); shift; done
    shift
    extra=("$@")
    up_to_date "$name" && return
    rm -rf "$objdir" && mkdir -p "$objdir"
    echo "realprogs: building $name (${#srcs[@]} files, $cc $cflags $ldflags)" >&2
    printf '%s\n' "${srcs[@]}" | xargs -P "$jobs" -I{} sh -c \
        'd=$1; s=$2; shift 2; o="$d/$(echo "$s" | md5sum | cut -c1-12)-$(basename "$s" .c).o"; '"$cc $cflags"' "$@" -c "$s" -o "$o"' \
        sh "$objdir" {} "${extra[@]}"
    # shellcheck disable=SC2086
    $cc $cflags $ldflags -o "$out/$name" "$objdir"/*.o -lm -lpthread -ldl
    echo "$stamp" > "$out/$name.flags"
}

# fetch_source URL SHA256 DIR: Debian's copy of an upstream tarball, verified, unpacked once into DIR (kept
# pristine for out-of-tree builds).
fetch_source() {
    local url=$1 sha=$2 src=$3 tarball=$here/build/$(basename "$1")
    [ -f "$src/configure" ] && return
    mkdir -p "$here/build"
    if ! echo "$sha  $tarball" | sha256sum -c --quiet >/dev/null 2>&1; then
        echo "realprogs: fetching $url" >&2
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$tarball.part"
        echo "$sha  $tarball.part" | sha256sum -c --quiet
        mv "$tarball.part" "$tarball"
    fi
    rm -rf "$src.part" && mkdir -p "$src.part"
    tar -xf "$tarball" -C "$src.part" --strip-components=1
    mv "$src.part" "$src"
}

# configure_build NAME SRC CONFIGURE_ARGS... -- MAKE_TARGETS...: configure + make out of tree, then copy the last
# target's file to $out/NAME. Each target is one make invocation and is split into words on purpose, so a target
# may carry make's own options ("-C support libsupport.a").
configure_build() {
    local name=$1 src=$2 objdir=$out/obj-$1 conf=() targets=()
    shift 2
    while [ "$1" != "--" ]; do conf+=("$1"); shift; done
    shift
    targets=("$@")
    rm -rf "$objdir" && mkdir -p "$objdir"
    echo "realprogs: building $name ($cc $cflags $ldflags)" >&2
    (cd "$objdir" &&
        "$src/configure" CC="$cc" CFLAGS="$cflags" LDFLAGS="$ldflags" "${conf[@]}" >configure.log 2>&1 &&
        for t in "${targets[@]}"; do make -j"$jobs" $t >>make.log 2>&1 || exit 1; done) ||
        { echo "realprogs: $name build failed, see $objdir/configure.log and make.log" >&2; exit 1; }
    cp "$objdir/$(basename "${targets[-1]}")" "$out/$name"
    echo "$stamp" > "$out/$name.flags"
}

# CPython 3.11.2: configure + `make python` per flag set. OPT keeps -DNDEBUG and -fwrapv but drops configure's
# -O3, so --cflags decides the optimization level.
CPYTHON_URL=http://deb.debian.org/debian/pool/main/p/python3.11/python3.11_3.11.2.orig.tar.gz
CPYTHON_SHA256=2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849
build_cpython() {
    local src=$here/build/Python-3.11.2
    up_to_date cpython && return
    fetch_source "$CPYTHON_URL" "$CPYTHON_SHA256" "$src"
    OPT="-DNDEBUG -fwrapv -Wall" configure_build cpython "$src" -- python
}

# gawk 5.2.1: its configure honours CFLAGS as given. Optional libraries off, so the binary needs only libc
# and libm, and the persistent-memory allocator off, so it is plain malloc.
GAWK_URL=http://deb.debian.org/debian/pool/main/g/gawk/gawk_5.2.1.orig.tar.xz
GAWK_SHA256=2337a0283b180ec1b9c727973a34781c6478b3ae9bcbdcca0a4dc49861d75a65
build_gawk() {
    local src=$here/build/gawk-5.2.1
    up_to_date gawk && return
    fetch_source "$GAWK_URL" "$GAWK_SHA256" "$src"
    configure_build gawk "$src" --disable-nls --disable-extensions --disable-mpfr --disable-pma --without-readline \
        -- "-C support libsupport.a" gawk
}

# mawk 1.3.4-20200120: configure honours CFLAGS/LDFLAGS; out of tree through its VPATH Makefile.
MAWK_URL=http://deb.debian.org/debian/pool/main/m/mawk/mawk_1.3.4.20200120.orig.tar.gz
MAWK_SHA256=7fd4cd1e1fae9290fe089171181bbc6291dfd9bca939ca804f0ddb851c8b8237
build_mawk() {
    local src=$here/build/mawk-1.3.4-20200120
    up_to_date mawk && return
    fetch_source "$MAWK_URL" "$MAWK_SHA256" "$src"
    configure_build mawk "$src" -- mawk
}

for prog in "${progs[@]}"; do
    case $prog in
        lua)
            src=$(crate_dir lua-src)/lua-5.4.7
            build lua "$here/lua_main.c" $(ls "$src"/*.c) -- -I"$src" -DLUA_USE_LINUX
            ;;
        sqlite-bench)
            src=$(crate_dir libsqlite3-sys)/sqlite3
            build sqlite-bench "$here/sqlite_bench.c" "$src/sqlite3.c" -- -I"$src" \
                -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION
            ;;
        zstd-bench)
            src=$(crate_dir zstd-sys)/zstd/lib
            build zstd-bench "$here/zstd_bench.c" $(ls "$src"/common/*.c "$src"/compress/*.c "$src"/decompress/*.c) -- \
                -I"$src" -DZSTD_DISABLE_ASM
            ;;
        cpython)
            build_cpython
            ;;
        gawk)
            build_gawk
            ;;
        mawk)
            build_mawk
            ;;
    esac
done
echo "$out"
