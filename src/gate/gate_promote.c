/* gate_promote.c: turns metrics JSONs of repeated runs into a baseline.
 *
 * A baseline is a metrics JSON (schema 2, PD_METRICS_SCHEMA_VERSION) of its own: the per-step samples of every run
 * concatenated (so a rank test sees the run-to-run noise, not only step-to-step noise),
 * "runs" with each run's metrics and host, metrics as the median over runs (what a
 * comparison reads), the most frequent verdict, a "policy" per metric whose tolerances come from
 * the spread between the runs, and "provenance" saying where the numbers come from.
 * An earlier baseline can be an input too: its runs are taken over one by one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd/pd_common.h"
#include "pd/pd_gate.h"
#include "pd/pd_writers.h"

#include "gate_internal.h"

/* Appends every element of doc[key] (an array) to dst. */
static int pro_concat(cJSON *dst, const cJSON *doc, const char *key) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, key), *it = NULL;
  cJSON_ArrayForEach(it, arr) {
    cJSON *copy = cJSON_Duplicate(it, 1);
    if (copy == NULL) return PD_ENOMEM;
    cJSON_AddItemToArray(dst, copy);
  }
  return 0;
}

/* Appends the runs one input stands for: an earlier baseline's "runs", or the input
 * itself as one run {source, host, steps, bottleneck, metrics}. Runs of an earlier
 * baseline that recorded no host (made before runs carried one) were recorded on one
 * machine per baseline: they get a host named after that baseline's provenance, so the
 * between-host spread treats them as one host. */
/* Adds run["provenance"] {commit, date, driver, tool_version} unless it has one. */
static int pro_run_provenance(cJSON *run, const char *commit, const char *date, const cJSON *driver,
                              const char *tool_version) {
  if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(run, "provenance"))) return 0;
  cJSON_DeleteItemFromObjectCaseSensitive(run, "provenance");
  cJSON *p = cJSON_AddObjectToObject(run, "provenance");
  if (p == NULL) return PD_ENOMEM;
  cJSON_AddStringToObject(p, "commit", commit != NULL ? commit : "unknown");
  cJSON_AddStringToObject(p, "date", date != NULL ? date : "unknown");
  if (cJSON_IsNumber(driver))
    cJSON_AddNumberToObject(p, "driver", driver->valuedouble);
  else
    cJSON_AddNullToObject(p, "driver");
  cJSON_AddStringToObject(p, "tool_version", tool_version != NULL ? tool_version : "unknown");
  return 0;
}

static int pro_add_runs(cJSON *runs, const cJSON *doc, const char *name, const char *commit, const char *date) {
  const cJSON *prior = cJSON_GetObjectItemCaseSensitive(doc, "runs"), *it = NULL;
  if (cJSON_IsArray(prior) && cJSON_GetArraySize(prior) > 0) {
    char key[160];
    const char *bc = cmp_string_at(doc, "provenance", "git_commit");
    const char *bd = cmp_string_at(doc, "provenance", "date");
    snprintf(key, sizeof(key), "baseline %s %s", bc ? bc : "?", bd ? bd : "?");
    cJSON_ArrayForEach(it, prior) {
      cJSON *copy = cJSON_Duplicate(it, 1);
      if (copy == NULL) return PD_ENOMEM;
      cJSON_AddItemToArray(runs, copy);
      if (!cJSON_IsObject(copy)) continue;
      if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(copy, "host"))) {
        cJSON_DeleteItemFromObjectCaseSensitive(copy, "host");
        cJSON *h = cJSON_AddObjectToObject(copy, "host");
        if (h == NULL) return PD_ENOMEM;
        cJSON_AddStringToObject(h, "name", "unrecorded");
        cJSON_AddStringToObject(h, "boot_id", key);
      }
      const cJSON *prov = cJSON_GetObjectItemCaseSensitive(doc, "provenance");
      int rc = pro_run_provenance(copy, commit, date, cJSON_GetObjectItemCaseSensitive(prov, "driver"),
                                  cmp_string_at(prov, "tool_version", NULL));
      if (rc != 0) return rc;
    }
    return 0;
  }
  cJSON *run = cJSON_CreateObject();
  if (run == NULL) return PD_ENOMEM;
  cJSON_AddItemToArray(runs, run);
  cJSON_AddStringToObject(run, "source", name != NULL ? name : "?");
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(doc, "host");
  if (cJSON_IsObject(host)) {
    cJSON *h = cJSON_Duplicate(host, 1);
    if (h == NULL) return PD_ENOMEM;
    cJSON_AddItemToObject(run, "host", h);
  }
  int prc = pro_run_provenance(run, commit, date,
                               cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "device"), "driver"),
                               cmp_string_at(doc, "tool", "version"));
  if (prc != 0) return prc;
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(doc, "step_times_s");
  cJSON_AddNumberToObject(run, "steps", cJSON_IsArray(st) ? cJSON_GetArraySize(st) : 0);
  const char *bn = cmp_string_at(doc, "verdict", "bottleneck");
  if (bn != NULL)
    cJSON_AddStringToObject(run, "bottleneck", bn);
  else
    cJSON_AddNullToObject(run, "bottleneck");
  cJSON *m = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(doc, "metrics"), 1);
  if (m == NULL) return PD_ENOMEM;
  cJSON_AddItemToObject(run, "metrics", m);
  return 0;
}

