/* demo_outputs.c: makes sure the output paths can be written before any GPU work, and
 * takes back what a failed run created (its files, then the directories it made), so a
 * failure leaves nothing behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "demo.h"
#include "pd/pd_common.h"
#include "pd/pd_out.h"

static void outputs_track_dir(pd_demo_outputs_t *outs, const char *path) {
  if (outs->ndirs >= PD_DEMO_MAX_TRACKED) return;
  snprintf(outs->dirs[outs->ndirs++], PD_DEMO_PATH_MAX, "%s", path);
}

void pd_demo_outputs_track_file(pd_demo_outputs_t *outs, const char *path) {
  /* "-" is standard output, which the writer holds back on failure: no file to remove */
  if (outs->nfiles >= PD_DEMO_MAX_TRACKED || pd_out_is_stdout(path)) return;
  snprintf(outs->files[outs->nfiles++], PD_DEMO_PATH_MAX, "%s", path);
}

void pd_demo_outputs_rollback(pd_demo_outputs_t *outs) {
  for (int i = outs->nfiles - 1; i >= 0; i--) (void)unlink(outs->files[i]);
  outs->nfiles = 0;
  /* Deepest first; rmdir leaves a directory that holds something else alone. */
  for (int i = outs->ndirs - 1; i >= 0; i--) (void)rmdir(outs->dirs[i]);
  outs->ndirs = 0;
}

/* mkdir -p, recording each directory it creates. Returns 0 or -1 with err set. */
static int outputs_mkdirs(pd_demo_outputs_t *outs, const char *flag, const char *dir, char *err, size_t errlen) {
  char path[PD_DEMO_PATH_MAX];
  snprintf(path, sizeof(path), "%s", dir);
  size_t len = strlen(path);
  for (size_t i = 1; i <= len; i++) {
    if (path[i] != '/' && path[i] != '\0') continue;
    char saved = path[i];
    path[i] = '\0';
    if (mkdir(path, 0777) == 0) {
      outputs_track_dir(outs, path);
    } else if (errno == EEXIST) {
      struct stat st;
      if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s '%s': '%s' exists and is not a directory", flag, dir, path);
        return -1;
      }
    } else {
      snprintf(err, errlen, "%s '%s': cannot create '%s': %s", flag, dir, path, strerror(errno));
      return -1;
    }
    path[i] = saved;
  }
  return 0;
}

/* Proves dir writable by creating and removing a file: access() says yes to root even on
 * a read-only file system. */
static int outputs_probe(const char *flag, const char *dir, char *err, size_t errlen) {
  char probe[PD_DEMO_PATH_MAX + 64];
  snprintf(probe, sizeof(probe), "%s/.profiler_demo_probe.%ld", dir, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot write in '%s': %s", flag, dir, strerror(errno));
    return -1;
  }
  close(fd);
  unlink(probe);
  return 0;
}

/* Writes the directory a file path lives in ("." for a bare name, "/" for "/file"). */
static void outputs_parent(const char *path, char parent[PD_DEMO_PATH_MAX]) {
  snprintf(parent, PD_DEMO_PATH_MAX, "%s", path);
  char *slash = strrchr(parent, '/');
  if (slash == NULL)
    snprintf(parent, PD_DEMO_PATH_MAX, ".");
  else if (slash == parent)
    parent[1] = '\0'; /* "/file.json" */
  else
    *slash = '\0';
}

/* The one writer's own check of an output file's path (pd_out_probe): what the final
 * write would refuse is refused now. */
static int output_check(const char *flag, const char *path, char *err, size_t errlen) {
  int rc = pd_out_probe(path);
  if (rc == 0) return 0;
  snprintf(err, errlen, "%s '%s': cannot write there: %s", flag, path, pd_strerror(rc));
  return -1;
}

/* A file output must be a regular file or not exist yet. */
static int output_file_kind(const char *flag, const char *path, char *err, size_t errlen) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "%s '%s' is a directory; it must name a file", flag, path);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s '%s' is not a regular file (a device, FIFO or socket); it must name a file", flag,
             path);
    return -1;
  }
  return 0;
}

int pd_demo_outputs_prepare(const pd_demo_config_t *cfg, pd_demo_outputs_t *outs, char *err, size_t errlen) {
  memset(outs, 0, sizeof(*outs));
  char parent[PD_DEMO_PATH_MAX], stacks_parent[PD_DEMO_PATH_MAX];
  outputs_parent(cfg->output_json, parent);
  outputs_parent(cfg->export_stacks, stacks_parent);
  /* "-" (standard output) needs no directory and no file check */
  const bool json_file = !pd_out_is_stdout(cfg->output_json);
  const bool stacks_file = cfg->export_stacks[0] && !pd_out_is_stdout(cfg->export_stacks);

  if ((json_file && output_file_kind("--output_json", cfg->output_json, err, errlen) != 0) ||
      (stacks_file && output_file_kind("--export_stacks", cfg->export_stacks, err, errlen) != 0))
    return PD_DEMO_EXIT_USAGE;
  /* --no_profile writes no trace, so it makes no trace directory either. */
  if ((!cfg->no_profile && (outputs_mkdirs(outs, "--trace_dir", cfg->trace_dir, err, errlen) != 0 ||
                            outputs_probe("--trace_dir", cfg->trace_dir, err, errlen) != 0)) ||
      (json_file && (outputs_mkdirs(outs, "--output_json", parent, err, errlen) != 0 ||
                     outputs_probe("--output_json", parent, err, errlen) != 0 ||
                     output_check("--output_json", cfg->output_json, err, errlen) != 0)) ||
      (stacks_file && (outputs_mkdirs(outs, "--export_stacks", stacks_parent, err, errlen) != 0 ||
                                 outputs_probe("--export_stacks", stacks_parent, err, errlen) != 0 ||
                                 output_check("--export_stacks", cfg->export_stacks, err, errlen) != 0))) {
    pd_demo_outputs_rollback(outs);
    return PD_DEMO_EXIT_USAGE;
  }
  return 0;
}
