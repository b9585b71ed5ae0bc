/* test_inject_library.c: libpd_inject.so as the CUDA driver and NVTX load it. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_test_util.h"

static void *lib_open(void) {
  void *h = dlopen(PD_INJECT_SO, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(h, "dlopen: %s", dlerror());
  return h;
}

/* Runs InitializeInjection with stderr in a file; returns its return value and the text. */
static int init_captured(void *h, char *said, size_t len) {
  int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
  cr_assert_not_null(init);
  char path[] = "/tmp/pd_inject_said.XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  int rc = init();
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  ssize_t n = pread(fd, said, len - 1, 0);
  said[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  return rc;
}

Test(inject_library, only_the_entry_points_are_exported) {
  void *h = lib_open();
  cr_assert_not_null(dlsym(h, "InitializeInjection"));
  cr_assert_not_null(dlsym(h, "InitializeInjectionNvtx2"));
  const char *hidden[] = {"pd_prof_create", "pd_range_push", "pd_inject_session_create", "pd_trace_write_file",
                          "pd_analysis_run", "pd_cupti_launch_hook_install"};
  for (size_t i = 0; i < sizeof(hidden) / sizeof(hidden[0]); i++)
    cr_assert_null(dlsym(h, hidden[i]), "%s is exported", hidden[i]);
}

Test(inject_library, a_bad_variable_is_one_warning_and_no_profiling) {
  setenv("PD_INJECT_ACTIVE", "0", 1);
  void *h = lib_open();
  char said[2048];
  cr_assert_eq(init_captured(h, said, sizeof said), 1, "the driver is never told to fail");
  cr_assert_str_eq(said,
                   "pd_inject: warning: environment PD_INJECT_ACTIVE='0' is not allowed (an integer in [1, 1000000]); "
                   "the program runs unprofiled\n");
  /* A second call (another cuInit) does nothing. */
  cr_assert_eq(init_captured(h, said, sizeof said), 1);
  cr_assert_str_eq(said, "");
}

Test(inject_library, without_a_driver_cupti_is_missing_and_the_program_is_left_alone) {
  if (access("/dev/nvidiactl", F_OK) == 0) cr_skip_test("a GPU driver is present: CUPTI can start here");
  unsetenv("PD_INJECT_ACTIVE");
  void *h = lib_open();
  char said[2048];
  cr_assert_eq(init_captured(h, said, sizeof said), 1);
  cr_assert_not_null(strstr(said, "pd_inject: warning: CUPTI is not available ("), "%s", said);
  cr_assert_not_null(strstr(said, "the program runs unprofiled\n"), "%s", said);
  cr_assert_eq(strchr(said, '\n'), said + strlen(said) - 1, "one line: %s", said);
  struct sigaction sa;
  cr_assert_eq(sigaction(SIGINT, NULL, &sa), 0);
  cr_assert_eq(sa.sa_handler, SIG_DFL, "no signal handler installed");
}
