/*
** lbackoff_ffi.c -- the C half of the LuaJIT FFI fast path (the Lua
** half is lua/backoff/ffi.lua).
**
** Under LuaJIT, b:failure() and b:success() call lbackoff_ffi_step
** through the FFI: the JIT compiles that into a direct call, where a Lua
** C function stops the trace.  The FFI cannot check what it passes, so
** Lua passes only userdata carrying this module's metatable, which Lua
** code cannot give to a userdata of its own (setmetatable takes tables;
** only the debug library can), and the step compares the object's owner
** with this module's state before anything else, as the methods' self
** check does.  That is luaL_checkudata's guarantee plus the owner: a C
** library that puts our metatable on a smaller userdata of its own is
** outside it.  Whatever the step does not handle (a hint, a Lua clock, a
** bad timestamp, another owner) it leaves untouched and answers
** LB_FFI_SLOW: the method proper then runs and raises the error or calls
** the Lua clock.
*/

#include <stdint.h>

#include "lbackoff.h"

#define LB_FFI_SLOW (-1)
#define LB_FFI_DELAY 0            /* out[0] */
#define LB_FFI_DELAY_TIMEOUT 1    /* out[0], out[1] */
#define LB_FFI_GIVE_UP 2          /* + the backoff_give_up reason */

#define LB_FFI_NOW 2              /* op: LB_OP_* | this: no timestamp */

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, const void *owner, int op,
                                      double ts, double *out);
LBACKOFF_EXPORT const void *lbackoff_ffi_token(void);

LBACKOFF_EXPORT int lbackoff_ffi_step(void *ud, const void *owner, int op,
                                      double ts, double *out) {
  lbackoff_object *o = (lbackoff_object *)ud;
  backoff_result r;
  if (o->owner != owner) return LB_FFI_SLOW;
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

/* _ffi_reasons(): the give-up reasons by step result, and the state
   the step compares owners with (a light userdata); the first call per
   lua_State only, so that a second load of the module (which finds the
   methods already wrapped) does not wrap them again */
int lbackoff_ffi_reasons(lua_State *L) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, UV_STATE);
  int g;
  if (st->ffi) return 0;
  st->ffi = 1;
  lua_newtable(L);
  for (g = 1; backoff_give_up_name(g) != NULL; g++) {
    lua_pushstring(L, backoff_give_up_name(g));
    lua_rawseti(L, -2, LB_FFI_GIVE_UP + g);
  }
  lua_pushlightuserdata(L, st);
  return 2;
}
