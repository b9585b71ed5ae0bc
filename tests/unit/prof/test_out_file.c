/* test_out_file.c: the one output writer (pd_out.h): temporaries that never follow a
 * planted link, targets that are refused (directories, device nodes, FIFOs, inputs),
 * UTF-8 repair across buffer boundaries, gzip, batches (all or none), a full disk (the
 * file size limit always; a 64 KiB tmpfs and a read-only remount when this process may
 * mount, in its own mount namespace), signals, two writers of one file at once, and the
 * terminal escaping of names.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "pd/pd_common.h"
#include "pd/pd_out.h"
#include "pd_test_util.h"

static char tmpdir[256];
static void setup(void) { pd_test_tmpdir_make(tmpdir, sizeof tmpdir, "pd_out"); }
static void teardown(void) { pd_test_tmpdir_remove(tmpdir); }
TestSuite(out_file, .init = setup, .fini = teardown);

static const char *in_dir(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

Test(out_file, writes_and_leaves_no_temporary) {
  const char *p = in_dir("a.json");
  cr_assert_eq(pd_out_write_all(p, 0, "{}\n", 3), 0);
  char *t = pd_test_slurp(p);
  cr_expect_str_eq(t, "{}\n");
  free(t);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp);
  /* replacing an existing file */
  cr_assert_eq(pd_out_write_all(p, 0, "[1]\n", 4), 0);
  t = pd_test_slurp(p);
  cr_expect_str_eq(t, "[1]\n");
  free(t);
  cr_expect_eq(pd_test_count_files(tmpdir, NULL), 1);
}

Test(out_file, planted_temporary_symlinks_are_never_followed) {
  const char *victim = in_dir("victim");
  write_text(victim, "precious");
  const char *p = in_dir("out.json");
  /* Symlinks at the first temporary names this process would pick, and a few more. */
  for (int i = 0; i < 8; i++) {
    char link[600];
    snprintf(link, sizeof link, "%s.tmp.%ld.%d", p, (long)getpid(), i);
    cr_assert_eq(symlink(victim, link), 0);
  }
  cr_assert_eq(pd_out_write_all(p, 0, "new\n", 4), 0);
  char *t = pd_test_slurp(victim);
  cr_expect_str_eq(t, "precious", "the link's target was written through");
  free(t);
  t = pd_test_slurp(p);
  cr_expect_str_eq(t, "new\n");
  free(t);
  cr_expect_eq(pd_test_count_files(tmpdir, NULL), 1 + 1 + 8, "victim, output and the planted links");
}

Test(out_file, refuses_directories_devices_fifos_and_inputs) {
  cr_assert_eq(mkdir(in_dir("d"), 0700), 0);
  cr_expect_eq(pd_out_write_all(in_dir("d"), 0, "x", 1), PD_ENOTREG);
  cr_expect_eq(pd_out_write_all("/dev/null", 0, "x", 1), PD_ENOTREG);
  cr_assert_eq(mkfifo(in_dir("fifo"), 0600), 0);
  cr_expect_eq(pd_out_write_all(in_dir("fifo"), 0, "x", 1), PD_ENOTREG);
  cr_expect_eq(pd_out_probe(in_dir("fifo")), PD_ENOTREG);
  const char *in = in_dir("input.json");
  write_text(in, "input");
  cr_assert_eq(pd_out_protect_input(in), 0);
  cr_expect_eq(pd_out_write_all(in, 0, "x", 1), PD_EISINPUT);
  /* through another name (a hard link) too */
  cr_assert_eq(link(in, in_dir("alias.json")), 0);
  cr_expect_eq(pd_out_write_all(in_dir("alias.json"), 0, "x", 1), PD_EISINPUT);
  char *t = pd_test_slurp(in);
  cr_expect_str_eq(t, "input");
  free(t);
  cr_expect_eq(pd_out_write_all(in_dir("no/such/dir.json"), 0, "x", 1), PD_ENOENT);
  cr_expect_eq(pd_out_write_all("", 0, "x", 1), PD_EINVAL);
  cr_expect_eq(pd_out_probe(in_dir("no/such/dir.json")), PD_ENOENT);
  cr_expect_eq(pd_out_probe(in_dir("fine.json")), 0);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 4, "d, fifo, input, alias: the probe left nothing");
  cr_expect(!has_tmp);
  rmdir(in_dir("d"));
}

