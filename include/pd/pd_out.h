/* pd_out.h: the one writer of every output file (traces, metrics JSON, analyzer reports,
 * baselines, comparison reports).
 *
 * An output is written to a temporary file in the target's own directory, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW (a planted file or symlink of that name is never followed
 * or reused), then flushed, fsync'ed, renamed over the target and the directory fsync'ed.
 * A reader never sees half a file, and a failed or interrupted write leaves the old file
 * (if any) and no temporary behind:
 *  - every failure path removes the temporary;
 *  - pd_out_remove_temps() removes the live temporaries from a signal handler
 *    (pd_out_cleanup_on_signals() installs one for SIGINT, SIGTERM and SIGHUP);
 *  - a target that exists and is not a regular file (a directory, a device node, a FIFO)
 *    is refused, and so is a target that is one of the program's inputs
 *    (pd_out_protect_input());
 *  - between pd_out_batch_begin() and pd_out_batch_commit() the outputs of the calling
 *    thread are only staged (complete and fsync'ed under their temporary names); the batch
 *    renames them all at the end (with SIGINT, SIGTERM and SIGHUP held back until the
 *    last rename), or removes them all (pd_out_batch_abort()), so one invocation's
 *    outputs are written all or none. Only a rename itself failing half way through a
 *    batch, or SIGKILL between two renames, could leave some renamed: staging is where
 *    the disk fills up.
 * The path "-" means standard output, for every output: its bytes are held (in an
 * anonymous memory file) until the output is committed, so a failure writes nothing there;
 * inside pd_out_stdout_begin() .. pd_out_stdout_end() they are held until the end, so a
 * program that fails later still writes nothing there. One output per process may use it
 * (a second open of "-" is PD_ESTDOUT). Other device nodes stay refused.
 * Text goes through a UTF-8 filter: each maximal invalid subsequence becomes U+FFFD, so a
 * JSON output is valid UTF-8 whatever bytes the names carried. PD_OUT_GZIP compresses on
 * the fly (zlib's gzip format, as torch.profiler's use_gzip), in the same single pass.
 */
#ifndef PD_OUT_H
#define PD_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_out pd_out_t;

enum {
  PD_OUT_GZIP = 1u << 0,  /* gzip the stream (the target name should end in .gz) */
  PD_OUT_BINARY = 1u << 1 /* bytes as given: no UTF-8 repair */
};

/* Opens a temporary for path (see above). *out owns it: finish with pd_out_commit() or
 * pd_out_abort(). Returns 0, PD_EINVAL (empty or too long a path), PD_ENOMEM,
 * PD_ENOTREG (path is a directory or not a regular file), PD_EISINPUT, PD_ENOENT (no
 * such directory), PD_EACCES, PD_EROFS, PD_ENOSPC or PD_EIO. */
int pd_out_open(const char *path, unsigned flags, pd_out_t **out);
/* The stream to write to (owned by o; valid until commit or abort). */
FILE *pd_out_stream(pd_out_t *o);
/* 0 while every byte so far reached the file system, else the error (PD_ENOSPC, ...):
 * a long writer may stop early. Writes to the stream never fail themselves. */
int pd_out_failed(const pd_out_t *o);
/* The target path (owned by o). */
const char *pd_out_path(const pd_out_t *o);
/* Flushes, fsyncs and closes the temporary, then renames it over the target and fsyncs
 * the directory; inside a batch the rename waits for pd_out_batch_commit(). Frees o
 * whatever happens. Returns 0 or the first error of the whole write (PD_ENOSPC,
 * PD_EROFS, PD_EIO, ...); on error nothing of this output is left. */
int pd_out_commit(pd_out_t *o);
/* Removes the temporary and frees o (NULL is fine). */
void pd_out_abort(pd_out_t *o);
/* Writes len bytes of data as path in one go (open, write, commit). */
int pd_out_write_all(const char *path, unsigned flags, const void *data, size_t len);

/* True for "-", the path of standard output. */
bool pd_out_is_stdout(const char *path);
/* For a program with an output on "-": moves the console to stderr (file descriptor 1
 * then refers to what 2 does, so every report line printed to stdout lands on stderr) and
 * holds the committed "-" output until pd_out_stdout_end(). Call before printing anything.
 * Returns 0, or PD_EIO (nothing changed). */
int pd_out_stdout_begin(void);
/* Ends what pd_out_stdout_begin() started: with keep, writes the held "-" output (if any)
 * to the real standard output; without, drops it. Restores descriptor 1. Returns 0 or
 * PD_EIO when the bytes could not all be written. A no-op without a begin. */
int pd_out_stdout_end(bool keep);

/* Starts a batch on the calling thread (batches do not nest). */
void pd_out_batch_begin(void);
/* Renames every output staged since pd_out_batch_begin(), in order, and ends the batch.
 * Returns 0, or the error of the first rename that failed (the outputs after it are
 * removed). */
int pd_out_batch_commit(void);
/* Removes every staged output of the batch and ends it. */
void pd_out_batch_abort(void);

/* Checks, without writing anything, that path could be written: its directory exists and
 * takes a new file (a temporary is created and removed at once), and path is not a
 * directory, a non-regular file or an input. Returns 0 or the code pd_out_open would. */
int pd_out_probe(const char *path);

/* Records path (an existing file) as an input of this process: no output may replace it.
 * Returns 0, or PD_EIO when it cannot be stat'ed. Readers call it for what they read. */
int pd_out_protect_input(const char *path);
/* The same for an open descriptor. */
int pd_out_protect_fd(int fd);

/* Removes every live temporary of the process. Async-signal-safe: for signal handlers. */
void pd_out_remove_temps(void);
/* Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the live temporaries and
 * then die of the same signal (exit status 128 + signal number in a shell). */
void pd_out_cleanup_on_signals(void);

/* Writes s to out with control characters (C0 but tab and newline, DEL, and the C1
 * range as UTF-8) shown as \xNN, and invalid UTF-8 bytes as \xNN: for names printed on a
 * terminal, where an ESC or CR would otherwise reach it raw. */
void pd_term_write(FILE *out, const char *s);
/* The same into buf (always NUL-terminated, cut short if needed); returns buf. */
char *pd_term_escape(char *buf, size_t len, const char *s);
/* As pd_term_escape, and tab and newline shown as \x09 and \x0a too: a message that
 * quotes user input (a flag's value) stays one line whatever that input holds. */
char *pd_term_escape_line(char *buf, size_t len, const char *s);

/* A stream that writes to under what pd_term_write() would: programs put their stdout and
 * stderr behind one (stdout = pd_term_stream(stdout)) so no name in any table or message
 * reaches the terminal raw. Returns NULL when out
 * of memory (then keep under). Line-buffered; closing it flushes under and leaves under open. */
FILE *pd_term_stream(FILE *under);

/* The programs' stdout and stderr put behind pd_term_stream() for the whole run, and back. */
typedef struct {
  FILE *raw_out, *raw_err; /* the streams before */
  FILE *out, *err;         /* the escaping ones, NULL where out of memory */
} pd_term_guard_t;
/* Sets stdout and stderr to escaping streams over themselves (each kept as it is when its
 * stream cannot be made). */
void pd_term_begin(pd_term_guard_t *g);
/* Flushes, restores stdout and stderr and closes the escaping streams (which flush into the
 * real ones). */
void pd_term_end(pd_term_guard_t *g);

#ifdef __cplusplus
}
#endif

#endif /* PD_OUT_H */
