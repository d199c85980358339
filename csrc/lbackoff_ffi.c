/*
** lbackoff_ffi.c -- the C half of the LuaJIT FFI fast path (the Lua
** half is lua/backoff/ffi.lua).
**
** Under LuaJIT, b:failure() and b:success() call lbackoff_ffi_step
** through the FFI: the JIT compiles that into a direct call, where a Lua
** C function stops the trace.  The FFI cannot check what it passes, so
** Lua passes only objects found in the weak set _ffi_objects() returns.
** The module hands the set out once per lua_State, to lua/backoff/ffi.lua,
** which keeps it in a local; only _ffi_trust adds to it, and only values
** that pass the methods' own self check (size and owner), so no foreign
** value gets in (short of the debug library).  An object enters the set
** on its first fast call, not when it is built: objects that never meet
** the FFI (a runner's template, most clones) cost nothing.  Whatever the step does not handle (a hint, a Lua clock, a
** bad timestamp) it leaves untouched and answers LB_FFI_SLOW: the
** method proper then runs and raises the error or calls the Lua clock.
*/

#include <stdint.h>

#include "lbackoff.h"

#define LB_FFI_SLOW (-1)
#define LB_FFI_DELAY 0            /* out[0] */
#define LB_FFI_DELAY_TIMEOUT 1    /* out[0], out[1] */
#define LB_FFI_GIVE_UP 2          /* + the backoff_give_up reason */

#define LB_FFI_NOW 2              /* op: LB_OP_* | this: no timestamp */

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, int op, double ts,
                                      double *out);
LBACKOFF_EXPORT const void *lbackoff_ffi_token(void);

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, int op, double ts,
                                      double *out) {
  lbackoff_object *o = (lbackoff_object *)ud;
  backoff_result r;
  if (op & LB_FFI_NOW) {
    if (o->flags & LB_HAS_CLOCK) return LB_FFI_SLOW;
    ts = lbackoff_monotonic();
  } else if (!lbackoff_is_finite(ts)) {
    return LB_FFI_SLOW;
  }
  lbackoff_step(o, op & LB_OP_SUCCESS, ts, 0, &r);
  if (r.give_up != BACKOFF_CONTINUE) return LB_FFI_GIVE_UP + r.give_up;
  out[0] = r.delay;
  if (!r.has_timeout) return LB_FFI_DELAY;
  out[1] = r.timeout;
  return LB_FFI_DELAY_TIMEOUT;
}

/* lets Lua check that the library the FFI loaded is this very one */
static const char ffi_token_byte = 0;

LBACKOFF_EXPORT const void *lbackoff_ffi_token(void) {
  return &ffi_token_byte;
}

void lbackoff_push_ffi_token(lua_State *L) {
  lua_pushlightuserdata(L, (void *)(uintptr_t)&ffi_token_byte);
}

/* _ffi_trust(v): true, and v joins the set, when v is one of our
   objects (the self check of every method); false otherwise */
int lbackoff_ffi_trust(lua_State *L) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  lbackoff_object *o = (lbackoff_object *)lua_touserdata(L, 1);
  int ok = st->ffi && o != NULL && lua_rawlen(L, 1) == sizeof *o &&
           o->owner == st;
  if (ok) {
    lua_getfield(L, LUA_REGISTRYINDEX, LBACKOFF_FFI);   /* set */
    lua_pushvalue(L, 1);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
  }
  lua_pushboolean(L, ok);
  return 1;
}

/* _ffi_objects(): the first call per lua_State returns a new weak set
   that every object built from now on goes into, and the give-up
   reasons by step result; later calls return nothing */
int lbackoff_ffi_objects(lua_State *L) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  int g;
  if (st->ffi) return 0;
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, LBACKOFF_FFI);
  lua_newtable(L);
  for (g = 1; backoff_give_up_name(g) != NULL; g++) {
    lua_pushstring(L, backoff_give_up_name(g));
    lua_rawseti(L, -2, LB_FFI_GIVE_UP + g);
  }
  st->ffi = 1;
  return 2;
}
