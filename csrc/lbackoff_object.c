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
