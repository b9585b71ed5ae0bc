/* overhead_json_get.c: the C fallback reader of profiler_overhead.sh, for a host with
 * neither python3 nor jq. Reads one profiler_demo metrics JSON and prints the fields the
 * overhead table needs on one tab-separated line, in the same format as the script's
 * python3 and jq readers:
 *
 *   avg_step_time_s  p50_step_time_s  trace_files  kernels_per_step  no_profile  est_added_us  device
 *
 * Numbers as "%.17g"; a null (not measured) metric as "null"; no_profile "true" or
 * "false" (absent counts as false); device is device.name or "unknown".
 * Exit 0, or 2 with one line on stderr when the file cannot be read or is not a
 * metrics JSON.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

/* Returns the file's bytes, NUL-terminated (caller frees), or NULL. */
static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  char chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    if (len + got + 1 > cap) {
      size_t ncap = (len + got + 1) * 2;
      char *nbuf = realloc(buf, ncap);
      if (nbuf == NULL) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nbuf;
      cap = ncap;
    }
    memcpy(buf + len, chunk, got);
    len += got;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  if (buf == NULL) buf = calloc(1, 1);
  if (buf != NULL) buf[len] = '\0';
  return buf;
}

/* Prints a metric as a number or "null" (the writer's NaN). */
static void print_metric(const cJSON *metrics, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(metrics, key);
  if (cJSON_IsNumber(v))
    printf("%.17g", v->valuedouble);
  else
    printf("null");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: overhead_json_get METRICS_JSON\n");
    return 2;
  }
  char *text = read_all(argv[1]);
  if (text == NULL) {
    fprintf(stderr, "overhead_json_get: cannot read '%s'\n", argv[1]);
    return 2;
  }
  cJSON *root = cJSON_Parse(text);
  free(text);
  const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(root, "metrics");
  if (!cJSON_IsObject(metrics)) {
    fprintf(stderr, "overhead_json_get: '%s' is not a profiler_demo metrics JSON (no metrics object)\n", argv[1]);
    cJSON_Delete(root);
    return 2;
  }
  const cJSON *traces = cJSON_GetObjectItemCaseSensitive(root, "trace_files");
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(root, "config");
  const cJSON *no_profile = cJSON_GetObjectItemCaseSensitive(config, "no_profile");
  const cJSON *device = cJSON_GetObjectItemCaseSensitive(root, "device");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(device, "name");

  print_metric(metrics, "avg_step_time_s");
  printf("\t");
  print_metric(metrics, "p50_step_time_s");
  printf("\t%d\t", cJSON_IsArray(traces) ? cJSON_GetArraySize(traces) : 0);
  print_metric(metrics, "kernels_per_step");
  printf("\t%s\t", cJSON_IsTrue(no_profile) ? "true" : "false");
  /* The profiler's own estimate of what it added per step (profiler_cost). */
  print_metric(cJSON_GetObjectItemCaseSensitive(root, "profiler_cost"), "est_added_us_per_step");
  printf("\t%s\n", cJSON_IsString(name) ? name->valuestring : "unknown");
  cJSON_Delete(root);
  return 0;
}
