/* run_report.c: pd_run's report, read back from the metrics JSON(s) the library wrote.
 *
 * The library writes at the program's exit; pd_run reads the file(s) newer than the run's
 * start: the configured --output_json (the program pd_run started) and
 * "<stem>.pid<PID>[.rank<R>].json" beside it (processes it exec'd that used CUDA). Values
 * are range-checked: a number that is not finite and >= 0 prints as n/a.
 */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "pd/pd_out.h"
#include "run.h"

#define REPORT_MAX_BYTES ((long)256 << 20)

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= REPORT_MAX_BYTES && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)n + 1)) != NULL) {
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    } else {
      buf[n] = '\0';
    }
  }
  fclose(f);
  return buf;
}

/* A number at obj.key that is finite and >= 0, else NAN. */
static double num(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 ? v->valuedouble : NAN;
}

/* A number that may be negative (a measured difference), within +-1e9; else NaN. */
static double signed_num(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) && fabs(v->valuedouble) <= 1e9 ? v->valuedouble : NAN;
}

static const char *str(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void line_num(FILE *out, const char *label, double v, double scale, const char *unit) {
  if (isnan(v)) fprintf(out, "  %-28s n/a\n", label);
  else fprintf(out, "  %-28s %.6g%s\n", label, v * scale, unit);
}

static void print_ops(FILE *out, const cJSON *arr, int limit, const char *title) {
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) return;
  fprintf(out, "\n%s\n  %-48s %8s %14s %14s %14s\n", title, "Name", "Calls", "Self CUDA us", "CUDA total us",
          "Self CPU us");
  int i = 0;
  const cJSON *row;
  cJSON_ArrayForEach(row, arr) {
    if (limit > 0 && i++ >= limit) break;
    char name[49];
    const char *nm = str(row, "name");
    pd_term_escape_line(name, sizeof name, nm != NULL ? nm : "?");
    double v[4] = {num(row, "calls"), num(row, "self_cuda_time_us"), num(row, "cuda_time_us"),
                   num(row, "self_cpu_time_us")};
    fprintf(out, "  %-48s", name);
    for (int k = 0; k < 4; k++) {
      if (isnan(v[k])) fprintf(out, " %*s", k == 0 ? 8 : 14, "n/a");
      else fprintf(out, k == 0 ? " %8.0f" : " %14.1f", v[k]);
    }
    fprintf(out, "\n");
  }
}

static void print_verdict(FILE *out, const cJSON *v) {
  if (!cJSON_IsObject(v)) {
    fprintf(out, "\nVerdict: none\n");
    return;
  }
  char t[600];
  const char *bn = str(v, "bottleneck");
  fprintf(out, "\nVerdict: %s\n", pd_term_escape_line(t, sizeof t, bn != NULL ? bn : "?"));
  const char *ev = str(v, "evidence"), *adv = str(v, "advice");
  if (ev != NULL && ev[0] != '\0') fprintf(out, "  evidence: %s\n", pd_term_escape_line(t, sizeof t, ev));
  if (adv != NULL && adv[0] != '\0') fprintf(out, "  advice:   %s\n", pd_term_escape_line(t, sizeof t, adv));
  const cJSON *f;
  cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(v, "findings")) {
    const char *cause = str(f, "cause"), *fev = str(f, "evidence");
    char c[64];
    fprintf(out, "  finding:  %s: %s\n", pd_term_escape_line(c, sizeof c, cause != NULL ? cause : "?"),
            pd_term_escape_line(t, sizeof t, fev != NULL ? fev : ""));
  }
}

