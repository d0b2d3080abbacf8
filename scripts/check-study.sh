#!/usr/bin/env bash
# check-study.sh — a committed study reproduces its published fits (and report data) from its
# committed store, on any machine, CPU only (issue 17, "Checks"; docs/fit.md "Committed studies").
#
#   scripts/check-study.sh STUDY_DIR [FP4LAB]             check (exit 0 match, 1 mismatch, 77 skipped)
#   scripts/check-study.sh --update STUDY_DIR [FP4LAB]    write STUDY_DIR/fits.txt from the committed store
#
# A committed study directory holds:
#   study.toml          the study's spec: its grid chooses the runs, its [fit] table the options
#   *.db.xz             its store(s), xz-compressed (the one study.toml's [sweep] store names, and any
#                       other store of the directory's grids)
#   fits.txt            `fp4lab fit study.toml` as a table (written by --update, or by
#                       `fp4lab fit STUDY_DIR/study.toml --out STUDY_DIR/fits.txt`)
#   <name>-report/      optional: `fp4lab report study.toml` (its default directory); its *.csv are checked
#
# The check copies the TOMLs and decompresses the stores into a temporary directory, fits again
# (`fp4lab fit --refit`: nothing is taken from fits stored in the store), and compares the table
# with fits.txt to its printed digits. Two things differ by design and are left out of the
# comparison: the fit ids in the headings ("chinchilla fit 3:") and the line under each heading that
# says where the fit is stored. Then, when a committed report directory exists, it writes the report
# again and compares every committed CSV byte for byte (aside from the columns that say which fit
# row and when: fit_id, created, created_utc, passed_over). Nothing is timed: the outcome does not
# depend on the machine's speed.
#
# Skipped (exit 77, with the reason): no study.toml, no committed store, no fits.txt yet. A build
# without CUDA reads a study whose runs name device "cuda" like any other.
set -euo pipefail

update=0
if [ "${1:-}" = "--update" ]; then
  update=1
  shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 [--update] STUDY_DIR [FP4LAB]" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
study=$(cd "$1" && pwd)
fp4lab=${2:-$root/build/cli/fp4lab}
name=${study#"$root"/}

skip() {
  echo "check-study: $name: skipped: $*"
  exit 77
}
[ -x "$fp4lab" ] || { echo "check-study: $fp4lab: no fp4lab binary (build first, or pass its path)" >&2; exit 2; }
[ -f "$study/study.toml" ] || skip "no study.toml"
shopt -s nullglob
stores=("$study"/*.db.xz)
reports=("$study"/*-report)
shopt -u nullglob
[ ${#stores[@]} -gt 0 ] || skip "no committed store (*.db.xz) yet"
[ $update -eq 1 ] || [ -f "$study/fits.txt" ] || skip "no committed fit output (fits.txt) yet"

work=$(mktemp -d "${TMPDIR:-/tmp}/check-study.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$study"/*.toml "$work/"
for s in "${stores[@]}"; do
  xz -dc "$s" > "$work/$(basename "$s" .xz)"
done

# The fit, from the committed store's runs alone.
if ! "$fp4lab" fit "$work/study.toml" --refit --plain --format table --out "$work/fits.out" 2> "$work/fit.err"; then
  cat "$work/fit.err" >&2
  echo "check-study: $name: fp4lab fit failed" >&2
  exit 1
fi

# The table without what differs by design: fit ids in headings, where each fit is stored, and the
# temporary directory where a message names the study's files (written relative to it).
normalize_fits() {
  sed -E -e 's/^(chinchilla|precision) fit [0-9]+: /\1 fit: /' \
         -e '/^  (stored as fit [0-9]+ in |stored fit [0-9]+ \(same data and options|from .* \(not stored\)$)/d' "$1" |
    WORK="$work/" awk '{ w = ENVIRON["WORK"]; while ((i = index($0, w)) > 0) $0 = substr($0, 1, i - 1) substr($0, i + length(w)); print }'
}

if [ $update -eq 1 ]; then
  normalize_fits "$work/fits.out" > "$work/fits.txt"
  mv "$work/fits.txt" "$study/fits.txt"
  echo "check-study: $name: wrote $study/fits.txt"
  exit 0
fi

status=0
if ! diff -u --label "$name/fits.txt (committed)" --label "fp4lab fit --refit (now)" \
       <(normalize_fits "$study/fits.txt") <(normalize_fits "$work/fits.out") >&2; then
  echo "check-study: $name: the fits differ from fits.txt (above)" >&2
  status=1
else
  echo "check-study: $name: fits.txt reproduced ($(grep -cE '^(chinchilla|precision) fit' "$work/fits.out") fits)"
fi

# The report's data, when a report is committed.
normalize_csv() {
  # The columns that record the store's history rather than the data: the fit id (fit_id), when
  # the fit was made (created, created_utc) and how many other fits of its law and scope the store
  # holds (passed_over); a refit changes all of them. Found by the header's names.
  awk 'BEGIN { FS = OFS = "," }
       NR == 1 { for (i = 1; i <= NF; i++) if ($i == "fit_id" || $i == "created" || $i == "created_utc" || $i == "passed_over") mask[i] = 1 }
       NR > 1 { for (i in mask) $i = "(" i ")" }
       { print }' "$1"
}
for committed in "${reports[@]}"; do
  [ -d "$committed" ] || continue
  out="$work/$(basename "$committed")"
  if ! "$fp4lab" report "$work/study.toml" --out "$out" > /dev/null 2> "$work/report.err"; then
    cat "$work/report.err" >&2
    echo "check-study: $name: fp4lab report failed" >&2
    exit 1
  fi
  checked=0
  for csv in "$committed"/*.csv; do
    [ -f "$csv" ] || continue
    base=$(basename "$csv")
    checked=$((checked + 1))
    if [ ! -f "$out/$base" ]; then
      echo "check-study: $name: $(basename "$committed")/$base is committed, but fp4lab report no longer writes it" >&2
      status=1
    elif ! cmp -s <(normalize_csv "$csv") <(normalize_csv "$out/$base"); then
      diff -u --label "$base (committed)" --label "$base (now)" <(normalize_csv "$csv") <(normalize_csv "$out/$base") \
        | head -n 40 >&2 || true
      echo "check-study: $name: $(basename "$committed")/$base differs (first lines above)" >&2
      status=1
    fi
  done
  echo "check-study: $name: $(basename "$committed"): $checked CSV file(s) compared"
done
exit $status
