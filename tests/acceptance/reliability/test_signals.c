/* test_signals.c: profiler_demo stopped by a signal, with a tiny CUPTI buffer budget, and
 * over repeated cycles (--repeat 0),
 * on a GPU (exit 77 without one).
 *
 *  - SIGINT during the profiled steps: exit 130, the trace of the steps recorded so far
 *    (complete, readable) and a metrics JSON with "incomplete": true, "stopped_by":
 *    "SIGINT" and "steps_done"; no temporary left;
 *  - SIGTERM during the warmup: exit 143, the metrics JSON marked incomplete, no trace;
 *  - two SIGTERMs at once: exit 143 at once, no temporary and no partial file left;
 *  - two runs writing into one trace directory at once: two complete traces.
 * The signal is sent after a fixed delay; the test checks which phase it landed in from
 * steps_done and fails with a clear message when the delay missed the phase it wants.
 */
#define _GNU_SOURCE /* unshare */
#include <criterion/criterion.h>
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pd/pd_analyze.h"
#include "pd/pd_event.h"

static char g_dir[128];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/pd_accept_sig.XXXXXX");
  cr_assert_not_null(mkdtemp(g_dir));
}
static void teardown(void) {
  if (getenv("PD_KEEP_ACCEPT_DIR") != NULL) return;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}
TestSuite(signals, .init = setup, .fini = teardown);

/* The log of the run started with tag (0: the plain start_demo()). */
static void log_path(int tag, char *buf, size_t len) {
  if (tag == 0)
    snprintf(buf, len, "%s/../pd_accept_sig_%d.log", g_dir, (int)getpid());
  else
    snprintf(buf, len, "%s/../pd_accept_sig_%d.%d.log", g_dir, (int)getpid(), tag);
}

/* The whole log of the run started with tag. */
static void read_log(int tag, char *text, size_t len) {
  char log[256];
  log_path(tag, log, sizeof log);
  FILE *f = fopen(log, "r");
  cr_assert_not_null(f, "no log %s", log);
  size_t n = fread(text, 1, len - 1, f);
  fclose(f);
  text[n] = 0;
}

/* Starts profiler_demo with the given flags, --trace_dir DIR/traces and --output_json
 * DIR/json_name (DIR: dir, or g_dir when NULL); its output goes to log_path(tag). */
