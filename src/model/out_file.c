/* out_file.c: the one writer of every output file (pd_out.h): temporary created with
 * O_EXCL|O_NOFOLLOW beside the target, UTF-8 repair and optional gzip on the way, fsync,
 * rename, directory fsync; batches for all-or-none outputs; temporaries removed on every
 * failure path and from signal handlers; inputs and non-regular targets never replaced.
 *
 * The stream handed to callers is a stdio cookie stream (fopencookie) whose write
 * function repairs UTF-8 and hands the bytes to write(2) or to zlib's gzwrite() on a
 * dup of the temporary's descriptor. The first errno of the sink is kept, so a full disk
 * is reported as ENOSPC however deep in a buffer flush it happened; the stream itself
 * never sees the error (see cookie_write), pd_out_failed() and pd_out_commit() do.
 *
 * Live temporaries are also kept in a fixed table of paths that an async-signal-safe
 * function walks (pd_out_remove_temps): a slot is claimed (0 -> 2), filled, then
 * published (2 -> 1); the handler unlinks published slots only.
 *
 * "-" is standard output: the same stream and sinks, over an anonymous memory file
 * (memfd) instead of a temporary beside the target, copied to descriptor 1 when the
 * output is committed, or held until pd_out_stdout_end() while a program has moved its
 * console to stderr (pd_out_stdout_begin). Nothing on disk, so nothing to remove.
 */
#define _GNU_SOURCE /* fopencookie */
#include "pd/pd_out.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "pd/pd_common.h"
#include "model_internal.h"

#define OUT_BUFFER_BYTES (1u << 20) /* the stdio buffer in front of the filter */
#define OUT_MAX_LIVE 64             /* temporaries the signal table can track at once */

struct pd_out {
  char *path;
  char *tmp;
  char *dir;
  int fd;       /* the temporary; -1 once closed */
  gzFile gz;    /* PD_OUT_GZIP: on a dup of fd */
  FILE *f;      /* the cookie stream callers write to */
  char *iobuf;  /* f's buffer */
  unsigned flags;
  int slot;     /* index in the signal table, or -1 */
  bool to_stdout; /* "-": fd is a memfd; hold_fd keeps it past close */
  int hold_fd;  /* to_stdout: a second descriptor of the memfd, else -1 */
  int err_no;   /* first errno of the sink */
  unsigned char pend[4]; /* start of a UTF-8 sequence cut by a buffer boundary */
  size_t npend;
  pd_out_t *next_staged;
};

/* ---- errors ------------------------------------------------------------------------------------- */

static int code_of_errno(int e) {
  switch (e) {
  case 0: return PD_EIO;
  case ENOSPC:
  case EDQUOT:
  case EFBIG: return PD_ENOSPC;
  case EROFS: return PD_EROFS;
  case EACCES:
  case EPERM: return PD_EACCES;
  case ENOENT:
  case ENOTDIR: return PD_ENOENT;
  case EISDIR: return PD_ENOTREG;
  case ENOMEM: return PD_ENOMEM;
  case ENAMETOOLONG: return PD_EINVAL;
  default: return PD_EIO;
  }
}

static void note_errno(pd_out_t *o, int e) {
  if (o->err_no == 0) o->err_no = e != 0 ? e : EIO;
}

/* ---- signal-safe table of live temporaries -------------------------------------------------------- */

static char g_slot_path[OUT_MAX_LIVE][PATH_MAX];
static atomic_int g_slot_state[OUT_MAX_LIVE]; /* 0 free, 2 being filled, 1 live */

static int slot_claim(const char *tmp) {
  if (strlen(tmp) >= PATH_MAX) return -1;
  for (int i = 0; i < OUT_MAX_LIVE; i++) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&g_slot_state[i], &expect, 2)) {
      strcpy(g_slot_path[i], tmp);
      atomic_store(&g_slot_state[i], 1);
      return i;
    }
  }
  return -1; /* table full: the temporary is still removed on every failure path */
}

