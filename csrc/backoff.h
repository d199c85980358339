/*
** backoff.h -- retry backoff strategies, the portable C core: the
** engine (strategies, jitter, limits, per-attempt timeouts, the
** generator).  backoff_options.h, on top of it, is the configuration
** kit: option names, defaults, the table of rules, backoff_init.
**
** No Lua, no malloc, no globals, no clock: the caller owns every
** backoff_t (embed it anywhere), passes the time in as seconds (any
** clock, as long as one object always sees the same one) and passes
** seeds in explicitly.  Every call is deterministic given its inputs.
**
** Typical use (with backoff_options.h):
**
**   backoff_config c;  backoff_t b;  backoff_result r;
**   backoff_config_init(&c, BACKOFF_EXPONENTIAL);
**   c.p.exponential.initial_delay = 0.1;
**   c.has_max_delay = 1;  c.max_delay = 10;
**   if (backoff_init(&b, &c, now(), seed, NULL) != BACKOFF_OK) ...
**
** (or set options by name with backoff_setup_*, as the Lua module does)
**   backoff_failure(&b, now(), &r);    r.give_up ? stop : sleep(r.delay)
**
** Every function that changes a backoff_t validates all of its inputs
** first: on an error status the object is left exactly as it was.
*/

#ifndef BACKOFF_H
#define BACKOFF_H

#include "backoff_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
** Initialise *b from *c, which the caller has checked (backoff_init in
** backoff_options.h checks it, then calls this): start finite, the
** jitter stream of seed.  Draws the initial timeout (from draws when
** not NULL; b->draws is left set to draws).  Cannot fail.
*/
BACKOFF_API void backoff_init_trusted(backoff_t *b, const backoff_config *c,
                                      double start, uint64_t seed,
                                      const backoff_draws *draws);

/*
** Record a failure (or a success) at time ts (seconds, finite; a time
** before the last recorded one counts as that one) and fill *r.
** Returns BACKOFF_OK, or BACKOFF_ETIME for a non-finite ts (no change).
*/
BACKOFF_API int backoff_failure(backoff_t *b, double ts, backoff_result *r);
BACKOFF_API int backoff_success(backoff_t *b, double ts, backoff_result *r);

/*
** A failure with the server's hint: wait at least `hint` seconds
** (finite, >= 0, else BACKOFF_EINVAL and no change).  The delay is
** max(hint, the strategy's delay), not cut by max_delay or the time
** left; a hint over max_hint gives up (BACKOFF_RETRY_AFTER), one that
** ends at or after start + max_actual_duration gives up
** (BACKOFF_MAX_DURATION; not lasting, unlike the duration give-up).
** Neither counts an attempt.  The hint never feeds the strategy's
** memory: the next delay grows from the strategy's own value.
*/
BACKOFF_API int backoff_failure_hint(backoff_t *b, double ts, double hint,
                                     backoff_result *r);

/* 1 when objects of this configuration draw random numbers (jitter,
   timeout jitter, decorrelated): only they need a seed of their own. */
BACKOFF_API int backoff_config_draws(const backoff_config *c);

/*
** Back to the state of a new object started at start, with the jitter
** stream of the object's seed.  BACKOFF_ETIME for a non-finite start.
*/
BACKOFF_API int backoff_reset(backoff_t *b, double start);

/* Lend *b a source of draws for the calls that follow (NULL: its own
   generator again).  Cannot fail. */
BACKOFF_API void backoff_lend_draws(backoff_t *b, const backoff_draws *d);

/* Restart the jitter stream from seed (and remember it for reset). */
BACKOFF_API void backoff_reseed(backoff_t *b, uint64_t seed);

/* backoff_reset with a new seed: one seeding where backoff_reseed and
   backoff_reset would do two (clone, reset of unseeded objects). */
BACKOFF_API int backoff_restart(backoff_t *b, double start, uint64_t seed);

/* Accessors; none changes the object. */
BACKOFF_API double backoff_delay(const backoff_t *b);      /* last delay */
BACKOFF_API uint64_t backoff_attempts(const backoff_t *b);
BACKOFF_API double backoff_start(const backoff_t *b);
/* 1 and *timeout set when timeouts are active, else 0. */
BACKOFF_API int backoff_timeout(const backoff_t *b, double *timeout);
/* google and cenkalti: 1 and *seconds = the interval the next failure
   starts from (Java's getCurrentIntervalMillis, in seconds); else 0. */
BACKOFF_API int backoff_current_interval(const backoff_t *b,
                                         double *seconds);
/* 1 when per-attempt timeouts are active for this configuration. */
BACKOFF_API int backoff_config_timeouts_active(const backoff_config *c);

/* Names of give-up reasons: "max_attempts", ...; NULL when out of range.
   (Strategy and jitter names are options: backoff_options.h.) */
BACKOFF_API const char *backoff_give_up_name(int g);
BACKOFF_API const char *backoff_strerror(int status);

/*
** The generator alone, for tests and embedders: seed with splitmix64,
** next 64-bit output, and a double in [0, 1) from the top 53 bits.
*/
BACKOFF_API void backoff_rng_seed(backoff_rng *r, uint64_t seed);
BACKOFF_API uint64_t backoff_rng_next(backoff_rng *r);
BACKOFF_API double backoff_rng_double(backoff_rng *r);

#ifdef __cplusplus
}
#endif

#endif
