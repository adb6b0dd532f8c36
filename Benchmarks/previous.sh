#!/bin/sh
# Builds the stampede binary of an earlier commit (default: the commit before HEAD), once per
# commit, and prints its path: `make bench-previous` runs it beside the current build.
#   Benchmarks/previous.sh [COMMIT]
# The commit's tree is exported (git archive) into .build/previous/SHA/src and built there as
# `make build` builds (release, the Swift runtime linked in); the binary is kept as
# .build/previous/SHA/stampede, so a second run of the same commit builds nothing.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse --verify "${1:-HEAD~1}^{commit}")
place="$repo/.build/previous/$commit"
if [ ! -x "$place/stampede" ]; then
    rm -rf "$place/src"
    mkdir -p "$place/src"
    git -C "$repo" archive "$commit" | tar -x -C "$place/src"
    echo "building $(git -C "$repo" log --oneline -1 "$commit" | cut -c1-72) in $place/src" >&2
    make -C "$place/src" build >&2
    cp "$place/src/.build/release/stampede" "$place/stampede.new"
    mv "$place/stampede.new" "$place/stampede"
    rm -rf "$place/src"
fi
echo "$place/stampede"