/* Fills vals[] with a metric's value in every run (NaN where absent or null); returns
 * the median of the finite ones (what the comparison reads as the baseline's value),
 * NaN when there are none. */
static double pro_run_values(const cJSON *runs, const char *metric, double *vals, size_t *n) {
  const cJSON *run = NULL;
  *n = 0;
  cJSON_ArrayForEach(run, runs) {
    const cJSON *v =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run, "metrics"), metric);
    vals[(*n)++] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  }
  return pd_quantile(vals, *n, 0.5);
}

/* The kernel and op tables of the runs, summed by name, and the steps they cover
 * ("tables_steps"): the explanation of a regression divides by it. Only inputs whose
 * tables cover their steps count: plain runs, and baselines that say how many steps
 * theirs cover (older baselines kept the first run's top ops only). */
static int pro_tables(cJSON *out, const cJSON *const *docs, size_t n) {
  static const char *const keys[] = {"top_ops", "top_kernels"};
  static const char *const nums[] = {"calls", "self_cuda_time_us", "cuda_time_us", "self_cpu_time_us",
                                     "cpu_time_us"};
  double steps = 0;
  bool complete = true;
  cJSON *tables[2];
  for (size_t k = 0; k < 2; k++)
    if ((tables[k] = cJSON_AddArrayToObject(out, keys[k])) == NULL) return PD_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const cJSON *doc = docs[i];
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(doc, "tables_steps");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(doc, "steps");
    bool pooled = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(doc, "runs"));
    const cJSON *cover = pooled ? ts : st;
    if (!cJSON_IsNumber(cover) || !(cover->valuedouble >= 1.0 && cover->valuedouble <= 1e9)) continue;
    steps += cover->valuedouble;
    complete = complete && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "top_ops_complete"));
    for (size_t k = 0; k < 2; k++) {
      const cJSON *row = NULL;
      cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(doc, keys[k])) {
        const char *name = cmp_string_at(row, "name", NULL);
        if (name == NULL) continue;
        cJSON *dst = NULL, *it = NULL;
        cJSON_ArrayForEach(it, tables[k]) {
          const char *nm = cmp_string_at(it, "name", NULL);
          if (nm != NULL && strcmp(nm, name) == 0) {
            dst = it;
            break;
          }
        }
        if (dst == NULL) {
          if ((dst = cJSON_CreateObject()) == NULL) return PD_ENOMEM;
          cJSON_AddItemToArray(tables[k], dst);
          cJSON_AddStringToObject(dst, "name", name);
          for (size_t f = 0; f < sizeof(nums) / sizeof(nums[0]); f++) cJSON_AddNumberToObject(dst, nums[f], 0);
        }
        for (size_t f = 0; f < sizeof(nums) / sizeof(nums[0]); f++) {
          const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, nums[f]);
          cJSON *d = cJSON_GetObjectItemCaseSensitive(dst, nums[f]);
          if (cJSON_IsNumber(v) && isfinite(v->valuedouble) && fabs(v->valuedouble) < 1e15)
            cJSON_SetNumberValue(d, d->valuedouble + v->valuedouble);
        }
      }
    }
  }
  cJSON_AddNumberToObject(out, "tables_steps", steps);
  /* Whole only when every input's op table was (gate_explain.c reads it). */
  cJSON_AddBoolToObject(out, "top_ops_complete", complete);
  return 0;
}

