//! The test child: a small C program that appends `start`/`stop` lines with a CLOCK_MONOTONIC
//! timestamp, its term, pid and label to a shared file (started in about a millisecond, so
//! that timings measure tenure, not an interpreter). Compiled once per test run with `cc`.
//!
//! The pid it logs is the one the test sees: its pid in the outermost PID namespace that
//! `/proc` shows (the first `NSpid` field), so that the test can check it from outside when
//! tenure runs the command in a PID namespace of its own.
//!
//! `child LOG LABEL MODE CODE`, where MODE is:
//! - `forever`: run until SIGTERM (logs `stop` and exits 0; nothing if the SIGTERM came
//!   before its `start` line);
//! - `SECS`: run that long, log `stop`, exit with CODE;
//! - `ignore-term`: ignore SIGTERM and run until killed (no `stop` line);
//! - `daemon`: double-fork a `forever` daemon in a session of its own, and exit 0 at once
//!   (the launcher logs nothing);
//! - `nestN`: a chain N deep (labels LABEL.1 … LABEL.N), each running `forever`.

use nix::time::{clock_gettime, ClockId};
use std::path::{Path, PathBuf};
use std::process::Command;

/// CLOCK_MONOTONIC in nanoseconds, as the children write it.
pub(crate) fn mono_ns() -> i64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock");
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

/// The child: a small C program (started in about a millisecond, so that it measures tenure,
/// not an interpreter), compiled once per test run with the machine's C compiler.
const CHILD_C: &str = r#"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
static const char *log_path, *label;
static char term[32], labelbuf[128];
/* Set once a `start` line is written: a SIGTERM that comes before it (a supervisor that stops
   the child as it starts) writes no `stop` without its `start`. */
static volatile sig_atomic_t started;
static int outer_pid(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char row[256];
    int pid = (int)getpid();
    if (!f) return pid;
    while (fgets(row, sizeof row, f)) {
        if (strncmp(row, "NSpid:", 6) == 0) { pid = atoi(row + 6); break; }
    }
    fclose(f);
    return pid;
}
static void line(const char *kind) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s %lld %s %d %s\n", kind,
                     (long long)t.tv_sec * 1000000000LL + t.tv_nsec, term, outer_pid(), label);
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) { if (write(fd, buf, n) < 0) {} close(fd); }
    if (strcmp(kind, "start") == 0) started = 1;
}
static void on_term(int s) { (void)s; if (started) line("stop"); _exit(0); }
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    log_path = argv[1]; label = argv[2];
    const char *t = getenv("TENURE_TERM");
    snprintf(term, sizeof term, "%s", t ? t : "0");
    signal(SIGTERM, on_term);
    if (strcmp(argv[3], "daemon") == 0) {
        pid_t first = fork();
        if (first < 0) return 3;
        if (first > 0) { waitpid(first, NULL, 0); return 0; }
        setsid();
        if (fork() != 0) _exit(0);
        line("start");
        for (;;) pause();
    }
    if (strcmp(argv[3], "ignore-term") == 0) {
        signal(SIGTERM, SIG_IGN);
        line("start");
        for (;;) pause();
    }
    if (strncmp(argv[3], "nest", 4) == 0) {
        int depth = atoi(argv[3] + 4);
        for (int level = 1;; level++) {
            snprintf(labelbuf, sizeof labelbuf, "%s.%d", argv[2], level);
            label = labelbuf;
            line("start");
            if (level >= depth || fork() != 0) break;
        }
        for (;;) pause();
    }
    line("start");
    if (strcmp(argv[3], "forever") == 0) for (;;) pause();
    double secs = atof(argv[3]);
    struct timespec d = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };
    while (nanosleep(&d, &d) == -1) {}
    line("stop");
    return atoi(argv[4]);
}
"#;

/// Builds the child program once.
pub(crate) fn child_program() -> &'static Path {
    static PROGRAM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tenure-run-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("child.c");
        std::fs::write(&source, CHILD_C).unwrap();
        let program = dir.join("child");
        let built = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&program)
            .arg(&source)
            .status()
            .expect("a C compiler (cc) to build the test child");
        assert!(built.success(), "cc failed");
        program
    })
}
