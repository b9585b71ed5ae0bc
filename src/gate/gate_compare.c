/* gate_compare.c: loading metrics JSONs and baselines, the GPU slug, and the comparison that
 * decides each metric's verdict (the rules are listed in pd_gate.h and docs/gate.md).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd/pd_common.h"
#include "pd/pd_out.h"
#include "pd/pd_gate.h"
#include "pd/pd_stats.h"

#include "gate_internal.h"

void cmp_why(char *why, size_t whylen, const char *fmt, ...) {
  if (why == NULL || whylen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
}

/* ---- documents ------------------------------------------------------------------------ */

/* Reads a whole metrics or baseline file. Only a regular file is read (a FIFO, a device
 * such as /dev/zero or a directory is refused at once, before any read), and only up to
 * PD_CMP_MAX_FILE_BYTES, checked before the buffer is allocated. The file is recorded as
 * an input, so no output of this process can replace it. Returns 0 and *text (caller
 * frees), or PD_EIO, PD_ENOTREG, PD_ETOOBIG, PD_ENOMEM with why naming the path. */
static int cmp_read_file(const char *path, char **text, size_t *len, char *why, size_t whylen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    cmp_why(why, whylen, "%s: cannot open: %s", path, strerror(errno));
    return PD_EIO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    cmp_why(why, whylen, "%s: not a regular file (a metrics JSON must be one)", path);
    return PD_ENOTREG;
  }
  if (st.st_size > PD_CMP_MAX_FILE_BYTES) {
    close(fd);
    cmp_why(why, whylen, "%s: %lld bytes is more than the %d MiB a metrics JSON may have", path,
            (long long)st.st_size, PD_CMP_MAX_FILE_BYTES >> 20);
    return PD_ETOOBIG;
  }
  (void)pd_out_protect_fd(fd);
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *buf = malloc(cap);
  if (buf == NULL) {
    close(fd);
    cmp_why(why, whylen, "%s: out of memory reading the file (%zu bytes)", path, cap);
    return PD_ENOMEM;
  }
  int failed = 0;
  while (n + 1 < cap) { /* a file that grows while read is cut at its size when opened */
    ssize_t got = read(fd, buf + n, cap - 1 - n);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got < 0) failed = errno;
    if (got <= 0) break;
    n += (size_t)got;
  }
  close(fd);
  if (failed) {
    free(buf);
    cmp_why(why, whylen, "%s: read error: %s", path, strerror(failed));
    return PD_EIO;
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return 0;
}

/* The per-step sample arrays of a metrics JSON or baseline. */
static const char *const k_sample_keys[] = {"step_times_s", "dataloader_wait_s"};

/* True (with why) when a per-step sample array is not an array of finite numbers >= 0:
 * checked at load, so --promote never writes a baseline that a comparison refuses. */
static bool cmp_doc_samples_bad(const cJSON *doc, const char *path, char *why, size_t whylen) {
  for (size_t k = 0; k < 2; k++) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, k_sample_keys[k]);
    if (arr == NULL) continue;
    if (!cJSON_IsArray(arr)) {
      cmp_why(why, whylen, "%s: \"%s\" is not an array", path, k_sample_keys[k]);
      return true;
    }
    size_t i = 0;
    const cJSON *it = NULL;
    cJSON_ArrayForEach(it, arr) {
      if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0) {
        cmp_why(why, whylen, "%s: \"%s\"[%zu] is %s, expected a finite number of seconds >= 0", path,
                k_sample_keys[k], i,
                cJSON_IsNull(it) ? "null (NaN)" : cJSON_IsNumber(it) ? "negative" : "not a number");
        return true;
      }
      i++;
    }
  }
  return false;
}

/* True (with why) when a step count at key is present and not an integer in
 * [lo, PD_CMP_MAX_STEPS]; *v gets the count (0 when absent). */
static bool cmp_doc_count_bad(const cJSON *obj, const char *key, double lo, const char *path, const char *where,
                              double *v, char *why, size_t whylen) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  *v = 0;
  if (it == NULL) return false;
  if (!cJSON_IsNumber(it) || !(it->valuedouble >= lo && it->valuedouble <= PD_CMP_MAX_STEPS) ||
      it->valuedouble != floor(it->valuedouble)) {
    cmp_why(why, whylen, "%s: \"%s%s\" must be an integer from %.0f to %d", path, where, key, lo,
            PD_CMP_MAX_STEPS);
    return true;
  }
  *v = it->valuedouble;
  return false;
}

/* True (with why) when the step counts do not fit the document: "steps" and
 * "tables_steps" integers in range; a baseline's "runs" an array of objects whose "steps"
 * (each at least 1) add up to the pooled per-step arrays' length, since a comparison
 * splits the samples by those counts. Checked at load, so no later arithmetic meets a
 * count that is not a small integer. */