static void pro_now_utc(char *buf, size_t len) {
  time_t t = time(NULL);
  struct tm tmv;
  if (gmtime_r(&t, &tmv) == NULL || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tmv) == 0)
    snprintf(buf, len, "unknown");
}

/* When the step waits on data (the dataloader bottleneck), the GPU sits idle for tens of
 * milliseconds before each step, and the step's own time depends on how far clocks and
 * caches fell asleep: on H100 machines an unchanged dataloader run's 10th-percentile step
 * time moved by +62% from one host to another. There the step-time statistics are
 * reported, not gated; the data wait and every count still are. */
static void pro_step_time_report_only(cJSON *policy) {
  static const char *const k_step[] = {"avg_step_time_s", "p50_step_time_s", "p95_step_time_s",
                                       "step_time_p10_s"};
  for (size_t i = 0; i < sizeof(k_step) / sizeof(k_step[0]); i++) {
    cJSON *o = cJSON_GetObjectItemCaseSensitive(policy, k_step[i]);
    if (o == NULL) continue;
    cJSON_ReplaceItemInObjectCaseSensitive(o, "direction", cJSON_CreateString("none"));
  }
}

/* Writes one metric's policy into the policy object. Returns 0 or PD_ENOMEM. */
static int pro_policy_add(cJSON *policy, const char *metric, const pd_cmp_policy_t *p) {
  cJSON *o = cJSON_AddObjectToObject(policy, metric);
  if (o == NULL) return PD_ENOMEM;
  cJSON_AddStringToObject(o, "class", pd_metric_class_name(p->cls));
  cJSON_AddStringToObject(o, "direction", pd_cmp_direction_name(p->direction));
  cJSON_AddStringToObject(o, "mode", pd_cmp_mode_name(p->mode));
  cJSON_AddNumberToObject(o, "tolerance", p->tolerance);
  cJSON_AddNumberToObject(o, "band", p->band);
  cJSON_AddNumberToObject(o, "min_abs", p->min_abs);
  return 0;
}