Test(out_file, invalid_utf8_becomes_fffd_even_across_buffer_boundaries) {
  const char *p = in_dir("u.json");
  pd_out_t *o = NULL;
  cr_assert_eq(pd_out_open(p, 0, &o), 0);
  FILE *f = pd_out_stream(o);
  fputs("a\xff" "b\xe2\x82" "c\xed\xa0\x80" "d", f); /* stray byte, cut sequence, surrogate */
  /* Fill the stream's buffer so that the next 4-byte character is cut by a flush. */
  size_t fill = (1u << 20) - 10 - 1;
  for (size_t i = 0; i < fill; i++) fputc('x', f);
  fputs("\xf0\x9f\x98\x80", f); /* U+1F600, split between two flushes */
  fputs("\xe2\x82", f);         /* cut short at the very end of the file */
  cr_assert_eq(pd_out_commit(o), 0);
  char *t = pd_test_slurp(p);
  cr_expect_eq(strncmp(t, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "d", 19), 0,
               "got %.20s", t);
  cr_expect_not_null(strstr(t, "x\xf0\x9f\x98\x80\xef\xbf\xbd"), "the split character survives, the cut end is U+FFFD");
  size_t n = strlen(t);
  cr_expect_eq(memcmp(t + n - 7, "\xf0\x9f\x98\x80\xef\xbf\xbd", 7), 0);
  free(t);
}

Test(out_file, gzip_in_one_pass) {
  const char *p = in_dir("t.json.gz");
  pd_out_t *o = NULL;
  cr_assert_eq(pd_out_open(p, PD_OUT_GZIP, &o), 0);
  for (int i = 0; i < 100000; i++) fprintf(pd_out_stream(o), "line %d\n", i);
  cr_assert_eq(pd_out_commit(o), 0);
  gzFile g = gzopen(p, "rb");
  cr_assert_not_null(g);
  cr_expect_eq(gzdirect(g), 0, "the file is gzip, not plain text");
  char line[64];
  int i = 0, ok = 1;
  while (gzgets(g, line, sizeof line) != NULL) {
    char want[64];
    snprintf(want, sizeof want, "line %d\n", i++);
    ok &= strcmp(line, want) == 0;
  }
  gzclose(g);
  cr_expect_eq(i, 100000);
  cr_expect(ok);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp);
}

Test(out_file, batch_is_all_or_none) {
  char a[512], b[512];
  snprintf(a, sizeof a, "%s", in_dir("a.html"));
  snprintf(b, sizeof b, "%s", in_dir("b.json"));
  write_text(a, "old a");
  /* staged outputs are not visible until the batch commits */
  pd_out_batch_begin();
  cr_assert_eq(pd_out_write_all(a, 0, "new a", 5), 0);
  cr_assert_eq(pd_out_write_all(b, 0, "new b", 5), 0);
  char *t = pd_test_slurp(a);
  cr_expect_str_eq(t, "old a");
  free(t);
  cr_expect_eq(access(b, F_OK), -1);
  pd_out_batch_abort();
  t = pd_test_slurp(a);
  cr_expect_str_eq(t, "old a");
  free(t);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp, "abort removes the staged temporaries");
  /* a failing second output: the caller aborts, the first stays old */
  cr_assert_eq(mkdir(in_dir("dir.json"), 0700), 0);
  pd_out_batch_begin();
  cr_assert_eq(pd_out_write_all(a, 0, "new a", 5), 0);
  cr_expect_eq(pd_out_write_all(in_dir("dir.json"), 0, "x", 1), PD_ENOTREG);
  pd_out_batch_abort();
  t = pd_test_slurp(a);
  cr_expect_str_eq(t, "old a");
  free(t);
  rmdir(in_dir("dir.json"));
  /* commit renames both */
  pd_out_batch_begin();
  cr_assert_eq(pd_out_write_all(a, 0, "new a", 5), 0);
  cr_assert_eq(pd_out_write_all(b, 0, "new b", 5), 0);
  cr_assert_eq(pd_out_batch_commit(), 0);
  t = pd_test_slurp(a);
  cr_expect_str_eq(t, "new a");
  free(t);
  t = pd_test_slurp(b);
  cr_expect_str_eq(t, "new b");
  free(t);
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 2);
  cr_expect(!has_tmp);
}

