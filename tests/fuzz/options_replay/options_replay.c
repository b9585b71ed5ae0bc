/* options_replay.c: replays inputs through the three option parsers (profiler_demo's,
 * profile_analyze's, profile_compare's) and prints, one line per input and program, the
 * status, the error line and every parsed field. Built twice by scripts/options_replay.sh,
 * once over the parsers of an earlier commit and once over the working tree's, whose
 * outputs must be identical: a refactor of the parsers keeps every message and exit code.
 *
 *   options_replay FILE...   each file split at NUL bytes into argv[1..], as the fuzz
 *                            targets split their inputs (tests/fuzz/<parser>_options)
 *   options_replay -g N      N generated argument vectors per program (fixed seed): flags
 *                            of all three programs, good and bad values, "=" forms, "-",
 *                            empty and odd strings, in random order and number */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze_cli.h"
#include "compare_cli.h"
#include "demo.h"

#define MAX_ARGS 66

static void put_str(const char *key, const char *s) {
  printf(" %s=", key);
  if (s == NULL) {
    printf("NULL");
    return;
  }
  putchar('\'');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p < 0x20 || *p >= 0x7f || *p == '\'' || *p == '\\') printf("\\x%02x", *p);
    else putchar(*p);
  }
  putchar('\'');
}

/* The start of a program's line: its status and error line. */
static void put_head(const char *prog, int rc, const char *err) {
  printf("%s rc=%d", prog, rc);
  put_str("err", err);
}

static void dump_demo(int argc, char **argv) {
  pd_demo_config_t c;
  char err[512] = "";
  int rc = pd_demo_config_parse(argc, argv, &c, err, sizeof err);
  put_head("demo", rc, err);
  if (rc == 0) {
    printf(" action=%d scen=%d bs=%d amp=%d warm=%d prof=%d wait=%d rep=%d steps=%lld seed=%lld dev=%d nw=%d pf=%d "
           "pw=%d pin=%d",
           c.action, c.scenario, c.batch_size, c.amp, c.warmup_steps, c.profile_steps, c.wait_steps, c.repeat,
           (long long)c.steps, (long long)c.seed, c.device, c.num_workers, c.prefetch_factor, c.persistent_workers,
           c.pin_memory);
    put_str("trace_dir", c.trace_dir);
    put_str("json", c.output_json);
    put_str("stacks", c.export_stacks);
    printf(" ws=%d sm=%d gbs=%d gz=%d budget=%d top=%d sort=%d level=%d quiet=%d noprof=%d names=%d nosync=%d tm=%d "
           "td=%d alloc=%d churn=%d inj=%.17g injg=%.17g",
           c.with_stack, c.stacks_metric, c.group_by_stack_n, c.trace_gzip, c.cupti_buffer_budget_mib, c.top_n,
           c.sort_by, c.profile_level, c.quiet, c.no_profile, c.list_names, c.no_sync, c.tiny_ops_mode,
           c.tiny_ops_depth, c.allocator, c.churn_buffers, c.inject_slowdown, c.inject_gpu_slowdown);
  }
  putchar('\n');
}

static void dump_analyze(int argc, char **argv) {
  pd_analyze_cli_t o;
  char err[1024] = "";
  int rc = pd_analyze_cli_parse(argc, argv, &o, err, sizeof err);
  put_head("analyze", rc, rc == PD_ACLI_BAD ? err : "");
  if (rc == PD_ACLI_RUN) {
    put_str("trace", o.trace);
    printf(" top=%d agg=%d order=%d min=%lld", o.top, (int)o.opts.aggregate, (int)o.opts.order,
           (long long)o.opts.min_time_ns);
    put_str("type", o.opts.type);
    printf(" bd=%d", o.breakdown);
    put_str("html", o.html);
    put_str("diff", o.diff);
    put_str("json", o.json);
    printf(" gbs=%d", o.group_by_stack_n);
    put_str("stacks", o.export_stacks);
    printf(" sm=%d set=%d", (int)o.stacks_metric, o.stacks_metric_set);
  }
  putchar('\n');
}

static void put_list(const char *key, const char *const *v, size_t n) {
  printf(" %s=[", key);
  for (size_t i = 0; i < n; i++) put_str("", v[i]);
  printf("]");
}

static void dump_compare(int argc, char **argv) {
  pd_compare_cli_t c;
  char err[1024] = "";
  int rc = pd_compare_cli_parse(argc, argv, &c, err, sizeof err);
  put_head("compare", rc, err);
  if (rc == 0) {
    printf(" mode=%d", (int)c.mode);
    put_list("files", c.files, c.nfiles);
    if (c.base != NULL) put_list("base", c.base, c.nbase);
    if (c.head != NULL) put_list("head", c.head, c.nhead);
    if (c.runs != NULL) put_list("runs", c.runs, c.nruns);
    put_str("json", c.json_out);
    put_str("md", c.md_out);
    printf(" alpha=%.17g quiet=%d", c.alpha, c.quiet);
    put_str("out", c.out);
    put_str("commit", c.commit);
    put_str("command", c.command);
    put_str("date", c.date);
  }
  pd_compare_cli_free(&c);
  putchar('\n');
}

