# lib_args.sh: sourced by the scripts that run profiler_demo over the scenarios
# (gpu_compare.sh, gpu_ab.sh, update_baselines.sh, make_fixtures.sh, bench/gate/*.sh,
# bench/diagnosis/scenario_truth.sh) and by pd_ab.sh (the sequential looks it shares with
# gpu_ab.sh). What they need, defined once:
#
#   pd_args_read FILE ARRAY   the flags of an args file (baselines/acceptance.args) into the
#                             named array. The one rule (baselines/README.md; the C reader in
#                             tests/acceptance/scenarios/test_scenarios.c keeps the same): a
#                             CR at the end of a line is dropped; a line whose first character
#                             after spaces and tabs is '#' is a comment; every other line is
#                             split into words at spaces and tabs (so a blank line gives none;
#                             no quoting, no comment after a flag).
#   pd_scenario_names DEMO ARRAY
#                             the scenario names, in table order, from
#                             `DEMO --list_scenarios --names` (no GPU needed).
#   pd_scenarios_chosen DEMO ARRAY
#                             the words of $PD_SCENARIOS when it is set and not empty (the
#                             GPU scripts' override), else pd_scenario_names.
#   pd_whole_number NAME VALUE
#                             whether VALUE is a whole number (digits only); if not, one line
#                             "PROG: NAME must be a whole number, got 'VALUE'" on stderr
#                             (PROG: the script's name without .sh).
#   pd_ab_warmup_args SCENARIO ARRAY
#                             the flags the A/B runners (gpu_ab.sh, bench/gate/ab_record.sh)
#                             add to a run of SCENARIO: --warmup_steps $PD_AB_WARMUP (default
#                             48), the untraced steps the A/B judges host time on; none for
#                             dataloader, which keeps the args file's warmup (its steps wait on
#                             the loader by design, about 80 ms each: 48 would add 3 s a run).
#                             With pd_ab_probe=1 (pd_ab_probe_check), also --warmup_probe
#                             (the host's speed after every warmup step: profile_compare
#                             --adjust's covariate for the untraced rows, docs/gate.md).
#   pd_ab_probe_check DEMO...
#                             sets pd_ab_probe=1 when PD_AB_PROBE is not 0 (default 1) and
#                             every DEMO (profiler_demo of each build of an A/B) has
#                             --warmup_probe in its --help; else 0 (a base build from before
#                             it: both sides without, the covariate falls back).
#   pd_help_names PROG FLAG   whether PROG's --help names FLAG (returns 0 or 1; a PROG that
#                             fails or is missing: 1).
#   pd_machine_lines          the machine, for a bench recording's host.txt: the lines
#                             "boot_id ...", "hostname ...", "gpu NAME, DRIVER" and
#                             "cpu MODEL x CPUS" on stdout (always returns 0).
#   pd_ab_record_scenarios ARRAY
#                             the scenarios bench/gate/ab_record.sh and env_check.sh record: the words of
#                             $PD_AB_SCENARIOS (spaces or commas), default "clean tiny_ops";
#                             of clean, tiny_ops, sync and memory_churn (the scenarios gpu_ab.sh
#                             judges on untraced steps, which bench/gate/ab_eval.py evaluates),
#                             each once.
#   pd_demo_run WHAT FILE SCRATCH COMMAND...
#                             one profiler_demo run of the GPU scripts: COMMAND (profiler_demo
#                             and its flags, after a prefix such as `env VAR=...` or `setarch`
#                             where wanted) with --quiet --trace_dir SCRATCH/t --output_json
#                             FILE, its output in SCRATCH/log, the traces removed after (FILE's
#                             folder and SCRATCH are created). Returns 0; 3 with "PROG: no CUDA
#                             device (profiler_demo exit 3)" on stderr; 1 with "PROG: WHAT
#                             exited RC:" and the log's last 5 lines. It returns, never exits
#                             (a caller inside $(...) too): `pd_demo_run ... || exit $?`.
#   pd_ab_look_alpha K LOOKS [ALPHA]
#                             the alpha of look K (from 1) of a sequential A/B that may look
#                             LOOKS times, ALPHA (default 0.01) spent across its looks so
#                             that looking again does not raise the false-alarm rate above
#                             it: ALPHA itself when LOOKS is 1; else 0.4 x ALPHA at the first
#                             look (0.004 of 0.01: 2^-8 = 0.0039 is reachable with 8 rounds)
#                             and the remaining 0.6 x ALPHA split evenly over the later ones
#                             (gpu_ab.sh, pd_ab.sh; bench/gate/ab_eval.py models the same).
#   pd_ab_undecided JSON      the count of undecided rows (worse by more than half the
#                             tolerance, or beyond it but not significant) in a
#                             profile_compare --json report, on stdout; 0 when the file or
#                             the key is missing.
# Each returns 0, or prints one line on stderr and returns 2; but pd_demo_run and
# pd_help_names, as said above.
# shellcheck shell=bash

pd_args_read() {
  local file=$1 line trimmed
  local -n pd_args_out_=$2
  local -a words
  pd_args_out_=()
  if [ ! -f "$file" ] || [ ! -r "$file" ]; then
    echo "${0##*/}: cannot read the args file $file" >&2
    return 2
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%$'\r'}
    trimmed=${line#"${line%%[!$' \t']*}"}
    case "$trimmed" in '' | '#'*) continue ;; esac
    read -r -a words <<<"$line"
    pd_args_out_+=("${words[@]}")
  done <"$file"
  return 0
}