static pid_t start_demo_in(const char *const *flags, const char *dir, const char *json_name, int tag) {
  const char *bin = getenv("PD_BINARY_DIR");
  cr_assert_not_null(bin, "PD_BINARY_DIR is not set (run through ctest)");
  char exe[512], trace_dir[256], json[256], log[256];
  if (dir == NULL) dir = g_dir;
  snprintf(exe, sizeof exe, "%s/src/cli/profiler_demo/profiler_demo", bin);
  snprintf(trace_dir, sizeof trace_dir, "%s/traces", dir);
  snprintf(json, sizeof json, "%s/%s", dir, json_name);
  log_path(tag, log, sizeof log);
  const char *argv[40] = {exe, "--trace_dir", trace_dir, "--output_json", json, "--quiet"};
  int argc = 6;
  for (int i = 0; flags[i] != NULL && argc < 39; i++) argv[argc++] = flags[i];
  argv[argc] = NULL;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

static pid_t start_demo_as(const char *const *flags, const char *json_name, int tag) {
  return start_demo_in(flags, NULL, json_name, tag);
}

/* Starts profiler_demo with the given flags (plus --trace_dir/--output_json in g_dir). */
static pid_t start_demo(const char *const *flags) { return start_demo_as(flags, "m.json", 0); }

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Waits up to limit_s for pid; returns its exit status, or -1 (killed) on timeout. */
static int wait_exit(pid_t pid, double limit_s) {
  for (double t = 0; t < limit_s; t += 0.1) {
    int st = 0;
    pid_t got = waitpid(pid, &st, WNOHANG);
    if (got == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    sleep_s(0.1);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

/* Counts the entries of dir and whether one is a temporary (".tmp."). */
static int count_in(const char *dir, bool *has_tmp, char *first, size_t firstlen) {
  DIR *d = opendir(dir);
  *has_tmp = false;
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n++ == 0 && first != NULL) snprintf(first, firstlen, "%s/%s", dir, e->d_name);
    if (strstr(e->d_name, ".tmp.") != NULL) *has_tmp = true;
  }
  closedir(d);
  return n;
}

static cJSON *load_json(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s was not written", path);
  static char buf[1 << 22];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  cJSON *j = cJSON_Parse(buf);
  cr_assert_not_null(j, "%s is not valid JSON", path);
  return j;
}

Test(signals, sigint_in_the_profiled_steps_writes_trace_and_incomplete_metrics) {
  /* The dataloader scenario's steps take about 70 ms, so 10000 of them outlast the delay
   * on any GPU (the clean step's 0.3 ms let a fast H200 finish all 10000 first). */
  pid_t pid = start_demo((const char *const[]){"--scenario", "dataloader", "--warmup_steps", "3", "--profile_steps",
                                               "10000", NULL});
  sleep_s(15.0); /* CUDA start, model, 3 warmup steps, then well into the profiled steps */
  kill(pid, SIGINT);
  int rc = wait_exit(pid, 300);
  cr_assert_eq(rc, 130, "exit %d (expected 130 after SIGINT)", rc);
  char json[256], traces[256], trace[512];
  snprintf(json, sizeof json, "%s/m.json", g_dir);
  snprintf(traces, sizeof traces, "%s/traces", g_dir);
  cJSON *m = load_json(json);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(m, "incomplete")));
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(m, "stopped_by")), "SIGINT");
  double done = cJSON_GetNumberValue(cJSON_GetObjectItem(m, "steps_done"));
  cr_assert_gt(done, 3 + 2, "the signal came before the recorded steps (%g steps done): raise the delay", done);
  cr_expect_gt(cJSON_GetArraySize(cJSON_GetObjectItem(m, "step_times_s")), 0);
  cJSON_Delete(m);
  bool has_tmp;
  cr_assert_eq(count_in(traces, &has_tmp, trace, sizeof trace), 1, "one trace of the partial cycle");
  cr_expect(!has_tmp);
  pd_trace_t *t = pd_trace_create();
  char err[512];
  cr_assert_eq(pd_trace_read_file(trace, t, err, sizeof err), 0, "%s", err);
  cr_expect_gt(pd_trace_count(t), 100u, "the trace holds the recorded steps");
  pd_trace_destroy(t);
  count_in(g_dir, &has_tmp, NULL, 0);
  cr_expect(!has_tmp, "a temporary was left in %s", g_dir);
}

Test(signals, sigterm_in_the_warmup_writes_incomplete_metrics_and_no_trace) {
  pid_t pid = start_demo((const char *const[]){"--scenario", "clean", "--warmup_steps", "100000", NULL});
  sleep_s(10.0);
  kill(pid, SIGTERM);
  int rc = wait_exit(pid, 300);
  cr_assert_eq(rc, 143, "exit %d (expected 143 after SIGTERM)", rc);
  char json[256], traces[256];
  snprintf(json, sizeof json, "%s/m.json", g_dir);
  snprintf(traces, sizeof traces, "%s/traces", g_dir);
  cJSON *m = load_json(json);
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(m, "incomplete")));
  cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(m, "stopped_by")), "SIGTERM");
  cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "steps_done")), 0);
  cJSON_Delete(m);
  bool has_tmp;
  cr_expect_eq(count_in(traces, &has_tmp, NULL, 0), 0, "no trace: the profiler never started");
}