static bool cmp_doc_counts_bad(const cJSON *doc, const char *path, char *why, size_t whylen) {
  double one = 0;
  if (cmp_doc_count_bad(doc, "steps", 0, path, "", &one, why, whylen) ||
      cmp_doc_count_bad(doc, "tables_steps", 0, path, "", &one, why, whylen))
    return true;
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(doc, "runs");
  if (runs == NULL) return false;
  if (!cJSON_IsArray(runs)) {
    cmp_why(why, whylen, "%s: \"runs\" is not an array", path);
    return true;
  }
  double total = 0;
  size_t i = 0;
  const cJSON *run = NULL;
  cJSON_ArrayForEach(run, runs) {
    char where[48];
    snprintf(where, sizeof where, "runs[%zu].", i);
    if (!cJSON_IsObject(run)) {
      cmp_why(why, whylen, "%s: \"runs[%zu]\" is not an object", path, i);
      return true;
    }
    if (cJSON_GetObjectItemCaseSensitive(run, "steps") == NULL) {
      cmp_why(why, whylen, "%s: \"runs[%zu].steps\" is missing", path, i);
      return true;
    }
    if (cmp_doc_count_bad(run, "steps", 1, path, where, &one, why, whylen)) return true;
    total += one; /* at most 2^31 runs of at most PD_CMP_MAX_STEPS: exact in a double */
    i++;
  }
  for (size_t k = 0; k < 2; k++) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, k_sample_keys[k]);
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    if (i > 0 && n > 0 && (double)n != total) {
      cmp_why(why, whylen, "%s: the runs' \"steps\" add up to %.0f but \"%s\" holds %d samples", path, total,
              k_sample_keys[k], n);
      return true;
    }
  }
  return false;
}

/* True (with why) when a metric of doc["metrics"] or of a run's "metrics" is neither a
 * number nor null: the comparison reads every one of them (cmp_metric_value) and would
 * refuse the document, so the load refuses it first, for compare and promote alike. */
static bool cmp_doc_metrics_bad(const cJSON *doc, const char *path, char *why, size_t whylen) {
  const cJSON *it = NULL;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(doc, "metrics")) {
    if (!cJSON_IsNumber(it) && !cJSON_IsNull(it)) {
      cmp_why(why, whylen, "%s: metrics.%s is not a number or null", path, it->string);
      return true;
    }
  }
  size_t i = 0;
  const cJSON *run = NULL;
  cJSON_ArrayForEach(run, cJSON_GetObjectItemCaseSensitive(doc, "runs")) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(run, "metrics");
    if (m != NULL && !cJSON_IsObject(m)) {
      cmp_why(why, whylen, "%s: \"runs[%zu].metrics\" is not an object", path, i);
      return true;
    }
    cJSON_ArrayForEach(it, m) {
      if (!cJSON_IsNumber(it) && !cJSON_IsNull(it)) {
        cmp_why(why, whylen, "%s: runs[%zu].metrics.%s is not a number or null", path, i, it->string);
        return true;
      }
    }
    i++;
  }
  return false;
}

int pd_cmp_doc_check(const cJSON *doc, const char *path, char *why, size_t whylen) {
  const char *fault = NULL;
  const cJSON *sv = cJSON_GetObjectItemCaseSensitive(doc, "schema_version");
  const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(doc, "metrics");
  const cJSON *device = cJSON_GetObjectItemCaseSensitive(doc, "device");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(device, "name");
  if (!cJSON_IsObject(doc)) {
    fault = "top level is not a JSON object";
  } else if (!cJSON_IsNumber(sv)) {
    fault = "no numeric \"schema_version\"; not a profiler_demo metrics JSON";
  } else if (sv->valuedouble != 1.0 && sv->valuedouble != 2.0 && sv->valuedouble != 3.0) {
    cmp_why(why, whylen, "%s: schema_version %g is not supported (this build reads 1, 2 and 3)", path,
            sv->valuedouble);
    return PD_ESCHEMA;
  } else if (!cJSON_IsObject(metrics)) {
    fault = "\"metrics\" is missing or not an object";
  } else if (!cJSON_IsString(name) || name->valuestring[0] == '\0') {
    fault = "\"device.name\" is missing; cannot tell which GPU the numbers are from";
  } else if (cmp_doc_samples_bad(doc, path, why, whylen) || cmp_doc_counts_bad(doc, path, why, whylen) ||
             cmp_doc_metrics_bad(doc, path, why, whylen)) {
    return PD_EPARSE; /* why names the field (and the index) */
  } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "incomplete"))) {
    fault = "\"incomplete\": true: the run was stopped early (a signal); its numbers cover only part of "
            "the steps, so it is neither compared nor promoted";
  }
  if (fault != NULL) {
    cmp_why(why, whylen, "%s: %s", path, fault);
    return PD_EPARSE;
  }
  return 0;
}

int pd_cmp_doc_load(const char *path, cJSON **out, char *why, size_t whylen) {
  *out = NULL;
  char *text = NULL;
  size_t len = 0;
  int rc = cmp_read_file(path, &text, &len, why, whylen);
  if (rc != 0) return rc;
  size_t blank = strspn(text, " \t\r\n");
  if (blank == len) {
    free(text);
    cmp_why(why, whylen, "%s: file is empty, expected a metrics JSON", path);
    return PD_EPARSE;
  }
  const char *end = NULL;
  /* len + 1: the terminating NUL is part of what cJSON checks for trailing garbage.
   * cJSON says only that the parse failed; malloc's ENOMEM tells running out of memory
   * (a failure, not bad input) from text that is not JSON. */
  errno = 0;
  cJSON *doc = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
  if (doc == NULL) {
    bool oom = errno == ENOMEM;
    size_t at = end != NULL && end >= text ? (size_t)(end - text) : 0;
    free(text);
    if (oom) {
      cmp_why(why, whylen, "%s: out of memory parsing the file (%zu bytes)", path, len);
      return PD_ENOMEM;
    }
    cmp_why(why, whylen, "%s: not valid JSON (parse error at byte %zu)", path, at);
    return PD_EPARSE;
  }
  free(text);
  rc = pd_cmp_doc_check(doc, path, why, whylen);
  if (rc != 0) {
    cJSON_Delete(doc);
    return rc;
  }
  *out = doc;
  return 0;
}

