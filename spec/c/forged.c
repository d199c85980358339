/*
** forged.c -- userdata of exactly a backoff object's size, made by C
** (which Lua code cannot do) and given the backoff metatable: every method
** must refuse them with "backoff.Backoff expected", whatever their bytes.
** The size check alone would let them through; the owner check must not.
** Built with ASan + UBSan (Lua 5.4 host) by `make forged`; prints TAP.
*/

#include <stdio.h>
#include <string.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

int luaopen_backoff_core(lua_State *L);

/* forge(real, byte): a new userdata of real's size filled with byte (or,
   with byte < 0, with real's bytes made unrelated by flipping each one),
   carrying real's metatable */
static int forge(lua_State *L) {
  size_t n = lua_rawlen(L, 1);
  const unsigned char *real = (const unsigned char *)lua_touserdata(L, 1);
  int byte = (int)luaL_checkinteger(L, 2);
  unsigned char *p;
  size_t i;
  luaL_argcheck(L, real != NULL, 1, "a userdata");
  p = (unsigned char *)lua_newuserdatauv(L, n, 0);
  for (i = 0; i < n; i++)
    p[i] = (unsigned char)(byte >= 0 ? byte : real[i] ^ 0x5a);
  lua_getmetatable(L, 1);
  lua_setmetatable(L, -2);
  return 1;
}

static const char *const check =
  "local core, forge = ...\n"
  "local real = core.exponential { initial_delay = 1 }\n"
  "local count, methods = 0, getmetatable(real).__index\n"
  "local names = {}\n"
  "for name in pairs(methods) do names[#names + 1] = name end\n"
  "table.sort(names)\n"
  "for _, byte in ipairs { 0, 255, -1 } do\n"
  "  local fake = forge(real, byte)\n"
  "  for _, name in ipairs(names) do\n"
  "    local ok, err = pcall(methods[name], fake, 0)\n"
  "    count = count + 1\n"
  "    local refused = not ok and\n"
  "      tostring(err):find('backoff.Backoff expected', 1, true)\n"
  "    print((refused and 'ok ' or 'not ok ') .. count .. ' - ' .. name ..\n"
  "      ' refuses a forged object (bytes ' .. byte .. ')')\n"
  "  end\n"
  "  local ok = pcall(tostring, fake)\n"
  "  count = count + 1\n"
  "  print((ok and 'not ok ' or 'ok ') .. count ..\n"
  "    ' - __tostring refuses a forged object (bytes ' .. byte .. ')')\n"
  "  debug.setmetatable(fake, nil)   -- so that __gc does not see it\n"
  "end\n"
  "assert(real:failure(0) == 1, 'the real object still works')\n"
  "print('1..' .. count)\n";

int main(void) {
  lua_State *L = luaL_newstate();
  int status;
  if (L == NULL) return 1;
  luaL_openlibs(L);
  status = luaL_loadstring(L, check);
  if (status == LUA_OK) {
    lua_pushcfunction(L, luaopen_backoff_core);
    lua_call(L, 0, 1);
    lua_pushcfunction(L, forge);
    status = lua_pcall(L, 2, 0, 0);
  }
  if (status != LUA_OK) {
    printf("not ok - %s\n", lua_tostring(L, -1));
    lua_close(L);
    return 1;
  }
  lua_close(L);
  return 0;
}
