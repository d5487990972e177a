// hottrace ADDRS OUT -- PROGRAM [ARG...]: which functions of PROGRAM a run
// enters, in the order it first enters them.
//
// ADDRS lists the functions' addresses in PROGRAM's file (hex, one a line,
// as the linker's map gives them: a position-independent binary is mapped
// from address 0). The program runs under ptrace with a breakpoint (int3)
// on the first byte of each; the first time one is hit, its address goes to
// OUT, its byte is put back and the thread goes on, so each function costs
// one stop. Every thread and every process that shares the program's
// memory is followed (the step's guard, a clone of the runner, shares it);
// a process that execs another program is let go.
//
// Used by link/hot-functions.sh; not part of the product.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long *addr;
static unsigned char *orig, *hit;
static long n;

static int by_address(const void *a, const void *b) {
  unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
  return x < y ? -1 : x > y;
}

static long find(unsigned long a) {
  long lo = 0, hi = n - 1;
  while (lo <= hi) {
    long m = lo + (hi - lo) / 2;
    if (addr[m] == a) return m;
    if (addr[m] < a) lo = m + 1; else hi = m - 1;
  }
  return -1;
}

// Where process `pid` mapped the start of the file named `name`.
static unsigned long base_of(pid_t pid, const char *name) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  FILE *maps = fopen(path, "r");
  if (!maps) { perror(path); exit(1); }
  unsigned long base = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long start, offset;
    char file[4096] = "";
    if (sscanf(line, "%lx-%*x %*s %lx %*s %*s %4095s", &start, &offset, file) == 3 &&
        offset == 0 && strcmp(strrchr(file, '/') ? strrchr(file, '/') + 1 : file, name) == 0) {
      base = start;
      break;
    }
  }
  fclose(maps);
  return base;
}

static int mem_of(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mem", pid);
  return open(path, O_RDWR);
}

int main(int argc, char **argv) {
  if (argc < 5 || strcmp(argv[3], "--") != 0) {
    fprintf(stderr, "usage: hottrace ADDRS OUT -- PROGRAM [ARG...]\n");
    return 2;
  }
  FILE *in = fopen(argv[1], "r");
  if (!in) { perror(argv[1]); return 1; }
  long cap = 1 << 16;
  addr = malloc(cap * sizeof *addr);
  unsigned long a;
  while (fscanf(in, "%lx", &a) == 1) {
    if (n == cap) addr = realloc(addr, (cap *= 2) * sizeof *addr);
    addr[n++] = a;
  }
  fclose(in);
  qsort(addr, n, sizeof *addr, by_address);
  long kept = 0;
  for (long i = 0; i < n; i++)
    if (kept == 0 || addr[kept - 1] != addr[i]) addr[kept++] = addr[i];
  n = kept;
  orig = calloc(n, 1);
  hit = calloc(n, 1);
  FILE *out = fopen(argv[2], "w");
  if (!out) { perror(argv[2]); return 1; }
  char **cmd = argv + 4;
  const char *name = strrchr(cmd[0], '/') ? strrchr(cmd[0], '/') + 1 : cmd[0];

  pid_t child = fork();
  if (child == 0) {
    ptrace(PTRACE_TRACEME, 0, 0, 0);
    raise(SIGSTOP);
    execvp(cmd[0], cmd);
    _exit(127);
  }
  int status;
  waitpid(child, &status, 0);
  ptrace(PTRACE_SETOPTIONS, child, 0,
         PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
             PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL);
  ptrace(PTRACE_CONT, child, 0, 0);

  unsigned long base = 0;
  int armed = 0, code = 0;
  long hits = 0;
  for (;;) {
    pid_t pid = waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      if (pid == child) code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      continue;
    }
    int sig = WSTOPSIG(status), event = status >> 16;
    if (sig == SIGTRAP && event == PTRACE_EVENT_EXEC) {
      if (pid != child || armed) {
        ptrace(PTRACE_DETACH, pid, 0, 0);
        continue;
      }
      base = base_of(pid, name);
      int mem = mem_of(pid);
      for (long i = 0; i < n; i++) {
        unsigned char trap = 0xcc;
        if (pread(mem, &orig[i], 1, base + addr[i]) != 1 ||
            pwrite(mem, &trap, 1, base + addr[i]) != 1) {
          fprintf(stderr, "hottrace: cannot set a breakpoint at %lx\n", addr[i]);
          return 1;
        }
      }
      close(mem);
      armed = 1;
      ptrace(PTRACE_CONT, pid, 0, 0);
      continue;
    }
    if (sig == SIGTRAP && event != 0) {  // a clone, fork or vfork reported
      ptrace(PTRACE_CONT, pid, 0, 0);
      continue;
    }
    if (sig == SIGTRAP && armed) {
      struct user_regs_struct regs;
      ptrace(PTRACE_GETREGS, pid, 0, &regs);
      unsigned long at = regs.rip - 1;
      long i = at >= base ? find(at - base) : -1;
      if (i >= 0) {
        // Another thread may have hit it first: its byte is back already.
        if (!hit[i]) {
          hit[i] = 1;
          hits++;
          fprintf(out, "%lx\n", addr[i]);
          int mem = mem_of(pid);
          pwrite(mem, &orig[i], 1, at);
          close(mem);
        }
        regs.rip = at;
        ptrace(PTRACE_SETREGS, pid, 0, &regs);
        ptrace(PTRACE_CONT, pid, 0, 0);
        continue;
      }
    }
    // A new thread's first stop, or a signal that is the program's own.
    ptrace(PTRACE_CONT, pid, 0, sig == SIGSTOP || sig == SIGTRAP ? 0 : sig);
  }
  fclose(out);
  fprintf(stderr, "hottrace: %s entered %ld of %ld functions\n", name, hits, n);
  return code;
}