int pd_gpu_slug(const char *device_name, char *out, size_t outlen) {
  if (device_name == NULL || out == NULL || outlen == 0) return PD_EINVAL;
  size_t n = 0;
  bool dash = false;
  for (const unsigned char *p = (const unsigned char *)device_name; *p != '\0'; p++) {
    if (isalnum(*p)) {
      if (dash && n > 0) {
        if (n + 1 >= outlen) return PD_EINVAL;
        out[n++] = '-';
      }
      dash = false;
      if (n + 1 >= outlen) return PD_EINVAL;
      out[n++] = (char)tolower(*p);
    } else {
      dash = true;
    }
  }
  out[n] = '\0';
  return n > 0 ? 0 : PD_EINVAL;
}

/* ---- comparison ------------------------------------------------------------------------ */

typedef struct {
  double *v;
  size_t n;
  bool present;
} cmp_samples_t;

const char *cmp_string_at(const cJSON *obj, const char *a, const char *b) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, a);
  if (b != NULL) it = cJSON_GetObjectItemCaseSensitive(it, b);
  return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* Reads a per-step array of numbers. An absent key is no samples; null or non-numbers
 * inside are an error (a NaN step time means the profiler is broken). */
static int cmp_samples_read(const cJSON *doc, const char *key, const char *who,
                            cmp_samples_t *s, char *why, size_t whylen) {
  memset(s, 0, sizeof(*s));
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, key);
  if (arr == NULL) return 0;
  if (!cJSON_IsArray(arr)) {
    cmp_why(why, whylen, "%s: \"%s\" is not an array", who, key);
    return PD_EPARSE;
  }
  int n = cJSON_GetArraySize(arr);
  s->present = true;
  if (n == 0) return 0;
  s->v = malloc((size_t)n * sizeof(double));
  if (s->v == NULL) return PD_ENOMEM;
  const cJSON *it = NULL;
  cJSON_ArrayForEach(it, arr) {
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) {
      cmp_why(why, whylen, "%s: \"%s\"[%zu] is %s, expected a finite number of seconds", who,
              key, s->n, cJSON_IsNull(it) ? "null (NaN)" : "not a number");
      free(s->v);
      s->v = NULL;
      return PD_EPARSE;
    }
    s->v[s->n++] = it->valuedouble;
  }
  return 0;
}

size_t pd_cmp_run_quantiles(const cJSON *doc, const char *samples, double q, double *vals,
                            size_t cap) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(doc, samples), *it = NULL;
  int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
  if (n <= 0 || cap == 0) return 0;
  double *xs = malloc((size_t)n * sizeof(*xs));
  if (xs == NULL) return 0;
  size_t m = 0;
  cJSON_ArrayForEach(it, arr) {
    if (cJSON_IsNumber(it) && isfinite(it->valuedouble)) xs[m++] = it->valuedouble;
  }
  /* A baseline's pooled samples are its runs' samples in order: split them by the runs'
   * step counts when those add up, otherwise treat the array as one run. Each count is
   * range-checked before it is added, so no count can wrap the sum. */
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(doc, "runs"), *run = NULL;
  size_t total = 0, nruns = 0;
  cJSON_ArrayForEach(run, runs) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(run, "steps");
    if (!cJSON_IsNumber(st) || !(st->valuedouble >= 1.0) || st->valuedouble > (double)(m - total) ||
        st->valuedouble != floor(st->valuedouble)) {
      total = 0;
      break;
    }
    total += (size_t)st->valuedouble;
    nruns++;
  }
  size_t k = 0;
  if (nruns > 0 && total == m) {
    size_t at = 0;
    cJSON_ArrayForEach(run, runs) {
      size_t len = (size_t)cJSON_GetObjectItemCaseSensitive(run, "steps")->valuedouble;
      if (k < cap) vals[k++] = pd_quantile(xs + at, len, q);
      at += len;
    }
  } else if (m > 0) {
    vals[k++] = pd_quantile(xs, m, q);
  }
  free(xs);
  return k;
}

/* A run's host key: its boot id, else its host name, else "" (not recorded). */
static const char *cmp_host_key(const cJSON *run) {
  const char *boot = cmp_string_at(run, "host", "boot_id");
  if (boot != NULL && boot[0] != '\0') return boot;
  const char *name = cmp_string_at(run, "host", "name");
  return name != NULL ? name : "";
}

size_t cmp_host_index(const cJSON *runs, int *host_of_run, size_t cap) {
  const cJSON *run = NULL;
  size_t n = 0;
  int hosts = 0;
  cJSON_ArrayForEach(run, runs) {
    if (n >= cap) break;
    const char *key = cmp_host_key(run);
    int h = -1;
    size_t j = 0;
    const cJSON *other = NULL;
    cJSON_ArrayForEach(other, runs) {
      if (j >= n) break;
      if (strcmp(cmp_host_key(other), key) == 0) {
        h = host_of_run[j];
        break;
      }
      j++;
    }
    host_of_run[n++] = h >= 0 ? h : hosts++;
  }
  return (size_t)hosts;
}