/* A write that cannot complete: returns the codes of a plain and a gzip write of 1 MiB
 * into dir as (plain, gzip). */
static void failing_writes(const char *dir, int *plain, int *gz) {
  char p[600];
  snprintf(p, sizeof p, "%s/big.json", dir);
  size_t n = 1u << 20;
  char *buf = malloc(n);
  memset(buf, 'y', n);
  *plain = buf != NULL ? pd_out_write_all(p, 0, buf, n) : PD_ENOMEM;
  free(buf);
  snprintf(p, sizeof p, "%s/big.json.gz", dir);
  pd_out_t *o = NULL;
  *gz = pd_out_open(p, PD_OUT_GZIP, &o);
  if (*gz == 0) {
    for (int i = 0; i < 64; i++) /* compresses badly: a counter's digits */
      for (size_t k = 0; k + 16 < n; k += 16) fprintf(pd_out_stream(o), "%015zu\n", k * 2654435761u + (size_t)i);
    *gz = pd_out_commit(o);
  }
}

static void expect_failed_write(const char *dir, int want) {
  int plain, gz;
  failing_writes(dir, &plain, &gz);
  cr_expect_eq(plain, want, "got %s, expected %s", pd_err_name(plain), pd_err_name(want));
  cr_expect_eq(gz, want, "gzip: got %s, expected %s", pd_err_name(gz), pd_err_name(want));
}

Test(out_file, file_size_limit_is_enospc_and_leaves_nothing) {
  /* RLIMIT_FSIZE makes write() fail with EFBIG (SIGXFSZ ignored): the same path as a
   * full disk, available to any user in CI. */
  write_text(in_dir("big.json"), "old");
  /* In a child: Criterion's own files must not meet the limit. */
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 64 << 10, .rlim_max = RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(100);
    int plain, gz;
    failing_writes(tmpdir, &plain, &gz);
    _exit((plain == PD_ENOSPC ? 0 : 1) | (gz == PD_ENOSPC ? 0 : 2));
  }
  int st = 0;
  waitpid(pid, &st, 0);
  cr_expect(WIFEXITED(st), "the writer died (signal %d)", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  cr_expect_eq(WEXITSTATUS(st), 0, "1: plain write not PD_ENOSPC, 2: gzip not, 3: neither (got %d)", WEXITSTATUS(st));
  char *t = pd_test_slurp(in_dir("big.json"));
  cr_expect_str_eq(t, "old");
  free(t);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp);
}

/* Mounts a 64 KiB tmpfs on dir in a private mount namespace of this test's process (it
 * vanishes with the process). Returns false when this process may not mount. */
static bool mount_small_tmpfs(const char *dir) {
  if (unshare(CLONE_NEWNS) != 0) return false;
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return false;
  return mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700") == 0;
}

Test(out_file, full_tmpfs_is_enospc_and_leaves_nothing) {
  const char *m = in_dir("mnt");
  cr_assert_eq(mkdir(m, 0700), 0);
  if (!mount_small_tmpfs(m)) {
    rmdir(m);
    cr_skip_test("cannot mount a tmpfs here (%s); the file size limit test covers ENOSPC", strerror(errno));
  }
  char old[600];
  snprintf(old, sizeof old, "%s/big.json", m);
  write_text(old, "old");
  expect_failed_write(m, PD_ENOSPC);
  char *t = pd_test_slurp(old);
  cr_expect_str_eq(t, "old");
  free(t);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(m, &has_tmp), 1);
  cr_expect(!has_tmp);
  /* read-only: refused at open, the old file untouched */
  cr_assert_eq(mount(NULL, m, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
  cr_expect_eq(pd_out_write_all(old, 0, "x", 1), PD_EROFS);
  cr_expect_eq(pd_out_probe(old), PD_EROFS);
  t = pd_test_slurp(old);
  cr_expect_str_eq(t, "old");
  free(t);
  umount(m);
  rmdir(m);
}

Test(out_file, signal_removes_live_temporaries) {
  const char *p = in_dir("sig.json");
  int pfd[2];
  cr_assert_eq(pipe(pfd), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    pd_out_cleanup_on_signals();
    pd_out_t *o = NULL;
    if (pd_out_open(p, 0, &o) != 0) _exit(3);
    fputs("half a file", pd_out_stream(o));
    fflush(pd_out_stream(o));
    (void)!write(pfd[1], "r", 1);
    for (;;) pause();
  }
  char c;
  cr_assert_eq(read(pfd[0], &c, 1), 1);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(has_tmp, "the temporary exists while the write runs");
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "dies of the signal");
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 0, "nothing left: no temporary, no output");
  close(pfd[0]);
  close(pfd[1]);
}