static void dump_all(const char *label, int argc, char **argv) {
  printf("# %s\n", label);
  argv[0] = "profiler_demo";
  dump_demo(argc, argv);
  argv[0] = "profile_analyze";
  dump_analyze(argc, argv);
  argv[0] = "profile_compare";
  dump_compare(argc, argv);
}

/* Splits data at NUL bytes as the fuzz targets do (a trailing NUL gives an empty last
 * argument). */
static void replay_bytes(const char *label, char *buf, size_t size) {
  char *argv[MAX_ARGS + 1] = {NULL};
  int argc = 1;
  for (size_t i = 0; i <= size && argc < MAX_ARGS - 1;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  dump_all(label, argc, argv);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}

/* Words of all three command lines, and values good and bad for them. */
static const char *const k_words[] = {
    /* profiler_demo */
    "--scenario", "--batch_size", "--amp", "--warmup_steps", "--profile_steps", "--wait_steps", "--repeat", "--steps",
    "--seed", "--device", "--num_workers", "--prefetch_factor", "--persistent_workers", "--pin_memory", "--trace_dir",
    "--output_json", "--cupti_buffer_budget_mib", "--trace_gzip", "--with_stack", "--export_stacks",
    "--stacks_metric", "--group_by_stack_n", "--top_n", "--sort_by", "--profile_level", "--quiet", "--no_profile",
    "--no_sync", "--tiny_ops_mode", "--tiny_ops_depth", "--allocator", "--churn_buffers", "--inject_slowdown",
    "--inject_gpu_slowdown", "--list_scenarios", "--names", "--help", "-h", "--version", "--scenario=sync",
    "--batch_size=0", "--amp=1", "--output_json=-", "--repeat=0", "--steps=5",
    /* profile_analyze */
    "-t", "--top", "--aggregate-by", "--order-by", "--min-time", "--type", "--breakdown", "--html", "--diff", "--json",
    "-t=3", "--top=2", "--breakdown=1", "--json=-", "--html=", "--help=1", "--min-time=0.5",
    /* profile_compare */
    "--promote", "--slug", "--base", "--head", "--markdown", "--alpha", "-o", "--output", "--commit", "--command",
    "--date", "--alpha=0.1", "--output=x",
    /* values */
    "-", "--", "", "x", "a.json", "b.json", "t.json", "0", "1", "2", "3", "-1", "+5", " 5", "5 ", "1e3", "0x10", "inf",
    "nan", "0.05", "0.5", "0.6", "1e-400", "1e400", "99999999999999999999", "-0", ".5", "name", "type", "time",
    "memory", "calls", "clean", "dataloader", "sync", "tiny_ops", "memory_churn", "lean", "full", "graph", "pool",
    "self_cuda_time_total", "self_cpu_time_total", "100", "101", "65536", "1000001", "/dev/null", "-x", "-tx",
    "--nope", "--scenario=", "a\nb", "\x1b[2J", "caf\xc3\xa9", "\xff", "=", "--=x", "-h=1", "-o=x"};
#define NWORDS (sizeof k_words / sizeof k_words[0])
static size_t k_first_value; /* index of "-", the first of the values (main sets it) */

static void replay_generated(long n) {
  char label[64];
  for (long k = 0; k < n; k++) {
    char *argv[MAX_ARGS + 1] = {NULL};
    int argc = 1;
    int len = (int)(rnd() % 9);
    if (rnd() % 8 == 0) len += (int)(rnd() % 20);
    /* half the words a flag followed by a value, so that more command lines parse */
    for (int i = 0; i < len && argc < MAX_ARGS - 2; i++) {
      argv[argc++] = (char *)k_words[rnd() % NWORDS];
      if (rnd() % 2 == 0) argv[argc++] = (char *)k_words[k_first_value + rnd() % (NWORDS - k_first_value)];
    }
    argv[argc] = NULL;
    snprintf(label, sizeof label, "generated %ld", k);
    dump_all(label, argc, argv);
  }
}

int main(int argc, char **argv) {
  while (k_first_value < NWORDS && strcmp(k_words[k_first_value], "-") != 0) k_first_value++;
  if (argc == 3 && strcmp(argv[1], "-g") == 0) {
    replay_generated(strtol(argv[2], NULL, 10));
    return 0;
  }
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (f == NULL) {
      fprintf(stderr, "options_replay: cannot read %s\n", argv[i]);
      return 2;
    }
    static char buf[4097];
    size_t n = fread(buf, 1, 4096, f);
    fclose(f);
    buf[n] = 0;
    replay_bytes(argv[i], buf, n);
  }
  return 0;
}
