#!/usr/bin/env bash
# prepare-corpus.sh — builds the byte-level token shards of the first study (SCIENCE.md) from the
# prepared text corpus: every *.txt.xz of CORPUS_DIR (default ../shared/data/corpus, the copy this
# project's machines carry; prose-v1 and, where present, tech-v1) into OUT (default data/corpus),
# with the corpus MANIFEST's validation rule (document n of each file is validation when
# n % 100 == 0). Idempotent: `fp4lab data build` refuses to overwrite a different build and
# rebuilds nothing when OUT already holds this one (docs/data.md).
# Usage: scripts/prepare-corpus.sh [CORPUS_DIR] [OUT]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
corpus=${1:-$root/../shared/data/corpus}
out=${2:-$root/data/corpus}
build=${FP4LAB_BUILD_DIR:-$root/build}
shopt -s nullglob
files=("$corpus"/*.txt.xz)
if [ ${#files[@]} -eq 0 ]; then
  echo "prepare-corpus: no *.txt.xz files in $corpus: pass the corpus directory as the first argument" >&2
  exit 2
fi
[ -x "$build/cli/fp4lab" ] || "$root/scripts/build.sh"
"$build/cli/fp4lab" data build --tokenizer bytes "${files[@]}" --out "$out"
"$build/cli/fp4lab" data info "$out"