Test(out_file, two_writers_of_one_file_at_once) {
  const char *p = in_dir("shared.json");
  pid_t kids[2];
  for (int k = 0; k < 2; k++) {
    kids[k] = fork();
    cr_assert_geq(kids[k], 0);
    if (kids[k] == 0) {
      char body[70000];
      memset(body, 'a' + k, sizeof body - 1);
      body[sizeof body - 1] = '\n';
      for (int i = 0; i < 50; i++)
        if (pd_out_write_all(p, 0, body, sizeof body) != 0) _exit(1);
      _exit(0);
    }
  }
  for (int k = 0; k < 2; k++) {
    int st = 0;
    waitpid(kids[k], &st, 0);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d failed", k);
  }
  char *t = pd_test_slurp(p);
  size_t n = strlen(t);
  cr_expect_eq(n, 70000u);
  bool uniform = true;
  for (size_t i = 1; i + 1 < n; i++) uniform &= t[i] == t[0];
  cr_expect(uniform, "one writer's complete file, never a mix");
  free(t);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp);
}

Test(out_file, terminal_escaping) {
  char buf[128];
  cr_expect_str_eq(pd_term_escape(buf, sizeof buf, "ok\x1b[2Jname\rx"), "ok\\x1b[2Jname\\x0dx");
  cr_expect_str_eq(pd_term_escape(buf, sizeof buf, "caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");
  cr_expect_str_eq(pd_term_escape(buf, sizeof buf, "c1\xc2\x9b" "bad\xff" "del\x7f"), "c1\\x9bbad\\xffdel\\x7f");
  cr_expect_str_eq(pd_term_escape(buf, sizeof buf, "tab\tnl\n"), "tab\tnl\n");
  cr_expect_str_eq(pd_term_escape(buf, 6, "abc\x1b"), "abc", "an escape that does not fit is left out whole");
  cr_expect_str_eq(pd_term_escape(buf, sizeof buf, NULL), "");
  char *mem = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&mem, &len);
  pd_term_write(f, "a\x1b" "b");
  fclose(f);
  cr_expect_str_eq(mem, "a\\x1bb");
  free(mem);
}

Test(out_file, terminal_stream_escapes_and_keeps_split_characters) {
  char *mem = NULL;
  size_t len = 0;
  FILE *under = open_memstream(&mem, &len);
  FILE *t = pd_term_stream(under);
  cr_assert_not_null(t);
  setvbuf(t, NULL, _IONBF, 0); /* every fputc a write: characters arrive split */
  const char *s = "k\xe2\x9c\x93 \x1b[31mred\r\n";
  for (const char *p = s; *p; p++) fputc(*p, t);
  fputs("cut\xe2\x9c", t);
  fclose(t);
  fclose(under);
  cr_expect_str_eq(mem, "k\xe2\x9c\x93 \\x1b[31mred\\x0d\ncut\\xe2\\x9c");
  free(mem);
}

/* Fuzz finding (trace_analyze, clang UBSan): the final UTF-8 flush at commit computed
 * NULL + 0 when nothing was pending. An empty output and one whose last write is empty
 * go through that path. */
Test(out_file, empty_output_and_empty_final_write) {
  const char *p = in_dir("empty.json");
  cr_assert_eq(pd_out_write_all(p, 0, "", 0), 0);
  char *t = pd_test_slurp(p);
  cr_expect_str_eq(t, "");
  free(t);
  pd_out_t *o = NULL;
  cr_assert_eq(pd_out_open(p, PD_OUT_GZIP, &o), 0);
  fwrite("", 1, 0, pd_out_stream(o));
  cr_assert_eq(pd_out_commit(o), 0);
  bool has_tmp;
  cr_expect_eq(pd_test_count_files(tmpdir, &has_tmp), 1);
  cr_expect(!has_tmp);
}