Test(signals, a_second_signal_quits_at_once_leaving_nothing_partial) {
  pid_t pid = start_demo((const char *const[]){"--scenario", "dataloader", "--warmup_steps", "3", "--profile_steps",
                                               "10000", NULL});
  sleep_s(15.0);
  kill(pid, SIGTERM);
  kill(pid, SIGTERM);
  int rc = wait_exit(pid, 60);
  cr_assert_eq(rc, 143, "exit %d (expected 143)", rc);
  char traces[256], trace[512], json[256];
  snprintf(traces, sizeof traces, "%s/traces", g_dir);
  snprintf(json, sizeof json, "%s/m.json", g_dir);
  bool has_tmp;
  int n = count_in(traces, &has_tmp, trace, sizeof trace);
  cr_expect(!has_tmp, "a temporary trace was left");
  if (n == 1) { /* the first signal's trace made it: it must be whole */
    pd_trace_t *t = pd_trace_create();
    char err[512];
    cr_expect_eq(pd_trace_read_file(trace, t, err, sizeof err), 0, "%s", err);
    pd_trace_destroy(t);
  }
  if (access(json, F_OK) == 0) cJSON_Delete(load_json(json));
  count_in(g_dir, &has_tmp, NULL, 0);
  cr_expect(!has_tmp, "a temporary was left in %s", g_dir);
}

/* A deliberately tiny CUPTI buffer budget: records are dropped, counted in the metrics
 * JSON's dropped_records and warned about, and what was kept still makes a readable trace. */
Test(signals, tiny_cupti_buffer_budget_reports_dropped_records) {
  pid_t pid = start_demo((const char *const[]){"--scenario", "tiny_ops", "--warmup_steps", "2", "--profile_steps",
                                               "30", "--cupti_buffer_budget_mib", "1", NULL});
  int rc = wait_exit(pid, 600);
  cr_assert_eq(rc, 0, "exit %d", rc);
  char json[256], traces[256], trace[512];
  snprintf(json, sizeof json, "%s/m.json", g_dir);
  snprintf(traces, sizeof traces, "%s/traces", g_dir);
  cJSON *m = load_json(json);
  double dropped = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "metrics"), "dropped_records"));
  cr_expect_gt(dropped, 0, "a 1 MiB budget for 30 tiny_ops steps must drop records");
  cJSON_Delete(m);
  char text[8192];
  read_log(0, text, sizeof text);
  cr_expect_not_null(strstr(text, "warning: CUPTI dropped"), "no warning in:\n%s", text);
  bool has_tmp;
  cr_assert_eq(count_in(traces, &has_tmp, trace, sizeof trace), 1);
  pd_trace_t *t = pd_trace_create();
  char err[512];
  cr_expect_eq(pd_trace_read_file(trace, t, err, sizeof err), 0, "%s", err);
  pd_trace_destroy(t);
}

/* repeat=0 (cycles until --steps ends): one complete trace per cycle, every active step
 * timed, the tables' "steps" over all cycles, host memory reported. The flatness over
 * 10,000 steps is scripts/long_run.sh's (too long for the suite). */