/* Builds the baseline into out; returns 0 or a PD_E code. */
static int pro_build(const cJSON *const *docs, const char *const *names, size_t n,
                     const pd_promote_info_t *info, cJSON *out) {
  const cJSON *first = docs[0];
  cJSON_AddNumberToObject(out, "schema_version", PD_METRICS_SCHEMA_VERSION);
  cJSON *config = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(first, "config"), 1);
  if (config == NULL) config = cJSON_CreateObject();
  if (config == NULL) return PD_ENOMEM;
  /* Paths of the machine the runs were made on mean nothing in a stored baseline. */
  cJSON_DeleteItemFromObjectCaseSensitive(config, "trace_dir");
  cJSON_DeleteItemFromObjectCaseSensitive(config, "output_json");
  cJSON_AddItemToObject(out, "config", config);
  cJSON *device = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(first, "device"), 1);
  if (device == NULL) return PD_ENOMEM;
  cJSON_AddItemToObject(out, "device", device);

  cJSON *runs = cJSON_CreateArray();
  cJSON *steps = cJSON_CreateArray();
  cJSON *waits = cJSON_CreateArray();
  if (runs == NULL || steps == NULL || waits == NULL) {
    cJSON_Delete(runs);
    cJSON_Delete(steps);
    cJSON_Delete(waits);
    return PD_ENOMEM;
  }
  cJSON *metrics = cJSON_AddObjectToObject(out, "metrics");
  cJSON_AddItemToObject(out, "step_times_s", steps);
  cJSON_AddItemToObject(out, "dataloader_wait_s", waits);
  cJSON_AddItemToObject(out, "runs", runs);
  if (metrics == NULL) return PD_ENOMEM;
  char date[40];
  if (info != NULL && info->date != NULL)
    snprintf(date, sizeof(date), "%s", info->date);
  else
    pro_now_utc(date, sizeof(date));
  const char *commit = info != NULL && info->git_commit ? info->git_commit : "unknown";
  for (size_t i = 0; i < n; i++) {
    /* runs taken over from an earlier baseline keep its commit and date */
    const char *pc = cmp_string_at(docs[i], "provenance", "git_commit");
    const char *pd = cmp_string_at(docs[i], "provenance", "date");
    bool pooled = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(docs[i], "runs"));
    int rc = pro_add_runs(runs, docs[i], names != NULL ? names[i] : NULL, pooled && pc ? pc : commit,
                          pooled && pd ? pd : date);
    if (rc == 0) rc = pro_concat(steps, docs[i], "step_times_s");
    if (rc == 0) rc = pro_concat(waits, docs[i], "dataloader_wait_s");
    if (rc != 0) return rc;
  }
  size_t nruns = (size_t)cJSON_GetArraySize(runs);
  cJSON_AddNumberToObject(out, "steps", cJSON_GetArraySize(steps));

  /* Metrics: median over runs, for every metric any input has, in first-seen order. */
  double *vals = malloc((nruns + 1) * sizeof(double));
  if (vals == NULL) return PD_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(docs[i], "metrics")) {
      if (cJSON_GetObjectItemCaseSensitive(metrics, it->string) != NULL) continue;
      size_t k = 0;
      cmp_add_number_or_null(metrics, it->string, pro_run_values(runs, it->string, vals, &k));
    }
  }

  /* Policy from the between-run spread: the tool's metrics, then the gate's own
   * statistics of each run's samples (the pooled arrays split by runs[].steps). */
  cJSON *policy = cJSON_AddObjectToObject(out, "policy");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(metrics, "avg_step_time_s");
  double step = cJSON_IsNumber(st) ? st->valuedouble : NAN;
  int *hosts = malloc((nruns + 1) * sizeof(*hosts));
  size_t nhosts = hosts != NULL ? cmp_host_index(runs, hosts, nruns) : 0;
  const cJSON *it = NULL;
  int rc = policy != NULL && hosts != NULL ? 0 : PD_ENOMEM;
  cJSON_ArrayForEach(it, metrics) {
    if (rc != 0) break;
    size_t k = 0;
    pro_run_values(runs, it->string, vals, &k);
    pd_cmp_policy_t p;
    pd_cmp_policy_derive(it->string, vals, hosts, k, step, &p);
    rc = pro_policy_add(policy, it->string, &p);
  }
  size_t nderived = 0;
  const pd_cmp_derived_t *derived = pd_cmp_derived_metrics(&nderived);
  for (size_t d = 0; d < nderived && rc == 0; d++) {
    size_t k = pd_cmp_run_quantiles(out, derived[d].samples, derived[d].q, vals, nruns + 1);
    if (k == 0) continue;
    pd_cmp_policy_t p;
    /* one quantile per run only when the samples split by run; else no host index */
    pd_cmp_policy_derive(derived[d].name, vals, k == nruns ? hosts : NULL, k, step, &p);
    rc = pro_policy_add(policy, derived[d].name, &p);
  }
  free(vals);
  free(hosts);
  if (rc != 0) return rc;

  /* Verdict: the bottleneck most runs named (ties: the earliest), with that run's rule
   * and evidence; a split is written into provenance so a reviewer sees it. */
  const cJSON *run = NULL;
  const char **named_by = malloc((nruns + 1) * sizeof(*named_by));
  if (named_by == NULL) return PD_ENOMEM;
  size_t k = 0, best_count = 0, named = 0;
  cJSON_ArrayForEach(run, runs) named_by[k++] = cmp_string_at(run, "bottleneck", NULL);
  const char *best = cmp_majority(named_by, k, &best_count, &named);
  free(named_by);
  if (best != NULL) {
    const cJSON *src = NULL;
    for (size_t i = 0; i < n && src == NULL; i++) {
      const char *b = cmp_string_at(docs[i], "verdict", "bottleneck");
      if (b != NULL && strcmp(b, best) == 0)
        src = cJSON_GetObjectItemCaseSensitive(docs[i], "verdict");
    }
    cJSON *v = src != NULL ? cJSON_Duplicate(src, 1) : cJSON_CreateObject();
    if (v == NULL) return PD_ENOMEM;
    if (src == NULL) cJSON_AddStringToObject(v, "bottleneck", best);
    cJSON_AddItemToObject(out, "verdict", v);
    if (strcmp(best, "dataloader") == 0) pro_step_time_report_only(policy);
  }
  if ((rc = pro_tables(out, docs, n)) != 0) return rc;
  cJSON_AddArrayToObject(out, "trace_files");
  const cJSON *tool = cJSON_GetObjectItemCaseSensitive(first, "tool");
  if (tool != NULL) cJSON_AddItemToObject(out, "tool", cJSON_Duplicate(tool, 1));

  cJSON *prov = cJSON_AddObjectToObject(out, "provenance");
  if (prov == NULL) return PD_ENOMEM;
  cJSON_AddStringToObject(prov, "device", cmp_string_at(first, "device", "name"));
  static const char *const versions[] = {"driver", "runtime", "cupti"};
  for (size_t i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(first, "device"), versions[i]);
    if (v != NULL)
      cJSON_AddItemToObject(prov, versions[i], cJSON_Duplicate(v, 1));
    else
      cJSON_AddNullToObject(prov, versions[i]);
  }
  const char *tv = cmp_string_at(first, "tool", "version");
  cJSON_AddStringToObject(prov, "tool_version", tv != NULL ? tv : "unknown");
  cJSON_AddStringToObject(prov, "git_commit", commit);
  cJSON_AddStringToObject(prov, "date", date);
  cJSON_AddStringToObject(prov, "command",
                          info != NULL && info->command ? info->command : "unknown");
  cJSON_AddNumberToObject(prov, "runs", (double)nruns);
  cJSON_AddNumberToObject(prov, "hosts", (double)nhosts);
  if (named > best_count) {
    char note[160];
    snprintf(note, sizeof(note), "runs disagree on the bottleneck: %zu of %zu named %s", best_count,
             named, best);
    cJSON_AddStringToObject(prov, "warning", note);
  }
  return 0;
}