/* Reads a metric value: a number, or null (NaN). Other types are an error. */
int cmp_metric_value(const cJSON *it, const char *who, double *v, char *why,
                            size_t whylen) {
  if (cJSON_IsNumber(it)) {
    *v = it->valuedouble;
    return 0;
  }
  if (cJSON_IsNull(it)) {
    *v = NAN;
    return 0;
  }
  cmp_why(why, whylen, "%s: metrics.%s is not a number or null", who, it->string);
  return PD_EPARSE;
}

/* Reads a metric's value of a document the same way on both sides of a comparison: for a
 * baseline (or any document with "runs"), the median over its runs' values, so a run
 * recorded in a slow machine state does not move it; for a plain metrics JSON, its own
 * value. absent is set when the document does not have the metric at all. */
int cmp_doc_value(const cJSON *doc, const char *metric, const char *who, double *v, bool *absent,
                  char *why, size_t whylen) {
  *v = NAN;
  *absent = true;
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(doc, "runs"), *run = NULL;
  int nruns = cJSON_IsArray(runs) ? cJSON_GetArraySize(runs) : 0;
  if (nruns > 0) {
    double *xs = malloc((size_t)nruns * sizeof(*xs));
    if (xs == NULL) return PD_ENOMEM;
    size_t n = 0, present = 0;
    int rc = 0;
    cJSON_ArrayForEach(run, runs) {
      const cJSON *it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run, "metrics"), metric);
      if (it == NULL) continue;
      double x;
      if ((rc = cmp_metric_value(it, who, &x, why, whylen)) != 0) break;
      present++;
      if (isfinite(x)) xs[n++] = x;
    }
    if (rc == 0 && present > 0) {
      *absent = false;
      *v = n > 0 ? pd_quantile(xs, n, 0.5) : NAN;
    }
    free(xs);
    if (rc != 0 || present > 0) return rc;
  }
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "metrics"), metric);
  if (it == NULL) return 0;
  *absent = false;
  return cmp_metric_value(it, who, v, why, whylen);
}

static int cmp_enum_parse(const char *text, const char *(*name_of)(int), int count, int *out) {
  for (int i = 0; i < count; i++)
    if (strcmp(name_of(i), text) == 0) {
      *out = i;
      return 0;
    }
  return PD_EINVAL;
}
#define CMP_PLUS_ONE(...) +1
enum {
  CMP_NDIRECTIONS = 0 PD_CMP_DIRECTION_MAP(CMP_PLUS_ONE),
  CMP_NMODES = 0 PD_CMP_MODE_MAP(CMP_PLUS_ONE)
};
static const char *cmp_dir_name_i(int i) { return pd_cmp_direction_name((pd_cmp_direction_t)i); }
static const char *cmp_mode_name_i(int i) { return pd_cmp_mode_name((pd_cmp_mode_t)i); }

/* Reads one metric's stored policy over the defaults in *p. */
static int cmp_policy_read(const cJSON *obj, const char *who, const char *metric, pd_cmp_policy_t *p,
                           char *why, size_t whylen) {
  if (!cJSON_IsObject(obj)) {
    cmp_why(why, whylen, "%s: policy.%s is not an object", who, metric);
    return PD_EPARSE;
  }
  const cJSON *dir = cJSON_GetObjectItemCaseSensitive(obj, "direction");
  const cJSON *mode = cJSON_GetObjectItemCaseSensitive(obj, "mode");
  int val = 0;
  if (dir != NULL) {
    if (!cJSON_IsString(dir) || cmp_enum_parse(dir->valuestring, cmp_dir_name_i, CMP_NDIRECTIONS, &val) != 0) {
      cmp_why(why, whylen,
              "%s: policy.%s.direction must be lower_is_better, higher_is_better or none", who,
              metric);
      return PD_EPARSE;
    }
    p->direction = (pd_cmp_direction_t)val;
  }
  if (mode != NULL) {
    if (!cJSON_IsString(mode) || cmp_enum_parse(mode->valuestring, cmp_mode_name_i, CMP_NMODES, &val) != 0) {
      cmp_why(why, whylen, "%s: policy.%s.mode must be significance, exact or band", who,
              metric);
      return PD_EPARSE;
    }
    p->mode = (pd_cmp_mode_t)val;
  }
  static const char *const nums[] = {"tolerance", "band", "min_abs"};
  double *dst[] = {&p->tolerance, &p->band, &p->min_abs};
  for (size_t i = 0; i < 3; i++) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, nums[i]);
    if (it == NULL) continue;
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0.0)) {
      cmp_why(why, whylen, "%s: policy.%s.%s must be a number >= 0", who, metric, nums[i]);
      return PD_EPARSE;
    }
    *dst[i] = it->valuedouble;
  }
  return 0;
}

static const char *cmp_side(double change) { return change > 0 ? "higher" : "lower"; }

