/*
** lbackoff_env.h -- what the binding takes from the system: the
** monotonic clock, sleeping, seeds for unseeded objects, and noticing
** that the process forked (jitter streams must never be shared by the
** workers forked from one nginx master).  Knows nothing of objects.
*/

#ifndef LBACKOFF_ENV_H
#define LBACKOFF_ENV_H

#include <stdint.h>

#include "backoff.h"
#include "lbackoff_aux.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/*
** Per lua_State (no C statics): a generator for the seeds of unseeded
** objects, and a page the kernel zeroes in a forked child
** (MADV_WIPEONFORK) holding the current process's tag, so that noticing
** a fork costs one load, not a getpid() system call.  wipe is NULL
** where the kernel lacks the feature; then getpid() is the check.
*/
typedef struct lbackoff_env {
  backoff_rng seeds;        /* seeded from the clocks and pid */
  uint32_t seeds_tag;       /* the process tag seeds was seeded in */
  volatile uint32_t *wipe;
} lbackoff_env;

void lbackoff_env_init(lbackoff_env *e);
/* gives the page back; e stays usable (getpid() from then on) */
void lbackoff_env_free(lbackoff_env *e);

double lbackoff_monotonic(void);
uint32_t lbackoff_tag_slow(lbackoff_env *e);

/* changes in a forked child: one load where the kernel can wipe a page
   (the page reads 0 in a new child), else getpid() */
static inline uint32_t lbackoff_tag(lbackoff_env *e) {
  uint32_t tag = e->wipe != NULL ? *e->wipe : 0;
  return tag != 0 ? tag : lbackoff_tag_slow(e);
}

/* a new jitter stream's seed, owned by this process (*tag its tag) */
uint64_t lbackoff_new_seed(lbackoff_env *e, uint32_t *tag);

/* backoff.now() and backoff.sleep(seconds) */
int lbackoff_now(lua_State *L);
int lbackoff_sleep(lua_State *L);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
