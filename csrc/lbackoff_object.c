/*
** lbackoff_object.c -- the userdata of a backoff object (see
** lbackoff_object.h): making one, checking self, its clock, restarting
** its jitter stream.
*/

#include "lbackoff_object.h"

void lbackoff_bad_self(lua_State *L, int idx, const char *method) {
  const char *got = lbackoff_repr(L, idx);   /* stays on the stack */
  lbackoff_argerror(L, idx, method, lua_pushfstring(L,
    LBACKOFF_MT " expected, got %s",
    lua_type(L, idx) == LUA_TUSERDATA ? "another userdata" : got));
}

lbackoff_object *lbackoff_check(lua_State *L, int idx, const char *method) {
  return lbackoff_self(L, idx, (lbackoff_state *)lua_touserdata(L, UV_STATE),
                       method);
}

lbackoff_object *lbackoff_newud(lua_State *L, lbackoff_state *owner,
                                int side) {
  lbackoff_object *o =
    (lbackoff_object *)lua_newuserdatauv(L, sizeof *o, side ? 1 : 0);
  (void)side;   /* before 5.4, every userdata has the slot */
  o->owner = owner;
  o->flags = 0;
  o->tag = 0;
  lua_pushvalue(L, UV_META);
  lua_setmetatable(L, -2);
  return o;
}

int lbackoff_call_clock(lua_State *L, int side, double *t) {
  lua_rawgeti(L, side, LB_SLOT_CLOCK);
  lua_call(L, 0, 1);
  *t = lua_tonumber(L, -1);
  if (lua_type(L, -1) != LUA_TNUMBER || !lbackoff_is_finite(*t)) return 0;
  lua_pop(L, 1);
  return 1;
}

void lbackoff_fresh_stream(lbackoff_object *o) {
  backoff_reseed(&o->core, lbackoff_new_seed(&o->owner->env, &o->tag));
}

void lbackoff_restart(lbackoff_object *o, double start) {
  if (o->flags & LB_SEEDED)
    backoff_reset(&o->core, start);
  else
    backoff_restart(&o->core, start,
                    lbackoff_new_seed(&o->owner->env, &o->tag));
}

/* ----------------------------------------------------------------- */
/* draws from a Lua function                                         */
/* ----------------------------------------------------------------- */

#define LEND_RAISED 1       /* the function raised: its error on top */
#define LEND_BAD 2          /* it returned no number in [0, 1]: on top */

/* backoff_draws.next: one call of the function; after a failure,
   placeholder draws (0) until the call into the core returns */
static double lent_draw(void *ctx) {
  lbackoff_lender *ln = (lbackoff_lender *)ctx;
  lua_State *L = ln->L;
  double u;
  if (ln->status != 0) return 0;
  lua_pushvalue(L, ln->fn);
  if (lua_pcall(L, 0, 1, 0) != 0) {
    ln->status = LEND_RAISED;
    return 0;
  }
  u = lua_tonumber(L, -1);
  if (lua_type(L, -1) != LUA_TNUMBER || !(u >= 0 && u <= 1)) {
    ln->status = LEND_BAD;
    return 0;
  }
  lua_pop(L, 1);
  return u;
}

void lbackoff_lend(lua_State *L, backoff_t *core, int side,
                   lbackoff_lender *ln) {
  lua_rawgeti(L, side, LB_SLOT_RANDOM);
  ln->draws.next = lent_draw;
  ln->draws.ctx = ln;
  ln->L = L;
  ln->fn = lua_gettop(L);
  ln->status = 0;
  ln->saved = *core;
  backoff_lend_draws(core, &ln->draws);
}

void lbackoff_unlend(lua_State *L, backoff_t *core, lbackoff_lender *ln,
                     const char *where) {
  backoff_lend_draws(core, NULL);
  if (ln->status == 0) {
    lua_remove(L, ln->fn);
    return;
  }
  *core = ln->saved;
  backoff_lend_draws(core, NULL);
  if (ln->status == LEND_RAISED) lua_error(L);
  luaL_error(L, "%s: option 'random' must return a number in [0, 1] "
             "(got %s)", where, lbackoff_repr(L, -1));
}
