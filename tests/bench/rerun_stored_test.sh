#!/usr/bin/env bash
# bench/rerun_stored.py against a real store: a tiny CPU sweep (one bf16 and one e2m1 run on the
# synthetic Markov source) is run, then one of its runs is rerun from the store and must give the
# same bits (exit 0), a copy of the store with one stored loss moved by one ulp must be reported
# DIFFERENT (exit 1), and an unknown run is a user error (exit 2).
# Usage: rerun_stored_test.sh FP4LAB REPO_ROOT
set -uo pipefail
fp4lab=$1 root=$2
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
t=$(mktemp -d) && trap 'rm -rf "$t"' EXIT
cat > "$t/tiny.toml" <<'TOML'
[sweep]
name = "tiny"
store = "tiny.db"
run_root = "runs"
[data]
source = "synthetic:markov?order=1&vocab=64&branch=4&seed=1"
[model]
seq_len = 16
[train]
batch_tokens = 256
micro_batch = 16
lr = 1e-2
[eval]
every = 4
tokens = 1024
[checkpoint]
every = 0
[grid]
model = [{n_layers = 1, d_model = 16, n_heads = 1, head_dim = 16}]
recipe = ["bf16", "e2m1"]
seed = [3]
tokens = [2048]
[executor]
cpu_jobs = 1
TOML
"$fp4lab" sweep run --plain "$t/tiny.toml" > "$t/sweep.log" 2>&1 || { cat "$t/sweep.log"; echo "FAIL: the sweep failed"; exit 1; }
run=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT name FROM runs WHERE recipe = 'e2m1'\").fetchone()[0])" "$t/tiny.db")
fail=0
out=$(python3 -B "$root/bench/rerun_stored.py" "$t/tiny.db" "$run" "$fp4lab" --device cpu); rc=$?
echo "$out"
[ $rc -eq 0 ] && [[ $out == "SAME BITS $run ("* ]] || { echo "FAIL: the rerun of $run was not the same bits (exit $rc)"; fail=1; }
[[ $out != *" 0 train rows"* ]] || { echo "FAIL: nothing was compared"; fail=1; }

cp "$t/tiny.db" "$t/moved.db"
python3 - "$t/moved.db" <<'PY'
import math, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
run, step, value = db.execute("SELECT m.run, m.step, m.value FROM metrics m JOIN runs r ON r.id = m.run "
                              "WHERE r.recipe = 'e2m1' AND m.key = 'train/loss' ORDER BY m.step DESC").fetchone()
db.execute("UPDATE metrics SET value = ? WHERE run = ? AND key = 'train/loss' AND step = ?",
           (math.nextafter(value, math.inf), run, step))
db.commit()
PY
out=$(python3 -B "$root/bench/rerun_stored.py" "$t/moved.db" "$run" "$fp4lab" --device cpu); rc=$?
echo "$out"
[ $rc -eq 1 ] && [[ $out == "DIFFERENT $run: 1 values differ"* ]] || { echo "FAIL: a loss moved by one ulp was not found (exit $rc)"; fail=1; }

python3 -B "$root/bench/rerun_stored.py" "$t/tiny.db" no-such-run "$fp4lab" --device cpu 2> "$t/err"; rc=$?
[ $rc -eq 2 ] && grep -q "no run named or id-prefixed 'no-such-run'" "$t/err" || { cat "$t/err"; echo "FAIL: an unknown run gave exit $rc"; fail=1; }
exit $fail