/* Decides a numeric row. Samples are NULL when the metric has none. */
static void cmp_eval(pd_cmp_row_t *r, const cmp_samples_t *sb, const cmp_samples_t *sn,
                     double alpha) {
  double base = r->base, now = r->now, diff = now - base;
  const pd_cmp_policy_t *p = &r->policy;
  r->p_value = NAN;
  if (isnan(base) || isnan(now)) {
    r->change_pct = NAN;
    if (isnan(now) && isnan(base)) {
      r->verdict = PD_CMP_SKIPPED;
      snprintf(r->note, sizeof(r->note), "null (NaN) in baseline and now: not compared");
    } else if (isnan(now)) {
      r->verdict = PD_CMP_REGRESSED;
      snprintf(r->note, sizeof(r->note), "now null (NaN): the metric could not be computed");
    } else {
      r->verdict = PD_CMP_SKIPPED;
      snprintf(r->note, sizeof(r->note), "baseline is null (NaN): not compared; re-promote it");
    }
    return;
  }
  r->change_pct = base != 0.0 ? diff / fabs(base) * 100.0
                              : (diff == 0.0 ? 0.0 : copysign(INFINITY, diff));
  bool bad = (p->direction == PD_CMP_DIR_LOWER_IS_BETTER && diff > 0) ||
             (p->direction == PD_CMP_DIR_HIGHER_IS_BETTER && diff < 0);
  pd_cmp_verdict_t beyond = bad ? PD_CMP_REGRESSED : PD_CMP_IMPROVED;
  bool report_only = p->direction == PD_CMP_DIR_NONE;

  if (p->mode != PD_CMP_MODE_SIGNIFICANCE) {
    /* exact: any difference (beyond float noise in the JSON text) counts */
    double allowed = p->mode == PD_CMP_MODE_BAND ? fmax(p->band * fabs(base), p->min_abs)
                                                 : fmax(p->min_abs, 1e-9 * fabs(base));
    bool outside = fabs(diff) > allowed;
    if (report_only) {
      r->verdict = PD_CMP_OK;
      snprintf(r->note, sizeof(r->note), "report only%s", outside ? " (changed)" : "");
    } else if (!outside) {
      r->verdict = PD_CMP_OK;
      if (p->mode == PD_CMP_MODE_EXACT)
        snprintf(r->note, sizeof(r->note), "exact match");
      else
        snprintf(r->note, sizeof(r->note), "within band +-%.3g%%%s", p->band * 100.0,
                 p->min_abs > p->band * fabs(base) ? " (absolute floor)" : "");
    } else {
      r->verdict = beyond;
      if (p->mode == PD_CMP_MODE_EXACT)
        snprintf(r->note, sizeof(r->note), "count is %s than the baseline (compared exactly)",
                 cmp_side(diff));
      else
        snprintf(r->note, sizeof(r->note), "%s than the baseline beyond its band +-%.3g%%%s", cmp_side(diff),
                 p->band * 100.0, p->min_abs > p->band * fabs(base) ? " and its absolute floor" : "");
    }
    return;
  }

  /* significance: large (beyond tolerance) AND significant against the samples */
  double allowed = fmax(p->tolerance * fabs(base), p->min_abs);
  bool large = fabs(diff) > allowed;
  if (sb == NULL || sn == NULL || sb->n == 0 || sn->n == 0) {
    r->verdict = report_only ? PD_CMP_OK : PD_CMP_SKIPPED;
    snprintf(r->note, sizeof(r->note),
             "%sinsufficient samples: no per-step samples on %s side; cannot test (%s)",
             report_only ? "report only; " : "", (sb == NULL || sb->n == 0) ? "the baseline" : "the current",
             large ? "change is beyond tolerance" : "change is within tolerance");
    return;
  }
  r->n_base = sb->n;
  r->n_now = sn->n;
  double min_p = pd_mwu_min_p(sn->n, sb->n);
  if (min_p > alpha) {
    r->verdict = report_only ? PD_CMP_OK : PD_CMP_SKIPPED;
    snprintf(r->note, sizeof(r->note),
             "insufficient samples: %zu now vs %zu baseline can never reach p < %g (best p %.3g); "
             "not tested, not failed",
             sn->n, sb->n, alpha, min_p);
    return;
  }
  pd_mwu_t t;
  if (pd_mwu_test(sn->v, sn->n, sb->v, sb->n, &t) != 0) {
    r->verdict = PD_CMP_SKIPPED;
    snprintf(r->note, sizeof(r->note), "rank test failed (out of memory)");
    return;
  }
  r->p_value = diff >= 0 ? t.p_greater : t.p_less;
  bool significant = r->p_value < alpha;
  if (report_only) {
    r->verdict = PD_CMP_OK;
    snprintf(r->note, sizeof(r->note), "report only");
  } else if (!large) {
    r->verdict = PD_CMP_OK;
    snprintf(r->note, sizeof(r->note), "within tolerance +-%.3g%%%s", p->tolerance * 100.0,
             p->min_abs > 0 && p->min_abs > p->tolerance * fabs(base) ? " (absolute floor)" : "");
  } else if (!significant) {
    r->verdict = PD_CMP_OK;
    snprintf(r->note, sizeof(r->note), "beyond tolerance but not significant (p >= %g)", alpha);
  } else {
    r->verdict = beyond;
    snprintf(r->note, sizeof(r->note), "%s beyond tolerance +-%.3g%% and significant (%s U test)",
             cmp_side(diff), p->tolerance * 100.0, t.exact ? "exact" : "normal-approx.");
  }
}