static void slot_release(int slot) {
  if (slot >= 0) atomic_store(&g_slot_state[slot], 0);
}

void pd_out_remove_temps(void) {
  for (int i = 0; i < OUT_MAX_LIVE; i++)
    if (atomic_load(&g_slot_state[i]) == 1) (void)unlink(g_slot_path[i]);
}

static void cleanup_handler(int sig) {
  pd_out_remove_temps();
  signal(sig, SIG_DFL);
  raise(sig);
}

void pd_out_cleanup_on_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = cleanup_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
}

/* ---- inputs ---------------------------------------------------------------------------------------- */

typedef struct {
  dev_t dev;
  ino_t ino;
} file_id_t;

static pthread_mutex_t g_inputs_lock = PTHREAD_MUTEX_INITIALIZER;
static file_id_t *g_inputs;
static size_t g_ninputs, g_inputs_cap;

static int protect_stat(const struct stat *st) {
  int rc = 0;
  pthread_mutex_lock(&g_inputs_lock);
  for (size_t i = 0; i < g_ninputs; i++)
    if (g_inputs[i].dev == st->st_dev && g_inputs[i].ino == st->st_ino) goto done;
  if (g_ninputs == g_inputs_cap) {
    size_t cap = g_inputs_cap ? g_inputs_cap * 2 : 16;
    file_id_t *n = realloc(g_inputs, cap * sizeof(*n));
    if (n == NULL) {
      rc = PD_ENOMEM;
      goto done;
    }
    g_inputs = n;
    g_inputs_cap = cap;
  }
  g_inputs[g_ninputs++] = (file_id_t){st->st_dev, st->st_ino};
done:
  pthread_mutex_unlock(&g_inputs_lock);
  return rc;
}

int pd_out_protect_input(const char *path) {
  struct stat st;
  if (path == NULL || stat(path, &st) != 0) return PD_EIO;
  return protect_stat(&st);
}

int pd_out_protect_fd(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return PD_EIO;
  return protect_stat(&st);
}

static bool is_input(const struct stat *st) {
  bool hit = false;
  pthread_mutex_lock(&g_inputs_lock);
  for (size_t i = 0; i < g_ninputs && !hit; i++)
    hit = g_inputs[i].dev == st->st_dev && g_inputs[i].ino == st->st_ino;
  pthread_mutex_unlock(&g_inputs_lock);
  return hit;
}

bool pd_out_is_stdout(const char *path) { return path != NULL && strcmp(path, "-") == 0; }

/* The target may be replaced: absent, or a regular file that is no input; or "-". */
static int check_target(const char *path) {
  struct stat st;
  if (pd_out_is_stdout(path)) return 0;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return 0; /* new file (or a dangling symlink, which rename replaces) */
    return code_of_errno(errno);
  }
  if (!S_ISREG(st.st_mode)) return PD_ENOTREG;
  if (is_input(&st)) return PD_EISINPUT;
  return 0;
}

/* ---- the UTF-8 filter and the sinks ----------------------------------------------------------------- */

static int sink_put(pd_out_t *o, const void *buf, size_t n) {
  if (n == 0) return 0;
  if (o->gz != NULL) {
    while (n > 0) {
      unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
      int w = gzwrite(o->gz, buf, chunk);
      if (w <= 0) {
        int zerr = 0;
        (void)gzerror(o->gz, &zerr);
        note_errno(o, zerr == Z_ERRNO && errno != 0 ? errno : (zerr == Z_MEM_ERROR ? ENOMEM : EIO));
        return -1;
      }
      buf = (const char *)buf + w;
      n -= (size_t)w;
    }
    return 0;
  }
  while (n > 0) {
    ssize_t w = write(o->fd, buf, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      note_errno(o, w < 0 ? errno : EIO);
      return -1;
    }
    buf = (const char *)buf + w;
    n -= (size_t)w;
  }
  return 0;
}

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Writes s[0..n) with each maximal invalid UTF-8 subsequence replaced by U+FFFD. A
 * sequence cut by the end of s waits in o->pend for the next call (final: replaced). */
