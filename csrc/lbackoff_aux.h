/*
** lbackoff_aux.h -- the bottom layer of the Lua binding: what every
** other file of it uses and that knows nothing of backoff objects.
** The compatibility shim (Lua 5.1 to 5.4, LuaJIT), export and
** visibility, values quoted in messages, argument errors.
**
** The binding's layers, lowest first; each file uses only those below:
**
**   lbackoff_aux      this file: compat, messages, counts
**   lbackoff_env      the system: monotonic clock, sleep, seeds, forks
**   lbackoff_object   the userdata of a backoff object, its state
**   lbackoff_ffi, lbackoff_options   features: the FFI step,
**                     constructors and config()
**   lbackoff_methods  the methods of an object
**   lbackoff          luaopen_backoff_core and the state's life cycle
*/

#ifndef LBACKOFF_AUX_H
#define LBACKOFF_AUX_H

#include <float.h>
#include <stdint.h>

#include "lua.h"
#include "lauxlib.h"

#if !defined(LUA_VERSION_NUM) || LUA_VERSION_NUM < 501
#error "backoff needs Lua 5.1 or later"
#endif

/* Only LBACKOFF_EXPORT functions leave the shared object, in every
   build (a rock's too, where no -fvisibility flag is passed). */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#if defined(_WIN32)
#define LBACKOFF_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define LBACKOFF_EXPORT __attribute__((visibility("default")))
#else
#define LBACKOFF_EXPORT
#endif

/* on the path of every method call: inlined where it is used; off that
   path: kept out of line, away from it */
#if defined(__GNUC__)
#define LBACKOFF_HOT static inline __attribute__((always_inline))
#define LBACKOFF_COLD static __attribute__((noinline, cold))
#else
#define LBACKOFF_HOT static inline
#define LBACKOFF_COLD static
#endif

/* ---- compatibility (only what the binding uses) ---- */
#if LUA_VERSION_NUM == 501
#define lua_rawlen(L, i) lua_objlen(L, i)
void lbackoff_setfuncs(lua_State *L, const luaL_Reg *l, int nup);
#define luaL_setfuncs(L, l, nup) lbackoff_setfuncs(L, l, nup)
#endif
#if LUA_VERSION_NUM < 504
#define lua_newuserdatauv(L, sz, nuv) lua_newuserdata(L, sz)
#endif
/* luaL_newmetatable, with __name before 5.3 too (5.3+ sets it) */
#if LUA_VERSION_NUM < 503
int lbackoff_newmetatable(lua_State *L, const char *name);
#else
#define lbackoff_newmetatable(L, name) luaL_newmetatable(L, name)
#endif
/* a userdata's one Lua value: its uservalue (5.2+) or environment */
#if LUA_VERSION_NUM == 501
#define lbackoff_setuv(L, i) lua_setfenv(L, i)
#define lbackoff_getuv(L, i) lua_getfenv(L, i)
#elif LUA_VERSION_NUM < 504
#define lbackoff_setuv(L, i) lua_setuservalue(L, i)
#define lbackoff_getuv(L, i) lua_getuservalue(L, i)
#else
#define lbackoff_setuv(L, i) lua_setiuservalue(L, i, 1)
#define lbackoff_getuv(L, i) lua_getiuservalue(L, i, 1)
#endif

/* inline: on the path of every failure()/success() */
static inline int lbackoff_is_finite(double v) {
  return v == v && v <= DBL_MAX && v >= -DBL_MAX;
}

/* push a short description of the value at idx (-1, 'text', table):
   strings quoted, at most 40 bytes, control bytes escaped */
const char *lbackoff_repr(lua_State *L, int idx);
/* core._repr(v): the same, for the Lua half's messages */
int lbackoff_repr_lua(lua_State *L);

/* luaL_argerror naming the function fname (see lbackoff_aux.c) */
int lbackoff_argerror(lua_State *L, int arg, const char *fname,
                      const char *msg);

/* a count as an integer where exact in every Lua's number, else a float */
void lbackoff_push_count(lua_State *L, uint64_t n);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
