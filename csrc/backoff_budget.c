/*
** backoff_budget.c -- a retry budget (token bucket): see backoff_budget.h.
** Plain integer arithmetic on counts <= 2^53, so no step can overflow.
*/

#include "backoff_budget.h"

int backoff_budget_init(backoff_budget *b, uint64_t capacity,
                        uint64_t cost, uint64_t refund) {
  if (capacity > BACKOFF_BUDGET_MAX || cost > BACKOFF_BUDGET_MAX ||
      refund > BACKOFF_BUDGET_MAX)
    return BACKOFF_BUDGET_ERANGE;
  b->capacity = capacity;
  b->cost = cost;
  b->refund = refund;
  b->tokens = capacity;       /* starts full, as AWS's retry quota */
  return BACKOFF_BUDGET_OK;
}

int backoff_budget_withdraw(backoff_budget *b, uint64_t cost) {
  if (cost > BACKOFF_BUDGET_MAX) return BACKOFF_BUDGET_ERANGE;
  if (b->tokens < cost) return 0;
  b->tokens -= cost;
  return 1;
}

int backoff_budget_deposit(backoff_budget *b, uint64_t n) {
  if (n > BACKOFF_BUDGET_MAX) return BACKOFF_BUDGET_ERANGE;
  /* tokens <= capacity, so capacity - tokens cannot wrap */
  if (n >= b->capacity - b->tokens)
    b->tokens = b->capacity;
  else
    b->tokens += n;
  return BACKOFF_BUDGET_OK;
}

uint64_t backoff_budget_tokens(const backoff_budget *b) {
  return b->tokens;
}

int backoff_budget_count(double v, uint64_t *out) {
  /* !(v >= 0) also refuses NaN; the bound refuses +inf; a double
     from 0 to 2^53 converts to uint64_t exactly when it is integral */
  if (!(v >= 0) || v > 9007199254740992.0 || v != (double)(uint64_t)v)
    return BACKOFF_BUDGET_ERANGE;
  *out = (uint64_t)v;
  return BACKOFF_BUDGET_OK;
}