int pd_run_report_file(FILE *out, const char *path, int top_n) {
  char shown[PD_INJECT_PATH_MAX];
  pd_term_escape_line(shown, sizeof shown, path);
  char *text = slurp(path);
  cJSON *root = text != NULL ? cJSON_Parse(text) : NULL;
  free(text);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "metrics");
  if (!cJSON_IsObject(m)) {
    fprintf(out, "%s: cannot read the metrics JSON '%s'\n", PD_RUN_PROG, shown);
    cJSON_Delete(root);
    return -1;
  }
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "config");
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "device");
  char name[128], dev[128];
  const char *nm = str(c, "name"), *dn = str(d, "name");
  pd_term_escape_line(name, sizeof name, nm != NULL ? nm : "?");
  pd_term_escape_line(dev, sizeof dev, dn != NULL ? dn : "unknown device");
  double steps = num(root, "steps"); /* top level, beside "metrics" (metrics_json.c) */
  if (!(steps >= 0.0 && steps < 1e12)) steps = NAN;
  fprintf(out, "\n%s: %s on %s, %s profiled steps (steps by %s)\n", PD_RUN_PROG, name, dev,
          isnan(steps) ? "n/a" : (snprintf(shown, sizeof shown, "%.0f", steps), shown),
          str(c, "steps_by") != NULL ? str(c, "steps_by") : "?");
  fprintf(out, "Quick stats:\n");
  line_num(out, "avg_step_time_s", num(m, "avg_step_time_s"), 1, "");
  line_num(out, "p50_step_time_s", num(m, "p50_step_time_s"), 1, "");
  line_num(out, "p95_step_time_s", num(m, "p95_step_time_s"), 1, "");
  line_num(out, "GPU busy", num(m, "gpu_busy_fraction"), 100, "%");
  line_num(out, "kernels per step", num(m, "kernels_per_step"), 1, "");
  line_num(out, "avg kernel time", num(m, "avg_kernel_time_us"), 1, " us");
  line_num(out, "sync calls per step", num(m, "sync_calls_per_step"), 1, "");
  line_num(out, "device allocs per step", num(m, "device_alloc_calls_per_step"), 1, "");
  line_num(out, "H2D bytes per step", num(m, "h2d_bytes_per_step"), 1, "");
  line_num(out, "peak device memory", num(m, "peak_device_memory_bytes"), 1.0 / (1024.0 * 1024.0), " MiB");
  double dropped = num(m, "dropped_records");
  if (!isnan(dropped) && dropped > 0) line_num(out, "dropped records", dropped, 1, " (CUPTI buffers overflowed)");
  print_ops(out, cJSON_GetObjectItemCaseSensitive(root, "top_ops"), top_n, "Top CUDA ops (host ranges, by self CUDA time):");
  print_ops(out, cJSON_GetObjectItemCaseSensitive(root, "top_kernels"), top_n > 0 && top_n < 10 ? top_n : 10,
            "Top kernels (by self CUDA time):");
  print_verdict(out, cJSON_GetObjectItemCaseSensitive(root, "verdict"));
  const cJSON *cost = cJSON_GetObjectItemCaseSensitive(root, "profiler_cost");
  double est = num(cost, "est_added_us_per_step");
  double meas = signed_num(cost, "measured_added_us_per_step");
  if (!isnan(est) || !isnan(meas)) {
    fprintf(out, "Profiler cost:");
    if (!isnan(est)) fprintf(out, " about %.1f us per step (estimate, calibrated on this host)", est);
    /* what the estimate counted beyond the records: the warmup's census, range-checked */
    const cJSON *ce = cJSON_GetObjectItemCaseSensitive(cost, "api_census");
    double ur = num(ce, "runtime_unrecorded_per_step"), ud = num(ce, "driver_unrecorded_per_step");
    if (!isnan(est) && ur >= 0 && ur <= 1e9 && ud >= 0 && ud <= 1e9)
      fprintf(out, ", with %.0f API calls per step traced but not recorded", ur + ud);
    /* the counts are range-checked like every number read here */
    double nt = num(cost, "measured_traced_steps"), nu = num(cost, "measured_untraced_steps");
    if (!isnan(meas) && nt >= 3 && nt <= 1e9 && nu >= 3 && nu <= 1e9)
      fprintf(out, "%s%+.1f us per step measured in the process (median of %.0f recorded steps against %.0f untraced)",
              isnan(est) ? " " : "; ", meas, nt, nu);
    fprintf(out, "\n");
  }
  const cJSON *tf;
  cJSON_ArrayForEach(tf, cJSON_GetObjectItemCaseSensitive(root, "trace_files")) {
    if (cJSON_IsString(tf)) fprintf(out, "Trace:   %s\n", pd_term_escape_line(shown, sizeof shown, tf->valuestring));
  }
  fprintf(out, "Metrics: %s\n", pd_term_escape_line(shown, sizeof shown, path));
  cJSON_Delete(root);
  return 0;
}

static bool fresh(const char *path, time_t since) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime >= since;
}

int pd_run_report(FILE *out, const pd_run_config_t *cfg, time_t since, int killed_by) {
  const char *json = cfg->inject.output_json;
  int files = 0;
  if (fresh(json, since) && pd_run_report_file(out, json, cfg->inject.top_n) == 0) files++;
  /* processes the program exec'd: <stem>.pid<PID>[.rank<R>].json beside it */
  char dir[PD_INJECT_PATH_MAX], stem[PD_INJECT_PATH_MAX];
  const char *slash = strrchr(json, '/');
  snprintf(dir, sizeof dir, "%.*s", slash != NULL ? (int)(slash - json) : 1, slash != NULL ? json : ".");
  const char *base = slash != NULL ? slash + 1 : json;
  const char *dot = strrchr(base, '.');
  snprintf(stem, sizeof stem, "%.*s.pid", dot != NULL && dot != base ? (int)(dot - base) : (int)strlen(base), base);
  DIR *dd = opendir(dir[0] != '\0' ? dir : "/");
  struct dirent *e;
  while (dd != NULL && (e = readdir(dd)) != NULL) {
    if (strncmp(e->d_name, stem, strlen(stem)) != 0) continue;
    char p[2 * PD_INJECT_PATH_MAX + 2];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (fresh(p, since) && pd_run_report_file(out, p, cfg->inject.top_n) == 0) files++;
  }
  if (dd != NULL) closedir(dd);
  if (files > 0) return files;
  char prog[256];
  pd_term_escape_line(prog, sizeof prog, cfg->argv[0]);
  if (killed_by > 0)
    fprintf(out, "%s: %s was killed by signal %d (%s) before it could exit: the profiler writes at exit, so nothing was written\n",
            PD_RUN_PROG, prog, killed_by, strsignal(killed_by));
  else
    fprintf(out, "%s: nothing to profile: %s wrote no metrics (it launched no CUDA kernel, or the profiler said why above)\n",
            PD_RUN_PROG, prog);
  return 0;
}
