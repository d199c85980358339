/*
** lbackoff.c -- luaopen_backoff_core: the Lua binding of the backoff
** core, module "backoff.core", and the life cycle of its state.
**
** Each backoff object is a full userdata holding one backoff_t (no
** heap, so nothing can leak when Lua longjmps).  The options that are
** Lua values (a clock function, the start option) live in the object's
** own side table: its uservalue (5.2+) or environment (5.1, LuaJIT), so
** a clock closure that refers back to its object is collected with it.
** The public module "backoff" (lua/backoff.lua) wraps this one and adds
** the parts that must be Lua so that they can yield (retry).
**
** This file is the top of the binding's layers (lbackoff_aux.h lists
** them): it only assembles what the files below it provide.
*/

#include "lbackoff_env.h"
#include "lbackoff_ffi.h"
#include "lbackoff_methods.h"
#include "lbackoff_object.h"
#include "lbackoff_options.h"

#define LBACKOFF_STATE "backoff.state"   /* registry: the lbackoff_state */

/* ----------------------------------------------------------------- */
/* the state of a lua_State                                          */
/* ----------------------------------------------------------------- */

/* __gc of the state: give the page and the FFI's set back */
static int state_gc(lua_State *L) {
  lbackoff_state *st = (lbackoff_state *)lua_touserdata(L, 1);
  if (st == NULL) return 0;
  lbackoff_env_free(&st->env);
  lbackoff_ffi_free(L, st);    /* objects collected later forget nothing */
  return 0;
}

/*
** Push the state of this lua_State, made on first use.  It lives in the
** registry: a second load of the module (package.loaded cleared) shares
** the metatable, so it must share the owner objects are checked against.
*/
static lbackoff_state *push_state(lua_State *L) {
  lbackoff_state *st;
  lua_getfield(L, LUA_REGISTRYINDEX, LBACKOFF_STATE);
  if (!lua_isnil(L, -1)) return (lbackoff_state *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  st = (lbackoff_state *)lua_newuserdatauv(L, sizeof *st, 0);
  st->ffi = 0;
  st->objects = NULL;
  st->nslots = st->nlive = st->ndead = 0;
  lbackoff_env_init(&st->env);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, state_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, LBACKOFF_STATE);
  return st;
}

/* ----------------------------------------------------------------- */
/* registration                                                      */
/* ----------------------------------------------------------------- */

/* the module's functions that belong to no object */
static const luaL_Reg functions[] = {
  {"_ffi_reasons", lbackoff_ffi_reasons},
  {"_repr", lbackoff_repr_lua},
  {"now", lbackoff_now},
  {"sleep", lbackoff_sleep},
  {NULL, NULL}
};

/* register l into the table at index t, with upvalues mt and state */
static void register_in(lua_State *L, int t, int mt, int state,
                        const luaL_Reg *l) {
  lua_pushvalue(L, t);
  lua_pushvalue(L, mt);
  lua_pushvalue(L, state);        /* t, mt, state */
  luaL_setfuncs(L, l, 2);
  lua_pop(L, 1);
}

/*
** The metatable and its methods are built once per lua_State: a second
** load keeps them as they are (with the FFI wrappers and retry that
** lua/backoff.lua put in), so old and new objects and both loads agree.
** Leaves the metatable and the methods table on the stack.
*/
static void open_metatable(lua_State *L, int state) {
  int mt;
  if (lbackoff_newmetatable(L, LBACKOFF_MT)) {
    mt = lua_gettop(L);
    register_in(L, mt, mt, state, lbackoff_meta_functions);
  }
  mt = lua_gettop(L);
  lua_getfield(L, mt, "__index");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    register_in(L, lua_gettop(L), mt, state, lbackoff_methods);
    lua_pushvalue(L, -1);
    lua_setfield(L, mt, "__index");
  }
}

LBACKOFF_EXPORT int luaopen_backoff_core(lua_State *L);

LBACKOFF_EXPORT int luaopen_backoff_core(lua_State *L) {
  int M, mt, state;
  lua_newtable(L);
  M = lua_gettop(L);
  push_state(L);
  state = lua_gettop(L);
  open_metatable(L, state);     /* mt, methods */
  mt = state + 1;
  register_in(L, M, mt, state, functions);
  register_in(L, M, mt, state, lbackoff_method_functions);
  lbackoff_open_constructors(L, M, mt, state);
  lua_pushvalue(L, mt + 1);     /* for the Lua half: adds retry */
  lua_setfield(L, M, "methods");
  lua_pushvalue(L, mt);         /* for the Lua half: "is it an object?" */
  lua_setfield(L, M, "_metatable");
  lua_pushliteral(L, "backoff " BACKOFF_VERSION);
  lua_setfield(L, M, "_VERSION");
  lbackoff_push_ffi_token(L);
  lua_setfield(L, M, "_ffi_token");
  lua_settop(L, M);
  return 1;
}
