/*
** lbackoff_aux.c -- the bottom layer of the binding (lbackoff_aux.h):
** the compatibility functions, values in messages, argument errors that
** name the function they are about.
*/

#include <string.h>

#include "lbackoff_aux.h"

/* ----------------------------------------------------------------- */
/* compatibility                                                     */
/* ----------------------------------------------------------------- */

#if LUA_VERSION_NUM == 501
/* luaL_setfuncs of 5.2: table at -(nup+1), nup upvalues on top */
void lbackoff_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
  int i;
  for (; l->name != NULL; l++) {
    for (i = 0; i < nup; i++)
      lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}
#endif

#if LUA_VERSION_NUM < 503
int lbackoff_newmetatable(lua_State *L, const char *name) {
  if (!luaL_newmetatable(L, name)) return 0;
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__name");
  return 1;
}
#endif

void lbackoff_push_count(lua_State *L, uint64_t n) {
  if (n <= UINT64_C(9007199254740992))  /* exact in every Lua's number */
    lua_pushinteger(L, (lua_Integer)n);
  else
    lua_pushnumber(L, (lua_Number)n);
}

/* ----------------------------------------------------------------- */
/* values in messages                                                */
/* ----------------------------------------------------------------- */

#define REPR_MAX 40   /* bytes of a string quoted in a message */

/* a string as 'text', at most REPR_MAX bytes, control bytes escaped */
static const char *repr_string(lua_State *L, int idx) {
  size_t len, i;
  const char *s = lua_tolstring(L, idx, &len);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '\'');
  for (i = 0; i < len && i < REPR_MAX; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 32 || c == 127 || c == '\\') {
      char esc[8];
      int n = c == '\\' ? 2 : 4;
      esc[0] = '\\';
      esc[1] = c == '\\' ? '\\' : (char)('0' + c / 64);
      esc[2] = (char)('0' + c / 8 % 8);
      esc[3] = (char)('0' + c % 8);
      luaL_addlstring(&b, esc, (size_t)n);
    } else {
      luaL_addchar(&b, (char)c);
    }
  }
  luaL_addchar(&b, '\'');
  if (len > REPR_MAX) luaL_addstring(&b, "...");
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

/* push a short description of the value at idx: -1, 'text', table */
const char *lbackoff_repr(lua_State *L, int idx) {
  idx = idx < 0 && idx > LUA_REGISTRYINDEX ? lua_gettop(L) + 1 + idx : idx;
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      if (lua_tonumber(L, idx) != lua_tonumber(L, idx))
        return lua_pushfstring(L, "nan");   /* not "-nan" on some libcs */
      lua_pushvalue(L, idx);  /* convert a copy, never the original */
      return lua_tostring(L, -1);
    case LUA_TSTRING:
      return repr_string(L, idx);
    case LUA_TBOOLEAN:
      return lua_pushfstring(L, "%s", lua_toboolean(L, idx) ? "true"
                                                              : "false");
    default:
      return lua_pushfstring(L, "%s", luaL_typename(L, idx));
  }
}

/* core._repr(v): the same, for the Lua half's messages */
int lbackoff_repr_lua(lua_State *L) {
  luaL_checkany(L, 1);
  lbackoff_repr(L, 1);
  return 1;
}

/*
** luaL_argerror with the function's name given, not looked up: Lua's
** debug information has no name for pcall(b.failure, b, x), for a tail
** call, or for a call from the FFI wrapper (it would say '?' or the name
** of a local), and API.md asks for the method's name.  Same wording and
** numbering as luaL_argerror: a method call counts self as argument 0.
*/
int lbackoff_argerror(lua_State *L, int arg, const char *fname,
                      const char *msg) {
  lua_Debug ar;
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) &&
      ar.namewhat != NULL && strcmp(ar.namewhat, "method") == 0) {
    arg--;
    if (arg == 0)
      return luaL_error(L, "calling '%s' on bad self (%s)", fname, msg);
  }
  return luaL_error(L, "bad argument #%d to '%s' (%s)", arg, fname, msg);
}