pd_scenario_names() {
  local demo=$1 text
  local -n pd_names_out_=$2
  pd_names_out_=()
  if ! text=$("$demo" --list_scenarios --names); then
    echo "${0##*/}: $demo --list_scenarios --names failed" >&2
    return 2
  fi
  mapfile -t pd_names_out_ <<<"$text"
  if [ "${#pd_names_out_[@]}" -eq 0 ] || [ -z "${pd_names_out_[0]}" ]; then
    echo "${0##*/}: $demo --list_scenarios --names listed no scenario" >&2
    return 2
  fi
  return 0
}

pd_scenarios_chosen() {
  if [ -n "${PD_SCENARIOS:-}" ]; then
    local -n pd_chosen_out_=$2
    # shellcheck disable=SC2034 # a nameref: it fills the caller's array
    read -r -a pd_chosen_out_ <<<"$PD_SCENARIOS"
    return 0
  fi
  pd_scenario_names "$1" "$2"
}

pd_whole_number() {
  case "$2" in '' | *[!0-9]*)
    local prog=${0##*/}
    echo "${prog%.sh}: $1 must be a whole number, got '$2'" >&2
    return 2
    ;;
  esac
  return 0
}

pd_ab_warmup_args() {
  local -n pd_warm_out_=$2
  # a local with a name no caller uses: the nameref would resolve to a local of its name
  local pd_warm_n_=${PD_AB_WARMUP:-48}
  pd_warm_out_=()
  pd_whole_number PD_AB_WARMUP "$pd_warm_n_" || return 2
  [ "$1" = dataloader ] && return 0
  # shellcheck disable=SC2034 # a nameref: it fills the caller's array
  pd_warm_out_=(--warmup_steps "$pd_warm_n_")
  [ "${pd_ab_probe:-0}" = 1 ] && pd_warm_out_+=(--warmup_probe)
  return 0
}

pd_machine_lines() {
  echo "boot_id $(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)"
  echo "hostname $(hostname)"
  echo "gpu $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') x $(nproc)"
}

pd_help_names() {
  # the whole text read first: `--help | grep -q` under pipefail fails when grep's early
  # exit kills a long --help with SIGPIPE
  [[ "$("$1" --help 2>/dev/null)" == *"$2"* ]]
}

pd_ab_probe_check() {
  local d prog=${0##*/}
  pd_ab_probe=0
  case "${PD_AB_PROBE:-1}" in 0) return 0 ;; 1) ;; *)
    echo "${prog%.sh}: PD_AB_PROBE must be 0 or 1, got '$PD_AB_PROBE'" >&2
    return 2
    ;;
  esac
  for d in "$@"; do
    pd_help_names "$d" --warmup_probe || return 0
  done
  pd_ab_probe=1
  return 0
}

pd_ab_record_scenarios() {
  local -n pd_rec_out_=$1
  local pd_rec_s_ prog=${0##*/}
  read -r -a pd_rec_out_ <<<"$(printf '%s' "${PD_AB_SCENARIOS:-clean tiny_ops}" | tr ',' ' ')"
  if [ "${#pd_rec_out_[@]}" -eq 0 ]; then
    echo "${prog%.sh}: PD_AB_SCENARIOS names no scenario (clean, tiny_ops, sync, memory_churn)" >&2
    return 2
  fi
  local pd_rec_seen_=" "
  for pd_rec_s_ in "${pd_rec_out_[@]}"; do
    case "$pd_rec_s_" in clean | tiny_ops | sync | memory_churn) ;; *)
      echo "${prog%.sh}: PD_AB_SCENARIOS: '$pd_rec_s_' is not one ab_record.sh records (clean, tiny_ops, sync, memory_churn)" >&2
      return 2
      ;;
    esac
    case "$pd_rec_seen_" in *" $pd_rec_s_ "*)
      echo "${prog%.sh}: PD_AB_SCENARIOS names '$pd_rec_s_' twice" >&2
      return 2
      ;;
    esac
    pd_rec_seen_+="$pd_rec_s_ "
  done
  return 0
}

pd_ab_look_alpha() {
  awk -v k="$1" -v n="$2" -v a="${3:-0.01}" \
    'BEGIN { printf "%.6g\n", (n <= 1) ? a : (k <= 1) ? 0.4 * a : 0.6 * a / (n - 1) }'
}

pd_ab_undecided() {
  local n
  n=$(sed -n 's/^[[:space:]]*"undecided":[[:space:]]*\([0-9]*\).*/\1/p' "$1" 2>/dev/null | head -n 1)
  echo "${n:-0}"
}

pd_demo_run() {
  local what=$1 file=$2 scratch=$3 prog=${0##*/} rc=0
  shift 3
  mkdir -p "$(dirname "$file")" "$scratch" || return 1
  "$@" --quiet --trace_dir "$scratch/t" --output_json "$file" >"$scratch/log" 2>&1 || rc=$?
  rm -rf "$scratch/t"
  if [ "$rc" -eq 3 ]; then
    echo "${prog%.sh}: no CUDA device (profiler_demo exit 3)" >&2
    return 3
  fi
  if [ "$rc" -ne 0 ]; then
    echo "${prog%.sh}: $what exited $rc:" >&2
    tail -n 5 "$scratch/log" >&2
    return 1
  fi
  return 0
}
