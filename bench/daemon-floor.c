/* The daemon's floor: the minimal durable tick (../shared/peers/floor.c) done
   in one long-lived process, paced like the daemon. Per tick: flock the
   loop's lock, read its state, posix_spawn `true` and wait for it, write a
   temporary file + fdatasync, rename it over the state, fsync the directory.
   HIST=1 adds a history append + fdatasync before the state, as automaton's
   commit does. SPARE=1 writes the state as automaton's file store does:
   over the state the last tick replaced (.state.spare), in place, padded
   to 1 KiB, synced, and swapped in with renameat2(RENAME_EXCHANGE). It prints its own CPU per tick (getrusage) and its
   children's, to set beside `bench/daemon.sh`'s daemon CPU per tick.

   cc -O2 -o /tmp/daemon-floor bench/daemon-floor.c
   /tmp/daemon-floor DIR LOOPS TICKS_PER_SECOND SECONDS   (DIR: an empty directory) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double cpu(int who) { struct rusage r; getrusage(who, &r); return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6; }
int main(int argc, char **argv) {
  if (argc != 5) { fprintf(stderr, "usage: %s DIR LOOPS TICKS_PER_SECOND SECONDS\n", argv[0]); return 2; }
  const char *root = argv[1]; int n = atoi(argv[2]); double rate = atof(argv[3]); double secs = atof(argv[4]);
  int hist = getenv("HIST") && atoi(getenv("HIST"));
  int spare = getenv("SPARE") && atoi(getenv("SPARE"));
  char buf[8192], path[1024], tmp[1100], state[1100];
  for (int i = 0; i < n; i++) { snprintf(path, sizeof path, "%s/l%d", root, i); mkdir(path, 0700);
    snprintf(state, sizeof state, "%s/.state.loop", path); int f = open(state, O_WRONLY|O_CREAT|O_TRUNC, 0600); memset(buf, 'x', 700); write(f, buf, 700); close(f); }
  double t0 = now(), c0 = cpu(RUSAGE_SELF), k0 = cpu(RUSAGE_CHILDREN); long ticks = 0;
  while (now() - t0 < secs) {
    double due = t0 + ticks / rate; double w = due - now(); if (w > 0) usleep(w * 1e6);
    int i = ticks % n; ticks++;
    snprintf(path, sizeof path, "%s/l%d/.state.lock", root, i);
    int lfd = open(path, O_RDWR|O_CREAT|O_CLOEXEC, 0600); flock(lfd, LOCK_EX);
    snprintf(state, sizeof state, "%s/l%d/.state.loop", root, i);
    int sfd = open(state, O_RDONLY|O_CLOEXEC); ssize_t len = read(sfd, buf, sizeof buf); close(sfd);
    pid_t pid; char *av[] = {"true", 0}; posix_spawnp(&pid, "true", 0, 0, av, environ); int st; waitpid(pid, &st, 0);
    if (hist) { snprintf(path, sizeof path, "%s/l%d/history.jsonl", root, i); int h = open(path, O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC, 0600);
      write(h, buf, 600); fdatasync(h); close(h); }
    if (spare) { /* written over in place (padded to 1 KiB), synced, swapped in */
      snprintf(tmp, sizeof tmp, "%s/l%d/.state.spare", root, i);
      if (len < 0) len = 0;
      memset(buf + len, ' ', 1024 - len);
      int tfd = open(tmp, O_WRONLY|O_CREAT|O_CLOEXEC, 0600); pwrite(tfd, buf, 1024, 0); fdatasync(tfd); close(tfd);
      renameat2(AT_FDCWD, tmp, AT_FDCWD, state, RENAME_EXCHANGE);
    } else {
      snprintf(tmp, sizeof tmp, "%s/l%d/.tmp-%ld", root, i, ticks);
      int tfd = open(tmp, O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0600); write(tfd, buf, len > 0 ? len : 1); fdatasync(tfd); close(tfd);
      rename(tmp, state);
    }
    snprintf(path, sizeof path, "%s/l%d", root, i); int dfd = open(path, O_RDONLY|O_CLOEXEC); fsync(dfd); close(dfd);
    flock(lfd, LOCK_UN); close(lfd);
  }
  double el = now() - t0;
  printf("%s%s ticks %ld (%.1f/s) own CPU per tick %.3f ms, children %.3f ms\n", hist ? "floor+history" : "floor", spare ? " via a spare" : "", ticks, ticks / el,
         (cpu(RUSAGE_SELF) - c0) * 1000 / ticks, (cpu(RUSAGE_CHILDREN) - k0) * 1000 / ticks);
  return 0;
}
