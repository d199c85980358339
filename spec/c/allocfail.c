/*
** allocfail.c -- run spec/valgrind_smoke.lua with an allocator that fails
** the Nth allocation, for N = 1, 2, ... until the script completes.
** Every run must end in a clean Lua error (LUA_ERRMEM, or an error that
** says "not enough memory") or success: never a crash, never another
** error.  Built with ASan (leaks on) by `make allocfail`; prints TAP.
**
**   allocfail SCRIPT LUA_PATH
*/

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

int luaopen_backoff_core(lua_State *L);

typedef struct budget {
  long count;   /* allocations so far */
  long fail_at; /* the allocation that fails (0: none) */
  int failed;   /* did it fail? */
} budget;

static void *failing_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  budget *b = (budget *)ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  /* only growth can fail: Lua assumes shrinking always works */
  if (nsize > osize || ptr == NULL) {
    if (++b->count == b->fail_at) {
      b->failed = 1;
      return NULL;
    }
  }
  return realloc(ptr, nsize);
}

/* 0: completed, 1: clean memory error, 2: anything else */
static int run_once(const char *script, const char *path, long fail_at,
                    int *hit) {
  budget b = {0, 0, 0};
  lua_State *L;
  int status, outcome;
  b.fail_at = fail_at;
  L = lua_newstate(failing_alloc, &b);
  if (L == NULL) {            /* the state itself could not be made */
    *hit = 1;
    return 1;
  }
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_backoff_core);
  lua_setfield(L, -2, "backoff.core");
  lua_pushstring(L, path);
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
  status = luaL_loadfile(L, script);
  if (status == LUA_OK) status = lua_pcall(L, 0, 0, 0);
  if (status == LUA_OK) {
    outcome = 0;
  } else {
    const char *msg = lua_tostring(L, -1);
    outcome = (status == LUA_ERRMEM ||
               (msg != NULL && strstr(msg, "not enough memory") != NULL))
                ? 1 : 2;
    if (outcome == 2 || !b.failed) {
      fprintf(stdout, "# N=%ld: status %d: %s\n", fail_at, status,
              msg ? msg : "(no message)");
      outcome = 2;
    }
  }
  *hit = b.failed;
  lua_close(L);
  return outcome;
}

int main(int argc, char **argv) {
  long n;
  int hit = 1, outcome = 1, bad = 0;
  if (argc != 3) {
    fprintf(stderr, "usage: allocfail SCRIPT LUA_PATH\n");
    return 2;
  }
  /* a run without failures first: the script must pass as it is */
  if (run_once(argv[1], argv[2], 0, &hit) != 0) {
    printf("not ok 1 - the script passes without allocation failures\n");
    return 1;
  }
  hit = 1;
  for (n = 1; hit && n < 1000000; n++) {
    outcome = run_once(argv[1], argv[2], n, &hit);
    if (outcome == 2) bad++;
  }
  printf("%s 1 - %ld allocation failure points, each ended in a clean "
         "memory error (%d did not)\n", bad ? "not ok" : "ok", n - 2, bad);
  printf("1..1\n");
  return bad ? 1 : 0;
}
