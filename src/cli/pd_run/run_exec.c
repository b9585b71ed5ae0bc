/* run_exec.c: pd_run's child: fork + exec, signal forwarding, the exit status, main().
 *
 * The exec's failure reaches the parent through a close-on-exec pipe (the child writes its
 * errno and exits), so pd_run tells "not found" (127) and "not executable" (126) in its own
 * line from a program that itself returns 126 or 127.
 */
#define _GNU_SOURCE 1 /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pd/pd_out.h"
#include "run.h"

static volatile sig_atomic_t g_child;

static const int k_forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define K_NFORWARDED (sizeof(k_forwarded) / sizeof(k_forwarded[0]))

/* A signal sent to pd_run alone goes on to the program; one the kernel sent (the terminal's
 * Ctrl-C, which the program in the same process group receives itself) is not sent twice. */
static void forward_cb(int sig, siginfo_t *info, void *ctx) {
  if (g_child > 0 && (info == NULL || info->si_code != SI_KERNEL)) (void)kill((pid_t)g_child, sig);
}

int pd_run_exit_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return PD_RUN_EXIT_SIGNAL_BASE + WTERMSIG(st);
  return 1;
}

int pd_run_spawn(char *const argv[], FILE *err, int *signaled) {
  *signaled = 0;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fprintf(err, "%s: pipe: %s\n", PD_RUN_PROG, strerror(errno));
    return 1;
  }
  /* The forwarded signals are blocked from before the fork until the child's pid is known
   * (a signal in between is held, then forwarded); the child gets the old dispositions and
   * mask back before exec. */
  struct sigaction sa, old[K_NFORWARDED];
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = forward_cb;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigset_t block, old_mask;
  sigemptyset(&block);
  for (size_t i = 0; i < K_NFORWARDED; i++) sigaddset(&block, k_forwarded[i]);
  sigprocmask(SIG_BLOCK, &block, &old_mask);
  for (size_t i = 0; i < K_NFORWARDED; i++) sigaction(k_forwarded[i], &sa, &old[i]);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(err, "%s: fork: %s\n", PD_RUN_PROG, strerror(errno));
    for (size_t i = 0; i < K_NFORWARDED; i++) sigaction(k_forwarded[i], &old[i], NULL);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    close(fds[0]);
    close(fds[1]);
    return 1;
  }
  if (pid == 0) {
    for (size_t i = 0; i < K_NFORWARDED; i++) sigaction(k_forwarded[i], &old[i], NULL);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    close(fds[0]);
    char root[32];
    snprintf(root, sizeof root, "%d", (int)getpid());
    (void)setenv("PD_INJECT_ROOT_PID", root, 1);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t w = write(fds[1], &e, sizeof e);
    (void)w;
    _exit(PD_RUN_EXIT_NOT_FOUND);
  }
  close(fds[1]);
  g_child = pid;
  sigprocmask(SIG_SETMASK, &old_mask, NULL);
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(fds[0], &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  for (size_t i = 0; i < K_NFORWARDED; i++) sigaction(k_forwarded[i], &old[i], NULL);
  char shown[256];
  if (got == (ssize_t)sizeof exec_errno) {
    *signaled = -1;
    pd_term_escape_line(shown, sizeof shown, argv[0]);
    if (exec_errno == ENOENT || exec_errno == ENOTDIR) {
      fprintf(err, "%s: %s: command not found\n", PD_RUN_PROG, shown);
      return PD_RUN_EXIT_NOT_FOUND;
    }
    fprintf(err, "%s: %s: cannot execute: %s\n", PD_RUN_PROG, shown, strerror(exec_errno));
    return PD_RUN_EXIT_NOT_EXEC;
  }
  if (WIFSIGNALED(st)) *signaled = WTERMSIG(st);
  return pd_run_exit_status(st);
}

int pd_run_main(int argc, char *const argv[]) {
  pd_run_config_t cfg;
  char err[PD_INJECT_PATH_MAX + 256];
  if (pd_run_config_parse(argc, argv, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", PD_RUN_PROG, err);
    return PD_RUN_EXIT_USAGE;
  }
  if (cfg.action == PD_RUN_HELP) {
    pd_run_print_help(stdout);
    return 0;
  }
  if (cfg.action == PD_RUN_VERSION) {
    pd_run_print_version(stdout);
    return 0;
  }
  char lib[PD_INJECT_PATH_MAX];
  if (pd_run_outputs_prepare(&cfg.inject, err, sizeof err) != 0 ||
      pd_run_find_library("/proc/self/exe", lib, sizeof lib, err, sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", PD_RUN_PROG, err);
    return PD_RUN_EXIT_USAGE;
  }
  if (pd_run_env_apply(&cfg, lib) != 0) {
    fprintf(stderr, "%s: out of memory for the environment\n", PD_RUN_PROG);
    return 1;
  }
  /* A metrics JSON older than this is an earlier run's (the file system's clock, seconds). */
  time_t since = time(NULL) - 1;
  int signaled = 0;
  int status = pd_run_spawn(cfg.argv, stderr, &signaled);
  if (signaled < 0) return status; /* the exec failed: said in pd_run's own line */
  (void)pd_run_report(stderr, &cfg, since, signaled);
  return status;
}
