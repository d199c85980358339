/*
** backoff_budget.h -- a retry budget (token bucket), the portable C core.
**
** No Lua, no malloc, no globals, no clock: the caller owns every
** backoff_budget.  The rule is the AWS SDKs' standard retry quota: a
** budget holds up to `capacity` tokens and starts full; a retry first
** withdraws `cost` tokens (when fewer remain, the retry is refused and
** nothing is taken); a success deposits `refund` tokens (or the cost of
** the retry that succeeded), never beyond capacity.  During an outage
** every caller soon finds the budget empty and stops retrying, so the
** load on the server stays close to one request per client request.
**
** Every count is an integer from 0 to BACKOFF_BUDGET_MAX (2^53): such
** values are exact as a double, so Lua numbers carry them exactly on
** every version.  cost may exceed capacity (every withdrawal of it is
** then refused: a budget that never allows a retry).
*/

#ifndef BACKOFF_BUDGET_H
#define BACKOFF_BUDGET_H

#include <stdint.h>

/* as in backoff.h: BACKOFF_HIDDEN keeps the symbols in the module */
#ifndef BACKOFF_API
#if defined(BACKOFF_HIDDEN) && defined(__GNUC__)
#define BACKOFF_API extern __attribute__((visibility("hidden")))
#else
#define BACKOFF_API extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* the largest count: 2^53 */
#define BACKOFF_BUDGET_MAX ((uint64_t)1 << 53)

/* defaults (the AWS SDK's standard retry quota) */
#define BACKOFF_BUDGET_CAPACITY 500
#define BACKOFF_BUDGET_COST 5
#define BACKOFF_BUDGET_REFUND 1

/* status codes */
enum {
  BACKOFF_BUDGET_OK = 0,
  BACKOFF_BUDGET_ERANGE = -1   /* a count above BACKOFF_BUDGET_MAX */
};

/* A complete type: embed it anywhere.  Read the fields freely; change
   them only through the functions below (they keep tokens <= capacity
   and every field <= BACKOFF_BUDGET_MAX). */
typedef struct backoff_budget {
  uint64_t capacity;   /* most tokens the budget holds */
  uint64_t cost;       /* default withdrawal: one retry */
  uint64_t refund;     /* default deposit: one success */
  uint64_t tokens;     /* current tokens, 0 <= tokens <= capacity */
} backoff_budget;

/*
** Set *b up with these counts, full (tokens = capacity).  Returns
** BACKOFF_BUDGET_OK, or BACKOFF_BUDGET_ERANGE when a count is above
** BACKOFF_BUDGET_MAX (then *b is not touched).
*/
BACKOFF_API int backoff_budget_init(backoff_budget *b, uint64_t capacity,
                                    uint64_t cost, uint64_t refund);

/*
** Withdraw cost tokens.  Returns 1 when at least cost tokens were there
** (they are taken), 0 when fewer were (nothing is taken), or
** BACKOFF_BUDGET_ERANGE for cost above BACKOFF_BUDGET_MAX (no change).
*/
BACKOFF_API int backoff_budget_withdraw(backoff_budget *b, uint64_t cost);

/*
** Deposit n tokens, saturating at capacity.  Returns BACKOFF_BUDGET_OK,
** or BACKOFF_BUDGET_ERANGE for n above BACKOFF_BUDGET_MAX (no change).
*/
BACKOFF_API int backoff_budget_deposit(backoff_budget *b, uint64_t n);

/* the current tokens, 0 <= tokens <= capacity */
BACKOFF_API uint64_t backoff_budget_tokens(const backoff_budget *b);

/*
** The count held by double v: BACKOFF_BUDGET_OK and *out = v when v is
** an integer from 0 to BACKOFF_BUDGET_MAX, else BACKOFF_BUDGET_ERANGE
** (NaN, infinities, fractions, negatives, larger; *out not touched).
** For bindings whose numbers are doubles.
*/
BACKOFF_API int backoff_budget_count(double v, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif
