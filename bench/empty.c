/*
** empty.c -- the baseline of `make bench`: a userdata whose method does
** nothing, the least a Lua C binding can cost per call.
*/
#include "lua.h"
#include "lauxlib.h"

static int empty_noop(lua_State *L) {
  (void)L;
  return 0;
}

static int empty_new(lua_State *L) {
  lua_newuserdata(L, 8);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, -2);
  return 1;
}

int luaopen_bench_empty(lua_State *L);

int luaopen_bench_empty(lua_State *L) {
  lua_newtable(L);                       /* M */
  lua_newtable(L);                       /* M, mt */
  lua_newtable(L);                       /* M, mt, methods */
  lua_pushcfunction(L, empty_noop);
  lua_setfield(L, -2, "noop");
  lua_setfield(L, -2, "__index");        /* M, mt */
  lua_pushcclosure(L, empty_new, 1);     /* M, new */
  lua_setfield(L, -2, "new");
  return 1;
}