pd_cmp_row_t *cmp_row_add(pd_cmp_report_t *rep, size_t *cap, const char *metric) {
  if (rep->nrows == *cap) {
    size_t ncap = *cap ? *cap * 2 : 32;
    pd_cmp_row_t *rows = realloc(rep->rows, ncap * sizeof(*rows));
    if (rows == NULL) return NULL;
    rep->rows = rows;
    *cap = ncap;
  }
  pd_cmp_row_t *r = &rep->rows[rep->nrows++];
  memset(r, 0, sizeof(*r));
  snprintf(r->metric, sizeof(r->metric), "%s", metric);
  r->base = r->now = r->change_pct = r->p_value = r->mde_fraction = NAN;
  return r;
}

/* Notes config keys whose values differ (paths excluded): reported, never failed, since
 * a knob such as --inject_slowdown is exactly what the gate must judge by the numbers. */
static void cmp_config_note(const cJSON *cur, const cJSON *base, char *out, size_t outlen) {
  const cJSON *cc = cJSON_GetObjectItemCaseSensitive(cur, "config");
  const cJSON *bc = cJSON_GetObjectItemCaseSensitive(base, "config");
  out[0] = '\0';
  if (!cJSON_IsObject(cc) || !cJSON_IsObject(bc)) return;
  size_t used = 0;
  const cJSON *it = NULL;
  cJSON_ArrayForEach(it, cc) {
    if (strcmp(it->string, "trace_dir") == 0 || strcmp(it->string, "output_json") == 0) continue;
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(bc, it->string);
    if (other != NULL && cJSON_Compare(it, other, 1)) continue;
    char *a = cJSON_PrintUnformatted(it);
    char *b = other != NULL ? cJSON_PrintUnformatted(other) : NULL;
    int w = snprintf(out + used, outlen - used, "%s%s=%s (baseline %s)", used ? ", " : "",
                     it->string, a ? a : "?", b ? b : "absent");
    free(a);
    free(b);
    if (w < 0 || (size_t)w >= outlen - used) break;
    used += (size_t)w;
  }
}