/* The child's working directory (made once per test): a file named "-" would land there. */
static const char *child_dir(void) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s", in_dir("cwd"));
  cr_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
  return dir;
}

/* Runs body in a child whose descriptors 1 and 2 are the files out and err, in
 * child_dir(); returns the child's exit status. */
static int in_child(const char *out, const char *err, int (*body)(void)) {
  const char *dir = child_dir();
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || chdir(dir) != 0) _exit(126);
    dup2(o, 1);
    dup2(e, 2);
    _exit(body());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  cr_assert(WIFEXITED(st), "the child crashed");
  return WEXITSTATUS(st);
}

/* "-" is standard output; a second output there is refused; nothing of an aborted one. */
static int stdout_plain(void) {
  if (!pd_out_is_stdout("-") || pd_out_is_stdout("./-") || pd_out_is_stdout(NULL)) return 10;
  if (pd_out_probe("-") != 0) return 11;
  pd_out_t *a = NULL;
  if (pd_out_open("-", 0, &a) != 0) return 12;
  fputs("dropped\n", pd_out_stream(a));
  pd_out_abort(a); /* nothing written, "-" free again */
  printf("before\n");
  if (pd_out_write_all("-", 0, "{\"a\": 1}\n", 9) != 0) return 13;
  if (pd_out_write_all("-", 0, "again\n", 6) != PD_ESTDOUT) return 14;
  if (pd_out_open("-", 0, &a) != PD_ESTDOUT || a != NULL) return 15;
  return 0;
}

Test(out_file, dash_is_standard_output_once) {
  const char *out = in_dir("out.txt"), *err = in_dir("err.txt");
  cr_assert_eq(in_child(out, err, stdout_plain), 0);
  char *t = pd_test_slurp(out);
  cr_expect_str_eq(t, "before\n{\"a\": 1}\n");
  free(t);
  cr_expect_eq(pd_test_count_files(child_dir(), NULL), 0, "a file was made in the working directory");
}

/* With the console moved to stderr, a report printed to stdout goes there, the "-" output
 * is held until the end and written only when the run succeeded. */
static int stdout_held_kept(void) {
  if (pd_out_stdout_begin() != 0) return 10;
  printf("report line\n");
  pd_out_t *o = NULL;
  if (pd_out_open("-", PD_OUT_GZIP, &o) != 0) return 11;
  fputs("zipped\n", pd_out_stream(o));
  if (pd_out_commit(o) != 0) return 12;
  printf("after the commit\n");
  return pd_out_stdout_end(true) == 0 ? 0 : 14;
}

static int stdout_held_dropped(void) {
  if (pd_out_stdout_begin() != 0) return 10;
  pd_out_batch_begin();
  if (pd_out_write_all("-", 0, "never\n", 6) != 0) return 11;
  pd_out_batch_abort();
  if (pd_out_write_all("-", 0, "staged\n", 7) != 0) return 12; /* free again after the abort */
  printf("failed later\n");
  return pd_out_stdout_end(false) == 0 ? 0 : 13;
}

Test(out_file, dash_waits_for_the_end_while_the_console_is_on_stderr) {
  const char *out = in_dir("out.gz"), *err = in_dir("err.txt");
  cr_assert_eq(in_child(out, err, stdout_held_kept), 0);
  gzFile gz = gzopen(out, "rb");
  cr_assert_not_null(gz);
  char buf[64] = {0};
  cr_expect_eq(gzread(gz, buf, sizeof buf - 1), 7);
  gzclose(gz);
  cr_expect_str_eq(buf, "zipped\n");
  char *e = pd_test_slurp(err);
  cr_expect_str_eq(e, "report line\nafter the commit\n");
  free(e);
  cr_assert_eq(in_child(out, err, stdout_held_dropped), 0);
  char *t = pd_test_slurp(out);
  cr_expect_str_eq(t, "", "a failed run wrote to stdout: %s", t);
  free(t);
  e = pd_test_slurp(err);
  cr_expect_str_eq(e, "failed later\n");
  free(e);
  cr_expect_eq(pd_test_count_files(child_dir(), NULL), 0);
  cr_expect_eq(pd_out_stdout_end(true), 0, "an end without a begin does nothing");
}
