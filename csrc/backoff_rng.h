/*
** backoff_rng.h -- internal to the engine: xoshiro256** 1.0 (Blackman
** and Vigna, 2018, public domain algorithm), seeded with splitmix64 as
** its authors recommend.  Inline, since a draw is on the path of every
** jittered failure; backoff.h exports it as backoff_rng_*.
*/

#ifndef BACKOFF_RNG_H
#define BACKOFF_RNG_H

#include <stdint.h>

#include "backoff_types.h"

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static inline uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static inline void rng_seed(backoff_rng *r, uint64_t seed) {
  uint64_t x = seed;
  int i;
  for (i = 0; i < 4; i++)
    r->s[i] = splitmix64(&x);
  /* splitmix64 is a bijection of a counter: four consecutive outputs
     cannot all be zero, but keep the invariant explicit */
  if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
    r->s[1] = 0xff;
}

static inline uint64_t rng_next(backoff_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* [0, 1) from the top 53 bits, as Lua 5.4's I2d does */
static inline double rng_double(backoff_rng *r) {
  return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