Test(signals, repeat_zero_writes_a_trace_per_cycle) {
  /* cycles of 15 wait + 1 warmup + 4 active = 20 steps; 210 steps: 10 full cycles and
   * 10 steps of an 11th that end in its wait (no trace) */
  pid_t pid = start_demo((const char *const[]){"--scenario", "clean", "--warmup_steps", "2", "--repeat", "0",
                                               "--steps", "210", "--wait_steps", "15", "--profile_steps", "4", NULL});
  int rc = wait_exit(pid, 600);
  cr_assert_eq(rc, 0, "exit %d", rc);
  char json[256], traces[256], trace[512];
  snprintf(json, sizeof json, "%s/m.json", g_dir);
  snprintf(traces, sizeof traces, "%s/traces", g_dir);
  cJSON *m = load_json(json);
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(m, "trace_files")), 10);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "steps")), 40, "4 active steps x 10 cycles");
  cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(m, "step_times_s")), 40);
  const cJSON *cfg = cJSON_GetObjectItem(m, "config");
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(cfg, "repeat")), 0);
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(cfg, "steps")), 210);
  const cJSON *h = cJSON_GetObjectItem(m, "host_memory");
  cr_assert(cJSON_IsObject(h), "no host_memory object");
  cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(h, "steps")), 210);
  double start = cJSON_GetNumberValue(cJSON_GetObjectItem(h, "rss_start_kib"));
  double first = cJSON_GetNumberValue(cJSON_GetObjectItem(h, "rss_first_cycle_kib"));
  double end = cJSON_GetNumberValue(cJSON_GetObjectItem(h, "rss_end_kib"));
  double peak = cJSON_GetNumberValue(cJSON_GetObjectItem(h, "rss_peak_kib"));
  cr_expect(start > 0 && first > 0 && end > 0 && peak >= end, "rss %g %g %g %g", start, first, end, peak);
  const cJSON *loss = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "metrics"), "loss_last");
  cr_expect(cJSON_IsNumber(loss), "a finished long run has its last loss");
  cJSON_Delete(m);
  bool has_tmp;
  cr_expect_eq(count_in(traces, &has_tmp, trace, sizeof trace), 10);
  cr_expect(!has_tmp);
  /* every trace is complete: read each */
  DIR *d = opendir(traces);
  cr_assert_not_null(d);
  struct dirent *de;
  int read_ok = 0;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", traces, de->d_name);
    pd_trace_t *t = pd_trace_create();
    char err[512];
    int r = pd_trace_read_file(path, t, err, sizeof err);
    cr_expect_eq(r, 0, "%s", err);
    read_ok += r == 0;
    pd_trace_destroy(t);
  }
  closedir(d);
  cr_expect_eq(read_ok, 10);
}

/* Two runs writing into one trace directory at once: each writes its own complete trace
 * (names carry host, pid and time) and its own metrics JSON naming that trace; no
 * temporary is left and neither run's file is the other's. */
Test(signals, two_runs_share_a_trace_directory) {
  const char *const flags[] = {"--scenario", "tiny_ops", "--warmup_steps", "2", "--profile_steps", "6", NULL};
  pid_t a = start_demo_as(flags, "a.json", 1);
  pid_t b = start_demo_as(flags, "b.json", 2);
  int rca = wait_exit(a, 600), rcb = wait_exit(b, 600);
  cr_assert(rca == 0 && rcb == 0, "exit %d and %d", rca, rcb);
  char traces[256];
  snprintf(traces, sizeof traces, "%s/traces", g_dir);
  bool has_tmp;
  cr_assert_eq(count_in(traces, &has_tmp, NULL, 0), 2, "one trace per run");
  cr_expect(!has_tmp, "a temporary was left in %s", traces);
  char named[2][512] = {{0}};
  const char *names[2] = {"a.json", "b.json"};
  for (int k = 0; k < 2; k++) {
    char json[256];
    snprintf(json, sizeof json, "%s/%s", g_dir, names[k]);
    cJSON *m = load_json(json);
    const cJSON *files = cJSON_GetObjectItem(m, "trace_files");
    cr_assert_eq(cJSON_GetArraySize(files), 1, "%s names one trace", names[k]);
    const char *path = cJSON_GetStringValue(cJSON_GetArrayItem(files, 0));
    cr_assert_not_null(path);
    snprintf(named[k], sizeof named[k], "%s", path);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "steps")), 6);
    cJSON_Delete(m);
    pd_trace_t *t = pd_trace_create();
    char err[512];
    cr_expect_eq(pd_trace_read_file(named[k], t, err, sizeof err), 0, "%s", err);
    cr_expect_gt(pd_trace_count(t), 1000u, "%s holds the 6 tiny_ops steps", named[k]);
    pd_trace_destroy(t);
  }
  cr_expect_str_neq(named[0], named[1], "the two runs wrote one trace name");
  count_in(g_dir, &has_tmp, NULL, 0);
  cr_expect(!has_tmp, "a temporary was left in %s", g_dir);
}

