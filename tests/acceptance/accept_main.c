/* accept_main.c: the main() of every acceptance test binary.
 *
 * 1. When CTest hands this test a GPU through a resource group
 *    (CTEST_RESOURCE_GROUP_0_GPUS="id:N,slots:1"), it sets CUDA_VISIBLE_DEVICES=N so
 *    the test and every program it starts use that GPU alone.
 * 2. It probes for a CUDA device in a child process (the parent never initializes
 *    CUDA, so Criterion's worker processes start clean). With no device it prints why
 *    and exits 77, which CTest reports as "Not Run" (SKIP_RETURN_CODE), never passed.
 * 3. Otherwise it runs the Criterion tests.
 */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PD_SKIP_EXIT 77

static void accept_select_gpu(void) {
  const char *res = getenv("CTEST_RESOURCE_GROUP_0_GPUS");
  if (res == NULL) return;
  const char *id = strstr(res, "id:");
  if (id == NULL) return;
  char buf[32];
  size_t n = strcspn(id + 3, ",;");
  if (n == 0 || n >= sizeof(buf)) return;
  memcpy(buf, id + 3, n);
  buf[n] = '\0';
  setenv("CUDA_VISIBLE_DEVICES", buf, 1);
}

/* Returns the number of CUDA devices, probed in a child; 0 when none or on error. */
static int accept_probe_gpus(char *why, size_t whylen) {
  int fds[2];
  if (pipe(fds) != 0) {
    snprintf(why, whylen, "pipe failed");
    return 0;
  }
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, whylen, "fork failed");
    return 0;
  }
  if (pid == 0) {
    close(fds[0]);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    char msg[256];
    int len = snprintf(msg, sizeof(msg), "%d %s", e == cudaSuccess ? count : 0,
                       e == cudaSuccess ? "ok" : cudaGetErrorString(e));
    if (write(fds[1], msg, (size_t)len) < 0) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  char msg[256] = {0};
  ssize_t got = read(fds[0], msg, sizeof(msg) - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got <= 0) {
    snprintf(why, whylen, "GPU probe process failed");
    return 0;
  }
  int count = atoi(msg);
  const char *text = strchr(msg, ' ');
  snprintf(why, whylen, "%s", text ? text + 1 : "");
  return count;
}

int main(int argc, char *argv[]) {
  /* Criterion re-executes this binary for its worker processes; only the first
   * (parent) run decides whether to skip. Workers inherit the environment. */
  if (getenv("PD_ACCEPT_PROBED") == NULL) {
    accept_select_gpu();
    char why[200];
    int n = accept_probe_gpus(why, sizeof(why));
    if (n <= 0) {
      fprintf(stderr, "SKIPPED: no CUDA device visible (%s); acceptance tests need a GPU\n", why);
      return PD_SKIP_EXIT;
    }
    setenv("PD_ACCEPT_PROBED", "1", 1);
  }
  struct criterion_test_set *tests = criterion_initialize();
  int result = 0;
  if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
  criterion_finalize(tests);
  return result;
}
