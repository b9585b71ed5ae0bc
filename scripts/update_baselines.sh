#!/usr/bin/env bash
# update_baselines.sh [--replace] [--force] [--runs N] [--build DIR] [--scenarios LIST]: adds this host's runs
# to this GPU's baselines (or, with --replace, records them anew).
#
# On the GPU model concerned: runs every scenario N times (default 5) with the flags in
# baselines/acceptance.args and promotes each scenario's runs into
# baselines/<gpu slug>/<scenario>.json (profile_compare --promote: samples pooled, each
# run with its host and provenance, policy re-derived from the spread between runs and
# between hosts). By default the runs are ADDED to the existing baseline: a baseline should
# pool runs from at least 3 freshly started machines, so run this on several (docs/gate.md).
# After an intentional change, --replace starts the baseline over from this host's runs
# (then add more hosts). Prints what changed against the old baseline and moves the new
# files into place atomically. Review with `git diff baselines/` and commit.
#
#   --replace   start over: do not keep the existing baseline's runs
#   --force     record even when the git tree is dirty (uncommitted or untracked files);
#               the provenance then names the commit with a "-dirty" suffix
#   --runs N    runs per scenario, 1..50 (default 5)
#   --build DIR the build folder with profiler_demo and profile_compare (default build)
#   --scenarios LIST  comma-separated scenarios to record (default: all five); the others'
#               baselines are left as they are (e.g. --replace --scenarios sync after a
#               change to the sync scenario only)
# Environment: PD_BASELINE_COMMIT names the commit where there is no git checkout.
#
# Nothing is written unless every run succeeded. Exit: 0 done; 1 a run failed or the tree
# is dirty; 2 bad argument or missing programs; 3 no GPU visible (nothing touched).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
die() { # die STATUS MESSAGE
  echo "update_baselines: $2" >&2
  exit "$1"
}

force=0 runs=5 build=build replace=0 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scenarios)
      [ $# -ge 2 ] || die 2 "--scenarios needs a comma-separated list"
      only=$2
      shift
      ;;
    --force) force=1 ;;
    --replace) replace=1 ;;
    --runs)
      [ $# -ge 2 ] || die 2 "--runs needs a number"
      runs=$2
      shift
      ;;
    --build)
      [ $# -ge 2 ] || die 2 "--build needs a directory"
      build=$2
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) die 2 "unknown argument '$1' (allowed: --replace, --force, --runs N, --build DIR, --help)" ;;
  esac
  shift
done
case "$runs" in '' | *[!0-9]*) die 2 "--runs must be a whole number from 1 to 50, got '$runs'" ;; esac
if [ "$runs" -lt 1 ] || [ "$runs" -gt 50 ]; then die 2 "--runs must be from 1 to 50, got '$runs'"; fi

demo=$build/src/cli/profiler_demo/profiler_demo
compare=$build/src/cli/profile_compare/profile_compare
for exe in "$demo" "$compare"; do
  [ -x "$exe" ] || die 2 "$exe is not built (build first, or name the build with --build DIR)"
done
# shellcheck source=scripts/lib_args.sh
. scripts/lib_args.sh
run_args=() scenarios=()
pd_args_read baselines/acceptance.args run_args || exit 2
pd_scenario_names "$demo" scenarios || exit 2

# A GPU first: without one there is nothing to measure and nothing may change.
ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
[ "$ngpu" -gt 0 ] || die 3 "no GPU visible (nvidia-smi -L lists none); baselines/ untouched"

# A clean tree, so the provenance's commit really describes the code that was measured.
if commit=$(git rev-parse --verify -q HEAD 2>/dev/null); then
  dirty=$(git status --porcelain --untracked-files=all)
  if [ -n "$dirty" ]; then
    if [ "$force" -eq 0 ]; then
      echo "update_baselines: the git tree is dirty; commit or stash first (or --force):" >&2
      echo "$dirty" | head -n 20 >&2
      exit 1
    fi
    commit="$commit-dirty"
  fi
else
  [ "$force" -eq 1 ] || die 1 "not a git checkout with a commit: cannot check the tree is clean (use --force)"
  commit=unknown
fi
commit=${PD_BASELINE_COMMIT:-$commit}

