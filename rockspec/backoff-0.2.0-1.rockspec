rockspec_format = "3.0"
package = "backoff"
version = "0.2.0-1"
source = {
  url = "git+https://example.invalid/backoff.git",
  tag = "v0.2.0",
}
description = {
  summary = "Retry backoff strategies: a C core with a Lua face",
  detailed = [[
Constant, linear, exponential, fibonacci, LILD, LIMD, MILD, MIMD,
decorrelated and retry_timeouts backoff with none/proportional/full/equal
jitter, limits and per-attempt timeouts, and the sequences of Google's,
cenkalti's, EventSauce's, Polly's and the AWS article's backoffs; a
yield-safe retry runner for OpenResty and coroutines, retry budgets,
Retry-After hints, an HTTP layer, a balancer helper and Prometheus
metrics; the backoff-delays command-line tool.]],
  license = "MIT",
}
dependencies = {
  "lua >= 5.1, < 5.5",
}
test_dependencies = {
  "busted",
}
test = {
  type = "busted",
}
-- The Makefile builds the rock (its rock-build and rock-install targets),
-- so the sources are listed in one place only, and everything is built
-- under build/rock/: nothing lands where a Lua started in the checkout
-- would load it (5.1 and LuaJIT look in ./?.so first).  The module is
-- built with -fvisibility=hidden; backoff-delays is installed as
-- backoff-delays-5.x, one per Lua version, so that rocks for several
-- versions can share a tree, and as backoff-delays, a launcher of the
-- newest of them, by the first version's rock in a tree.
build = {
  type = "make",
  build_target = "rock-build",
  install_target = "rock-install",
  build_variables = {
    CFLAGS = "$(CFLAGS)",
    LIBFLAG = "$(LIBFLAG)",
    LUA_INCDIR = "$(LUA_INCDIR)",
    LUA = "$(LUA)",
  },
  install_variables = {
    LUA = "$(LUA)",
    LUADIR = "$(LUADIR)",
    LIBDIR = "$(LIBDIR)",
    BINDIR = "$(BINDIR)",
  },
}
