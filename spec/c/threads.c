/*
** threads.c -- the core has no hidden shared state: 4 threads each
** drive their own objects (every strategy, jitter on, seeded), at the
** same time, and must produce exactly the sequences that one thread
** produces alone.  Built with -fsanitize=thread by `make threads`, which
** would also report any data race.  Prints TAP.
*/

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backoff_options.h"

#define NTHREADS 4
#define NOPS 20000

typedef struct job {
  int id;
  double checksum;
} job;

static double drive(int id) {
  double sum = 0;
  int s, i;
  for (s = 0; s < BACKOFF_NSTRATEGIES; s++) {
    backoff_config c;
    backoff_t b;
    backoff_result r;
    backoff_config_init(&c, s);
    c.p.linear.initial_delay = 1 + id;  /* first of every strategy */
    c.p.linear.delay_increment = (s == BACKOFF_CONSTANT) ? 0 : 1.5;
    c.p.linear.delay_on_success = 0.5;
    c.has_max_delay = 1;
    c.max_delay = 100;
    if (s != BACKOFF_DECORRELATED) {
      c.jitter = (unsigned char)(1 + (s + id) % 3);
      c.jitter_factor = c.jitter == BACKOFF_JITTER_PROPORTIONAL ? 0.3 : 0;
    }
    backoff_init(&b, &c, 0, (uint64_t)(id * 1000 + s), NULL);
    for (i = 0; i < NOPS; i++) {
      if (i % 7 == 6) backoff_success(&b, i * 0.01, &r);
      else backoff_failure(&b, i * 0.01, &r);
      sum += r.delay + (r.has_timeout ? r.timeout : 0);
    }
  }
  return sum;
}

static void *worker(void *arg) {
  job *j = (job *)arg;
  j->checksum = drive(j->id);
  return NULL;
}

int main(void) {
  pthread_t t[NTHREADS];
  job jobs[NTHREADS];
  double alone[NTHREADS];
  int i, same = 1;
  for (i = 0; i < NTHREADS; i++) alone[i] = drive(i);
  for (i = 0; i < NTHREADS; i++) {
    jobs[i].id = i;
    if (pthread_create(&t[i], NULL, worker, &jobs[i]) != 0) {
      printf("not ok 1 - pthread_create\n");
      return 1;
    }
  }
  for (i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  for (i = 0; i < NTHREADS; i++)
    if (memcmp(&alone[i], &jobs[i].checksum, sizeof(double)) != 0) same = 0;
  printf("%s 1 - %d threads x %d strategies x %d operations: the same "
         "results as one thread alone, no race reported\n",
         same ? "ok" : "not ok", NTHREADS, BACKOFF_NSTRATEGIES, NOPS);
  printf("1..1\n");
  return same ? 0 : 1;
}
