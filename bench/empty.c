/*
** empty.c -- the baselines of `make bench`: a userdata whose methods do
** (almost) nothing, the least a Lua C binding can cost per call.
**
**   noop     returns nothing: the empty C method call, the unit of the table
**   number   returns one constant number
**   floor    what any b:failure(ts) binding must do before its own work:
**            check self (pointer, size, owner: as lbackoff.c does), check
**            that ts is a number, read it, return one number
**   floor_hint  the same for a method that also takes an optional third
**            argument (b:failure([ts] [, hint])): one more API call to
**            see whether it was given
**   usual    the same checks the usual way: luaL_checkudata (self by its
**            metatable), luaL_checknumber, luaL_optnumber
*/
#include "lua.h"
#include "lauxlib.h"

#if LUA_VERSION_NUM == 501
#define lua_rawlen(L, i) lua_objlen(L, i)
#endif

typedef struct empty_object {
  const void *owner;
  double factor;
} empty_object;

static int empty_noop(lua_State *L) {
  (void)L;
  return 0;
}

static int empty_number(lua_State *L) {
  lua_pushnumber(L, 1.5);
  return 1;
}

static int empty_floor(lua_State *L) {
  const void *owner = lua_touserdata(L, lua_upvalueindex(1));
  empty_object *o = (empty_object *)lua_touserdata(L, 1);
  if (o == NULL || lua_rawlen(L, 1) != sizeof *o || o->owner != owner)
    return luaL_argerror(L, 1, "bench object expected");
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_argerror(L, 2, "number expected");
  lua_pushnumber(L, lua_tonumber(L, 2) * o->factor);
  return 1;
}

static int empty_floor_hint(lua_State *L) {
  const void *owner = lua_touserdata(L, lua_upvalueindex(1));
  empty_object *o = (empty_object *)lua_touserdata(L, 1);
  double hint = 0;
  if (o == NULL || lua_rawlen(L, 1) != sizeof *o || o->owner != owner)
    return luaL_argerror(L, 1, "bench object expected");
  if (lua_gettop(L) > 2) {
    if (lua_type(L, 3) != LUA_TNUMBER)
      return luaL_argerror(L, 3, "number expected");
    hint = lua_tonumber(L, 3);
  }
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_argerror(L, 2, "number expected");
  lua_pushnumber(L, lua_tonumber(L, 2) * o->factor + hint);
  return 1;
}

static int empty_usual(lua_State *L) {
  empty_object *o = (empty_object *)luaL_checkudata(L, 1, "bench.empty");
  double hint = (double)luaL_optnumber(L, 3, 0);
  lua_pushnumber(L, luaL_checknumber(L, 2) * o->factor + hint);
  return 1;
}

/* upvalues: the metatable, the owner token */
static int empty_new(lua_State *L) {
  empty_object *o = (empty_object *)lua_newuserdata(L, sizeof *o);
  o->owner = lua_touserdata(L, lua_upvalueindex(2));
  o->factor = 0.5;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, -2);
  return 1;
}

int luaopen_bench_empty(lua_State *L);

int luaopen_bench_empty(lua_State *L) {
  lua_newtable(L);                       /* M */
  luaL_newmetatable(L, "bench.empty");   /* M, mt (registered: usual) */
  lua_newuserdata(L, 1);                 /* M, mt, owner */
  lua_newtable(L);                       /* M, mt, owner, methods */
  lua_pushcfunction(L, empty_noop);
  lua_setfield(L, -2, "noop");
  lua_pushcfunction(L, empty_number);
  lua_setfield(L, -2, "number");
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, empty_floor, 1);
  lua_setfield(L, -2, "floor");
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, empty_floor_hint, 1);
  lua_setfield(L, -2, "floor_hint");
  lua_pushcfunction(L, empty_usual);
  lua_setfield(L, -2, "usual");
  lua_setfield(L, -3, "__index");        /* M, mt, owner */
  lua_pushcclosure(L, empty_new, 2);     /* M, new */
  lua_setfield(L, -2, "new");
  return 1;
}
