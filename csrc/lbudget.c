/*
** lbudget.c -- the Lua binding of the retry budget (backoff_budget.h):
** backoff.core.budget{capacity = 500, cost = 5, refund = 1}.
**
** Each budget is a full userdata holding one backoff_budget (no heap),
** with its own metatable "backoff.Budget".  Counts are integers from 0
** to 2^53, exact as Lua numbers on every version.
*/

#include <stdio.h>
#include <string.h>

#include "backoff_budget.h"
#include "lbackoff_aux.h" /* compatibility, lbackoff_repr, argerror */
#include "lbudget.h"

#define LBUDGET_MT "backoff.Budget"
#define LBUDGET_RULE "an integer >= 0 and <= 2^53"

/*
** The budget at index 1, else raise: a full userdata of our size with
** our metatable (the size check keeps a foreign userdata given our
** metatable by debug.setmetatable from being read past its end).
*/
static backoff_budget *lbudget_self(lua_State *L, const char *method) {
  void *p = lua_touserdata(L, 1);
  int ok = 0;
  if (p != NULL && lua_type(L, 1) == LUA_TUSERDATA &&
      lua_rawlen(L, 1) == sizeof(backoff_budget) && lua_getmetatable(L, 1)) {
    luaL_getmetatable(L, LBUDGET_MT);
    ok = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  if (!ok)
    lbackoff_argerror(L, 1, method, lua_pushfstring(L,
      LBUDGET_MT " expected, got %s", lbackoff_repr(L, 1)));
  return (backoff_budget *)p;
}

/* optional count argument 2 (name for messages), else dflt */
static uint64_t lbudget_count_arg(lua_State *L, const char *method,
                                  const char *name, uint64_t dflt) {
  uint64_t v = dflt;
  if (lua_isnoneornil(L, 2)) return dflt;
  if (lua_type(L, 2) != LUA_TNUMBER ||
      backoff_budget_count(lua_tonumber(L, 2), &v) != BACKOFF_BUDGET_OK)
    lbackoff_argerror(L, 2, method, lua_pushfstring(L,
      "%s must be " LBUDGET_RULE " (got %s)", name, lbackoff_repr(L, 2)));
  return v;
}

/* bud:withdraw([cost]) -> true (taken) or false (short: nothing taken) */
static int lbudget_withdraw(lua_State *L) {
  backoff_budget *b = lbudget_self(L, "withdraw");
  uint64_t cost = lbudget_count_arg(L, "withdraw", "cost", b->cost);
  lua_pushboolean(L, backoff_budget_withdraw(b, cost) == 1);
  return 1;
}

/* bud:deposit([n]) -> the tokens after (capped at capacity) */
static int lbudget_deposit(lua_State *L) {
  backoff_budget *b = lbudget_self(L, "deposit");
  uint64_t n = lbudget_count_arg(L, "deposit", "n", b->refund);
  backoff_budget_deposit(b, n);   /* n is in range: cannot fail */
  lbackoff_push_count(L, backoff_budget_tokens(b));
  return 1;
}

/* bud:allows([cost]) -> would withdraw(cost) succeed now (takes nothing) */
static int lbudget_allows(lua_State *L) {
  backoff_budget *b = lbudget_self(L, "allows");
  uint64_t cost = lbudget_count_arg(L, "allows", "cost", b->cost);
  lua_pushboolean(L, backoff_budget_tokens(b) >= cost);
  return 1;
}

/*
** bud:record(ok [, attempt [, cost]]): an attempt ended.  A success
** deposits refund after a first attempt (attempt 1, the default), else
** the cost its retry paid (cost; nil: the budget's cost); a failure
** changes nothing.  Every argument is checked before anything changes.
*/
static int lbudget_record(lua_State *L) {
  backoff_budget *b = lbudget_self(L, "record");
  uint64_t attempt = 1, cost = b->cost;
  int ok;
  if (lua_type(L, 2) != LUA_TBOOLEAN)
    lbackoff_argerror(L, 2, "record", lua_pushfstring(L,
      "ok must be a boolean (got %s)", lbackoff_repr(L, 2)));
  ok = lua_toboolean(L, 2);
  if (!lua_isnoneornil(L, 3) && (lua_type(L, 3) != LUA_TNUMBER ||
      backoff_budget_count(lua_tonumber(L, 3), &attempt) !=
        BACKOFF_BUDGET_OK || attempt < 1))
    lbackoff_argerror(L, 3, "record", lua_pushfstring(L,
      "attempt must be an integer >= 1 and <= 2^53 (got %s)",
      lbackoff_repr(L, 3)));
  if (!lua_isnoneornil(L, 4) && (lua_type(L, 4) != LUA_TNUMBER ||
      backoff_budget_count(lua_tonumber(L, 4), &cost) != BACKOFF_BUDGET_OK))
    lbackoff_argerror(L, 4, "record", lua_pushfstring(L,
      "cost must be " LBUDGET_RULE " (got %s)", lbackoff_repr(L, 4)));
  if (ok)
    backoff_budget_deposit(b, attempt > 1 ? cost : b->refund);
  return 0;
}

static int lbudget_tokens(lua_State *L) {
  lbackoff_push_count(L, backoff_budget_tokens(lbudget_self(L, "tokens")));
  return 1;
}

static int lbudget_capacity(lua_State *L) {
  lbackoff_push_count(L, lbudget_self(L, "capacity")->capacity);
  return 1;
}

static int lbudget_cost(lua_State *L) {
  lbackoff_push_count(L, lbudget_self(L, "cost")->cost);
  return 1;
}

static int lbudget_refund(lua_State *L) {
  lbackoff_push_count(L, lbudget_self(L, "refund")->refund);
  return 1;
}

static int lbudget_tostring(lua_State *L) {
  const backoff_budget *b = lbudget_self(L, "__tostring");
  char buf[128];
  snprintf(buf, sizeof buf,
           "backoff.budget: %llu/%llu tokens (cost %llu, refund %llu)",
           (unsigned long long)b->tokens, (unsigned long long)b->capacity,
           (unsigned long long)b->cost, (unsigned long long)b->refund);
  lua_pushstring(L, buf);
  return 1;
}

/* the budget owns no resource: __gc only checks self */
static int lbudget_gc(lua_State *L) {
  lbudget_self(L, "__gc");
  return 0;
}

/* is the key below the top exactly name (a NUL inside never matches) */
static int key_is(lua_State *L, const char *name) {
  size_t len;
  const char *k;
  if (lua_type(L, -2) != LUA_TSTRING) return 0;
  k = lua_tolstring(L, -2, &len);
  return len == strlen(name) && memcmp(k, name, len) == 0;
}

/* read option value (on top) of the option called name into *out */
static void lbudget_option(lua_State *L, const char *name, uint64_t *out) {
  if (lua_type(L, -1) != LUA_TNUMBER ||
      backoff_budget_count(lua_tonumber(L, -1), out) != BACKOFF_BUDGET_OK)
    luaL_error(L, "backoff.budget: option '%s' must be " LBUDGET_RULE
               " (got %s)", name, lbackoff_repr(L, -1));
}

/*
** backoff.core.budget([opts]) -> a full budget.  Every option is read
** and checked before the userdata exists, so a raise leaks nothing.
*/
static int lbudget_new(lua_State *L) {
  uint64_t v[3] = { BACKOFF_BUDGET_CAPACITY, BACKOFF_BUDGET_COST,
                    BACKOFF_BUDGET_REFUND };
  static const char *const names[] = { "capacity", "cost", "refund" };
  backoff_budget *b;
  int i;
  if (!lua_isnoneornil(L, 1)) {
    if (!lua_istable(L, 1))
      luaL_error(L, "backoff.budget: options must be a table (got %s)",
                 luaL_typename(L, 1));
    lua_pushnil(L);
    while (lua_next(L, 1)) {   /* key, value */
      for (i = 0; i < 3; i++)
        if (key_is(L, names[i]))
          break;
      if (i == 3)
        luaL_error(L, "backoff.budget: unknown option %s",
                   lbackoff_repr(L, -2));
      lbudget_option(L, names[i], &v[i]);
      lua_pop(L, 1);
    }
  }
  b = (backoff_budget *)lua_newuserdatauv(L, sizeof *b, 0);
  backoff_budget_init(b, v[0], v[1], v[2]);   /* checked: cannot fail */
  luaL_getmetatable(L, LBUDGET_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static const luaL_Reg lbudget_methods[] = {
  { "withdraw", lbudget_withdraw },
  { "deposit", lbudget_deposit },
  { "allows", lbudget_allows },
  { "record", lbudget_record },
  { "tokens", lbudget_tokens },
  { "capacity", lbudget_capacity },
  { "cost", lbudget_cost },
  { "refund", lbudget_refund },
  { NULL, NULL }
};

void lbackoff_open_budget(lua_State *L) {
  /* built once per lua_State: a second load of the module shares it */
  if (lbackoff_newmetatable(L, LBUDGET_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, lbudget_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, lbudget_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, lbudget_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, lbudget_new);
  lua_setfield(L, -2, "budget");
}