if [ -n "$only" ]; then
  IFS=, read -r -a picked <<< "$only"
  for p in "${picked[@]}"; do
    case " ${scenarios[*]} " in *" $p "*) ;; *) die 2 "--scenarios: unknown scenario '$p' (${scenarios[*]})" ;; esac
  done
  scenarios=("${picked[@]}")
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd_baselines.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "update_baselines: $runs run(s) of each scenario on $(nvidia-smi -L | head -n 1)"
echo "update_baselines: flags: ${run_args[*]}"
for s in "${scenarios[@]}"; do mkdir -p "$tmp/runs/$s"; done
# Round after round over all scenarios rather than one scenario's runs back to back, so
# each scenario's runs spread over the whole session and its baseline's spread includes
# the drift of a shared machine (docs/gate.md).
for ((i = 1; i <= runs; i++)); do
  for s in "${scenarios[@]}"; do
    log=$tmp/runs/$s/$i.log
    rc=0
    "$demo" --scenario "$s" "${run_args[@]}" --trace_dir "$tmp/traces" \
      --output_json "$tmp/runs/$s/$i.json" >"$log" 2>&1 || rc=$?
    rm -rf "$tmp/traces"
    if [ "$rc" -eq 3 ]; then
      die 3 "profiler_demo found no CUDA device (exit 3); baselines/ untouched"
    elif [ "$rc" -ne 0 ]; then
      echo "update_baselines: profiler_demo --scenario $s (run $i) exited $rc; last lines:" >&2
      tail -n 20 "$log" >&2
      die 1 "nothing recorded; baselines/ untouched"
    fi
    printf '  run %d/%d  %-13s avg step %s s\n' "$i" "$runs" "$s" \
      "$(grep -o '"avg_step_time_s":[[:space:]]*[-0-9.eE+]*' "$tmp/runs/$s/$i.json" | head -n 1 | sed 's/.*:[[:space:]]*//')"
  done
done

slug=$("$compare" --slug "$tmp/runs/${scenarios[0]}/1.json") || die 1 "cannot read the device of the runs"
dest=baselines/$slug
compare_abs=$(cd "$(dirname "$compare")" && pwd)/$(basename "$compare")
for s in "${scenarios[@]}"; do
  files=()
  # Unless --replace: the existing baseline's runs (other hosts) first, then this host's.
  if [ "$replace" -eq 0 ] && [ -f "$dest/$s.json" ]; then
    cp "$dest/$s.json" "$tmp/runs/$s.previous.json"
    files+=("$s.previous.json")
  fi
  for ((i = 1; i <= runs; i++)); do files+=("$s/$i.json"); done
  # From inside the runs folder, so each run's "source" reads "clean/1.json", not a temp path.
  (cd "$tmp/runs" && "$compare_abs" --promote "${files[@]}" -o "$tmp/$s.json" --commit "$commit" \
    --command "profiler_demo --scenario $s ${run_args[*]} (x$runs, scripts/update_baselines.sh)" \
    >/dev/null) || die 1 "promoting $s failed; baselines/ untouched"
done

# What changed: the new baseline (its mean metrics, pooled samples) against the old one.
for s in "${scenarios[@]}"; do
  echo
  if [ -f "$dest/$s.json" ]; then
    echo "==== $s: new baseline vs $dest/$s.json"
    rc=0
    "$compare" "$tmp/$s.json" "$dest/$s.json" || rc=$?
    case "$rc" in
      0) echo "($s: within the old baseline's policy)" ;;
      1) echo "($s: CHANGED beyond the old baseline's policy: review before committing)" ;;
      *) echo "($s: not comparable with the old baseline, see above)" ;;
    esac
  else
    echo "==== $s: new baseline (none before for $slug)"
  fi
done

# Into place: every file copied to a temporary name in the same folder first, then each
# renamed over the old one, so a failed copy leaves the old baselines as they were.
mkdir -p "$dest"
for s in "${scenarios[@]}"; do
  cp "$tmp/$s.json" "$dest/.$s.json.tmp.$$" || {
    rm -f "$dest"/.*.json.tmp.$$
    die 1 "cannot write into $dest; baselines/ untouched"
  }
done
for s in "${scenarios[@]}"; do mv -f "$dest/.$s.json.tmp.$$" "$dest/$s.json"; done
echo
echo "update_baselines: wrote ${#scenarios[@]} baselines to $dest/ (commit $commit);"
echo "update_baselines: review with 'git diff $dest' and commit them"