int pd_baseline_promote(const cJSON *const *runs, const char *const *names, size_t n,
                        const pd_promote_info_t *info, cJSON **out, char *why, size_t whylen) {
  *out = NULL;
  if (runs == NULL || n == 0) {
    cmp_why(why, whylen, "promote needs at least one metrics JSON");
    return PD_EINVAL;
  }
  const char *dev0 = cmp_string_at(runs[0], "device", "name");
  const char *scen0 = cmp_string_at(runs[0], "config", "scenario");
  for (size_t i = 0; i < n; i++) {
    const char *name = names != NULL && names[i] != NULL ? names[i] : "input";
    const char *dev = cmp_string_at(runs[i], "device", "name");
    const char *scen = cmp_string_at(runs[i], "config", "scenario");
    if (dev == NULL || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(runs[i], "metrics"))) {
      cmp_why(why, whylen, "%s: not a metrics JSON (device.name or metrics missing)", name);
      return PD_EPARSE;
    }
    if (strcmp(dev, dev0) != 0) {
      cmp_why(why, whylen, "%s is from '%s' but %s from '%s': a baseline holds one GPU model",
              name, dev, names != NULL && names[0] ? names[0] : "the first input", dev0);
      return PD_EMISMATCH;
    }
    if ((scen == NULL) != (scen0 == NULL) || (scen != NULL && strcmp(scen, scen0) != 0)) {
      cmp_why(why, whylen, "%s is scenario '%s' but the first input is '%s': one scenario per "
              "baseline", name, scen ? scen : "?", scen0 ? scen0 : "?");
      return PD_EMISMATCH;
    }    /* A plain run becomes one of the baseline's runs, whose "steps" (its sample count)
     * the comparison requires to be at least 1. */
    const cJSON *prior = cJSON_GetObjectItemCaseSensitive(runs[i], "runs");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(runs[i], "step_times_s");
    if (!(cJSON_IsArray(prior) && cJSON_GetArraySize(prior) > 0) && cJSON_GetArraySize(st) < 1) {
      cmp_why(why, whylen, "%s: \"step_times_s\" holds no samples; a baseline's run needs at least one step",
              name);
      return PD_EPARSE;
    }
    /* What the comparison would refuse in an input it refuses here too (one validator). */
    int vrc = pd_cmp_doc_check(runs[i], name, why, whylen);
    if (vrc != 0) return vrc;
  }
  cJSON *doc = cJSON_CreateObject();
  if (doc == NULL) return PD_ENOMEM;
  int rc = pro_build(runs, names, n, info, doc);
  if (rc != 0) {
    cJSON_Delete(doc);
    if (rc == PD_ENOMEM) cmp_why(why, whylen, "out of memory building the baseline");
    return rc;
  }
  /* The baseline itself passes the comparison's validator, or is not handed out. */
  rc = pd_cmp_doc_check(doc, "the promoted baseline", why, whylen);
  if (rc != 0) {
    cJSON_Delete(doc);
    return rc;
  }
  *out = doc;
  return 0;
}
