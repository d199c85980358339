/*
** lbackoff_env.c -- what the binding takes from the system (see
** lbackoff_env.h): the monotonic clock, sleeping, seeds, forks.
*/

#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE   /* MADV_WIPEONFORK */

#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "lbackoff_env.h"

double lbackoff_monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the process's tag, the first time it is asked for in this process */
uint32_t lbackoff_tag_slow(lbackoff_env *e) {
  uint32_t tag = (uint32_t)getpid();
  if (e->wipe != NULL) *e->wipe = tag;
  return tag;
}

/* seed the state's generator from the clocks, the pid and an address */
static void seed_generator(lbackoff_env *e, uint32_t tag) {
  struct timespec m, r;
  uint64_t x;
  clock_gettime(CLOCK_MONOTONIC, &m);
  clock_gettime(CLOCK_REALTIME, &r);
  x = (uint64_t)m.tv_sec * UINT64_C(1000000000) + (uint64_t)m.tv_nsec;
  x ^= ((uint64_t)r.tv_sec << 32) ^ (uint64_t)r.tv_nsec;
  x ^= (uint64_t)tag << 40;
  x ^= (uint64_t)(uintptr_t)e * UINT64_C(0x9e3779b97f4a7c15);
  backoff_rng_seed(&e->seeds, x);
  e->seeds_tag = tag;
}

/*
** A new jitter stream for an unseeded object, owned by this process:
** the next output of the state's generator, which is seeded again in
** a forked child.  No system call (where the kernel wipes pages), so
** clones and constructors stay cheap.
*/
uint64_t lbackoff_new_seed(lbackoff_env *e, uint32_t *tag) {
  *tag = lbackoff_tag(e);
  if (*tag != e->seeds_tag) seed_generator(e, *tag);
  return backoff_rng_next(&e->seeds);
}

void lbackoff_env_free(lbackoff_env *e) {
  if (e->wipe != NULL) {
    munmap((void *)(uintptr_t)e->wipe, 4096);
    e->wipe = NULL;
  }
}

void lbackoff_env_init(lbackoff_env *e) {
  void *page = MAP_FAILED;
  e->wipe = NULL;
#if defined(MADV_WIPEONFORK) && defined(MAP_ANONYMOUS)
  page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page != MAP_FAILED && madvise(page, 4096, MADV_WIPEONFORK) != 0) {
    munmap(page, 4096);
    page = MAP_FAILED;
  }
#endif
  if (page != MAP_FAILED) e->wipe = (volatile uint32_t *)page;
  seed_generator(e, lbackoff_tag(e));
}

/* backoff.now(): the default clock */
int lbackoff_now(lua_State *L) {
  lua_pushnumber(L, (lua_Number)lbackoff_monotonic());
  return 1;
}

/*
** backoff.sleep(seconds): blocking, for plain Lua.  0 returns at once
** (no system call); a positive time under 1 ms sleeps 1 ms, as the
** runner's sleeps do in nginx (ngx.sleep's resolution), so that a delay
** means the same pause everywhere.  nanosleep, restarted on EINTR.
*/
int lbackoff_sleep(lua_State *L) {
  double s = lua_tonumber(L, 1);
  struct timespec req, rem;
  if (lua_type(L, 1) != LUA_TNUMBER || !(s >= 0) || s > DBL_MAX)
    return lbackoff_argerror(L, 1, "sleep", lua_pushfstring(L,
      "seconds must be a finite number >= 0 (got %s)", lbackoff_repr(L, 1)));
  if (s == 0) return 0;
  if (s < 0.001) s = 0.001;
  if (s > 1e9) s = 1e9;   /* ~31 years: keeps tv_sec in range */
  req.tv_sec = (time_t)s;
  req.tv_nsec = (long)((s - (double)req.tv_sec) * 1e9);
  if (req.tv_nsec > 999999999L) req.tv_nsec = 999999999L;
  while (nanosleep(&req, &rem) != 0 && errno == EINTR)
    req = rem;
  return 0;
}