static int put_utf8(pd_out_t *o, const unsigned char *s, size_t n, bool final) {
  /* Finish a sequence left over from the previous buffer, byte by byte. */
  while (o->npend > 0 && (n > 0 || final)) {
    if (n > 0) o->pend[o->npend++] = *s++, n--;
    size_t prefix = 0;
    size_t len = pd_utf8_seq(o->pend, o->npend, &prefix);
    if (len == SIZE_MAX && !final) {
      continue; /* still incomplete */
    }
    if (len != 0 && len != SIZE_MAX) {
      if (sink_put(o, o->pend, len) != 0) return -1;
      o->npend = 0;
      break;
    }
    /* invalid (or cut at the very end): U+FFFD for the maximal subpart, rest re-read */
    if (len == SIZE_MAX) prefix = o->npend;
    if (sink_put(o, k_fffd, 3) != 0) return -1;
    size_t rest = o->npend - prefix;
    unsigned char tail[4];
    memcpy(tail, o->pend + prefix, rest);
    o->npend = 0;
    if (rest > 0 && put_utf8(o, tail, rest, final) != 0) return -1;
    break;
  }
  if (n == 0) return 0; /* also s == NULL: the final call at close */
  const unsigned char *run = s, *p = s, *end = s + n;
  while (p < end) {
    if (*p < 0x80) {
      p++;
      continue;
    }
    size_t prefix = 0;
    size_t len = pd_utf8_seq(p, (size_t)(end - p), &prefix);
    if (len != 0 && len != SIZE_MAX) {
      p += len;
      continue;
    }
    if (sink_put(o, run, (size_t)(p - run)) != 0) return -1;
    if (len == SIZE_MAX && !final) { /* cut by the buffer's end: keep for later */
      o->npend = (size_t)(end - p);
      memcpy(o->pend, p, o->npend);
      return 0;
    }
    if (len == SIZE_MAX) prefix = (size_t)(end - p);
    if (sink_put(o, k_fffd, 3) != 0) return -1;
    p += prefix;
    run = p;
  }
  return sink_put(o, run, (size_t)(p - run));
}

/* Never reports a failure to stdio: glibc's buffered writes can misbehave after a cookie
 * write returns -1 (a crash was seen in _IO_default_xsputn). The first error is kept in
 * o->err_no, later bytes are dropped, and pd_out_commit() reports it. */
static ssize_t cookie_write(void *cookie, const char *buf, size_t n) {
  pd_out_t *o = cookie;
  if (o->err_no == 0) {
    if (o->flags & PD_OUT_BINARY) (void)sink_put(o, buf, n);
    else (void)put_utf8(o, (const unsigned char *)buf, n, false);
  }
  return (ssize_t)n;
}

/* ---- open, commit, abort ----------------------------------------------------------------------------- */

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *c = malloc(n);
  if (c != NULL) memcpy(c, s, n);
  return c;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) return dup_str(".");
  if (slash == path) return dup_str("/");
  size_t n = (size_t)(slash - path);
  char *d = malloc(n + 1);
  if (d != NULL) {
    memcpy(d, path, n);
    d[n] = 0;
  }
  return d;
}

/* ---- standard output ("-") ------------------------------------------------------------------------- */

/* One output per process on "-" (set at open, cleared when it is aborted). Outputs are
 * opened and committed on the program's main thread; the flag is atomic all the same. */
static atomic_bool g_stdout_taken;
/* While pd_out_stdout_begin() is in effect: the real standard output, and the committed
 * "-" output waiting for pd_out_stdout_end() (-1: none). Main thread only. */
static int g_console_saved = -1;
static int g_stdout_held = -1;