int pd_cmp_compare(const cJSON *current, const cJSON *baseline, const pd_cmp_options_t *opt,
                   pd_cmp_report_t *rep, char *why, size_t whylen) {
  memset(rep, 0, sizeof(*rep));
  rep->alpha = opt != NULL && opt->alpha > 0.0 ? opt->alpha : 0.01;
  /* Messages name the files by path when the caller gave them. */
  const char *cur_who = opt != NULL && opt->current_name != NULL ? opt->current_name : "current";
  const char *base_who = opt != NULL && opt->baseline_name != NULL ? opt->baseline_name : "baseline";
  const char *cur_dev = cmp_string_at(current, "device", "name");
  const char *base_dev = cmp_string_at(baseline, "device", "name");
  if (cur_dev == NULL || base_dev == NULL) {
    cmp_why(why, whylen, "device.name missing; load the files with pd_cmp_doc_load()");
    return PD_EPARSE;
  }
  if (strcmp(cur_dev, base_dev) != 0) {
    cmp_why(why, whylen,
            "different GPU: the current run is from '%s', the baseline from '%s'; baselines "
            "belong to one GPU model, so nothing was compared (make a baseline for this GPU "
            "with scripts/update_baselines.sh)",
            cur_dev, base_dev);
    return PD_EMISMATCH;
  }
  const char *cur_scen = cmp_string_at(current, "config", "scenario");
  const char *base_scen = cmp_string_at(baseline, "config", "scenario");
  if (cur_scen != NULL && base_scen != NULL && strcmp(cur_scen, base_scen) != 0) {
    cmp_why(why, whylen,
            "different scenario: the current run is '%s', the baseline '%s'; nothing compared",
            cur_scen, base_scen);
    return PD_EMISMATCH;
  }
  snprintf(rep->device, sizeof(rep->device), "%s", cur_dev);
  snprintf(rep->scenario, sizeof(rep->scenario), "%s",
           cur_scen ? cur_scen : base_scen ? base_scen : "?");
  const cJSON *runs = cJSON_GetObjectItemCaseSensitive(baseline, "runs");
  rep->setting = PD_CMP_STORED;
  rep->baseline_runs = cJSON_IsArray(runs) && cJSON_GetArraySize(runs) > 0
                           ? (size_t)cJSON_GetArraySize(runs) : 1;
  if (cJSON_IsArray(runs) && cJSON_GetArraySize(runs) > 0) {
    int *hosts = malloc((size_t)cJSON_GetArraySize(runs) * sizeof(*hosts));
    if (hosts == NULL) return PD_ENOMEM;
    rep->baseline_hosts = cmp_host_index(runs, hosts, (size_t)cJSON_GetArraySize(runs));
    free(hosts);
  }
  cmp_config_note(current, baseline, rep->config_note, sizeof(rep->config_note));

  const cJSON *bm = cJSON_GetObjectItemCaseSensitive(baseline, "metrics");
  const cJSON *cm = cJSON_GetObjectItemCaseSensitive(current, "metrics");
  const cJSON *policy = cJSON_GetObjectItemCaseSensitive(baseline, "policy");
  if (policy != NULL && !cJSON_IsObject(policy)) {
    cmp_why(why, whylen, "%s: \"policy\" is not an object", base_who);
    return PD_EPARSE;
  }

  /* The per-step arrays, read once. */
  cmp_samples_t sb[2], sn[2];
  memset(sb, 0, sizeof(sb));
  memset(sn, 0, sizeof(sn));
  int rc = 0;
  for (size_t k = 0; k < 2 && rc == 0; k++) {
    rc = cmp_samples_read(baseline, k_sample_keys[k], base_who, &sb[k], why, whylen);
    if (rc == 0) rc = cmp_samples_read(current, k_sample_keys[k], cur_who, &sn[k], why, whylen);
  }
  double base_step = NAN;
  bool no_step = false;
  if (rc == 0) rc = cmp_doc_value(baseline, "avg_step_time_s", base_who, &base_step, &no_step, why, whylen);
  double base_kernels = NAN;
  bool no_kernels = false;
  if (rc == 0) rc = cmp_doc_value(baseline, "kernels_per_step", base_who, &base_kernels, &no_kernels, why, whylen);
  if (no_kernels) base_kernels = NAN;

  size_t cap_rows = 0;
  const cJSON *it = NULL;
  cJSON_ArrayForEach(it, bm) {
    if (rc != 0) break;
    pd_cmp_row_t *r = cmp_row_add(rep, &cap_rows, it->string);
    if (r == NULL) {
      rc = PD_ENOMEM;
      break;
    }
    bool absent = false;
    if ((rc = cmp_metric_value(it, base_who, &r->base, why, whylen)) != 0) break;
    if ((rc = cmp_doc_value(baseline, it->string, base_who, &r->base, &absent, why, whylen)) != 0) break;
    pd_cmp_policy_default(it->string, PD_CMP_STORED, base_step, &r->policy);
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(policy, it->string);
    if (pol != NULL && (rc = cmp_policy_read(pol, base_who, it->string, &r->policy, why, whylen)) != 0)
      break;
    pd_cmp_policy_kernel_floor(it->string, PD_CMP_STORED, base_kernels, &r->policy);
    if ((rc = cmp_doc_value(current, it->string, cur_who, &r->now, &absent, why, whylen)) != 0) break;
    if (absent) {
      r->verdict = PD_CMP_MISSING;
      snprintf(r->note, sizeof(r->note), "in the baseline but not in the current run");
      continue;
    }
    const char *skey = pd_cmp_metric_samples_key(it->string);
    size_t k = skey != NULL && strcmp(skey, k_sample_keys[1]) == 0 ? 1 : 0;
    cmp_eval(r, skey ? &sb[k] : NULL, skey ? &sn[k] : NULL, rep->alpha);
  }
  /* The gate's own statistics from the per-step samples, where the baseline has them. */
  size_t nderived = 0;
  const pd_cmp_derived_t *derived = pd_cmp_derived_metrics(&nderived);
  for (size_t d = 0; d < nderived && rc == 0; d++) {
    size_t k = 0;
    while (k < 2 && strcmp(derived[d].samples, k_sample_keys[k]) != 0) k++;
    if (k == 2) continue; /* samples a stored baseline does not pool (the A/B's own rows) */
    if (sb[k].n == 0) continue;
    size_t cap = sb[k].n > sn[k].n ? sb[k].n : sn[k].n;
    double *vals = malloc((cap + 1) * sizeof(*vals));
    pd_cmp_row_t *r = vals != NULL ? cmp_row_add(rep, &cap_rows, derived[d].name) : NULL;
    if (r == NULL) {
      free(vals);
      rc = PD_ENOMEM;
      break;
    }
    size_t nb = pd_cmp_run_quantiles(baseline, derived[d].samples, derived[d].q, vals, cap);
    /* The baseline's value is the median over its runs, like the spread the tolerance
     * comes from: a run recorded in a slow state of the machine (2 of 10 on an H100, 21%
     * slower in every step) must not move it, or a real 5% slowdown hides under it. */
    r->base = nb > 0 ? pd_quantile(vals, nb, 0.5) : NAN;
    pd_cmp_policy_default(derived[d].name, PD_CMP_STORED, base_step, &r->policy);
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(policy, derived[d].name);
    if (pol != NULL) rc = cmp_policy_read(pol, base_who, derived[d].name, &r->policy, why, whylen);
    /* The same statistic on both sides: the median of the runs' quantiles (one run for
     * a plain metrics JSON, every run when the current document is itself pooled). */
    size_t nn = pd_cmp_run_quantiles(current, derived[d].samples, derived[d].q, vals, cap);
    r->now = nn > 0 ? pd_quantile(vals, nn, 0.5) : NAN;
    free(vals);
    if (rc != 0) break;
    if (nn == 0) {
      r->verdict = PD_CMP_SKIPPED;
      snprintf(r->note, sizeof(r->note), "insufficient samples: the current run has no %s",
               derived[d].samples);
      continue;
    }
    cmp_eval(r, &sb[k], &sn[k], rep->alpha);
    size_t len = strlen(r->note);
    snprintf(r->note + len, sizeof(r->note) - len, " [p%.0f of each run's %s]",
             derived[d].q * 100.0, derived[d].samples);
  }
  cJSON_ArrayForEach(it, cm) {
    if (rc != 0) break;
    if (cJSON_GetObjectItemCaseSensitive(bm, it->string) != NULL) continue;
    pd_cmp_row_t *r = cmp_row_add(rep, &cap_rows, it->string);
    if (r == NULL) {
      rc = PD_ENOMEM;
      break;
    }
    if ((rc = cmp_metric_value(it, cur_who, &r->now, why, whylen)) != 0) break;
    pd_cmp_policy_default(it->string, PD_CMP_STORED, base_step, &r->policy);
    r->verdict = PD_CMP_NEW;
    snprintf(r->note, sizeof(r->note), "not in the baseline: reported, not compared");
  }
  for (size_t k = 0; k < 2; k++) {
    free(sb[k].v);
    free(sn[k].v);
  }

  /* The verdict's bottleneck must match. */
  if (rc == 0) {
    pd_cmp_row_t *r = cmp_row_add(rep, &cap_rows, "verdict.bottleneck");
    if (r == NULL) {
      rc = PD_ENOMEM;
    } else {
      const char *b = cmp_string_at(baseline, "verdict", "bottleneck");
      const char *n = cmp_string_at(current, "verdict", "bottleneck");
      r->text = true;
      r->policy.mode = PD_CMP_MODE_EXACT;
      snprintf(r->base_text, sizeof(r->base_text), "%s", b ? b : "-");
      snprintf(r->now_text, sizeof(r->now_text), "%s", n ? n : "-");
      if (b == NULL) {
        r->verdict = PD_CMP_SKIPPED;
        snprintf(r->note, sizeof(r->note), "the baseline has no verdict");
      } else if (n == NULL) {
        r->verdict = PD_CMP_MISSING;
        snprintf(r->note, sizeof(r->note), "the current run has no verdict");
      } else if (strcmp(b, n) != 0 && cmp_doc_schema(baseline) < 3 && cmp_doc_schema(current) >= 3) {
        /* schema 1 named it from a rule table, schema 2 from the time attribution; schema 3
         * from the replay's savings */
        r->verdict = PD_CMP_SKIPPED;
        snprintf(r->note, sizeof(r->note),
                 "the baseline's verdict comes from schema %d's %s; re-record it "
                 "(scripts/update_baselines.sh --replace)",
                 cmp_doc_schema(baseline), cmp_doc_schema(baseline) < 2 ? "rule table" : "time attribution");
      } else if (strcmp(b, n) != 0 && cmp_doc_schema(baseline) < 2) {
        r->verdict = PD_CMP_SKIPPED;
        snprintf(r->note, sizeof(r->note),
                 "the baseline's verdict comes from schema 1's rule table; re-record it "
                 "(scripts/update_baselines.sh --replace)");
      } else if (strcmp(b, n) != 0 && pd_bottleneck_is_balance(b) && pd_bottleneck_is_balance(n)) {
        /* compute / host_bound / launch_overhead say where the host/GPU balance of the
         * step lies, and that moves between hosts of one GPU model (a fresh H100 left
         * the clean step's GPU busy 41% where another host had 66%). The exact kernel
         * and call counts guard the step's shape; time is judged A/B on one machine. */
        r->verdict = PD_CMP_OK;
        snprintf(r->note, sizeof(r->note), "host/GPU balance moved from %s to %s (host-dependent; not judged here)",
                 b, n);
      } else if (strcmp(b, n) != 0) {
        r->verdict = PD_CMP_REGRESSED;
        snprintf(r->note, sizeof(r->note), "bottleneck changed from %s to %s", b, n);
      } else {
        r->verdict = PD_CMP_OK;
        snprintf(r->note, sizeof(r->note), "same bottleneck");
      }
    }
  }
  if (rc == 0) rc = pd_cmp_explain(&baseline, 1, &current, 1, rep);
  if (rc != 0) return rc;
  cmp_report_tally(rep);
  return 0;
}

