/* pingpong ROUNDS CPU_A CPU_B: two processes hand a byte back and forth
   over a socket pair ROUNDS times, the parent pinned to CPU_A and the child
   to CPU_B (-1: not pinned), as crun and a container's process hand over
   during its set-up.  Prints the CPU both used and the wall time, in
   microseconds per round trip.  */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void
pin (int cpu)
{
  cpu_set_t set;

  if (cpu < 0)
    return;
  CPU_ZERO (&set);
  CPU_SET (cpu, &set);
  if (sched_setaffinity (0, sizeof set, &set) < 0)
    {
      perror ("sched_setaffinity");
      exit (1);
    }
}

static double
usec (struct timeval t)
{
  return t.tv_sec * 1e6 + t.tv_usec;
}

int
main (int argc, char **argv)
{
  struct timespec start, end;
  struct rusage self, children;
  int sv[2], rounds, i, status;
  char c = 0;
  pid_t pid;

  if (argc != 4 || (rounds = atoi (argv[1])) <= 0)
    {
      fprintf (stderr, "usage: pingpong ROUNDS CPU_A CPU_B\n");
      return 2;
    }
  if (socketpair (AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
    {
      perror ("socketpair");
      return 1;
    }
  pid = fork ();
  if (pid < 0)
    {
      perror ("fork");
      return 1;
    }
  if (pid == 0)
    {
      pin (atoi (argv[3]));
      for (i = 0; i < rounds; i++)
        if (read (sv[1], &c, 1) != 1 || write (sv[1], &c, 1) != 1)
          _exit (1);
      _exit (0);
    }
  pin (atoi (argv[2]));
  clock_gettime (CLOCK_MONOTONIC, &start);
  for (i = 0; i < rounds; i++)
    if (write (sv[0], &c, 1) != 1 || read (sv[0], &c, 1) != 1)
      {
        perror ("round trip");
        return 1;
      }
  clock_gettime (CLOCK_MONOTONIC, &end);
  if (waitpid (pid, &status, 0) < 0 || status != 0)
    {
      fprintf (stderr, "the child failed\n");
      return 1;
    }
  getrusage (RUSAGE_SELF, &self);
  getrusage (RUSAGE_CHILDREN, &children);
  printf ("%.2f %.2f\n",
          (usec (self.ru_utime) + usec (self.ru_stime) + usec (children.ru_utime) + usec (children.ru_stime)) / rounds,
          ((end.tv_sec - start.tv_sec) * 1e6 + (end.tv_nsec - start.tv_nsec) / 1e3) / rounds);
  return 0;
}