/* Copies the whole of memfd from (from its start) to descriptor to. Returns 0 or PD_EIO. */
static int copy_fd(int from, int to) {
  char buf[1 << 16];
  if (lseek(from, 0, SEEK_SET) != 0) return PD_EIO;
  for (;;) {
    ssize_t n = read(from, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PD_EIO;
    if (n == 0) return 0;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return PD_EIO;
      off += w;
    }
  }
}

/* Hands a committed "-" output's bytes on: held while the console is on stderr, else
 * written to descriptor 1 now. Takes hold_fd. */
static int stdout_deliver(int hold_fd) {
  if (g_console_saved >= 0) {
    if (g_stdout_held >= 0) close(g_stdout_held);
    g_stdout_held = hold_fd;
    return 0;
  }
  fflush(stdout); /* what the program printed before comes first */
  int rc = copy_fd(hold_fd, STDOUT_FILENO);
  close(hold_fd);
  return rc;
}

int pd_out_stdout_begin(void) {
  if (g_console_saved >= 0) return 0;
  fflush(stdout);
  int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return PD_EIO;
  if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    close(fd);
    return PD_EIO;
  }
  g_console_saved = fd;
  return 0;
}

int pd_out_stdout_end(bool keep) {
  if (g_console_saved < 0) return 0;
  fflush(NULL); /* the console's lines (on stderr now) before the output */
  int rc = 0;
  if (g_stdout_held >= 0) {
    if (keep) rc = copy_fd(g_stdout_held, g_console_saved);
    close(g_stdout_held);
    g_stdout_held = -1;
  }
  if (dup2(g_console_saved, STDOUT_FILENO) < 0 && rc == 0) rc = PD_EIO;
  close(g_console_saved);
  g_console_saved = -1;
  return rc;
}

static void out_free(pd_out_t *o) {
  free(o->path);
  free(o->tmp);
  free(o->dir);
  free(o->iobuf);
  free(o);
}

/* Closes the stream and the descriptors; keeps the first error. */
static void close_all(pd_out_t *o, bool sync) {
  if (o->f != NULL) {
    if (fflush(o->f) != 0) note_errno(o, errno);
    if (!(o->flags & PD_OUT_BINARY) && o->err_no == 0 && put_utf8(o, NULL, 0, true) != 0) note_errno(o, o->err_no);
    FILE *f = o->f;
    o->f = NULL;
    fclose(f); /* the cookie has no close function: errors were caught by fflush */
  }
  if (o->gz != NULL) {
    int zr = gzclose(o->gz);
    o->gz = NULL;
    if (zr != Z_OK) note_errno(o, zr == Z_ERRNO ? errno : EIO);
  }
  if (o->fd >= 0) {
    if (sync && o->err_no == 0 && fsync(o->fd) != 0) note_errno(o, errno);
    if (close(o->fd) != 0) note_errno(o, errno);
    o->fd = -1;
  }
}

static void discard(pd_out_t *o) {
  close_all(o, false);
  if (o->to_stdout) {
    if (o->hold_fd >= 0) close(o->hold_fd);
    atomic_store(&g_stdout_taken, false);
  }
  if (o->tmp != NULL) (void)unlink(o->tmp);
  slot_release(o->slot);
  out_free(o);
}

/* Creates the temporary "<path>.tmp.<pid>.<n>" with O_EXCL|O_NOFOLLOW. */
static int create_temp(pd_out_t *o) {
  static atomic_uint g_seq;
  size_t n = strlen(o->path) + 48;
  o->tmp = malloc(n);
  if (o->tmp == NULL) return PD_ENOMEM;
  for (int tries = 0; tries < 100; tries++) {
    snprintf(o->tmp, n, "%s.tmp.%ld.%u", o->path, (long)getpid(), atomic_fetch_add(&g_seq, 1));
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (o->fd >= 0) return 0;
    if (errno != EEXIST) return code_of_errno(errno);
  }
  return PD_EIO;
}

