#!/usr/bin/env bash
# tables.sh ANALYZER: regenerates the truth tables of docs/diagnosis.md from the raw runs
# kept in bench/diagnosis/data (offline, no GPU):
#   data/<gpu>-<boot>.tar.gz        scenario_truth.sh runs of our five scenarios
#   data/torch/<gpu>-<boot>.tar.gz  record_torch_traces.py runs (traces and truth.json)
# (data/truth_only/ keeps recordings whose traces were lost: quoted in the text, not tabled)
# and the committed torch fixtures (tests/fixtures/torch). ANALYZER is profile_analyze
# (the model under test: the predictions are recomputed from the traces, so a model change
# regenerates every table). One Markdown table per recording, newest model, measured truth.
set -euo pipefail
analyzer=${1:?usage: bench/diagnosis/tables.sh PROFILE_ANALYZE}
[ -x "$analyzer" ] || { echo "tables.sh: no program at $analyzer" >&2; exit 2; }
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in bench/diagnosis/data/*.tar.gz; do
  name=$(basename "$t" .tar.gz)
  mkdir -p "$tmp/$name"
  tar -xzf "$t" -C "$tmp/$name"
  echo "### Scenarios, $name"
  echo
  python3 bench/diagnosis/truth_table.py "$tmp/$name/truth" --analyzer "$analyzer"
  echo
done
for t in bench/diagnosis/data/torch/*.tar.gz; do
  name=$(basename "$t" .tar.gz)
  mkdir -p "$tmp/torch-$name"
  tar -xzf "$t" -C "$tmp/torch-$name"
  # the recording's boot id is in its file name (the script's truth.json has none), before
  # the model's suffix (-lm: record_torch_traces.py --model lm)
  boot=${name#*-}
  python3 - "$tmp/torch-$name/tt/truth.json" "${boot%-lm}" <<'PY'
import json, sys
p, boot = sys.argv[1:]
t = json.load(open(p))
t["boot_id"] = boot
json.dump(t, open(p, "w"))
PY
  echo "### torch.profiler variants, $name"
  echo
  python3 bench/diagnosis/truth_table.py --torch "$analyzer" --torch-truth "$tmp/torch-$name/tt/truth.json"
  echo
done
echo "### torch.profiler fixtures (tests/fixtures/torch)"
echo
python3 bench/diagnosis/truth_table.py --torch "$analyzer"