int cmp_doc_schema(const cJSON *doc) {
  const cJSON *sv = cJSON_GetObjectItemCaseSensitive(doc, "schema_version");
  return cJSON_IsNumber(sv) && sv->valuedouble >= 1 && sv->valuedouble <= 1e6 ? (int)sv->valuedouble : 0;
}

const char *cmp_majority(const char *const *names, size_t n, size_t *count, size_t *named) {
  const char *best = NULL;
  size_t best_count = 0, nnamed = 0;
  for (size_t i = 0; i < n; i++) {
    if (names[i] == NULL) continue;
    nnamed++;
    size_t c = 0;
    for (size_t j = 0; j < n; j++) c += names[j] != NULL && strcmp(names[j], names[i]) == 0;
    if (c > best_count) {
      best = names[i];
      best_count = c;
    }
  }
  if (count != NULL) *count = best_count;
  if (named != NULL) *named = nnamed;
  return best;
}

void cmp_report_tally(pd_cmp_report_t *rep) {
  memset(rep->counts, 0, sizeof(rep->counts));
  rep->failed = false;
  for (size_t i = 0; i < rep->nrows; i++) {
    rep->counts[rep->rows[i].verdict]++;
    if (pd_cmp_verdict_fails(rep->rows[i].verdict)) rep->failed = true;
  }
}

void pd_cmp_report_free(pd_cmp_report_t *rep) {
  if (rep == NULL) return;
  free(rep->rows);
  rep->rows = NULL;
  rep->nrows = 0;
}