int pd_out_open(const char *path, unsigned flags, pd_out_t **out) {
  if (out != NULL) *out = NULL;
  if (path == NULL || path[0] == 0 || out == NULL) return PD_EINVAL;
  if (strlen(path) + 48 >= PATH_MAX) return PD_EINVAL;
  int rc = check_target(path);
  if (rc != 0) return rc;
  const bool to_stdout = pd_out_is_stdout(path);
  bool unclaimed = false;
  if (to_stdout && !atomic_compare_exchange_strong(&g_stdout_taken, &unclaimed, true)) return PD_ESTDOUT;
  pd_out_t *o = calloc(1, sizeof(*o));
  if (o == NULL) {
    if (to_stdout) atomic_store(&g_stdout_taken, false);
    return PD_ENOMEM;
  }
  o->fd = -1;
  o->hold_fd = -1;
  o->slot = -1;
  o->flags = flags;
  o->to_stdout = to_stdout;
  o->path = dup_str(path);
  o->dir = dir_of(path);
  o->iobuf = malloc(OUT_BUFFER_BYTES);
  if (o->path == NULL || o->dir == NULL || o->iobuf == NULL) {
    if (to_stdout) atomic_store(&g_stdout_taken, false);
    out_free(o);
    return PD_ENOMEM;
  }
  if (to_stdout) {
    /* held in memory until committed: a failure writes nothing to standard output */
    o->fd = memfd_create("pd_out_stdout", MFD_CLOEXEC);
    o->hold_fd = o->fd >= 0 ? fcntl(o->fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (o->hold_fd < 0) {
      rc = code_of_errno(errno);
      discard(o);
      return rc;
    }
  } else {
    rc = create_temp(o);
    if (rc != 0) {
      free(o->tmp);
      o->tmp = NULL; /* nothing was created */
      out_free(o);
      return rc;
    }
    o->slot = slot_claim(o->tmp);
  }
  if (flags & PD_OUT_GZIP) {
    int fd2 = dup(o->fd);
    o->gz = fd2 >= 0 ? gzdopen(fd2, "wb") : NULL;
    if (o->gz == NULL) {
      if (fd2 >= 0) close(fd2);
      discard(o);
      return PD_ENOMEM;
    }
    (void)gzbuffer(o->gz, 256u << 10);
  }
  cookie_io_functions_t io = {.read = NULL, .write = cookie_write, .seek = NULL, .close = NULL};
  o->f = fopencookie(o, "w", io);
  if (o->f == NULL) {
    discard(o);
    return PD_ENOMEM;
  }
  setvbuf(o->f, o->iobuf, _IOFBF, OUT_BUFFER_BYTES);
  *out = o;
  return 0;
}

FILE *pd_out_stream(pd_out_t *o) { return o != NULL ? o->f : NULL; }
int pd_out_failed(const pd_out_t *o) { return o != NULL && o->err_no != 0 ? code_of_errno(o->err_no) : 0; }
const char *pd_out_path(const pd_out_t *o) { return o != NULL ? o->path : NULL; }

void pd_out_abort(pd_out_t *o) {
  if (o != NULL) discard(o);
}

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd); /* some file systems refuse fsync on a directory: the rename stands */
    close(fd);
  }
}

/* Renames a staged output over its target (checked again just before) and frees it. */
static int finish(pd_out_t *o) {
  if (o->to_stdout) {
    int hold = o->hold_fd;
    o->hold_fd = -1;
    out_free(o); /* stays taken: one output per process on "-" */
    return stdout_deliver(hold);
  }
  int rc = check_target(o->path);
  if (rc == 0 && rename(o->tmp, o->path) != 0) rc = code_of_errno(errno);
  if (rc != 0) {
    discard(o);
    return rc;
  }
  sync_dir(o->dir);
  slot_release(o->slot);
  out_free(o);
  return 0;
}

