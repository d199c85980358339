/*
** backoff_math.h -- internal to the core: the numeric helpers of the
** engine and of the configuration kit.
**
** Every arithmetic result that could overflow goes through fin(), which
** maps +-inf to +-DBL_MAX: a finite input then never produces inf or
** NaN further down (no inf - inf, no 0 * inf), and fin() is the
** identity on every finite value, so it never changes a normal result.
*/

#ifndef BACKOFF_MATH_H
#define BACKOFF_MATH_H

#include <float.h>
#include <stdint.h>
#include <string.h>

static inline double fin(double x) {
  if (x > DBL_MAX) return DBL_MAX;
  if (x < -DBL_MAX) return -DBL_MAX;
  return x;
}

static inline int is_finite(double x) {
  return x == x && x <= DBL_MAX && x >= -DBL_MAX;
}

/* 2^k for 0 <= k <= 1023, exactly, from the bits of the double */
static inline double pow2(uint64_t k) {
  uint64_t bits = (k + 1023) << 52;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* +0.0 for -0.0, so that nothing returned prints as "-0" */
static inline double unsign_zero(double x) {
  return x == 0 ? 0.0 : x;
}

#endif
