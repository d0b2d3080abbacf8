#!/usr/bin/env bash
# real_slurm.sh FP4LAB — `fp4lab sweep slurm` → `sbatch` → `fp4lab sweep ingest` on a real
# single-node Slurm (Debian 12's slurm-wlm and munge, installed by scripts/setup-test-deps.sh).
#
# The test starts its own munged, slurmctld and slurmd as root, on ports of its own (16817/16818,
# or the next free pair), with every file in a scratch directory; runs a two-run grid whose run
# root has spaces, quotes, '$', '#' and '%' in it (so sbatch itself must read the quoted #SBATCH
# lines as meant); waits for the array job, ingests, and checks that the store is complete and
# that Slurm wrote each task's output where --output says. It stops the daemons it started,
# however it ends.
# Exit 77 (ctest: skipped), with the reason on stdout, when the machine cannot run the daemons.
set -uo pipefail
fp4lab=${1:?usage: real_slurm.sh FP4LAB}
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

for tool in munged slurmctld slurmd sbatch sinfo squeue sqlite3; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed (scripts/setup-test-deps.sh installs slurm-wlm and munge as root)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs, and this test runs as uid $(id -u)"

scratch=$(mktemp -d /tmp/fp4lab-slurm-XXXXXX)
chmod 755 "$scratch"  # munged's socket must be reachable
cleanup() {
  for f in slurmd slurmctld munged; do
    [ -f "$scratch/$f.pid" ] && kill "$(cat "$scratch/$f.pid")" 2>/dev/null
  done
  sleep 1
  for f in slurmd slurmctld munged; do
    [ -f "$scratch/$f.pid" ] && kill -9 "$(cat "$scratch/$f.pid")" 2>/dev/null
  done
  rm -rf "$scratch"
}
trap cleanup EXIT
show_logs() { tail -n 20 "$scratch"/log/*.log 2>/dev/null; }

mkdir -p "$scratch/state" "$scratch/spool" "$scratch/log"
head -c 1024 /dev/urandom >"$scratch/munge.key"
chmod 400 "$scratch/munge.key"
munged --force --key-file="$scratch/munge.key" --socket="$scratch/munge.sock" --pid-file="$scratch/munged.pid" \
  --log-file="$scratch/log/munged.log" --seed-file="$scratch/munge.seed" ||
  { show_logs; skip "munged does not start here"; }

host=$(hostname -s)
cpus=$(nproc)
# Two free ports (another Slurm, or a test still shutting down, may hold the first pair).
port=
for p in 16817 16827 16837 16847 16857; do
  if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/$((p + 1))) 2>/dev/null; then
    port=$p
    break
  fi
done
[ -n "$port" ] || skip "no free pair of ports among 16817-16858"
cat >"$scratch/slurm.conf" <<CONF
ClusterName=fp4labtest
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$scratch/munge.sock
StateSaveLocation=$scratch/state
SlurmdSpoolDir=$scratch/spool
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd.pid
SlurmctldLogFile=$scratch/log/slurmctld.log
SlurmdLogFile=$scratch/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
NodeName=$host CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$scratch/slurm.conf
slurmctld -f "$SLURM_CONF" || { show_logs; skip "slurmctld does not start here"; }
slurmd -f "$SLURM_CONF" || { show_logs; skip "slurmd does not start here"; }
for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 1
done
[ "$state" = idle ] || { show_logs; skip "the Slurm node did not become idle within 60 s (state '$state')"; }
echo "slurm: $(sinfo -V), node $host idle with $cpus CPUs"

# The grid: two tiny CPU runs; the run root exercises sbatch's quoting.
work=$scratch/work
mkdir -p "$work"
run_root="runs a 'q' \"dq\" \$(touch INJECTED) #c %A"
cat >"$work/grid.toml" <<TOML
[sweep]
name = "real-slurm"
run_root = "runs a 'q' \\"dq\\" \$(touch INJECTED) #c %A"
[data]
source = "synthetic:markov?order=1&vocab=64&branch=4&seed=1"
[model]
preset = "d1"
seq_len = 32
[train]
batch_tokens = 128
micro_batch = 2
lr = 3e-3
[eval]
every = 0
tokens = 128
[executor]
threads_per_job = 1
[grid]
recipe = ["bf16", "ufp4"]
tokens = [640]
TOML
cd "$work" || fail "cannot enter $work"
"$fp4lab" sweep slurm grid.toml --out job.sbatch --fp4lab "$fp4lab" || fail "sweep slurm failed"
timeout 300 sbatch --wait job.sbatch || { show_logs; cat "$work"/*/slurm-*.out 2>/dev/null; fail "the array job failed"; }
"$fp4lab" sweep ingest --spec grid.toml || fail "sweep ingest failed"

succeeded=$(sqlite3 "$work/real-slurm.db" "SELECT count(*) FROM runs WHERE state = 'succeeded'")
[ "$succeeded" = 2 ] || { "$fp4lab" sweep status grid.toml; fail "$succeeded of 2 runs succeeded"; }
outs=$(find "$work/$run_root" -maxdepth 1 -name 'slurm-*_*.out' | wc -l)
[ "$outs" = 2 ] || { ls -la "$work" "$work/$run_root"; fail "sbatch wrote $outs task outputs into the run root, not 2"; }
[ -z "$(find "$work" -name 'INJECTED*')" ] || fail "something in the run root's name was executed"
rows=$(sqlite3 "$work/real-slurm.db" "SELECT count(*) FROM metrics WHERE key = 'train/loss'")
[ "$rows" = 10 ] || fail "$rows train/loss rows in the store, want 2 runs x 5 steps"
"$fp4lab" sweep plan grid.toml | grep -q "would start or resume 0" || fail "the plan still has runs to do"
echo "passed: 2 runs through sbatch, both succeeded and ingested ($rows train/loss rows); outputs where --output says"