static _Thread_local bool t_batch;
static _Thread_local pd_out_t *t_staged_head, *t_staged_tail;

int pd_out_commit(pd_out_t *o) {
  if (o == NULL) return PD_EINVAL;
  if (o->f != NULL && ferror(o->f)) note_errno(o, o->err_no);
  close_all(o, true);
  if (o->err_no != 0) {
    int rc = code_of_errno(o->err_no);
    discard(o);
    return rc;
  }
  if (t_batch) {
    o->next_staged = NULL;
    if (t_staged_tail != NULL) t_staged_tail->next_staged = o;
    else t_staged_head = o;
    t_staged_tail = o;
    return 0;
  }
  return finish(o);
}

int pd_out_write_all(const char *path, unsigned flags, const void *data, size_t len) {
  pd_out_t *o = NULL;
  int rc = pd_out_open(path, flags, &o);
  if (rc != 0) return rc;
  if (len > 0 && fwrite(data, 1, len, o->f) != len) note_errno(o, o->err_no);
  return pd_out_commit(o);
}

void pd_out_batch_begin(void) {
  t_batch = true;
  t_staged_head = t_staged_tail = NULL;
}

int pd_out_batch_commit(void) {
  int rc = 0;
  pd_out_t *o = t_staged_head;
  t_batch = false;
  t_staged_head = t_staged_tail = NULL;
  /* Check every target first, so a refusal renames nothing. */
  for (pd_out_t *p = o; p != NULL && rc == 0; p = p->next_staged) rc = check_target(p->path);
  /* SIGINT, SIGTERM and SIGHUP wait until every rename is done: a signal between two
   * renames would leave a new file beside an old one (seen in the kill test). Only
   * SIGKILL can still split a batch. */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  while (o != NULL) {
    pd_out_t *next = o->next_staged;
    if (rc == 0) rc = finish(o);
    else discard(o);
    o = next;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

void pd_out_batch_abort(void) {
  pd_out_t *o = t_staged_head;
  t_batch = false;
  t_staged_head = t_staged_tail = NULL;
  while (o != NULL) {
    pd_out_t *next = o->next_staged;
    discard(o);
    o = next;
  }
}

int pd_out_probe(const char *path) {
  pd_out_t *o = NULL;
  int rc = pd_out_open(path, PD_OUT_BINARY, &o);
  if (rc == 0) pd_out_abort(o);
  return rc;
}

/* ---- terminal text ---------------------------------------------------------------------------------- */

/* Escapes p[0..n) into out, or into buf (at most len - 1 bytes, NUL-terminated) when out
 * is NULL: C0 controls but tab and newline, DEL, C1 (as UTF-8) and invalid UTF-8 bytes
 * become \xNN. With hold_tail, a valid but cut-short character at the end is not written:
 * *held receives its length. Returns the bytes written to buf. */
static size_t term_escape_n(FILE *out, char *buf, size_t len, const unsigned char *p, size_t n, bool hold_tail,
                            size_t *held, bool one_line) {
  static const char hex[] = "0123456789abcdef";
  size_t used = 0, i = 0;
  if (held != NULL) *held = 0;
  while (i < n) {
    char esc[4] = {'\\', 'x', 0, 0};
    const char *piece = (const char *)p + i;
    size_t plen = 1, step = 1;
    unsigned char c = p[i];
    size_t prefix = 0, seq = 1;
    if (c >= 0x80) {
      seq = pd_utf8_seq(p + i, n - i, &prefix);
      if (seq == SIZE_MAX && hold_tail) {
        if (held != NULL) *held = n - i;
        break;
      }
    }
    bool c1 = seq == 2 && c == 0xC2 && p[i + 1] < 0xA0; /* U+0080..U+009F */
    if ((c < 0x20 && ((c != '\t' && c != '\n') || one_line)) || c == 0x7F || (c >= 0x80 && (seq == 0 || seq == SIZE_MAX || c1))) {
      unsigned char b = c1 ? p[i + 1] : c;
      esc[2] = hex[b >> 4];
      esc[3] = hex[b & 15];
      piece = esc;
      plen = 4;
      step = c1 ? 2 : 1;
    } else {
      plen = step = c >= 0x80 ? seq : 1;
    }
    if (out != NULL) {
      fwrite(piece, 1, plen, out);
    } else {
      if (used + plen >= len) break;
      memcpy(buf + used, piece, plen);
      used += plen;
    }
    i += step;
  }
  if (out == NULL && len > 0) buf[used] = 0;
  return used;
}

void pd_term_write(FILE *out, const char *s) {
  if (out != NULL && s != NULL) (void)term_escape_n(out, NULL, 0, (const unsigned char *)s, strlen(s), false, NULL, false);
}

char *pd_term_escape_line(char *buf, size_t len, const char *s) {
  if (buf == NULL || len == 0) return buf;
  if (s == NULL) s = "";
  (void)term_escape_n(NULL, buf, len, (const unsigned char *)s, strlen(s), false, NULL, true);
  return buf;
}

char *pd_term_escape(char *buf, size_t len, const char *s) {
  if (buf == NULL || len == 0) return buf;
  if (s == NULL) s = "";
  (void)term_escape_n(NULL, buf, len, (const unsigned char *)s, strlen(s), false, NULL, false);
  return buf;
}

/* A stream that escapes what it is given and passes it to an underlying stream. A UTF-8
 * character cut by a buffer boundary waits in pend for the next write. */
typedef struct {
  FILE *under;
  unsigned char pend[4];
  size_t npend;
} term_stream_t;

static ssize_t term_cookie_write(void *cookie, const char *buf, size_t n) {
  term_stream_t *t = cookie;
  unsigned char *all = malloc(t->npend + n);
  if (all == NULL) { /* out of memory: the bytes escaped one by one, no holding back */
    (void)term_escape_n(t->under, NULL, 0, (const unsigned char *)buf, n, false, NULL, false);
    fflush(t->under);
    return (ssize_t)n;
  }
  memcpy(all, t->pend, t->npend);
  memcpy(all + t->npend, buf, n);
  size_t total = t->npend + n, held = 0;
  (void)term_escape_n(t->under, NULL, 0, all, total, true, &held, false);
  memcpy(t->pend, all + total - held, held);
  t->npend = held;
  free(all);
  fflush(t->under);
  return (ssize_t)n;
}

static int term_cookie_close(void *cookie) {
  term_stream_t *t = cookie;
  (void)term_escape_n(t->under, NULL, 0, t->pend, t->npend, false, NULL, false);
  fflush(t->under);
  free(t);
  return 0;
}

FILE *pd_term_stream(FILE *under) {
  if (under == NULL) return NULL;
  term_stream_t *t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  t->under = under;
  cookie_io_functions_t io = {.read = NULL, .write = term_cookie_write, .seek = NULL, .close = term_cookie_close};
  FILE *f = fopencookie(t, "w", io);
  if (f == NULL) {
    free(t);
    return NULL;
  }
  /* line-buffered: lines of stdout and stderr keep their order in a shared log */
  setvbuf(f, NULL, _IOLBF, BUFSIZ);
  return f;
}

void pd_term_begin(pd_term_guard_t *g) {
  g->raw_out = stdout;
  g->raw_err = stderr;
  g->out = pd_term_stream(stdout);
  g->err = pd_term_stream(stderr);
  if (g->out != NULL) stdout = g->out;
  if (g->err != NULL) stderr = g->err;
}

void pd_term_end(pd_term_guard_t *g) {
  fflush(stdout);
  fflush(stderr);
  if (g->out != NULL) {
    stdout = g->raw_out;
    fclose(g->out);
    g->out = NULL;
  }
  if (g->err != NULL) {
    stderr = g->raw_err;
    fclose(g->err);
    g->err = NULL;
  }
}