/* Mounts a tmpfs of size_kib on dir (created) in a private mount namespace of this test's
 * process, which profiler_demo started from it inherits; it vanishes with the process.
 * Skips the calling test, saying so, where this process may not mount. */
static void mount_tmpfs_or_skip(const char *dir, int size_kib) {
  cr_assert_eq(mkdir(dir, 0700), 0);
  char opts[64];
  snprintf(opts, sizeof opts, "size=%dk,mode=0700", size_kib);
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
    cr_skip_test("cannot mount a tmpfs here (%s): the full-disk and read-only runs were NOT made", strerror(errno));
}

/* The files under dir (not directories), and whether one is a temporary. */
static int files_under(const char *dir, bool *has_tmp) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "find '%s' -type f", dir);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char line[512];
  int n = 0;
  *has_tmp = false;
  while (fgets(line, sizeof line, p) != NULL) {
    n++;
    if (strstr(line, ".tmp.") != NULL) *has_tmp = true;
  }
  pclose(p);
  return n;
}

/* A run (log tag) whose trace could not be written on the file system at fs for cause:
 * exit 1, one line "cannot write trace '<fs>/...': <cause>", no file and no temporary
 * left on fs. Unmounts fs. */
static void expect_trace_write_failed(int rc, int tag, const char *fs, const char *cause) {
  char text[16384];
  read_log(tag, text, sizeof text);
  cr_assert_eq(rc, 1, "exit %d (expected 1: the trace could not be written); log:\n%s", rc, text);
  cr_expect(strstr(text, "profiler_demo: cannot write trace '") != NULL && strstr(text, cause) != NULL &&
                strstr(text, fs) != NULL,
            "the message names the path and '%s':\n%s", cause, text);
  bool has_tmp;
  cr_expect_eq(files_under(fs, &has_tmp), 0, "files were left in %s", fs);
  cr_expect(!has_tmp, "a temporary was left in %s", fs);
  umount(fs);
}

/* A disk that fills while the trace is written (a 64 KiB tmpfs holds the directories but
 * not a trace): exit 1, one message naming the trace's path and "no space left", no
 * temporary and no file left (the run takes back what it made). */
Test(signals, full_disk_while_writing_the_trace_fails_cleanly) {
  char fs[256];
  snprintf(fs, sizeof fs, "%s/fs", g_dir);
  mount_tmpfs_or_skip(fs, 64);
  pid_t pid = start_demo_in((const char *const[]){"--scenario", "clean", "--warmup_steps", "2", "--profile_steps", "4",
                                                  NULL},
                            fs, "m.json", 3);
  expect_trace_write_failed(wait_exit(pid, 300), 3, fs, "no space left on device");
}

/* The file system turns read-only during the profiled steps (a tmpfs remounted read-only):
 * the trace cannot be written at the cycle's end: exit 1, the message names the path and
 * "read-only", nothing partial or temporary is left. */
Test(signals, read_only_file_system_while_profiling_fails_cleanly) {
  char fs[256];
  snprintf(fs, sizeof fs, "%s/fs", g_dir);
  mount_tmpfs_or_skip(fs, 256 << 10);
  /* dataloader steps take about 70 ms: 150 of them outlast the delay on any GPU */
  pid_t pid = start_demo_in((const char *const[]){"--scenario", "dataloader", "--warmup_steps", "3", "--profile_steps",
                                                  "150", NULL},
                            fs, "m.json", 4);
  sleep_s(10.0); /* CUDA start, model, warmup, then into the profiled steps */
  int remount = mount(NULL, fs, NULL, MS_REMOUNT | MS_RDONLY, NULL);
  int remount_errno = errno;
  int rc = wait_exit(pid, 300);
  cr_assert_eq(remount, 0, "remount read-only: %s", strerror(remount_errno));
  cr_assert_neq(rc, 0, "the run finished with exit 0 before or despite the remount");
  expect_trace_write_failed(rc, 4, fs, "read-only file system");
}
